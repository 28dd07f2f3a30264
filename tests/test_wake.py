"""Wake planning against a real Redis: batch sizes, the in-flight cap, the page budget, state."""
from __future__ import annotations

import dataclasses
import time

from crawler_tasks.frontier import Discovered, Frontier
from crawler_tasks.runtime.control import Control, CrawlState
from crawler_tasks.stages.wake import plan_wake


def _seed_hosts(frontier: Frontier, n: int) -> None:
    frontier.put_discovered([Discovered(url=f"http://h{i}.test/", host=f"h{i}.test", force=True) for i in range(n)])


def test_ready_hosts_are_cut_into_even_sessions_and_tracked_in_flight(settings):
    s = dataclasses.replace(settings, SHARDS=1, FETCH_BATCH=4, MAX_INFLIGHT_BATCHES=10)
    frontier = Frontier(s)
    _seed_hosts(frontier, 9)
    batches = plan_wake(s, frontier)
    assert sorted(len(b.leases) for b in batches) == [3, 3, 3]     # not 4 + 4 + 1
    assert len({lease.host for b in batches for lease in b.leases}) == 9
    assert Control(s).inflight() == 3
    assert plan_wake(s, frontier) == []                               # every host is leased


def test_session_cap_page_budget_and_parse_backlog_limit_a_wake(settings):
    s = dataclasses.replace(settings, SHARDS=1, FETCH_BATCH=2, MAX_FETCH_SESSIONS=2)
    frontier = Frontier(s)
    _seed_hosts(frontier, 10)
    assert sum(len(b.leases) for b in plan_wake(s, frontier)) == 4   # 2 sessions of 2
    assert plan_wake(s, frontier) == []                               # both still running
    Control(s).begin_batches([f"g{i}" for i in range(s.MAX_INFLIGHT_BATCHES + 1)], time.time() + 60)
    Control(s).end_session(0, Control(s).client.zrange(Control(s).keys.sessions, 0, 0)[0].split("/")[1])
    assert plan_wake(s, frontier) == []                               # parse is behind
    s2 = dataclasses.replace(settings, KEY_PREFIX=settings.KEY_PREFIX + "b", SHARDS=1, FETCH_BATCH=8,
                             MAX_PAGES=5)
    frontier2 = Frontier(s2)
    _seed_hosts(frontier2, 10)
    Control(s2).count({"fetch/pages": 2})
    assert sum(len(b.leases) for b in plan_wake(s2, frontier2)) == 3  # 5 - 2 fetched


def test_each_shard_gets_its_share_of_sessions(settings):
    s = dataclasses.replace(settings, SHARDS=2, FETCH_BATCH=1, MAX_FETCH_SESSIONS=4)
    frontier = Frontier(s)
    _seed_hosts(frontier, 40)
    batches = plan_wake(s, frontier)
    assert sorted(b.shard for b in batches) == [0, 0, 1, 1]
    assert Control(s).sessions_by_shard() == {0: 2, 1: 2}


def test_nothing_is_dispatched_unless_running(settings):
    s = dataclasses.replace(settings, SHARDS=1)
    frontier = Frontier(s)
    _seed_hosts(frontier, 3)
    Control(s).set_state(CrawlState.STOPPING, "test")
    assert plan_wake(s, frontier) == []
    Control(s).set_state(CrawlState.RUNNING, "")
    assert len(plan_wake(s, frontier)) == 1


def test_beat_sends_wake_only_while_the_crawl_runs(settings):
    """Before the first seeds, paused or finished, Beat sends no wake (they filled Flower's
    task list four times a second) and looks again within IDLE_CHECK_S."""
    import pickle
    from datetime import UTC, datetime

    from crawler_tasks.schedule import IDLE_CHECK_S, LONG_AGO, build_schedule

    wake = build_schedule(settings)["wake"]["schedule"]
    assert pickle.loads(pickle.dumps(wake)).run_every == wake.run_every   # Beat's shelve keeps it
    control = Control(settings)
    assert wake.is_due(LONG_AGO) == (False, IDLE_CHECK_S)     # no crawl yet
    control.seeded(1)
    assert wake.is_due(LONG_AGO).is_due
    assert not wake.is_due(datetime.now(UTC)).is_due          # the interval still holds
    for state in (CrawlState.PAUSED, CrawlState.STOPPING, CrawlState.FINISHED):
        control.set_state(state, "test")
        assert wake.is_due(LONG_AGO) == (False, IDLE_CHECK_S), state


def test_maintenance_slows_down_once_the_crawl_has_finished(settings):
    import pickle
    from datetime import UTC, datetime, timedelta

    from crawler_tasks.schedule import IDLE_CHECK_S, IDLE_MAINTENANCE_S, build_schedule

    maintenance = build_schedule(settings)["maintenance"]["schedule"]
    copy = pickle.loads(pickle.dumps(maintenance))
    assert (copy.states, copy.idle_s) == (maintenance.states, maintenance.idle_s)
    now = datetime.now(UTC)
    a_while = now - timedelta(seconds=settings.MAINTENANCE_INTERVAL_S + 0.5)
    long_ago = now - timedelta(seconds=IDLE_MAINTENANCE_S + 1)
    assert maintenance.is_due(a_while).is_due        # before the first seeds: its heartbeat says beat is up
    control = Control(settings)
    control.seeded(1)
    for state in (CrawlState.RUNNING, CrawlState.PAUSED, CrawlState.STOPPING):   # the full cadence
        control.set_state(state, "test")
        assert maintenance.is_due(a_while).is_due, state
    control.set_state(CrawlState.FINISHED, "test")
    assert maintenance.is_due(a_while) == (False, IDLE_CHECK_S)    # every 10 s, not every 1 s
    assert maintenance.is_due(long_ago).is_due


def test_hosts_spread_over_free_session_slots(settings):
    """40 ready hosts on 2 shards and 8 session slots: 8 sessions of 5, not 2 of 20 that the
    first worker up takes whole; never a session below MIN_SESSION_HOSTS when spreading."""
    from crawler_tasks.stages.wake import MIN_SESSION_HOSTS

    s = dataclasses.replace(settings, SHARDS=1, FETCH_BATCH=32, MAX_FETCH_SESSIONS=4)
    frontier = Frontier(s)
    _seed_hosts(frontier, 20)
    assert sorted(len(b.leases) for b in plan_wake(s, frontier)) == [5, 5, 5, 5]
    s2 = dataclasses.replace(s, KEY_PREFIX=settings.KEY_PREFIX + "b")
    frontier2 = Frontier(s2)
    _seed_hosts(frontier2, 2 * MIN_SESSION_HOSTS + 1)
    assert sorted(len(b.leases) for b in plan_wake(s2, frontier2)) == [4, 5]
