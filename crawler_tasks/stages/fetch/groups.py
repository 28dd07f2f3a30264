"""Page groups: finished pages handed to parse together (their bodies in one spool
file), so that a page never waits for the rest of its session."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from crawler_tasks.counters import Counters
from crawler_tasks.output.spool import new_batch_id, write_spool
from crawler_tasks.records import Capture, FetchedPage
from crawler_tasks.runtime.latency import record_latencies
from crawler_tasks.stages.fetch.outcome import count_page
from crawler_tasks.stages.worker import Worker


class Taken(NamedTuple):
    """A finished turn's page, with what parse will need beside it."""

    page: FetchedPage
    body: bytes
    warc_id: str | None
    location: str | None


@dataclass(slots=True)
class Group:
    pages: list[Taken] = field(default_factory=list)
    parked: list[str] = field(default_factory=list)   # their frontier entries, acked once handed on
    since: float = 0.0
    body_bytes: int = 0

    def add(self, taken: Taken, parked: str | None) -> None:
        if not self.pages:
            self.since = time.monotonic()
        self.pages.append(taken)
        self.body_bytes += len(taken.body)
        if parked is not None:
            self.parked.append(parked)


def flush_group(w: Worker, shard: int, group: Group, counters: Counters,
                emit: Callable[[list[Capture], str], None]) -> int:
    """Spool the group's bodies, count its pages, hand it to parse (this node's), and only
    then let its fetched URLs leave the queues (the frontier keeps them with the group
    until it is enqueued, for a node lost before parsing it). Returns the number of pages
    handed on."""
    group_id = new_batch_id()
    bodies = [t.body for t in group.pages if t.body]
    refs = iter(write_spool(w.settings, group_id, bodies) if bodies else [])
    captures = [Capture(t.page, next(refs) if t.body else None, t.warc_id, t.location) for t in group.pages]
    w.warc.flush()
    pages = [t.page for t in group.pages]
    for page in pages:
        count_page(page, counters, pages_counted=bool(w.settings.MAX_PAGES))
    # latencies, the group in flight and the counters: one round trip
    pipe = w.control.client.pipeline(transaction=False)
    record_latencies(pipe, w.settings.KEY_PREFIX, [p.fetch_ms / 1000 for p in pages if p.fetch_ms is not None])
    w.control.begin_batches([group_id], time.time() + w.settings.batch_timeout_s, w.settings.node_name, pipe)
    w.control.count(counters, pipe)
    pipe.execute()
    emit(captures, group_id)
    w.frontier.ack(shard, group.parked, group_id)
    return len(captures)
