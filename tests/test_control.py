"""Crawl control against a real Redis: the state machine, counters, batches in flight."""
from __future__ import annotations

import time

import pytest

from crawler_tasks.runtime.control import Control, CrawlState


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
    assert control.drop_stale_batches(now) == (["c"], 0)   # "c" was past its deadline: given up
    assert control.claim_group("c", "n1") is False   # its message, should it turn up, is skipped
    assert control.inflight() == 1
    control.forget_batches()
    assert control.inflight() == 0


def test_moves_leave_only_the_states_they_name(settings):
    from crawler_tasks.runtime.control import NEW

    control = Control(settings)
    assert control.move(CrawlState.PAUSED, "by test", (CrawlState.RUNNING,)) == (NEW, False)
    assert not control.exists()                    # a refused move writes nothing
    control.start()
    assert control.move(CrawlState.PAUSED, "by test", (CrawlState.RUNNING,)) == ("running", True)
    control.start()                                # `crawl --resume` keeps a pause
    assert control.read().state is CrawlState.PAUSED and control.raw_state() == "paused"
    assert not control.finish("frontier exhausted", control.read().epoch, idle=True)   # paused: never finished
    assert control.move(CrawlState.RUNNING, "", (CrawlState.PAUSED,)) == ("paused", True)
    assert control.raw_state() == "running"


def test_first_seeds_start_a_crawl_and_later_ones_cancel_a_finish_decided_before_them(settings):
    control = Control(settings)
    assert control.raw_state() is None             # workers up, no crawl yet: no wake
    assert control.seeded(2) == "new"
    c = control.read()
    assert c.exists and c.state is CrawlState.RUNNING and c.epoch == 1
    assert control.stats() == {"frontier/seeds": 2, "frontier/enqueued": 2}
    epoch = c.epoch                                # maintenance reads the state, then the queues...
    assert control.seeded(1) == "running"          # ...a seed lands in between...
    assert not control.finish("frontier exhausted", epoch, idle=True)   # ...and the finish is dropped
    assert control.finish("frontier exhausted", control.read().epoch, idle=True)
    c = control.read()
    assert c.state is CrawlState.FINISHED and c.idle
    control.set_state(CrawlState.FINISHED, "max pages (3) reached")
    assert not control.read().idle                 # a limit is not lack of work: no revival


def test_maintenance_waits_for_the_first_seeds_then_finishes_an_exhausted_crawl(settings):
    """The compose order (workers and beat first, then `seed`) used to mark the crawl
    "finished: frontier exhausted" within a second, and the seeds were never fetched."""
    from crawler_tasks.frontier import Frontier
    from crawler_tasks.ops.seeds import seed_urls
    from crawler_tasks.runtime.maintenance import run_maintenance

    control = Control(settings)
    for _ in range(3):
        assert not run_maintenance(settings).started
    assert not control.exists()
    assert seed_urls(settings, ["http://a.test/"])[0] == 1
    assert run_maintenance(settings).state is CrawlState.RUNNING      # queued: not finished
    frontier = Frontier(settings)
    frontier.client(0).delete(*frontier.client(0).keys(f"{settings.KEY_PREFIX}:{{s*"))   # as if fetched
    assert run_maintenance(settings).state is CrawlState.FINISHED
    assert control.read().idle and control.read().reason == "frontier exhausted"


def test_exchanges_in_flight_are_counted_until_they_end_or_their_deadline(settings):
    control = Control(settings)
    now = time.time()
    pipe = control.client.pipeline(transaction=False)
    control.begin_exchange(pipe, "s1", "a.test", now + 30)
    control.begin_exchange(pipe, "s1", "b.test", now + 30)
    control.begin_exchange(pipe, "s2", "c.test", now - 1)    # its worker died: no longer counted
    pipe.execute()
    assert control.exchanges(now) == 2
    pipe = control.client.pipeline(transaction=False)
    control.end_exchange(pipe, "s1", "a.test")
    pipe.execute()
    assert control.exchanges(now) == 1
    control.drop_stale_batches(now)
    assert control.client.zcard(control.keys.exchanges) == 1


def test_a_crawl_nothing_maintains_is_told_apart(settings):
    control = Control(settings)
    now = time.time()
    assert control.unattended_s(control.read(), 1.0, now) == float("inf")   # never maintained
    control.heartbeat(now - 2)
    assert not control.exists()                                         # a heartbeat starts nothing
    assert control.unattended_s(control.read(), 1.0, now) is None
    assert control.unattended_s(control.read(), 1.0, now + 60) == pytest.approx(62)
    assert control.unattended_s(control.read(), 10.0, now + 60) is None  # 10 intervals of 10 s


@pytest.mark.parametrize("state, reason, idle, note, after", [
    (CrawlState.FINISHED, "frontier exhausted", True, "it runs again with them", CrawlState.RUNNING),
    (CrawlState.FINISHED, "max pages (3) reached", False, "`manage.py crawl --resume` continues it",
     CrawlState.FINISHED),
    (CrawlState.PAUSED, "by manage.py pause", False, "fetched after `manage.py resume`", CrawlState.PAUSED),
    (CrawlState.STOPPING, "stopped by SIGTERM", False, "they wait for `manage.py crawl --resume`",
     CrawlState.STOPPING),
])
def test_seed_into_a_live_crawl_revives_it_or_says_what_fetches_the_urls(settings, monkeypatch, capsys,
                                                                         state, reason, idle, note, after):
    """`manage.py seed` against a live Redis (the production shape): never "N added" and silence."""
    import manage

    control = Control(settings)
    control.seeded(1)
    control.move(state, reason, idle=idle)
    control.heartbeat(time.time())   # a control worker runs
    monkeypatch.setenv("CRAWLER_KEY_PREFIX", settings.KEY_PREFIX)
    monkeypatch.setenv("CRAWLER_REDIS_URL", settings.REDIS_URL)
    assert manage.main(["seed", "http://a.test/new"]) == 0
    out, err = capsys.readouterr()
    assert out == "1 URL(s) added\n" and note in err, err
    assert control.read().state is after


def test_limits_and_stop_work_without_the_runner(settings, monkeypatch, capsys):
    """The production shape has no `manage.py crawl` to watch the clock or take a Ctrl-C:
    maintenance enforces MAX_SECONDS (a paused crawl too) and `manage.py stop` stops."""
    import dataclasses

    import manage
    from crawler_tasks.runtime.maintenance import run_maintenance

    control = Control(settings)
    control.seeded(1)
    control.move(CrawlState.PAUSED, "by test")
    assert run_maintenance(settings).state is CrawlState.PAUSED      # seeds queued: waits, paused
    control.client.hset(control.keys.control, "started_at", time.time() - 20)
    timed = dataclasses.replace(settings, MAX_SECONDS=10.0)
    assert run_maintenance(timed).state is CrawlState.FINISHED       # stopping, and idle: finished
    assert control.read().reason == "max seconds (10) reached" and not control.read().idle

    other = dataclasses.replace(settings, KEY_PREFIX=settings.KEY_PREFIX + "s")
    Control(other).seeded(1)
    monkeypatch.setenv("CRAWLER_KEY_PREFIX", other.KEY_PREFIX)
    monkeypatch.setenv("CRAWLER_REDIS_URL", settings.REDIS_URL)
    assert manage.main(["stop"]) == 0 and "stopping:" in capsys.readouterr().out
    assert run_maintenance(other).state is CrawlState.FINISHED
    assert Control(other).read().reason == "stopped by manage.py stop"
