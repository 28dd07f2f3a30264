"""The three stages of one batch: fetch -> parse -> dedup. Celery tasks call these.

Messages between stages are plain JSON dicts (see ``tasks.py``):
- fetch returns one *page* per leased host that produced an outcome: the URL's
  record fields plus, for HTML, a reference (``body_ref`` = offset, length) into the
  batch's spool file on this node; bodies never cross the broker (measured: inline
  bodies, zlib + base64 + JSON + kombu's own base64, cost more CPU than parsing);
  so parse runs on the node that fetched (queue ``crawl.parse.<node>``);
- parse returns *records*: the page fields plus title, fingerprints and outlinks. It
  also does the content dedup (exact fingerprint, simhash near-duplicates, soft 404s),
  because only this node holds the text, and emits indexable pages with their text to
  the indexer feed (``feed.jsonl`` and a Redis Stream);
- dedup filters and enqueues links, sitemap entries and redirect targets (URL-seen
  test), writes ``pages.jsonl`` and counts.

Policy: one bad URL never fails a batch. Anything unexpected while handling one URL
is logged once per kind, counted as ``error/<Type>`` and recorded on that URL.
"""
from __future__ import annotations

import logging
import os
import random
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
import dataclasses
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlsplit

from crawler_tasks.connection import global_client, shard_client
from crawler_tasks.dedup.fingerprint import fingerprint_collapsed
from crawler_tasks.dedup.nearindex import NearDupIndex
from crawler_tasks.dedup.simhash import from_hex, simhash64_with_count, to_hex
from crawler_tasks.fetch.http import Fetcher, FetchResult
from crawler_tasks.urls.filters import UrlFilter
from crawler_tasks.frontier import (
    ENQUEUED,
    PAGE,
    PROBE,
    SITEMAP,
    VERDICT_NAMES,
    Discovered,
    Entry,
    Frontier,
    Lease,
    group_by,
)
from crawler_tasks.keys import GlobalKeys
from crawler_tasks.ops.metrics import record_latencies
from crawler_tasks.fetch.netsafety import AddressRefused, ResolveError
from crawler_tasks.parse.html import is_html, parse_html
from crawler_tasks.fetch.politeness import (
    FetchOutcome,
    HostState,
    PolitenessPolicy,
    crawl_delay_verdict,
    next_contact,
)
from crawler_tasks.frontier.recrawl import Recrawler
from crawler_tasks.robots.cache import RULES, UNREACHABLE, RobotsCache
from crawler_tasks.settings import Settings
from crawler_tasks.parse.sitemaps import MAX_SITEMAP_BYTES, parse_sitemap
from crawler_tasks.output.warc import FeedWriter, WarcStore, append_jsonl, payload_digest, warc_date
from crawler_tasks.urls.normalize import (
    DEFAULT_SESSION_PARAMS,
    DEFAULT_TRACKING_PARAMS,
    host_key,
    normalize_url,
)

log = logging.getLogger(__name__)

# Response headers worth keeping in records (the parser and indexers use them).
KEEP_HEADERS = ("x-robots-tag", "link", "content-language", "last-modified", "etag")
RETRYABLE_KINDS = {"timeout", "connect", "protocol", "dns"}
NETWORK_KINDS = RETRYABLE_KINDS | {"tls", "headers_too_large"}
KIND_NAMES = {SITEMAP: "sitemap", PROBE: "probe"}
FEED_FIELDS = ("url", "title", "lang", "fingerprint", "simhash", "fetched_at", "canonical", "content_type")
MAX_SITEMAPS_PER_HOST = 20
PROBE_MARK = "soft404-probe"
RECENT_LASTMOD_S = 30 * 86_400.0


