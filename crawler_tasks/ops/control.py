"""Crawl control: the one reader and writer of the crawl's state, counters and batches in flight.

The state machine is ``running -> stopping -> finished`` (``CrawlState``): the runner
starts a crawl and asks it to stop (signal, --max-seconds), maintenance stops it at
--max-pages and finishes it when nothing can happen any more, wake dispatches only
while it is running. Counters are slash paths (``fetch/status/200``) in one hash,
page groups between fetch and enqueue a sorted set of group id -> deadline (back-pressure:
fetch sessions give their hosts back while too many wait for parse), fetch sessions
another (wake keeps each shard's share of them running); stale entries of both are
dropped by maintenance.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

import redis

from crawler_tasks.connection import global_client
from crawler_tasks.keys import GlobalKeys
from crawler_tasks.settings import Settings


class CrawlState(StrEnum):
    RUNNING = "running"
    STOPPING = "stopping"
    FINISHED = "finished"


@dataclass(frozen=True, slots=True)
class ControlView:
    """What wake needs in one round trip."""

    state: CrawlState
    inflight: int
    pages: int


class Control:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.keys = GlobalKeys(settings.KEY_PREFIX)

    @property
    def client(self) -> redis.Redis:
        return global_client(self.settings)

    # -- state ------------------------------------------------------------------------
    def exists(self) -> bool:
        """Whether this Redis holds a crawl under our prefix."""
        return bool(self.client.exists(self.keys.control))

    def start(self, started_at: float | None = None) -> None:
        fields: dict[str, str | float] = {"state": CrawlState.RUNNING, "reason": ""}
        if started_at is not None:
            fields["started_at"] = started_at
        self.client.hset(self.keys.control, mapping=fields)  # type: ignore[arg-type]  # redis-py's Mapping key is invariant

    def set_state(self, state: CrawlState, reason: str) -> None:
        self.client.hset(self.keys.control, mapping={"state": state, "reason": reason, "state_at": time.time()})

    def state(self) -> tuple[CrawlState, str, float | None]:
        """(state, reason, when it was entered); a crawl with no state yet is running."""
        raw: dict[str, str] = self.client.hgetall(self.keys.control)  # type: ignore[assignment]
        at = raw.get("state_at")
        return _state(raw.get("state")), raw.get("reason", ""), float(at) if at else None

    def view(self) -> ControlView:
        """State, page groups waiting for parse/enqueue, pages fetched: one round trip."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hget(self.keys.control, "state")
        pipe.zcard(self.keys.inflight)
        pipe.hget(self.keys.stats, "fetch/pages")
        state, inflight, pages = pipe.execute()
        return ControlView(_state(state), int(inflight or 0), int(pages or 0))

    # -- counters ---------------------------------------------------------------------
    def count(self, counters: Mapping[str, int]) -> None:
        """Add to the crawl's counters in one round trip."""
        if not counters:
            return
        pipe = self.client.pipeline(transaction=False)
        for name, n in counters.items():
            pipe.hincrby(self.keys.stats, name, n)
        pipe.execute()

    def queue_count_page(self, pipe: redis.client.Pipeline) -> Callable[[list[object]], int]:
        """One more page fetched, counted at once (the page budget must not trail the
        fetches), on a pipeline of the global client that the caller runs. Returns the
        reader of its reply among the pipeline's: the new total (an error reply raises)."""
        at = len(pipe)
        pipe.hincrby(self.keys.stats, "fetch/pages", 1)

        def read(replies: list[object]) -> int:
            reply = replies[at]
            if isinstance(reply, Exception):
                raise reply
            return int(reply)  # type: ignore[call-overload]
        return read

    def stats(self) -> dict[str, int]:
        raw: dict[str, str] = self.client.hgetall(self.keys.stats)  # type: ignore[assignment]
        return {k: int(v) for k, v in raw.items()}

    # -- batches in flight ------------------------------------------------------------
    def begin_batches(self, batch_ids: Iterable[str], deadline: float) -> None:
        mapping = {batch_id: deadline for batch_id in batch_ids}
        if mapping:
            self.client.zadd(self.keys.inflight, mapping)

    def end_batch(self, batch_id: str) -> None:
        self.client.zrem(self.keys.inflight, batch_id)

    def inflight(self) -> int:
        """Page groups and fetch sessions not finished: work that can still add URLs."""
        pipe = self.client.pipeline(transaction=False)
        pipe.zcard(self.keys.inflight)
        pipe.zcard(self.keys.sessions)
        groups, sessions = pipe.execute()
        return int(groups) + int(sessions)

    def drop_stale_batches(self, now: float) -> int:
        """Forget groups and sessions past their deadline (their worker died; its hosts come
        back when their leases expire)."""
        n = 0
        for key in (self.keys.inflight, self.keys.sessions):
            stale = self.client.zrangebyscore(key, "-inf", now)
            if stale:
                self.client.zrem(key, *stale)
            n += len(stale)
        return n

    def forget_batches(self) -> None:
        """After a restore: no group or session of the old processes is still running."""
        self.client.delete(self.keys.inflight, self.keys.sessions)

    # -- fetch sessions ---------------------------------------------------------------
    def begin_session(self, shard: int, session_id: str, deadline: float) -> None:
        self.client.zadd(self.keys.sessions, {f"{shard}/{session_id}": deadline})

    def end_session(self, shard: int, session_id: str) -> None:
        self.client.zrem(self.keys.sessions, f"{shard}/{session_id}")

    def sessions_by_shard(self) -> dict[int, int]:
        out: dict[int, int] = {}
        members: list[str] = self.client.zrange(self.keys.sessions, 0, -1)  # type: ignore[assignment]
        for member in members:
            shard = member.split("/", 1)[0]
            if shard.isdigit():
                out[int(shard)] = out.get(int(shard), 0) + 1
        return out


def _state(raw: str | None) -> CrawlState:
    try:
        return CrawlState(raw) if raw else CrawlState.RUNNING
    except ValueError:  # an unknown value written by a newer version: treat as running
        return CrawlState.RUNNING
