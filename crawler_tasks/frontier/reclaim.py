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
"""
from __future__ import annotations

import time

from crawler_tasks.frontier import Frontier

# Entries examined at the head of each back queue, where fetched URLs wait.
HEAD_ENTRIES = 64


def give_back(frontier: Frontier, shard: int, now: float | None = None) -> tuple[int, int]:
    """The shard's leased hosts and parked entries, all back in the frontier at once:
    (hosts, entries). Only when no worker of the crawl runs."""
    now = time.time() if now is None else now
    k = frontier.keys(shard)
    reply = list(frontier.run_script(shard, "reclaim", [k.lease, k.ready, k.handoff, k.active, k.te],  # type: ignore[call-overload]
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
