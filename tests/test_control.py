"""Crawl control against a real Redis: the state machine, counters, batches in flight."""
from __future__ import annotations

import time

from crawler_tasks.ops.control import Control, CrawlState


def test_a_new_crawl_is_running_and_states_carry_reason_and_time(settings):
    control = Control(settings)
    assert not control.exists()
    assert control.state() == (CrawlState.RUNNING, "", None)
    control.start(started_at=123.0)
    assert control.exists()
    before = time.time()
    control.set_state(CrawlState.STOPPING, "max pages (5) reached")
    state, reason, at = control.state()
    assert state is CrawlState.STOPPING and reason == "max pages (5) reached"
    assert at is not None and before <= at <= time.time()


def test_unknown_state_value_reads_as_running(settings, rclient):
    control = Control(settings)
    rclient.hset(control.keys.control, "state", "paused-by-a-future-version")
    assert control.state()[0] is CrawlState.RUNNING


def test_counters_add_up_in_one_hash(settings):
    control = Control(settings)
    control.count({"fetch/pages": 2, "fetch/status/200": 2})
    control.count({"fetch/pages": 3})
    control.count({})
    assert control.stats() == {"fetch/pages": 5, "fetch/status/200": 2}
    view = control.view()
    assert view.pages == 5 and view.inflight == 0 and view.state is CrawlState.RUNNING


def test_batches_in_flight_end_or_go_stale(settings):
    control = Control(settings)
    now = time.time()
    control.begin_batches(["a", "b"], now + 10)
    control.begin_batches(["c"], now - 1)
    control.begin_batches([], now)
    assert control.inflight() == 3
    control.end_batch("a")
    assert control.drop_stale_batches(now) == 1   # "c" was past its deadline
    assert control.inflight() == 1
    control.forget_batches()
    assert control.inflight() == 0