@dataclass(slots=True)
class Worker:
    """Per-process state of a stage worker: clients, caches, writers."""

    settings: Settings
    frontier: Frontier
    fetcher: Fetcher
    robots: RobotsCache
    warc: WarcStore
    filter: UrlFilter
    policy: PolitenessPolicy
    drop_params: frozenset[str]
    pool: ThreadPoolExecutor
    near_index: NearDupIndex
    feed: FeedWriter
    recrawler: Recrawler

    @classmethod
    def create(cls, settings: Settings) -> "Worker":
        drop = drop_params(settings)
        policy = PolitenessPolicy(
            min_delay_s=settings.MIN_DELAY_S, delay_factor=settings.DELAY_FACTOR,
            max_factor_delay_s=settings.MAX_FACTOR_DELAY_S, honour_crawl_delay=settings.HONOUR_CRAWL_DELAY,
            max_crawl_delay_s=settings.MAX_CRAWL_DELAY_S,
            skip_host_over_max_crawl_delay=settings.SKIP_HOST_OVER_MAX_CRAWL_DELAY,
            max_retry_after_s=settings.MAX_RETRY_AFTER_S, backoff_base_s=settings.BACKOFF_BASE_S,
            backoff_max_s=settings.BACKOFF_MAX_S, park_after_failures=settings.PARK_AFTER_FAILURES,
            park_s=settings.PARK_S)
        frontier = Frontier(settings)
        return cls(settings, frontier, Fetcher(settings),
                   RobotsCache(settings.ROBOTS_TTL_S, settings.ROBOTS_ERROR_TTL_S),
                   WarcStore(settings.OUT_DIR, settings.WARC_MAX_BYTES, operator=settings.USER_AGENT,
                             gzip_level=settings.WARC_GZIP_LEVEL),
                   UrlFilter(settings), policy, drop,
                   ThreadPoolExecutor(max_workers=min(64, settings.FETCH_BATCH), thread_name_prefix="fetch"),
                   NearDupIndex(global_client(settings), settings.KEY_PREFIX, parts=settings.SHARDS),
                   FeedWriter(settings), Recrawler(settings, frontier))

    @property
    def gkeys(self) -> GlobalKeys:
        return GlobalKeys(self.settings.KEY_PREFIX)

    def count(self, counters: dict[str, int]) -> None:
        if not counters:
            return
        pipe = global_client(self.settings).pipeline(transaction=False)
        for name, n in counters.items():
            pipe.hincrby(self.gkeys.stats, name, n)
        pipe.execute()

    def normalize(self, href: str, base: str | None = None) -> str | None:
        return normalize_url(href, base, drop_params=self.drop_params)


def drop_params(settings: Settings) -> frozenset[str]:
    """Query parameters normalization drops: the settings' list, else urls.py's defaults."""
    return frozenset(p.lower() for p in settings.DROP_PARAMS) or (DEFAULT_TRACKING_PARAMS | DEFAULT_SESSION_PARAMS)


_errors_logged: set[str] = set()


def _log_once(kind: str, message: str, *args: Any) -> None:
    if kind not in _errors_logged:
        _errors_logged.add(kind)
        log.exception(message, *args)


def _bump(counters: dict[str, int], name: str, n: int = 1) -> None:
    counters[name] = counters.get(name, 0) + n


# ----------------------------------------------------------------------------- fetch
def fetch_stage(w: Worker, leases: list[Lease], batch_id: str) -> tuple[list[dict], str | None]:
    """Fetch the head URL of each leased host concurrently (one connection per host),
    write WARC records, release each host with its next contact time.

    Returns the pages and the path of the batch's spool file (None if no body)."""
    renewed = [lease for lease in w.frontier.renew(leases) if lease is not None]
    counters: dict[str, int] = {}
    if len(renewed) < len(leases):
        _bump(counters, "frontier/lease_lost", len(leases) - len(renewed))
    pages: list[dict] = []
    bodies: list[bytes] = []
    if renewed:
        states = _load_host_states(w, renewed)
        validators = _load_validators(w, renewed)
        futures = {w.pool.submit(_fetch_one, w, lease, states[lease.host], validators.get(lease.raw)): lease
                   for lease in renewed}
        for future in as_completed(futures):
            lease = futures[future]
            try:
                outcome = future.result()
            except Exception as exc:  # a bug must not cost the batch or the URL
                _log_once(f"fetch/{type(exc).__name__}", "unexpected error fetching %s", lease.entry.url)
                _bump(counters, f"error/{type(exc).__name__}")
                w.frontier.complete(lease, te=time.time() + w.settings.MIN_DELAY_S, action="keep")
                continue
            if outcome is not None:
                page, body = outcome
                if body:
                    page["body_ref"] = [sum(map(len, bodies)), len(body)]
                    bodies.append(body)
                pages.append(page)
    _bump(counters, "fetch/batches")
    latencies = [p["fetch_ms"] / 1000 for p in pages if p.get("fetch_ms") is not None]
    if latencies:
        record_latencies(global_client(w.settings), w.settings.KEY_PREFIX, latencies)
    w.warc.flush()
    spool = _write_spool(w.settings, batch_id, bodies) if bodies else None
    for page in pages:
        if page.get("status") is not None or page.get("error_kind") in NETWORK_KINDS:
            _bump(counters, "fetch/pages")  # a request went out
        else:
            _bump(counters, "fetch/skipped")
        if page.get("status") is not None:
            _bump(counters, f"fetch/status/{page['status']}")
            _bump(counters, "fetch/bytes", page.get("bytes", 0))
        if page.get("error_kind"):
            _bump(counters, f"fetch/error/{page['error_kind']}")
    w.count(counters)
    return pages, spool


