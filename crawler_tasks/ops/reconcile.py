"""Outputs and crawl state agree after a crash: each URL's record is written once.

The contract (README, "Crash safety"):
- ``pages.jsonl`` is the ledger. A URL's page is done once its record is there; the
  dedup task writes a page group's records in one append, then ends the group.
- The feed (``feed.jsonl``) is written by the parse task just before it hands its
  records on; a feed line whose URL has no record yet is committed only when that
  hand-off is in the broker (a pending dedup message).
- WARC holds every exchange made, as made: a page that was in flight at a crash and
  is fetched again has two captures, one per real exchange, never one written twice.

``crawl --resume`` (and ``--restore``) runs ``reconcile`` before any worker starts, while
it holds the folder's lock:
1. a torn last line (a worker killed mid-write, a full disk) is cut from pages.jsonl and
   feed.jsonl, and a torn last record from each process's last WARC file;
2. the dead workers' broker messages are settled (``broker.settle_leftovers``): stage
   messages they had taken are queued again, fetch session messages dropped. A worker
   can die after its task wrote and before it acknowledged: the records of a taken
   dedup message already in pages.jsonl, and the pages of a taken parse message already
   recorded or in a dedup message, leave it first (after the cut of step 1, so the
   unwritten half of a torn group stays); a message left empty is dropped, and a dedup
   message's page group ended, as the task would have; a stage message kept on this
   node's disk (``spool.keep_message``) whose batch no queue holds was lost by the
   broker: it is sent again, without the items already recorded;
3. the frontier gives back the dead sessions' leases and hand-offs at once
   (``frontier.reclaim``), and the queued URLs whose record is in pages.jsonl or on its
   way in a pending message leave the queue, so they are not fetched again;
4. feed lines near the end whose page is neither recorded nor on its way to a record
   through a pending dedup message are moved to ``feed.jsonl.uncommitted``: the parse
   task or the fetch that made them runs again and writes them anew.
Steps 3 (its second half) and 4 are skipped for a continuous crawl, which records a URL
once per visit.
"""
from __future__ import annotations

import logging
import os
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from crawler_tasks.connection import broker_url
from crawler_tasks.frontier import Discovered, Entry, Frontier
from crawler_tasks.frontier.reclaim import (
    forget,
    give_back,
    queue_heads,
    queued_among,
    queued_or_parked,
    remember_queued,
    unseen_among,
)
from crawler_tasks.output.jsonl import FEED_FILE, PAGES_FILE, whole_lines_end
from crawler_tasks.output.spool import drop_message, kept_messages, prune_markers, remove_spool
from crawler_tasks.queues import ENQUEUE_QUEUE, ENQUEUE_QUEUES, fetch_queue, parse_queue
from crawler_tasks.records import EntryKind
from crawler_tasks.runtime.control import Control
from crawler_tasks.settings import Settings

if TYPE_CHECKING:
    from crawler_tasks.broker import Leftovers

log = logging.getLogger(__name__)

# Feed lines examined from the end (a crash leaves uncommitted lines only in the last
# page groups of each parse worker).
FEED_TAIL_BYTES = 64 * 2**20
RECORDED_TAIL_BYTES = 16 * 2**20   # of pages.jsonl: well over the seconds of records Redis can lose
UNCOMMITTED_SUFFIX = ".uncommitted"
ROLLED_BACK_SUFFIX = ".rolled-back"


@dataclass(slots=True)
class Reconciled:
    torn_bytes: int = 0          # cut from the end of pages.jsonl and feed.jsonl
    requeued: int = 0            # stage messages of the dead workers queued again
    written_tasks: int = 0       # ... whose output was all written already: dropped
    written_items: int = 0       # pages or records of those messages already written: left out
    dropped_sessions: int = 0    # fetch session messages dropped
    leases: int = 0              # hosts given back at once
    handoffs: int = 0            # fetched, not handed on: back in their queues
    forgotten: int = 0           # queued URLs already recorded: not fetched again
    feed_moved: int = 0          # uncommitted feed lines moved aside
    resent: int = 0              # stage messages the broker lost, sent again from their kept copy
    refetched: int = 0           # their pages not sent but fetched again (waiting, or unknown after a restore)
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        parts = [f"{n} {what}" for n, what in (
            (self.leases, "host lease(s) reclaimed"), (self.handoffs, "fetched URL(s) not handed on requeued"),
            (self.requeued, "interrupted task(s) queued again"),
            (self.resent, "task(s) the broker lost sent again"),
            (self.refetched, "page(s) of lost tasks left to be fetched again"),
            (self.written_tasks, "interrupted task(s) already written dropped"),
            (self.written_items, "already written page(s) or record(s) left out of interrupted tasks"),
            (self.forgotten, "queued URL(s) already recorded dropped"),
            (self.torn_bytes, "byte(s) of torn last lines or WARC records cut"),
            (self.feed_moved, "uncommitted feed line(s) moved aside")) if n]
        return "; ".join(parts) or "nothing to repair"


