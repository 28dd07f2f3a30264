"""Records of the indexer feed, built in one place so each follows feed.schema.json.

The schema beside this module is the contract with indexers; every record
carries ``schema_version`` so a consumer can tell which contract a line
follows.  Pure logic: no Redis, no I/O (``FeedWriter`` in warc.py writes).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from crawler_tasks.parse.text import PageText

__all__ = ["SCHEMA_PATH", "SCHEMA_VERSION", "feed_record"]

SCHEMA_VERSION = 1
SCHEMA_PATH = Path(__file__).with_name("feed.schema.json")
_MAX_ANCHOR_CHARS = 200
_INDEXER_RELS = frozenset({"nofollow", "ugc", "sponsored"})


def feed_record(
    page: PageText,
    *,
    url: str,
    fetched_at: str,
    fingerprint: str | None,
    simhash: str | None = None,
    canonical: str | None = None,
    content_type: str | None = None,
    outlinks: Iterable[Sequence[Any]] = (),
) -> dict[str, Any]:
    """One feed record (a JSON-ready dict) for a page.

    ``outlinks`` holds ``(url, anchor_text)`` or ``(url, anchor_text, rel)``
    items, ``rel`` a string or a list of tokens; only the tokens an indexer
    acts on are kept.  ``full_text`` appears only when the page has it.
    """
    record: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "url": url,
        "title": page.title,
        "text": page.text,
        "lang": {"detected": page.lang, "confidence": page.lang_confidence, "declared": page.lang_declared},
        "description": page.description,
        "headings": list(page.headings),
        "published": page.published,
        "modified": page.modified,
        "word_count": page.word_count,
        "outlinks": [_outlink(link) for link in outlinks],
        "fingerprint": fingerprint,
        "simhash": simhash,
        "fetched_at": fetched_at,
        "canonical": canonical,
        "content_type": content_type,
    }
    if page.full_text is not None:
        record["full_text"] = page.full_text
    return record


def _outlink(link: Sequence[Any]) -> dict[str, Any]:
    rel: Any = link[2] if len(link) > 2 else ()
    tokens = rel.lower().split() if isinstance(rel, str) else [str(t).lower() for t in rel]
    return {
        "url": str(link[0]),
        "text": str(link[1] or "")[:_MAX_ANCHOR_CHARS],
        "rel": sorted(_INDEXER_RELS.intersection(tokens)),
    }