def spool_dir(settings: Settings) -> str:
    return os.path.join(settings.OUT_DIR, "spool")


def _write_spool(settings: Settings, batch_id: str, bodies: list[bytes]) -> str:
    os.makedirs(spool_dir(settings), exist_ok=True)
    path = os.path.join(spool_dir(settings), f"{batch_id}.bin")
    with open(path, "wb") as fh:
        fh.write(b"".join(bodies))
    return path


def _load_validators(w: Worker, leases: list[Lease]) -> dict[str, dict[str, str]]:
    """Conditional-GET headers (continuous mode) for the leased URLs, by lease entry."""
    if not w.settings.CONTINUOUS:
        return {}
    out: dict[str, dict[str, str]] = {}
    for shard, group in group_by(leases, lambda lease: lease.shard).items():
        headers = w.recrawler.conditional_headers(shard, [lease.entry.url for lease in group])
        out.update({lease.raw: h for lease, h in zip(group, headers) if h})
    return out


def _load_host_states(w: Worker, leases: list[Lease]) -> dict[str, HostState]:
    """Politeness state of every host of the batch, one round trip per shard."""
    states: dict[str, HostState] = {}
    for shard, group in group_by(leases, lambda lease: lease.shard).items():
        pipe = shard_client(w.settings, shard).pipeline(transaction=False)
        for lease in group:
            pipe.hgetall(w.frontier.keys(shard).host_state(lease.host))
        for lease, raw in zip(group, pipe.execute()):
            try:
                states[lease.host] = HostState.from_fields(raw) if raw else HostState()
            except ValueError:  # a corrupt hash must not stop the host forever
                states[lease.host] = HostState()
    return states


def _release(w: Worker, lease: Lease, state: HostState, res: FetchResult | None, action: str) -> None:
    """Compute the host's next contact from this exchange and give the host back."""
    if res is None or (res.status is None and res.error_kind in ("refused", "bad_url", "url_too_long")):
        # no request reached the host: its previous te (<= now) still holds
        w.frontier.complete(lease, te=time.time(), action=action)
        return
    failed = res.status is None or res.status >= 500 or res.status == 429
    outcome = FetchOutcome(end=res.ended, duration_s=res.duration_s, status=res.status,
                           retry_after=res.header("retry-after"), failed=failed)
    te, new_state, _reason = next_contact(w.policy, state, outcome)
    w.frontier.complete(lease, te=te, action=action, host_state=new_state.to_fields())


def _fetch_one(w: Worker, lease: Lease, state: HostState,
               validators: dict[str, str] | None = None) -> tuple[dict, bytes] | None:
    """Fetch one leased host's head URL: (page, body to parse or b"") or None when the
    lease was used for robots.txt or the URL goes back to the queue."""
    s = w.settings
    entry = lease.entry
    url = entry.url
    parts = urlsplit(url)
    keys = w.frontier.keys(lease.shard)
    client = shard_client(s, lease.shard)
    ip = None
    try:  # refuse private targets before anything, robots.txt included, is sent
        ip = w.fetcher.check_host(parts.hostname or "")
    except AddressRefused as exc:
        _release(w, lease, state, None, "done")
        return _page(entry, None, error_kind="refused", error=exc.reason), b""
    except ResolveError:
        pass  # the fetch below records the DNS failure and the retry policy applies
    if s.PER_IP_POLITENESS and ip:
        free_at = w.frontier.claim_ip(ip)
        if free_at:  # another host on this address was contacted too recently
            w.frontier.complete(lease, te=free_at, action="keep")
            return None
        try:
            return _fetch_checked(w, lease, state, entry, parts, keys, client, validators)
        finally:  # the address waits as long as the host just contacted
            w.frontier.release_ip(ip, w.frontier.host_te(lease.shard, lease.host) or time.time())
    return _fetch_checked(w, lease, state, entry, parts, keys, client, validators)