def cut_torn_line(path: Path) -> int:
    """Truncate ``path`` after its last newline; bytes cut (0 when it ends whole)."""
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return 0
    try:
        return os.fstat(fd).st_size - whole_lines_end(fd)
    finally:
        os.close(fd)


def whole_gzip_members(path: Path) -> int:
    """Length of the complete gzip members at the start of ``path`` (a WARC file is
    one member per record): where a record torn by a crash begins, or the file size."""
    good = pos = 0
    with open(path, "rb") as f:
        d = zlib.decompressobj(31)
        while chunk := f.read(1 << 20):
            while chunk:
                try:
                    d.decompress(chunk, 0)
                except zlib.error:
                    return good
                pos += len(chunk) - len(d.unused_data)
                if not d.eof:
                    break
                good, chunk = pos, d.unused_data
                d = zlib.decompressobj(31)
    return good


def cut_torn_warc(warc_dir: Path) -> int:
    """Cut a record torn by a crash from the end of each process's last WARC file
    (``...-<pid>-<serial>.warc.gz``: only a file still open at the crash can hold one).
    Returns the bytes cut."""
    last: dict[str, Path] = {}
    for path in sorted(warc_dir.glob("*.warc.gz")):
        parts = path.name[: -len(".warc.gz")].rsplit("-", 2)
        if len(parts) == 3:
            last[parts[1]] = max(last.get(parts[1], path), path)
    cut = 0
    for path in last.values():
        size = path.stat().st_size
        good = whole_gzip_members(path)
        if good < size:
            os.truncate(path, good)
            cut += size - good
    return cut


def _url(line: bytes) -> str | None:
    try:
        url = orjson.loads(line).get("url")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return url if isinstance(url, str) else None


def recorded_among(path: Path, urls: Iterable[str]) -> set[str]:
    """Which of ``urls`` have a record in ``path`` (one pass; memory is the candidates')."""
    wanted = set(urls)
    found: set[str] = set()
    if not wanted:
        return found
    try:
        with open(path, "rb") as f:
            for line in f:
                if b'"url"' in line:
                    url = _url(line)
                    if url in wanted:
                        found.add(url)
    except FileNotFoundError:
        pass
    return found


