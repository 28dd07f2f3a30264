"""Resume after a crash: what the dead crawl's processes held comes back at once.

A crawl that was killed leaves hosts leased to its fetch sessions and fetched URLs
parked in the hand-off zset; maintenance would give them back only when their leases
and hand-off deadlines pass (minutes). ``crawl --resume`` holds the output folder's
lock and starts no worker before this runs, so nothing the old processes held can still
be in use: everything goes back now (reclaim.lua). Then the URLs whose page is already
recorded (a worker wrote the record and died before the frontier heard of it, or its
page group is still waiting in the broker) leave the head of their back queues
(forget.lua), so they are not fetched again. Fetched URLs wait at the head of their
host's queue, so only the first ``HEAD_ENTRIES`` of each queue are examined.
After a restore, ``queued_among`` says which recently recorded pages the restored
frontier will fetch again (their records are rolled back, ops/reconcile.py), and
``drop_front_copies`` removes the second copy a live checkpoint can hold of a URL.
"""
from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any

from crawler_tasks.frontier import Entry, Frontier

# Entries examined at the head of each back queue, where fetched URLs wait.
HEAD_ENTRIES = 64


def give_back(frontier: Frontier, shard: int, now: float | None = None) -> tuple[int, int]:
    """The shard's leased hosts and parked entries, all back in the frontier at once:
    (hosts, entries). Only when no worker of the crawl runs."""
    now = time.time() if now is None else now
    k = frontier.keys(shard)
    reply = list(frontier.run_script(shard, "reclaim", [k.lease, k.ready, k.handoff, k.active, k.te, k.lease_owner,  # type: ignore[call-overload]
                                                        k.handoff_owner, k.parsing],
                                     [now, k.queue_prefix]))
    return int(reply[0]), int(reply[1])


def queue_heads(frontier: Frontier, shard: int) -> dict[str, list[str]]:
    """host -> the first HEAD_ENTRIES entries of its back queue."""
    k = frontier.keys(shard)
    client = frontier.client(shard)
    return {host: client.lrange(k.queue(host), 0, HEAD_ENTRIES - 1)  # type: ignore[misc]
            for host in list(client.sscan_iter(k.active, count=1000))}


def forget(frontier: Frontier, shard: int, host: str, entries: list[str], now: float | None = None) -> int:
    """Remove these entries (their pages are recorded) from the host's back queue; how many were."""
    if not entries:
        return 0
    now = time.time() if now is None else now
    k = frontier.keys(shard)
    return int(frontier.run_script(shard, "forget", [k.queue(host), k.queued, k.active, k.ready, k.te],  # type: ignore[call-overload]
                                   [host, now, *entries]))


def _queued_urls(frontier: Frontier, shard: int, chunk: int = 10_000) -> Iterator[list[str]]:
    """The URLs waiting in the shard's front queues, back queues and overflow list, in
    chunks (spill files on disk are not read)."""
    for entries in queued_entries(frontier, shard, chunk):
        yield [e.url for e in entries]


def queued_entries(frontier: Frontier, shard: int, chunk: int = 10_000) -> Iterator[list[Entry]]:
    """The entries waiting in the shard's front queues, back queues and overflow list,
    in chunks (spill files on disk are not read); one that does not decode is skipped."""
    k = frontier.keys(shard)
    client = frontier.client(shard)
    for key in [*k.fronts(frontier.levels), k.overflow,
                *(k.queue(host) for host in list(client.sscan_iter(k.active, count=1000)))]:
        for raws in _chunks(client, key, chunk):
            yield entries_of(raws)


def entries_of(raws: Iterable[str]) -> list[Entry]:
    """The entries of raw queue items (or spill file lines) that decode."""
    return [e for e in map(_entry_of, raws) if e is not None]


def _entry_of(raw: str) -> Entry | None:
    try:
        return Entry.decode(raw)
    except ValueError:
        return None