def _fetch_checked(w: Worker, lease: Lease, state: HostState, entry: Entry, parts: Any, keys: Any,
                   client: Any, validators: dict[str, str] | None) -> tuple[dict, bytes] | None:
    s = w.settings
    url = entry.url
    if s.OBEY_ROBOTS:
        robots = w.robots.get(client, keys, lease.host)
        if robots is None:
            robots, res = w.robots.fetch_and_store(w.fetcher, client, keys, parts.scheme, lease.host)
            w.count({f"robots/{robots.kind}": 1, **({f"robots/status/{res.status}": 1} if res.status else {})})
            if robots.kind == RULES:
                delay = robots.rules.crawl_delay(s.robots_agent)
                state.crawl_delay_s, skip = crawl_delay_verdict(w.policy, delay)
                if skip:
                    w.frontier.complete(lease, te=time.time() + w.policy.park_s, action="keep")
                    return None
            if robots.kind != UNREACHABLE:
                _first_contact(w, lease, parts.scheme, robots.rules.sitemaps if robots.kind == RULES else [])
            _release(w, lease, state, res, "keep")
            return None
        if robots.kind == UNREACHABLE:
            # disallow all for now; the URL waits for the next robots.txt attempt
            w.frontier.complete(lease, te=max(robots.expires, time.time() + s.MIN_DELAY_S), action="keep")
            return None
        if not robots.rules.is_allowed(url, s.robots_agent):
            _release(w, lease, state, None, "done")
            return _page(entry, None, error_kind="robots", error="disallowed by robots.txt"), b""
    if entry.kind == SITEMAP:
        res = w.fetcher.fetch(url, max_body_bytes=MAX_SITEMAP_BYTES, max_decoded_bytes=MAX_SITEMAP_BYTES)
    else:
        res = w.fetcher.fetch(url, extra_headers=validators)
    action = "done"
    retryable = (res.error_kind in RETRYABLE_KINDS) or (res.status is not None and (res.status >= 500 or res.status == 429))
    if retryable and entry.tries < s.MAX_RETRIES:
        action = "retry"
    record_id = None
    if res.status is not None:
        try:
            record_id = w.warc.write_exchange(res, _earlier_capture(w, res))
        except (ValueError, UnicodeError):  # warcio on odd headers: record the URL, keep going
            _log_once("warc", "cannot write WARC record for %s", url)
    _release(w, lease, state, res, action)
    if action == "retry":
        return None
    page = _page(entry, res)
    if record_id:
        page["warc_id"] = record_id
    ok = res.status is not None and 200 <= res.status < 300
    parseable = ok and (entry.kind == SITEMAP or is_html(res.content_type, res.content[:512]))
    return page, res.content if parseable else b""


def _earlier_capture(w: Worker, res: FetchResult) -> tuple[str, str] | None:
    """(url, date) of an earlier capture of the very same payload bytes, if any: that
    fetch is then stored as a revisit record. The first capture of a digest wins."""
    s = w.settings
    if not s.WARC_DEDUP_REVISITS or res.status != 200 or not res.body or res.truncated:
        return None
    digest = payload_digest(res.body)
    key = w.gkeys.payloads(int.from_bytes(digest.encode()[-4:], "big") % s.SHARDS)
    client = global_client(s)
    mine = f"{res.url} {warc_date(res.started)}"
    pipe = client.pipeline(transaction=False)
    pipe.hsetnx(key, digest, mine)
    pipe.hget(key, digest)
    _, first = pipe.execute()
    if not first or first == mine:
        return None
    url, date = first.rsplit(" ", 1)
    return None if url == res.url else (url, date)


def _first_contact(w: Worker, lease: Lease, scheme: str, sitemaps: list[str]) -> None:
    """Right after a host's robots.txt: queue its sitemaps, and put a soft-404 probe
    (a random path) at the head of its queue so it is the host's first page fetch."""
    s = w.settings
    base = f"{scheme}://{lease.host}"
    items = []
    if s.USE_SITEMAPS:
        urls = list(sitemaps) + ([base + "/sitemap.xml"] if s.PROBE_SITEMAP_XML else [])
        for raw in urls[:MAX_SITEMAPS_PER_HOST]:
            url = w.normalize(raw, base + "/")
            if url and w.filter.reason(url, 0, check_depth=False, check_extension=False) is None:
                items.append(Discovered(url=url, host=host_key(url), depth=0, priority=0, kind=SITEMAP))
    if items:
        w.frontier.put_discovered(items)
    if s.SOFT404_PROBE:
        probe = Entry(f"{base}/{random.getrandbits(64):016x}-{PROBE_MARK}.html", depth=0, kind=PROBE)
        w.frontier.add_head(lease.shard, lease.host, probe)