def _fetched_epoch(record: dict) -> float:
    try:
        return datetime.fromisoformat(str(record.get("fetched_at")).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def roll_back(settings: Settings, out_dir: Path, since: float) -> int:
    """After a restore of the checkpoint taken at ``since``: the records of pages fetched
    since then (less a page group's time in flight) that the restored frontier will fetch
    again (queued in it, or unknown to its URL-seen test) leave pages.jsonl and the feed
    for ``<file>.rolled-back``, so each is recorded once, when it is fetched again, and
    the links found on it are found again. Returns how many records were rolled back."""
    pages, feed = out_dir / PAGES_FILE, out_dir / FEED_FILE
    cutoff = since - settings.batch_timeout_s
    first, candidates = _since(pages, cutoff)
    if first is None:
        return 0
    frontier = Frontier(settings)
    for shard in range(settings.SHARDS):
        remember_queued(frontier, shard)
    # fetched again: still queued in the checkpoint, or first found since (found again
    # when the pages that link to them are fetched again)
    again = set().union(*(queued_among(frontier, shard, candidates) for shard in range(settings.SHARDS)))
    unseen = unseen_among(frontier, candidates - again)
    again |= unseen

    def undone(record: dict) -> bool:
        return record.get("url") in again and _fetched_epoch(record) >= cutoff

    moved = _move_lines(pages, first, undone, ROLLED_BACK_SUFFIX)
    feed_first, _ = _since(feed, cutoff)
    if feed_first is not None:
        _move_lines(feed, feed_first, undone, ROLLED_BACK_SUFFIX)
    # first found since the checkpoint: queued again now, in case the page that linked to
    # them is not fetched again (the checkpoint's filter was read before their discovery)
    kinds = {kind.label: kind for kind in EntryKind}
    lost = {r["url"]: r for r in moved if r["url"] in unseen}
    frontier.put_discovered([Discovered(url=url, host=url.split("/", 3)[2], depth=int(r.get("depth") or 0),
                                        hops=int(r.get("hops") or 0), kind=kinds.get(r.get("kind", ""), EntryKind.PAGE))
                             for url, r in lost.items()])
    return len(moved)


def _since(path: Path, cutoff: float) -> tuple[int | None, set[str]]:
    """Byte offset of the first line of ``path`` fetched at ``cutoff`` or later, and the
    URLs of all such lines (one streaming pass)."""
    first, urls, offset = None, set(), 0
    try:
        with open(path, "rb") as f:
            for line in f:
                record = _record(line)
                if record is not None and isinstance(record.get("url"), str) and _fetched_epoch(record) >= cutoff:
                    urls.add(record["url"])
                    first = offset if first is None else first
                offset += len(line)
    except FileNotFoundError:
        pass
    return first, urls


def _record(line: bytes) -> dict | None:
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _move_lines(path: Path, start: int, matches: Callable[[dict], bool], suffix: str) -> list[dict]:
    """Move the lines of ``path`` from byte ``start`` on whose record ``matches`` to
    ``<path><suffix>`` (appended, synced first); returns their records."""
    try:
        with open(path, "rb") as f:
            f.seek(start)
            lines = f.read().splitlines(keepends=True)
    except FileNotFoundError:
        return []
    keep: list[bytes] = []
    moved: list[bytes] = []
    records: list[dict] = []
    for line in lines:
        record = _record(line)
        if record is not None and matches(record):
            moved.append(line)
            records.append(record)
        else:
            keep.append(line)
    if not moved:
        return []
    with open(path.with_name(path.name + suffix), "ab") as aside:
        aside.write(b"".join(moved))
        aside.flush()
        os.fsync(aside.fileno())
    with open(path, "rb+") as f:
        f.seek(start)
        f.write(b"".join(keep))
        f.truncate()
    return records


def reconcile(settings: Settings, out_dir: Path, now: float | None = None) -> Reconciled:
    """Make the frontier, the broker and the outputs of a crawl that died agree (module
    docstring). Only with no worker of the crawl running."""
    now = time.time() if now is None else now
    pages, feed = out_dir / PAGES_FILE, out_dir / FEED_FILE
    out = Reconciled(torn_bytes=cut_torn_line(pages) + cut_torn_line(feed) + cut_torn_warc(out_dir / "warc"))
    parse_q = parse_queue(settings.node_name)

    def written(taken: dict[str, set[str]], queued: dict[str, set[str]]) -> dict[str, set[str]]:
        """A taken enqueue message wrote the records in pages.jsonl; a taken parse message
        wrote its feed lines and handed its pages on once they are recorded or in an
        enqueue message."""
        recorded = recorded_among(pages, set().union(*taken.values()))
        handed = set().union(*(taken.get(q, set()) | queued.get(q, set()) for q in ENQUEUE_QUEUES))
        return {q: recorded for q in ENQUEUE_QUEUES} | {parse_q: recorded | handed}

    # imported here: Celery costs a crawl's start a tenth of a second, and kombu the runner
    # of a crawl that is not resumed ~30 ms and ~6 MiB
    from crawler_tasks.broker import broker_options, settle_leftovers

    leftovers = settle_leftovers(broker_url(settings), {parse_q, *ENQUEUE_QUEUES},
                                 {fetch_queue(i) for i in range(settings.SHARDS)},
                                 None if settings.CONTINUOUS else written, broker_options(settings))
    out.requeued, out.dropped_sessions, out.written_items = leftovers.requeued, leftovers.dropped, leftovers.trimmed
    control = Control(settings)
    for q in ENQUEUE_QUEUES:   # as the task would have, after its records
        for batch_id in leftovers.done.get(q, []):
            control.end_batch(batch_id)
            drop_message(settings, batch_id)
    out.resent, out.refetched = _resend_lost(settings, pages, leftovers, broker_options(settings))
    for batch_id in leftovers.done.get(parse_q, []):       # its pages were handed on
        remove_spool(settings, batch_id)
    out.written_tasks = sum(map(len, leftovers.done.values()))
    prune_markers(settings)
    # the feed's own repair is step 4: a parse task run again must write the lines it moves aside
    prune_markers(settings, older_than_s=-60.0, outputs=("feed",))
    pending = set().union(*leftovers.urls.values()) if leftovers.urls else set()
    frontier = Frontier(settings)
    heads: dict[int, dict[str, list[str]]] = {}
    for shard in range(settings.SHARDS):
        leases, handoffs = give_back(frontier, shard, now)
        out.leases += leases
        out.handoffs += handoffs
        heads[shard] = queue_heads(frontier, shard)
    if settings.CONTINUOUS:   # a URL is recorded once per visit there: nothing to forget by URL
        return out
    candidates = {Entry.decode(raw).url for by_host in heads.values() for entries in by_host.values()
                  for raw in entries}
    done = (candidates & pending) | recorded_among(pages, candidates - pending)
    for shard, by_host in heads.items():
        for host, entries in by_host.items():
            out.forgotten += forget(frontier, shard, host, [raw for raw in entries if Entry.decode(raw).url in done],
                                    now)
    out.feed_moved = _move_uncommitted_feed(feed, pages, set().union(*(leftovers.urls.get(q, set())
                                                                       for q in ENQUEUE_QUEUES)))
    return out


def _resend_lost(settings: Settings, pages: Path, leftovers: Leftovers, options: dict) -> tuple[int, int]:
    """Stage messages kept on this node (spool.keep_message) whose batch no queue holds
    were lost by the broker: sent again without the items already recorded, or to be
    fetched again (waiting in the frontier, or unknown to it after a restore). A batch
    left with none is done: its kept message goes and it is no longer in flight.
    Returns (messages sent, pages left to be fetched again)."""
    lost = {batch_id: kept for batch_id, kept in kept_messages(settings).items() if batch_id not in leftovers.batches}
    urls = {url for _, items in lost.values() for item in items if isinstance(item, dict)
            and isinstance(url := item.get("url"), str)}
    # after a restore, pages fetched since the checkpoint wait in its queues, or are unknown to
    # it and found again: fetched again, not sent
    frontier = Frontier(settings)
    recorded = recorded_among(pages, urls)
    unseen = unseen_among(frontier, urls)
    again = (queued_or_parked(frontier, urls - unseen) | unseen) - recorded
    skip = recorded | again
    control = Control(settings)
    queues = {"parse": parse_queue(settings.node_name), "enqueue": ENQUEUE_QUEUE,
              "dedup": ENQUEUE_QUEUE}   # kept by a worker of the last release, whose enqueue task had that name
    sent = 0
    for batch_id, (task, items) in lost.items():
        left = [item for item in items if isinstance(item, dict) and item.get("url") not in skip]
        if task not in queues or not left:
            drop_message(settings, batch_id)
            control.end_batch(batch_id)
            continue
        _send_stage_message(broker_url(settings), task, left, batch_id, queues[task], options)
        # in flight again, with a new deadline: a group past its old one (a restored checkpoint's)
        # would be given up and its pages fetched again while the message sent is recorded
        control.begin_batches([batch_id], time.time() + settings.batch_timeout_s, settings.node_name)
        leftovers.urls.setdefault(queues[task], set()).update(item["url"] for item in left if "url" in item)
        sent += 1
    return sent, len(again)


def forget_recorded(settings: Settings, out_dir: Path, now: float | None = None) -> int:
    """After a restart of Redis from its append-only file, which can lose acknowledged
    writes (appendfsync everysec: about a second, and up to two more while a slow disk
    holds an fsync, when redis-server postpones its writes; measured: the last 0.8 s of a
    session's turns): fetched URLs whose record is in pages.jsonl, or whose page is on
    its way to it (a stage message kept on this node, spool.keep_message), may be back at
    the head of their queue or in the hand-off zset; they leave both, so they are not
    fetched (and recorded) again. Workers may run meanwhile: no lease is touched. (A
    stage message run again writes nothing twice: its batch's markers, jsonl.append_lines.)
    Returns how many entries left."""
    if settings.CONTINUOUS:   # a URL is recorded once per visit there
        return 0
    frontier = Frontier(settings)
    heads = {shard: queue_heads(frontier, shard) for shard in range(settings.SHARDS)}
    parked: dict[int, list[str]] = {shard: frontier.client(shard).zrange(frontier.keys(shard).handoff, 0, -1)  # type: ignore[misc]
                                    for shard in range(settings.SHARDS)}
    candidates = {Entry.decode(raw).url for shard in heads for entries in heads[shard].values() for raw in entries}
    candidates |= {Entry.decode(raw).url for entries in parked.values() for raw in entries}
    handed = {item["url"] for _, items in kept_messages(settings).values() for item in items
              if isinstance(item, dict) and isinstance(item.get("url"), str)}
    done = (candidates & handed) | recorded_among(out_dir / PAGES_FILE, candidates - handed)
    if not done:
        return 0
    n = 0
    for shard in heads:
        for host, entries in heads[shard].items():
            n += forget(frontier, shard, host, [raw for raw in entries if Entry.decode(raw).url in done], now)
        # under a group no worker has: maintenance forgets it, as any group no longer in flight
        n += frontier.ack(shard, [raw for raw in parked[shard] if Entry.decode(raw).url in done], "recorded")
    return n


def remember_recorded_tail(settings: Settings, out_dir: Path, tail_bytes: int = RECORDED_TAIL_BYTES) -> int:
    """After a restart of Redis from its append-only file: the URL-seen test knows again
    the URLs of the last records of pages.jsonl. A URL whose record was written in the
    lost second (one a learned rule filtered, whose drop was never queued: its URL-seen
    bit, the rule itself, may be lost) would otherwise be admitted, fetched and recorded
    a second time when a link names it again. Returns how many URLs were remembered."""
    path = out_dir / PAGES_FILE
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - tail_bytes))
            lines = f.read().split(b"\n")[1 if size > tail_bytes else 0:]
    except FileNotFoundError:
        return 0
    frontier = Frontier(settings)
    by_shard: dict[int, list[str]] = {}
    for url in filter(None, map(_url, lines)):
        if "://" in url:
            by_shard.setdefault(frontier.shard_of(url.split("/", 3)[2]), []).append(url)
    for shard, urls in by_shard.items():
        frontier.remember(shard, urls)
    return sum(map(len, by_shard.values()))


