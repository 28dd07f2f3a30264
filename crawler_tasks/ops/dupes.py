"""Near-duplicate report of a finished crawl (``manage.py dupes --out DIR``).

Why offline: the crawl itself only flags pages within NEAR_DUP_BITS simhash bits of an earlier
page (``dedup/nearindex.py``); grouping *all* near-duplicates into clusters needs
every page at once. The records in ``OUT/pages.jsonl`` carry no text, so the text
is rebuilt from the WARC responses exactly as the parse stage saw it (content
coding undone with ``decode_body``, then ``parse_html``). Pages are compared by
MinHash sketches of 4-word shingles (``dedup/minhash.py``): pairs with estimated
Jaccard >= threshold (0.9 by default) are linked and clusters are the connected
components.

A page whose payload was byte-identical to an earlier one is stored as a ``revisit``
record (identical-payload-digest) that refers to that page: it gets the sketch of the
page it refers to. It used to get none, and ``dupes`` found 0 clusters where
``report`` (from the records' ``duplicate_of``) showed the exact duplicate.

Output: clusters of two or more pages, largest first, one URL per line, a blank
line between clusters, then ``N clusters, M pages in clusters of T pages``.
"""
from __future__ import annotations

import argparse
import json
import sys
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TextIO

from warcio.archiveiterator import ArchiveIterator

from crawler_tasks.dedup.minhash import clusters, sketch
from crawler_tasks.fetch.http import decode_body
from crawler_tasks.parse.encoding import is_html
from crawler_tasks.parse.html import parse_html
from crawler_tasks.settings import Settings


def _is_page(rec: dict) -> bool:
    """A page record fetched with 200 (not a sitemap or soft-404 probe); whether it is
    HTML is decided on its WARC response."""
    return rec.get("status") == 200 and not rec.get("kind") and bool(rec.get("url"))


def sketch_pages(records: Iterable[dict], texts: Mapping[str, str] | None) -> dict[str, Sequence[int]]:
    """URL -> MinHash sketch of each 200 page that has text. Text comes from ``texts``
    (keyed by the fetched URL, ``final_url`` if the record has one) or, without it,
    from the record's own ``text`` field."""
    out: dict[str, Sequence[int]] = {}
    for rec in records:
        if not _is_page(rec):
            continue
        if texts is None:
            text = rec.get("text")
        else:
            text = texts.get(rec.get("final_url") or rec["url"])
            if text is None:
                text = texts.get(rec["url"])
        if text:
            sk = sketch(text)
            if sk:
                out[rec["url"]] = sk
    return out


def report(records: Iterable[dict], texts: Mapping[str, str] | None,
           threshold: float = 0.9) -> list[list[str]]:
    """Clusters (size >= 2, largest first, URLs sorted) of near-duplicate 200 pages."""
    return clusters(sketch_pages(records, texts), threshold)


def read_records(out_dir: str | Path) -> Iterator[dict]:
    """The records of ``OUT/pages.jsonl`` (a torn last line is skipped)."""
    with open(Path(out_dir) / "pages.jsonl", encoding="utf-8") as fh:
        for line in fh:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict):
                yield rec


def iter_warc_pages(out_dir: str | Path, urls: set[str] | None = None, settings: Settings | None = None,
                    revisits: dict[str, str] | None = None) -> Iterator[tuple[str, str]]:
    """(URL, page text) of the HTML 200 responses in ``OUT/warc/*.warc.gz``, decoded
    and parsed as the parse stage does; only the first response of a URL. ``revisits``
    is filled with URL -> the URL whose identical payload it refers to."""
    s = settings or Settings()
    seen: set[str] = set()
    for path in sorted((Path(out_dir) / "warc").glob("*.warc.gz")):
        with open(path, "rb") as fh:
            for record in ArchiveIterator(fh):
                url = record.rec_headers.get_header("WARC-Target-URI") or ""
                if record.rec_type == "revisit" and revisits is not None and (urls is None or url in urls):
                    target = record.rec_headers.get_header("WARC-Refers-To-Target-URI")
                    if target and target != url:   # not a 304 of the same URL
                        revisits.setdefault(url, target)
                if record.rec_type != "response" or record.http_headers is None:
                    continue
                if url in seen or (urls is not None and url not in urls):
                    continue
                if record.http_headers.get_statuscode() != "200":
                    continue
                ctype = record.http_headers.get_header("Content-Type")
                raw = record.raw_stream.read()   # as transferred: content coding kept
                body, _ = decode_body(raw, record.http_headers.get_header("Content-Encoding"),
                                      s.MAX_DECODED_BYTES)
                if not is_html(ctype, body[:4096]):
                    continue
                seen.add(url)
                yield url, parse_html(body, url, content_type=ctype, max_text_chars=s.MAX_TEXT_CHARS).text


def warc_texts(out_dir: str | Path, urls: set[str] | None = None,
               settings: Settings | None = None) -> dict[str, str]:
    """URL -> page text (see :func:`iter_warc_pages`); all texts in memory, for small crawls."""
    return dict(iter_warc_pages(out_dir, urls, settings))


def warc_sketches(out_dir: str | Path, records: list[dict],
                  settings: Settings | None = None) -> dict[str, Sequence[int]]:
    """Record URL -> MinHash sketch of its page, streaming the WARC files: only the
    sketches (1.6 KB per page as ``array('q')``) are kept, never the texts."""
    by_fetched: dict[str, list[str]] = {}
    for rec in records:
        if _is_page(rec):
            by_fetched.setdefault(rec.get("final_url") or rec["url"], []).append(rec["url"])
            by_fetched.setdefault(rec["url"], []).append(rec["url"])
    out: dict[str, Sequence[int]] = {}
    fetched: dict[str, Sequence[int]] = {}
    revisits: dict[str, str] = {}
    for url, text in iter_warc_pages(out_dir, set(by_fetched), settings, revisits):
        sk = sketch(text)
        if sk:
            fetched[url] = array("q", sk)
    for url, target in revisits.items():
        if url not in fetched and target in fetched:
            fetched[url] = fetched[target]
    for url, kept in fetched.items():
        for rec_url in by_fetched[url]:
            out.setdefault(rec_url, kept)
    return out


def write_report(groups: list[list[str]], total: int, out: TextIO) -> None:
    for i, group in enumerate(groups):
        if i:
            out.write("\n")
        out.write("".join(url + "\n" for url in group))
    if groups:
        out.write("\n")
    in_clusters = sum(map(len, groups))
    out.write(f"{len(groups)} clusters, {in_clusters} pages in clusters of {total} pages\n")


def main(argv: list[str] | None = None) -> int:
    """``manage.py dupes --out DIR [--threshold 0.9]``: print the clusters; 0 on success."""
    ap = argparse.ArgumentParser(prog="manage.py dupes", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="crawl output folder (default: CRAWLER_OUT_DIR or crawl-out)")
    ap.add_argument("--threshold", type=float, default=0.9, help="estimated Jaccard of 4-word shingles (default 0.9)")
    args = ap.parse_args(argv)
    if not 0.0 < args.threshold <= 1.0:
        ap.error("--threshold must be in (0, 1]")
    settings = Settings.from_env()
    out_dir = Path(args.out or settings.OUT_DIR)
    if not (out_dir / "pages.jsonl").exists():
        print(f"no crawl output: {out_dir / 'pages.jsonl'} does not exist", file=sys.stderr)
        return 2
    records = [rec for rec in read_records(out_dir) if _is_page(rec)]
    sketches = warc_sketches(out_dir, records, settings)
    write_report(clusters(sketches, args.threshold), len(sketches), sys.stdout)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