def _page(entry: Any, res: FetchResult | None, *, error_kind: str | None = None, error: str | None = None) -> dict:
    page: dict[str, Any] = {"url": entry.url, "depth": entry.depth, "hops": entry.hops, "status": None,
                            "error_kind": error_kind, "error": error}
    if entry.kind != PAGE:
        page["kind"] = KIND_NAMES[entry.kind]
    if res is None:
        page["fetched_at"] = warc_date(time.time())
        return page
    page.update({
        "final_url": res.url, "status": res.status, "content_type": res.content_type,
        "bytes": len(res.content), "fetched_at": warc_date(res.started),
        "fetch_ms": round(res.duration_s * 1000, 1), "ip": res.ip, "truncated": res.truncated,
        "error_kind": res.error_kind, "error": res.error,
    })
    headers = {k: v for k, v in ((name, res.header(name)) for name in KEEP_HEADERS) if v is not None}
    if headers:
        page["headers"] = headers
    if res.location:
        page["location"] = res.location
    return page


# ----------------------------------------------------------------------------- parse
def parse_stage(w: Worker, pages: list[dict], spool: str | None) -> list[dict]:
    """HTML -> title, text fingerprint, normalized outlinks; the spool file is removed."""
    data = b""
    if spool:
        try:
            with open(spool, "rb") as fh:
                data = fh.read()
        except OSError as exc:  # a redelivered task whose spool is gone: record, go on
            _log_once("parse/spool", "spool file %s unreadable: %s", spool, exc)
    records = []
    texts: dict[str, tuple[str, list[list[str]]]] = {}
    for page in pages:
        ref = page.pop("body_ref", None)
        if ref is not None:
            body = data[ref[0]:ref[0] + ref[1]]
            try:
                if len(body) != ref[1]:
                    raise OSError(f"spool file {spool} missing or short")
                if page.get("kind") == "sitemap":
                    _parse_sitemap_into(page, body)
                else:
                    texts[page["url"]] = _parse_into(w, page, body)
            except Exception as exc:
                _log_once(f"parse/{type(exc).__name__}", "cannot parse %s", page.get("url"))
                page["error_kind"], page["error"] = "parse", f"{type(exc).__name__}: {exc}"
                w.count({f"error/{type(exc).__name__}": 1})
        if page.get("location"):
            page["redirect_to"] = w.normalize(page.pop("location"), page["url"])
        records.append(page)
    if spool:
        try:
            os.unlink(spool)
        except OSError:
            pass
    counters: dict[str, int] = {}
    _mark_duplicates(w, records, counters)
    _mark_soft404(w, records, counters)
    _mark_near_duplicates(w, records, counters)
    _count_host_duplicates(w, records)
    feed = []
    for rec in records:
        rec["indexable"] = _indexable(rec)
        warc_id = rec.pop("warc_id", None)
        if w.settings.WARC_METADATA and rec["url"] in texts and texts[rec["url"]][1]:
            w.warc.write_metadata(rec["url"], warc_id, [u for u, _ in texts[rec["url"]][1]], rec["fetched_at"])
        if rec["indexable"] and rec["url"] in texts:
            text, outlinks = texts[rec["url"]]
            feed.append({k: rec.get(k) for k in FEED_FIELDS} | {"text": text, "outlinks": outlinks})
    w.warc.flush()
    if feed:
        w.feed.emit(feed)
        _bump(counters, "feed/records", len(feed))
    w.count(counters)
    return records


def _parse_sitemap_into(page: dict, body: bytes) -> None:
    sitemap = parse_sitemap(body, page["url"])
    page["sitemap"] = sitemap.kind
    if sitemap.error:
        page["error_kind"], page["error"] = "sitemap", sitemap.error
    if sitemap.truncated:
        page["truncated"] = page.get("truncated") or "sitemap-limit"
    if sitemap.kind == "sitemapindex":
        page["sitemaps"] = [e.url for e in sitemap.entries]
    else:
        page["sitemap_urls"] = [[e.url, e.priority, e.lastmod] for e in sitemap.entries]
    page["n_links"] = len(sitemap.entries)