def drop_front_copies(frontier: Frontier, shard: int, chunk: int = 10_000) -> int:
    """Remove from the front queues (and the overflow list) each URL that is also in a
    back queue or parked. A live checkpoint reads the front queues first: a URL that moved
    on while the rest was read is in both, and would be fetched and recorded twice.
    Returns how many entries went. Memory: a hash per queued URL, then only the few
    that match."""
    k = frontier.keys(shard)
    client = frontier.client(shard)
    later_keys = [k.queue(host) for host in list(client.sscan_iter(k.active, count=1000))]

    def later_urls() -> Iterator[str]:
        parked: list[str] = client.zrange(k.handoff, 0, -1)  # type: ignore[assignment]
        yield from map(_url_of, parked)
        for key in later_keys:
            for entries in _chunks(client, key, chunk):
                yield from map(_url_of, entries)

    hashes = {hash(url) for url in later_urls() if url}
    if not hashes:
        return 0
    fronts = [*k.fronts(frontier.levels), k.overflow]
    candidates: dict[str, list[tuple[str, str]]] = {}   # url -> (key, entry) of front copies
    for key in fronts:
        for entries in _chunks(client, key, chunk):
            for raw in entries:
                url = _url_of(raw)
                if url and hash(url) in hashes:
                    candidates.setdefault(url, []).append((key, raw))
    if not candidates:   # the usual case: the back queues are not read a second time
        return 0
    twice = {url for url in later_urls() if url in candidates}   # hashes can collide: the URLs may not
    pipe = client.pipeline(transaction=False)
    for url in twice:
        for key, raw in candidates[url]:
            pipe.lrem(key, 1, raw)
    return sum(pipe.execute()) if twice else 0


def _url_of(raw: str) -> str:
    """An entry's URL; "" for one that does not decode (it is left where it is)."""
    entry = _entry_of(raw)
    return entry.url if entry is not None else ""


def _chunks(client: Any, key: str, chunk: int) -> Iterator[list[str]]:
    start = 0
    while True:
        entries: list[str] = client.lrange(key, start, start + chunk - 1)
        yield entries
        if len(entries) < chunk:
            return
        start += chunk


def queued_sample(frontier: Frontier, limit: int) -> list[str]:
    """Up to ``limit`` URLs still queued, for a stopped crawl's summary: a URL without a
    record is then at least named (``crawl --resume`` fetches it)."""
    out: list[str] = []
    for shard in range(frontier.shards):
        for chunk in _queued_urls(frontier, shard, limit):
            out += chunk[:limit - len(out)]
            if len(out) >= limit:
                return out
    return out


def queued_among(frontier: Frontier, shard: int, urls: set[str]) -> set[str]:
    """Which of ``urls`` wait in the shard's queues."""
    return {url for chunk in _queued_urls(frontier, shard) for url in chunk if url in urls}


def remember_queued(frontier: Frontier, shard: int) -> int:
    """Set the URL-seen bits of every queued URL. A checkpoint is read key by key while
    the crawl runs, so its Bloom filter may predate a URL its queues hold; restored as
    is, that URL would be enqueued (and fetched) a second time when found again."""
    n = 0
    for chunk in _queued_urls(frontier, shard):
        frontier.remember(shard, chunk)
        n += len(chunk)
    return n


def unseen_among(frontier: Frontier, urls: set[str]) -> set[str]:
    """Which of ``urls`` the URL-seen test does not know: after a restore, the URLs
    first found since the checkpoint (read-only)."""
    ordered = sorted(urls)
    by_shard: dict[int, list[str]] = {}
    for url in ordered:
        by_shard.setdefault(frontier.shard_of(url.split("/", 3)[2]), []).append(url)
    unseen: set[str] = set()
    for shard, shard_urls in by_shard.items():
        unseen.update(url for url, seen in zip(shard_urls, frontier.seen_test(shard, shard_urls), strict=True)
                      if not seen)
    return unseen


def waiting_among(frontier: Frontier, urls: set[str]) -> set[str]:
    """Which of ``urls`` wait in the frontier (queued, or fetched and on their way to a
    record): a forced seed of one of them would be fetched a second time. Only URLs the
    URL-seen test knows are looked for (the queues are read whole)."""
    return queued_or_parked(frontier, urls - unseen_among(frontier, urls))


def queued_or_parked(frontier: Frontier, urls: set[str]) -> set[str]:
    """Which of ``urls`` are in a queue or the hand-off zset of any shard."""
    if not urls:
        return set()
    found: set[str] = set()
    for shard in range(frontier.settings.SHARDS):
        found |= queued_among(frontier, shard, urls)
        parked: list[str] = frontier.client(shard).zrange(frontier.keys(shard).handoff, 0, -1)  # type: ignore[assignment]
        found |= {url for url in (Entry.decode(raw).url for raw in parked) if url in urls}
    return found
