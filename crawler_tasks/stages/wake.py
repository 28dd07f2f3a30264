"""Wake planning: which hosts to lease now and how to cut them into fetch batches.

Back-pressure: at most MAX_INFLIGHT_BATCHES batches are between lease and dedup at
any time, so leases never wait long in the broker (a lease that waited past its
deadline would be handed to another worker and the host fetched twice). The
``MAX_PAGES`` budget is enforced here too: pages fetched plus hosts in flight never
exceed it (robots.txt fetches and retries do not count as pages).
"""
from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass

from crawler_tasks.frontier import Frontier, Lease
from crawler_tasks.ops.control import Control, CrawlState
from crawler_tasks.settings import Settings


@dataclass(frozen=True, slots=True)
class Batch:
    shard: int
    batch_id: str
    leases: list[Lease]


def new_batch_id() -> str:
    return f"{int(time.time() * 1000):x}-{os.getpid():x}-{random.getrandbits(32):08x}"


def plan_wake(settings: Settings, frontier: Frontier, now: float | None = None) -> list[Batch]:
    """Lease ready hosts of every shard, within the in-flight and page budgets."""
    now = time.time() if now is None else now
    control = Control(settings)
    view = control.view()
    if view.state != CrawlState.RUNNING:
        return []
    slots = settings.MAX_INFLIGHT_BATCHES - view.inflight
    budget = None
    if settings.MAX_PAGES:
        budget = settings.MAX_PAGES - view.pages - frontier.leased_hosts()
        if budget <= 0:
            return []
    batches: list[Batch] = []
    shards = list(range(settings.SHARDS))
    shards = shards[int(now * 4) % len(shards):] + shards[: int(now * 4) % len(shards)]  # no shard starves
    for shard in shards:
        max_hosts = max(0, slots - len(batches)) * settings.FETCH_BATCH
        max_hosts = min(max_hosts, settings.WAKE_MAX_HOSTS)
        if budget is not None:
            max_hosts = min(max_hosts, budget)
        leases = frontier.get_urls(shard, max_hosts, now=now)  # max_hosts 0 still refills
        if not leases:
            continue
        if budget is not None:
            budget -= len(leases)
        n = -(-len(leases) // settings.FETCH_BATCH)   # as few batches as the cap allows,
        size = -(-len(leases) // n)                    # of even size (not 32 + 1)
        for i in range(0, len(leases), size):
            batches.append(Batch(shard, new_batch_id(), leases[i:i + size]))
    control.begin_batches((b.batch_id for b in batches), now + settings.batch_timeout_s)
    return batches