def _parse_into(w: Worker, page: dict, body: bytes) -> tuple[str, list[list[str]]]:
    """Fill the record from the HTML; returns (text, outlinks with anchor text) for the
    indexer feed, which must not travel through the broker."""
    s = w.settings
    parsed = parse_html(body, page["url"], content_type=page.get("content_type"),
                        headers=page.get("headers"), agent=s.robots_agent, max_text_chars=s.MAX_TEXT_CHARS)
    page["title"] = parsed.title
    page["fingerprint"] = fingerprint_collapsed(parsed.text)
    if s.NEAR_DUPLICATES:
        sim, n_words = simhash64_with_count(parsed.text[: s.SIMHASH_MAX_CHARS])
        if n_words >= s.SIMHASH_MIN_WORDS:
            page["simhash"] = to_hex(sim)
    page["text_chars"] = len(parsed.text)
    if parsed.canonical:
        page["canonical"] = w.normalize(parsed.canonical)
    if parsed.noindex:
        page["noindex"] = True
    if parsed.lang:
        page["lang"] = parsed.lang
    links: list[str] = []
    anchors: list[list[str]] = []
    seen: set[str] = set()
    if parsed.meta_refresh:
        target = w.normalize(parsed.meta_refresh)
        if target and target != page["url"]:
            page["redirect_to"] = target
    if not parsed.nofollow:
        for link in parsed.links:
            if link.nofollow and not s.FOLLOW_NOFOLLOW:
                continue
            url = w.normalize(link.url)
            if url and url not in seen:
                seen.add(url)
                links.append(url)
                anchors.append([url, link.text])
    else:
        page["nofollow"] = True
    page["links"] = links
    page["n_links"] = len(links)
    return parsed.text, anchors


# ----------------------------------------------------------------------------- dedup
def dedup_stage(w: Worker, records: list[dict], batch_id: str) -> int:
    """URL dedup: filter and enqueue new links, sitemap entries and redirect targets,
    write pages.jsonl, close the batch. Returns URLs enqueued. (Content dedup ran in the
    parse stage, on the node that holds the text.)"""
    s = w.settings
    counters: dict[str, int] = {}
    discovered: list[Discovered] = []
    canonical_of: dict[int, int] = {}   # index in discovered -> index in records
    for n, rec in enumerate(records):
        depth = rec.get("depth", 0)
        if not rec.get("duplicate_of") and not rec.get("soft_404"):
            for url in rec.get("links", ()):
                d = _candidate(w, url, depth + 1, 0, counters)
                if d is not None:
                    discovered.append(d)
        for url, priority, lastmod in rec.pop("sitemap_urls", ()):
            # not forced: a sitemap usually lists pages the links reach too, and only the
            # Bloom filter knows those (an exact test would fetch each of them twice)
            d = _candidate(w, w.normalize(url), 0, 0, counters, check_depth=False,
                           priority=_sitemap_level(w, priority, lastmod))
            if d is not None:
                discovered.append(d)
        for url in rec.pop("sitemaps", ()):
            d = _candidate(w, url, 0, 0, counters, check_depth=False, kind=SITEMAP)
            if d is not None:
                discovered.append(d)
        canonical = rec.get("canonical")
        if canonical and canonical != rec["url"]:
            d = _candidate(w, canonical, depth, 0, counters)
            if d is not None:
                canonical_of[len(discovered)] = n
                discovered.append(d)
        target = rec.get("redirect_to")
        if target:
            hops = rec.get("hops", 0) + 1
            if hops > s.MAX_REDIRECTS:
                rec["error_kind"], rec["error"] = "redirects", f"more than {s.MAX_REDIRECTS} redirects"
                _bump(counters, "filter/redirects")
            else:
                d = _candidate(w, target, depth, hops, counters, kind=PAGE)
                if d is not None:
                    discovered.append(d)
    enqueued = 0
    if discovered:
        discovered = _demote_duplicate_hosts(w, discovered, counters)
        verdicts = w.frontier.put_discovered(discovered)
        for i, verdict in enumerate(verdicts):
            if verdict == ENQUEUED:
                enqueued += 1
            else:
                _bump(counters, f"frontier/dropped/{VERDICT_NAMES.get(verdict, verdict)}")
        _bump(counters, "frontier/enqueued", enqueued)
    for rec in records:
        rec.pop("links", None)
        rec.setdefault("indexable", False)
        if rec.get("error_kind"):
            _bump(counters, f"records/error/{rec['error_kind']}")
    if s.CONTINUOUS:
        for name, n in w.recrawler.record_visits(records).items():
            _bump(counters, name, n)
    append_jsonl(os.path.join(s.OUT_DIR, "pages.jsonl"), records)
    _bump(counters, "records/written", len(records))
    _bump(counters, "records/indexable", sum(1 for r in records if r["indexable"]))
    w.count(counters)
    global_client(s).zrem(w.gkeys.inflight, batch_id)
    return enqueued


