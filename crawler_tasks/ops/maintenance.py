"""Periodic housekeeping: expire dead leases, log stats, decide when the crawl is over.

A crawl is *finished* when nothing can happen any more: no batch in flight, no host
leased, no URL in a front or back queue (checked twice, the first time before and the
second after reading the queues, so a batch that ends in between is not missed), or
when only hosts waiting longer than MAX_IDLE_WAIT_S remain (parked or robots-blocked
hosts must not keep a finite crawl alive for hours); a continuous crawl never runs out
of work this way. It is *stopping* once MAX_PAGES
pages are fetched: wake dispatches nothing more and the crawl finishes when the
in-flight batches are through.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from crawler_tasks.connection import global_client
from crawler_tasks.frontier import Frontier
from crawler_tasks.keys import GlobalKeys
from crawler_tasks.stages.wake import FINISHED, RUNNING, STOPPING
from crawler_tasks.settings import Settings
from crawler_tasks.frontier.spill import Spiller

log = logging.getLogger(__name__)

# Only hosts further away than this remain: a finite crawl stops instead of idling.
MAX_IDLE_WAIT_S = 300.0


@dataclass(slots=True)
class Progress:
    at: float
    state: str
    reason: str
    stats: dict[str, int]
    shards: list[dict[str, int]]
    inflight: int
    next_ready_s: float | None = None
    expired_leases: int = 0
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def pages(self) -> int:
        return self.stats.get("fetch/pages", 0)

    @property
    def queued(self) -> int:
        return sum(s["front"] + s["back"] for s in self.shards)

    @property
    def leased(self) -> int:
        return sum(s["leased_hosts"] for s in self.shards)

    @property
    def errors(self) -> int:
        return sum(v for k, v in self.stats.items() if k.startswith("records/error/"))


def read_progress(settings: Settings, frontier: Frontier | None = None) -> Progress:
    """A consistent-enough picture of the crawl, for stats, progress and the stop decision."""
    frontier = frontier or Frontier(settings)
    g = GlobalKeys(settings.KEY_PREFIX)
    client = global_client(settings)
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(g.stats)
    pipe.hgetall(g.control)
    pipe.zcard(g.inflight)
    stats_raw, control, inflight = pipe.execute()
    shards = [frontier.sizes(s) for s in range(settings.SHARDS)]
    waits = [w for w in (frontier.next_ready_in(s) for s in range(settings.SHARDS)) if w is not None]
    return Progress(at=time.time(), state=control.get("state", RUNNING), reason=control.get("reason", ""),
                    stats={k: int(v) for k, v in stats_raw.items()}, shards=shards, inflight=int(inflight),
                    next_ready_s=min(waits) if waits else None)


def set_state(settings: Settings, state: str, reason: str) -> None:
    g = GlobalKeys(settings.KEY_PREFIX)
    global_client(settings).hset(g.control, mapping={"state": state, "reason": reason, "state_at": time.time()})


def run_maintenance(settings: Settings, frontier: Frontier | None = None, now: float | None = None) -> Progress:
    frontier = frontier or Frontier(settings)
    now = time.time() if now is None else now
    g = GlobalKeys(settings.KEY_PREFIX)
    client = global_client(settings)
    expired = sum(len(frontier.expire(s, now=now)) for s in range(settings.SHARDS))
    stale = client.zrangebyscore(g.inflight, "-inf", now)
    if stale:
        client.zrem(g.inflight, *stale)
        log.warning("%d batches did not finish within %.0f s; their hosts return when leases expire",
                    len(stale), settings.batch_timeout_s)
    if expired:
        client.hincrby(g.stats, "frontier/lease_expired", expired)
        log.warning("%d host leases expired (a worker died or hung); hosts put back", expired)
    moved_out, moved_in = Spiller(settings, frontier).run()
    if moved_out or moved_in:
        log.info("front queues: %d URLs spilled to disk, %d read back", moved_out, moved_in)
    before_inflight = client.zcard(g.inflight)
    progress = read_progress(settings, frontier)
    progress.expired_leases = expired
    if progress.state == FINISHED:
        return progress
    if settings.MAX_PAGES and progress.pages >= settings.MAX_PAGES and progress.state == RUNNING:
        set_state(settings, STOPPING, f"max pages ({settings.MAX_PAGES}) reached")
        progress.state = STOPPING
    idle = before_inflight == 0 and progress.inflight == 0 and progress.leased == 0
    if settings.CONTINUOUS and progress.state == RUNNING:
        pass  # a continuous crawl waits for its next visits; only limits and signals stop it
    elif idle and progress.state == STOPPING:
        set_state(settings, FINISHED, client.hget(g.control, "reason") or "stopped")
        progress.state = FINISHED
    elif idle and progress.queued == 0:
        set_state(settings, FINISHED, "frontier exhausted")
        progress.state = FINISHED
    elif idle and progress.next_ready_s is not None and progress.next_ready_s > MAX_IDLE_WAIT_S \
            and sum(s["front"] for s in progress.shards) == 0:
        set_state(settings, FINISHED, f"only hosts waiting more than {MAX_IDLE_WAIT_S:.0f} s remain")
        progress.state = FINISHED
    log.info("crawl %s: pages=%d queued=%d leased=%d inflight=%d errors=%d",
             progress.state, progress.pages, progress.queued, progress.leased, progress.inflight, progress.errors)
    return progress
