"""Parse stage: HTML and PDF -> title, text fingerprints, normalized outlinks; sitemaps -> URLs.

It runs on the node that fetched (it reads the page group's spool file), so it also does the
content dedup (exact fingerprint, soft 404s, simhash near-duplicates) and emits
indexable pages with their text to the indexer feed: text never crosses the broker.
Policy: a page that cannot be parsed gets ``error_kind="parse"`` and the group goes on.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any

from crawler_tasks.counters import Counters, bump
from crawler_tasks.dedup.evidence import EMPTY_TEXT, TextSketch
from crawler_tasks.dedup.simhash import NearPrint, to_hex
from crawler_tasks.frontier import Discovered
from crawler_tasks.output.feed import feed_record
from crawler_tasks.output.jsonl import once_written
from crawler_tasks.output.spool import handed_on, read_spool, written_marker
from crawler_tasks.parse.page import Analysis, analyse
from crawler_tasks.parse.pdf import PDF_TYPE, is_pdf
from crawler_tasks.parse.sandbox import ParseFailed, ParseSandbox
from crawler_tasks.parse.sitemaps import parse_sitemap
from crawler_tasks.parse.text import PageText
from crawler_tasks.records import Capture, EntryKind, ErrorKind, FetchedPage, Found, PageRecord, SitemapUrl
from crawler_tasks.stages.worker import Worker, log_once
from crawler_tasks.urls.normalize import MAX_LINK_CHARS, host_key

log = logging.getLogger(__name__)
Anchors = list[tuple[str, str, list[str]]]   # outlink, anchor text, rel tokens
MAX_SHOWN_URL_CHARS = 1024
# A page parsed without the budget's tokenizer must be done by then (real pages: < 0.4 s,
# the largest measured, Node.js's 8 MB all.html, 0.36 s; a 0.5 MiB bomb takes lexbor 2-3 s).
UNBUDGETED_PARSE_S = 1.0


def parse_stage(w: Worker, pages: list[Capture], group_id: str) -> list[PageRecord] | None:
    """Parse the page group (its task removes the spool file once the records are sent
    on). None: an earlier run of this group's task handed it on (this one is a
    redelivery), so there is nothing to do."""
    data = b""
    if any(cap.body is not None for cap in pages):
        try:
            data = read_spool(w.settings, group_id)
        except OSError as exc:
            if handed_on(w.settings, group_id):
                log.info("page group %s was handed on by an earlier run of its parse task: skipped", group_id)
                w.count({"parse/redelivered_done": 1})
                return None
            pages = _fetch_again(w, pages, group_id, exc)
    records: list[PageRecord] = []
    extra: list[PageRecord] = []   # over-long links: one record each, so an operator sees why
    # and the page's WARC response record, and the type its text was read as
    texts: dict[str, tuple[PageText, Anchors, str | None, str | None]] = {}
    sketches: dict[str, TextSketch] = {}   # of the pages' texts, for the trap evidence
    prints: dict[str, NearPrint] = {}      # of the pages with a simhash, for the near-duplicate index
    for cap in pages:
        rec, ref = PageRecord(cap.page), cap.body
        page = rec.page
        if ref is not None:
            body = data[ref.offset:ref.offset + ref.length]
            try:
                if len(body) != ref.length:
                    raise OSError(f"spool file of group {group_id} missing or short")
                if page.kind == EntryKind.SITEMAP:
                    _parse_sitemap_into(rec, body)
                else:
                    pdf = is_pdf(page.content_type, body[:1024])
                    text, anchors, sketches[page.url], near = _parse_into(w, rec, body, extra, pdf)
                    if near is not None:
                        prints[page.url] = near
                    texts[page.url] = (text, anchors, cap.warc_id, PDF_TYPE if pdf else page.content_type)
            except Exception as exc:  # noqa: BLE001 - bad input is a per-URL error, never a dead worker
                log_once(f"parse/{type(exc).__name__}", "cannot parse %s", page.url)
                page.error_kind, page.error = ErrorKind.PARSE, f"{type(exc).__name__}: {exc}"
                w.count({f"error/{type(exc).__name__}": 1})
        if cap.location:
            rec.parsed.redirect_to = w.normalize(cap.location, page.url)
        records.append(rec)
    records += extra
    counters: Counters = {}
    w.content.mark(records, counters, prints)
    probes = w.content.hosts_to_probe(records)
    if probes:   # the host shows the sign of a catch-all answer: one probe, fetched first
        w.frontier.put_discovered([Discovered(url=u, host=host_key(u), kind=EntryKind.PROBE) for u in probes])
        bump(counters, "dedup/soft_404_probes", len(probes))
    # same-content URL pairs teach the host's URL rules; texts judge its URL shapes
    w.rules.observe(records, counters, sketches)
    feed = []
    for rec in records:
        page, parsed = rec.page, rec.parsed
        parsed.indexable = _indexable(rec)
        if page.url not in texts:
            continue
        text, anchors, warc_id, content_type = texts[page.url]
        if w.settings.WARC_METADATA and anchors:
            w.warc.write_metadata(page.url, warc_id, [a[0] for a in anchors], page.fetched_at)
        if parsed.indexable:
            feed.append(feed_record(text, url=page.url, fetched_at=page.fetched_at, fingerprint=parsed.fingerprint,
                                    simhash=parsed.simhash, canonical=parsed.canonical,
                                    content_type=content_type, outlinks=anchors) | {"node": w.settings.node_name})
    once_written(w.warc.flush)   # made again while the disk refuses: the records stay pending meanwhile
    if feed:
        w.feed.emit(feed, written_marker(w.settings, group_id, "feed"))
        bump(counters, "feed/records", len(feed))
    once_written(partial(w.count, counters))   # the feed is out: a retry of the task would write it twice
    return records


def _fetch_again(w: Worker, pages: list[Capture], group_id: str, exc: OSError) -> list[Capture]:
    """A task run again after its spool was removed and before its records were handed on
    (a retry of a Redis error in sending them on, or a redelivery of a run that a crash
    stopped there): the pages with a body go back to the frontier to be fetched again, or
    their links would be lost; the rest go on."""
    log.warning("spool file of group %s unreadable (%s): its pages are fetched again", group_id, exc)
    again = [cap.page for cap in pages if cap.body is not None]
    w.frontier.put_discovered([Discovered(url=page.url, host=host_key(page.url), depth=page.depth, hops=page.hops,
                                          kind=page.kind, again=True) for page in again])
    w.count({"parse/fetched_again": len(again)})
    return [cap for cap in pages if cap.body is None]


def _indexable(rec: PageRecord) -> bool:
    """Whether an indexer should take this page: a 200 HTML page or PDF that came whole or was
    cut at a size cap (its start is the page, as search engines index the first bytes;
    a transfer that stalled or broke is not), not noindex, not a duplicate or
    near-duplicate of a page already taken, not a soft 404.

    ``rel=canonical`` is a hint, not a verdict: a page whose canonical is elsewhere (off
    site, out of scope, never fetched, or with other content) stays in the feed with
    ``canonical`` set for the indexer to key on; it drops out only when it duplicates
    content already taken, which is what a canonical target with the same text means."""
    page, parsed = rec.page, rec.parsed
    return bool(page.status == 200 and parsed.fingerprint and not parsed.noindex
                and page.truncated not in ("time", "disconnect") and not parsed.duplicate_of
                and not parsed.near_duplicate_of and not parsed.soft_404 and page.kind == EntryKind.PAGE)


def _parse_sitemap_into(rec: PageRecord, body: bytes) -> None:
    page = rec.page
    sitemap = parse_sitemap(body, page.url)
    rec.parsed.sitemap = sitemap.kind
    if sitemap.error:
        page.error_kind, page.error = ErrorKind.SITEMAP, sitemap.error
    if sitemap.truncated:
        page.truncated = page.truncated or "sitemap-limit"
    if sitemap.kind == "sitemapindex":
        rec.found = Found(sitemaps=[e.url for e in sitemap.entries])
    else:
        rec.found = Found(sitemap_urls=[SitemapUrl(e.url, e.priority, e.lastmod) for e in sitemap.entries])
    rec.parsed.n_links = len(sitemap.entries)


def _sandboxed(sandbox: ParseSandbox, body: bytes, url: str, args: tuple[Any, ...],
               count: Callable[[Counters], None], pdf: bool = False, **kwargs: Any) -> Analysis:
    """Every page is parsed as it is under a short deadline first; a late one (a bomb),
    or one whose child died, is parsed again within the budget. The budget's tokenizer
    costs a real page nothing this way (it took 50-300 ms on real pages of 0.5-8 MB,
    and lexbor reads them in 0.1-0.4 s), and a bomb ~1 s more than with the tokenizer first.
    A PDF gets its whole deadline at once: the budget does not change how PDFium reads it,
    and its page and character caps bound the page the PDF becomes."""
    if pdf:
        return sandbox.analyse(body, url, *args, **kwargs)
    try:
        return sandbox.analyse(body, url, *args, budget=False, timeout_s=UNBUDGETED_PARSE_S, **kwargs)
    except ParseFailed:
        count({"parse/budget_retry": 1})
        return sandbox.analyse(body, url, *args, **kwargs)


def _parse_into(w: Worker, rec: PageRecord, body: bytes, extra: list[PageRecord],
                pdf: bool = False) -> tuple[PageText, Anchors, TextSketch, NearPrint | None]:
    """Fill the record from the HTML (or the PDF); returns the page's text and outlinks
    (with anchor text and rel) for the indexer feed, which must not travel through the
    broker, its text's sketch, and its NearPrint when it has a simhash."""
    s = w.settings
    page, out = rec.page, rec.parsed
    options: dict[str, Any] = dict(content_type=page.content_type, headers=page.headers, agent=w.robots_agent,
                                   max_text_chars=s.MAX_TEXT_CHARS, drop_params=w.gate.drop,
                                   max_elements=s.PARSE_MAX_ELEMENTS, max_depth=s.PARSE_MAX_DEPTH,
                                   max_attrs=s.PARSE_MAX_ATTRS)
    args = (options, s.TEXT_MODE, s.MAX_TEXT_CHARS, s.SIMHASH_MAX_CHARS if s.NEAR_DUPLICATES else 0,
            bool(s.TRAP_SHAPE_MIN_PAGES))
    if pdf:
        w.count({"parse/pdf": 1})
    if w.sandbox is None:
        result = analyse(body, page.url, *args, pdf_max_pages=s.PDF_MAX_PAGES)
    else:
        try:
            result = _sandboxed(w.sandbox, body, page.url, args, w.count, pdf, pdf_max_pages=s.PDF_MAX_PAGES)
        except ParseFailed as exc:
            page.error_kind, page.error = ErrorKind.PARSE_LIMIT, str(exc)
            w.count({"parse/stopped": 1})
            return PageText(url=page.url), [], EMPTY_TEXT, None
    parsed, text = result.parsed, result.text
    if text.error:   # an unreadable PDF (encrypted, broken), or a text extraction that failed
        w.count({"parse/text_error": 1})
        if not page.error_kind:
            page.error_kind, page.error = ErrorKind.PARSE, text.error
    if parsed.too_long:
        shown = parsed.too_long[:MAX_SHOWN_URL_CHARS]
        extra.append(PageRecord(FetchedPage(
            url=shown if shown.startswith(("http://", "https://")) and shown.isprintable() else page.url + "#long-link",
            depth=page.depth + 1, fetched_at=page.fetched_at, error_kind=ErrorKind.URL_TOO_LONG,
            error=f"a link of {len(parsed.too_long)} characters on {page.url} was not followed (the limit is "
                  f"{MAX_LINK_CHARS}; url shows its first {MAX_SHOWN_URL_CHARS})")))
    if parsed.limited and not page.error_kind:
        page.error_kind, page.error = ErrorKind.PARSE_LIMIT, f"parse budget cut the page: {parsed.limited}"
    out.title = parsed.title or text.title
    out.fingerprint = result.fingerprint or None
    near = None
    if s.NEAR_DUPLICATES and result.simhash_words >= s.SIMHASH_MIN_WORDS:
        out.simhash = to_hex(result.simhash)
        near = result.near
    out.text_chars = len(text.text)
    out.modified = text.modified
    out.canonical = parsed.canonical
    out.noindex = parsed.noindex
    out.lang = text.lang or text.lang_declared or parsed.lang or None
    if parsed.meta_refresh and parsed.meta_refresh != page.url:
        out.redirect_to = parsed.meta_refresh
    links: list[str] = []
    anchors: Anchors = []
    if parsed.nofollow:
        out.nofollow = True
    else:
        seen: set[str] = set()
        for link in parsed.links:
            if (link.nofollow and not s.FOLLOW_NOFOLLOW) or link.url in seen:
                continue
            seen.add(link.url)
            links.append(link.url)
            anchors.append((link.url, link.text, ["nofollow"] if link.nofollow else []))
    out.n_links = len(links)
    if len(links) > s.MAX_OUTLINKS_PER_PAGE:   # followed: the first ones; the feed keeps them all
        w.count({"parse/outlinks_dropped": len(links) - s.MAX_OUTLINKS_PER_PAGE})
        links = links[: s.MAX_OUTLINKS_PER_PAGE]
    rec.found = Found(links=links)
    return text, anchors, result.sketch or EMPTY_TEXT, near