def _indexable(rec: dict) -> bool:
    """Whether an indexer should take this page: a 200 HTML page that is not noindex,
    not a duplicate, not a soft 404, and is its own canonical."""
    return bool(rec.get("status") == 200 and rec.get("fingerprint") and not rec.get("noindex")
                and not rec.get("duplicate_of") and not rec.get("near_duplicate_of")
                and not rec.get("soft_404") and not rec.get("kind")
                and rec.get("canonical") in (None, rec["url"]))


def _sitemap_level(w: Worker, priority: float | None, lastmod: str | None = None) -> int:
    """Sitemap <priority> (0..1, default 0.5) -> front-queue level (0 = highest); a page
    modified in the last RECENT_LASTMOD_S moves up one level."""
    top = w.settings.PRIORITY_LEVELS - 1
    p = 0.5 if priority is None else priority
    level = min(top, int(round((1.0 - p) * top)))
    if lastmod and level > 0:
        try:
            when = datetime.fromisoformat(lastmod.replace("Z", "+00:00"))
            if when.tzinfo is None:
                when = when.replace(tzinfo=timezone.utc)
            if time.time() - when.timestamp() < RECENT_LASTMOD_S:
                level -= 1
        except ValueError:
            pass
    return level


def _candidate(w: Worker, url: str | None, depth: int, hops: int, counters: dict[str, int], *,
               check_depth: bool = True, priority: int | None = None, kind: str = PAGE) -> Discovered | None:
    """A link that passed the filters, ready for the URL-seen test."""
    if not url:
        return None
    reason = w.filter.reason(url, depth, check_depth=check_depth, check_extension=kind != SITEMAP)
    if reason is not None:
        _bump(counters, f"filter/{reason}")
        return None
    level = min(depth, w.settings.PRIORITY_LEVELS - 1) if priority is None else priority
    return Discovered(url=url, host=host_key(url), depth=depth, priority=level, hops=hops, kind=kind)


def _mark_near_duplicates(w: Worker, records: list[dict], counters: dict[str, int]) -> None:
    """simhash within 3 bits of a page seen before: ``near_duplicate_of`` that page.
    Links of near-duplicates are still followed (a false match must not hide a site)."""
    candidates = [r for r in records if r.get("simhash") and r.get("status") == 200
                  and not r.get("duplicate_of") and not r.get("kind") and not r.get("soft_404")]
    if not candidates:
        return
    matches = w.near_index.check_and_add([(r["url"], from_hex(r["simhash"])) for r in candidates])
    for rec, match in zip(candidates, matches):
        if match:
            rec["near_duplicate_of"] = match
            _bump(counters, "dedup/near_duplicate")


def _count_host_duplicates(w: Worker, records: list[dict]) -> None:
    """Per host: pages parsed and how many duplicated content we had (the trap signal)."""
    pages: dict[str, list[int]] = {}
    for rec in records:
        if rec.get("fingerprint") and rec.get("status") == 200 and not rec.get("kind"):
            n = pages.setdefault(host_key(rec["url"]), [0, 0])
            n[0] += 1
            n[1] += bool(rec.get("duplicate_of") or rec.get("near_duplicate_of"))
    for shard, hosts in group_by(pages, w.frontier.shard_of).items():
        pipe = shard_client(w.settings, shard).pipeline(transaction=False)
        key = w.frontier.keys(shard).dup_stats
        for host in hosts:
            pipe.hincrby(key, f"p:{host}", pages[host][0])
            if pages[host][1]:
                pipe.hincrby(key, f"d:{host}", pages[host][1])
        pipe.execute()