def _move_uncommitted_feed(feed: Path, pages: Path, handed_on: set[str]) -> int:
    """Feed lines near the end whose URL has no record and no pending dedup message go
    to ``feed.jsonl.uncommitted`` (they will be written again). Returns how many."""
    try:
        size = feed.stat().st_size
    except FileNotFoundError:
        return 0
    with open(feed, "rb") as f:
        start = max(0, size - FEED_TAIL_BYTES)
        f.seek(start)
        tail = f.read()
    if start:   # from the first whole line of the window
        cut = tail.find(b"\n") + 1
        start, tail = start + cut, tail[cut:]
    lines = tail.splitlines(keepends=True)
    urls = [_url(line) for line in lines]
    recorded = recorded_among(pages, {u for u in urls if u and u not in handed_on})
    moving = {u for u in urls if u and u not in handed_on and u not in recorded}
    moved = len(_move_lines(feed, start, lambda r: r.get("url") in moving, UNCOMMITTED_SUFFIX))
    if not moved:
        return 0
    log.warning("moved %d uncommitted feed line(s) to %s", moved, feed.name + UNCOMMITTED_SUFFIX)
    return moved


def _send_stage_message(url: str, task: str, items: list[Any], batch_id: str, queue: str,
                        transport_options: dict[str, Any] | None = None) -> None:
    """Queue a stage message (``crawler.parse`` or ``crawler.enqueue``) as a worker sends it."""
    from kombu import Connection

    from crawler_tasks.celery import app

    with Connection(url, transport_options=transport_options or {}) as conn:
        app.send_task(f"crawler.{task}", args=(items, batch_id), queue=queue, connection=conn,
                      argsrepr=f"(<{len(items)} items>, {batch_id!r})", kwargsrepr="{}")
