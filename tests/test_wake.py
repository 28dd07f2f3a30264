"""Wake planning against a real Redis: batch sizes, the in-flight cap, the page budget, state."""
from __future__ import annotations

import dataclasses

from crawler_tasks.frontier import Discovered, Frontier
from crawler_tasks.ops.control import Control, CrawlState
from crawler_tasks.stages.wake import plan_wake


def _seed_hosts(frontier: Frontier, n: int) -> None:
    frontier.put_discovered([Discovered(url=f"http://h{i}.test/", host=f"h{i}.test", force=True) for i in range(n)])


def test_ready_hosts_are_cut_into_even_batches_and_tracked_in_flight(settings):
    s = dataclasses.replace(settings, SHARDS=1, FETCH_BATCH=4, MAX_INFLIGHT_BATCHES=10)
    frontier = Frontier(s)
    _seed_hosts(frontier, 9)
    batches = plan_wake(s, frontier)
    assert sorted(len(b.leases) for b in batches) == [3, 3, 3]     # not 4 + 4 + 1
    assert len({lease.host for b in batches for lease in b.leases}) == 9
    assert Control(s).inflight() == 3
    assert plan_wake(s, frontier) == []                               # every host is leased


def test_in_flight_cap_and_page_budget_limit_a_wake(settings):
    s = dataclasses.replace(settings, SHARDS=1, FETCH_BATCH=2, MAX_INFLIGHT_BATCHES=2)
    frontier = Frontier(s)
    _seed_hosts(frontier, 10)
    assert sum(len(b.leases) for b in plan_wake(s, frontier)) == 4   # 2 batches of 2
    s2 = dataclasses.replace(settings, KEY_PREFIX=settings.KEY_PREFIX + "b", SHARDS=1, FETCH_BATCH=8,
                             MAX_INFLIGHT_BATCHES=10, MAX_PAGES=5)
    frontier2 = Frontier(s2)
    _seed_hosts(frontier2, 10)
    Control(s2).count({"fetch/pages": 2})
    assert sum(len(b.leases) for b in plan_wake(s2, frontier2)) == 3  # 5 - 2 fetched


def test_nothing_is_dispatched_unless_running(settings):
    s = dataclasses.replace(settings, SHARDS=1)
    frontier = Frontier(s)
    _seed_hosts(frontier, 3)
    Control(s).set_state(CrawlState.STOPPING, "test")
    assert plan_wake(s, frontier) == []
    Control(s).set_state(CrawlState.RUNNING, "")
    assert len(plan_wake(s, frontier)) == 1
