"""Continuous crawling: every fetched URL gets a next visit from its change history.

Policy: a page whose content fingerprint changed since the last visit is revisited
twice as soon, an unchanged one (or a 304 to our conditional GET) 1.5x later, within
[RECRAWL_MIN_S, RECRAWL_MAX_S]; a new URL starts at RECRAWL_INITIAL_S. The priority of
the revisit blends the change rate with quality, so fast-changing junk does not win:
only indexable pages that change often get the top level; pages that are not
indexable (duplicates, soft 404s, errors) are revisited at the lowest level.

State per URL (``hist`` hash of the URL's shard): ``etag \\t last-modified \\t fingerprint
\\t interval \\t visits \\t changes`` (about 60 bytes plus the URL as field name), and the
``due`` sorted set (score = next visit). A Beat task (``crawler.recrawl``) moves due URLs
back into the front queues with recrawl.lua.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from crawler_tasks.connection import shard_client
from crawler_tasks.frontier import Frontier, group_by
from crawler_tasks.records import EntryKind, PageRecord
from crawler_tasks.settings import Settings
from crawler_tasks.urls.normalize import host_key


@dataclass(slots=True)
class History:
    etag: str = ""
    last_modified: str = ""
    fingerprint: str = ""
    interval_s: float = 0.0
    visits: int = 0
    changes: int = 0

    def encode(self) -> str:
        return "\t".join([self.etag, self.last_modified, self.fingerprint, f"{self.interval_s:.0f}",
                          str(self.visits), str(self.changes)])

    @classmethod
    def decode(cls, raw: str | None) -> "History":
        if not raw:
            return cls()
        try:
            etag, lm, fp, interval, visits, changes = raw.split("\t")
            return cls(etag, lm, fp, float(interval), int(visits), int(changes))
        except ValueError:  # an old or damaged entry: start the history again
            return cls()


def next_visit(settings: Settings, old: History, status: int | None, fingerprint: str | None,
               etag: str | None, last_modified: str | None) -> tuple[History, bool]:
    """The URL's new history after a visit, and whether its content changed (pure)."""
    if status == 304:
        changed = False
        fingerprint = old.fingerprint
    else:
        changed = bool(old.visits) and (fingerprint or "") != old.fingerprint
    if not old.visits:
        interval = settings.RECRAWL_INITIAL_S
    elif changed:
        interval = old.interval_s / 2
    else:
        interval = old.interval_s * 1.5
    interval = min(max(interval, settings.RECRAWL_MIN_S), settings.RECRAWL_MAX_S)
    new = History(etag or (old.etag if status == 304 else ""),
                  last_modified or (old.last_modified if status == 304 else ""),
                  fingerprint or "", interval, old.visits + 1, old.changes + int(changed))
    return new, changed


def revisit_level(settings: Settings, hist: History, indexable: bool) -> int:
    """Front-queue level of the revisit: change rate counts only for indexable pages."""
    top = settings.PRIORITY_LEVELS - 1
    if not indexable:
        return top
    rate = hist.changes / max(1, hist.visits - 1)
    return 0 if rate >= 0.5 else min(1, top)


class Recrawler:
    def __init__(self, settings: Settings, frontier: Frontier) -> None:
        self.settings = settings
        self.frontier = frontier

    def conditional_headers(self, shard: int, urls: list[str]) -> list[dict[str, str]]:
        """If-None-Match / If-Modified-Since for URLs we hold validators for."""
        if not urls:
            return []
        raw: list[str | None] = shard_client(self.settings, shard).hmget(  # type: ignore[assignment]
            self.frontier.keys(shard).history, urls)
        out = []
        for value in raw:
            h = History.decode(value)
            headers = {}
            if h.etag:
                headers["If-None-Match"] = h.etag
            if h.last_modified:
                headers["If-Modified-Since"] = h.last_modified
            out.append(headers)
        return out

    def record_visits(self, records: list[PageRecord], now: float | None = None) -> dict[str, int]:
        """Update histories and schedule next visits (``revisit_s`` on each record);
        returns counters."""
        now = time.time() if now is None else now
        counters = {"recrawl/changed": 0, "recrawl/unchanged": 0}
        visited = [r for r in records if r.status in (200, 304) and r.kind != EntryKind.PROBE]
        by_shard = group_by(visited, lambda rec: self.frontier.shard_of(host_key(rec.url)))
        for shard, group in by_shard.items():
            k = self.frontier.keys(shard)
            client = shard_client(self.settings, shard)
            old: list[str | None] = client.hmget(k.history, [r.url for r in group])  # type: ignore[assignment]
            pipe = client.pipeline(transaction=False)
            for rec, raw in zip(group, old, strict=True):
                hist, changed = next_visit(self.settings, History.decode(raw), rec.status, rec.fingerprint,
                                           rec.headers.get("etag"), rec.headers.get("last-modified"))
                counters["recrawl/changed" if changed else "recrawl/unchanged"] += 1
                rec.revisit_s = round(hist.interval_s, 1)
                level = revisit_level(self.settings, hist, rec.indexable or rec.status == 304)
                pipe.hset(k.history, rec.url, hist.encode())
                pipe.zadd(k.due, {f"{level} {rec.url}": now + hist.interval_s})
            pipe.execute()
        return counters

    def requeue_due(self, now: float | None = None, limit: int = 5000) -> int:
        """Move due URLs of every shard back into the front queues."""
        now = time.time() if now is None else now
        moved = 0
        for shard in range(self.settings.SHARDS):
            k = self.frontier.keys(shard)
            moved += int(self.frontier.run_script(shard, "recrawl", [k.due, k.queued] + k.fronts(self.frontier.levels),
                                                  [now, limit]))  # type: ignore[call-overload]
        return moved