def _demote_duplicate_hosts(w: Worker, discovered: list[Discovered], counters: dict[str, int]) -> list[Discovered]:
    """New URLs of hosts whose content keeps duplicating go to the lowest level."""
    s = w.settings
    trap: set[str] = set()
    for shard, hosts in group_by({d.host for d in discovered}, w.frontier.shard_of).items():
        key = w.frontier.keys(shard).dup_stats
        fields = [f for h in hosts for f in (f"p:{h}", f"d:{h}")]
        values = shard_client(s, shard).hmget(key, fields)
        for i, host in enumerate(hosts):
            n_pages, n_dups = int(values[2 * i] or 0), int(values[2 * i + 1] or 0)
            if n_pages >= s.DUP_TRAP_MIN_PAGES and n_dups >= s.DUP_TRAP_RATIO * n_pages:
                trap.add(host)
    if not trap:
        return discovered
    top = s.PRIORITY_LEVELS - 1
    out = [dataclasses.replace(d, priority=top) if d.host in trap else d for d in discovered]
    _bump(counters, "frontier/demoted_duplicate_host", sum(d.host in trap for d in discovered))
    return out


def _mark_soft404(w: Worker, records: list[dict], counters: dict[str, int]) -> None:
    """A probe's answer (a random path) that is 200 fixes the host's soft-404 fingerprint;
    pages with that same fingerprint are soft 404s, not content."""
    if not w.settings.SOFT404_PROBE:
        return
    with_fp = [r for r in records if r.get("fingerprint") and r.get("status") == 200]
    if not with_fp:
        return
    for shard, group in group_by(with_fp, lambda rec: w.frontier.shard_of(host_key(rec["url"]))).items():
        key = w.frontier.keys(shard).soft404
        client = shard_client(w.settings, shard)
        probes = {host_key(r["url"]): r["fingerprint"] for r in group if r.get("kind") == "probe"}
        if probes:
            client.hset(key, mapping=probes)
        pages = [r for r in group if r.get("kind") != "probe"]
        if not pages:
            continue
        known = client.hmget(key, [host_key(r["url"]) for r in pages])
        for rec, fp in zip(pages, known):
            if fp and fp == rec["fingerprint"]:
                rec["soft_404"] = True
                _bump(counters, "dedup/soft_404")


def _mark_duplicates(w: Worker, records: list[dict], counters: dict[str, int]) -> None:
    """Exact content dedup: fingerprints sharded by value, first URL wins."""
    with_fp = [r for r in records if r.get("fingerprint") and r.get("status") == 200]
    if not with_fp:
        return
    shards = w.settings.SHARDS
    client = global_client(w.settings)
    pipe = client.pipeline(transaction=False)
    for rec in with_fp:
        key = w.gkeys.fingerprints(int(rec["fingerprint"], 16) % shards)
        pipe.hsetnx(key, rec["fingerprint"], rec["url"])
        pipe.hget(key, rec["fingerprint"])
    res = pipe.execute()
    for i, rec in enumerate(with_fp):
        first = res[2 * i + 1]
        if not res[2 * i] and first and first != rec["url"]:
            rec["duplicate_of"] = first
            _bump(counters, "dedup/duplicate_content")


# ----------------------------------------------------------------------------- seeds
def seed_urls(settings: Settings, urls: list[str], frontier: Frontier | None = None) -> tuple[int, list[str]]:
    """Normalize, filter and force-add seed URLs. Returns (added, rejected messages)."""
    frontier = frontier or Frontier(settings)
    flt = UrlFilter(settings)
    drop = drop_params(settings)
    items, rejected = [], []
    for raw in urls:
        url = normalize_url(raw, drop_params=drop)
        if url is None:
            rejected.append(f"{raw!r}: not a crawlable http(s) URL")
            continue
        reason = flt.reason(url, 0)
        if reason:
            rejected.append(f"{raw!r}: filtered ({reason})")
            continue
        items.append(Discovered(url=url, host=host_key(url), depth=0, priority=0, force=True))
    added = sum(v == ENQUEUED for v in frontier.put_discovered(items)) if items else 0
    if added:
        pipe = global_client(settings).pipeline(transaction=False)
        pipe.hincrby(GlobalKeys(settings.KEY_PREFIX).stats, "frontier/seeds", added)
        pipe.hincrby(GlobalKeys(settings.KEY_PREFIX).stats, "frontier/enqueued", added)
        pipe.execute()
    return added, rejected

