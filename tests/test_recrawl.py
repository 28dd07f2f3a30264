"""Recrawl: change-rate estimates, the budget's allocation, the revisit rules (pure), and
the shard's plan and limiter on a real Redis."""
from __future__ import annotations

import dataclasses
import math
import random

import pytest

from crawler_tasks.freshness.allocate import (
    Bounds,
    FreqOf,
    Objective,
    PageClass,
    age,
    expected_freshness,
    freshness,
    optimal_freq,
    solve_mu,
)
from crawler_tasks.freshness.policy import History, Plan, Policy, Visit, cell_rate, rate_cell, revisit
from crawler_tasks.freshness.rate import RateEstimate
from crawler_tasks.frontier import Frontier
from crawler_tasks.frontier.recrawl import BURST_S, Recrawler, recrawl_lines
from crawler_tasks.records import FetchedPage, PageRecord, Parsed

BOUNDS = Bounds(1 / 1000.0, 1 / 10.0)


def _poisson_visits(rate: float, rng: random.Random, visits: int, mean_gap: float) -> list[tuple[float, bool, float]]:
    """(elapsed, changed, seconds since the last change) for irregular visits of a Poisson page."""
    out = []
    t, next_change, last_change = 0.0, rng.expovariate(rate), 0.0
    for _ in range(visits):
        gap = rng.expovariate(1 / mean_gap)
        t += gap
        changed = next_change <= t
        while next_change <= t:
            last_change, next_change = next_change, next_change + rng.expovariate(rate)
        out.append((gap, changed, t - last_change))
    return out


@pytest.mark.parametrize("rate,mean_gap", [(1 / 50, 20.0), (1 / 50, 100.0), (1 / 5000, 500.0)])
def test_estimate_converges_where_counting_changed_intervals_does_not(rate, mean_gap):
    """Visits as often as changes and rarer: counting each changed interval as one change
    (changes / time) falls short by the changes it hides; the estimate does not."""
    ests = []
    for seed in range(20):
        est = RateEstimate.prior(1 / 1000)
        seen = watched = 0.0
        for gap, changed, _ in _poisson_visits(rate, random.Random(seed), 300, mean_gap):
            est.observe(gap, changed)
            seen, watched = seen + changed, watched + gap
        ests.append((est.rate, seen / watched))
    ours = sorted(e for e, _ in ests)[len(ests) // 2]
    naive = sorted(n for _, n in ests)[len(ests) // 2]
    assert abs(ours / rate - 1) < 0.3, (ours, rate)
    if rate * mean_gap >= 0.4:   # changes hide in intervals: the naive count falls short
        assert abs(ours / rate - 1) < abs(naive / rate - 1)


def test_last_modified_sharpens_the_estimate():
    rate = 1 / 40
    errs = {False: [], True: []}
    for seed in range(30):
        for use_lm in (False, True):
            est = RateEstimate.prior(1 / 1000)
            for gap, changed, since in _poisson_visits(rate, random.Random(seed), 25, 120.0):
                est.observe(gap, changed, since if use_lm and changed else None)
            errs[use_lm].append(abs(math.log(est.rate / rate)))
    assert sum(errs[True]) < sum(errs[False])


def test_estimate_forgets_old_evidence():
    est = RateEstimate.prior(1 / 100)
    for _ in range(200):
        est.observe(10.0, True)
    fast = est.rate
    for _ in range(60):
        est.observe(100.0, False)
    assert est.rate < fast / 5   # a page that stopped changing is seen to


def test_freshness_and_age_formulas():
    assert freshness(0.0, 1.0) == 1.0 and freshness(1.0, 0.0) == 0.0
    assert freshness(1.0, 1.0) == pytest.approx(1 - math.exp(-1))
    assert freshness(1e-9, 1.0) == pytest.approx(1.0)
    # age of a copy revisited every I: integral of the time since the first change, closed form
    lam, interval = 0.3, 4.0
    x = lam * interval
    assert age(lam, 1 / interval) == pytest.approx((x / 2 - 1 + (1 - math.exp(-x)) / x) / lam)
    assert age(lam, 1e6) == pytest.approx(0.0, abs=1e-6)


def test_freshness_optimum_gives_up_on_pages_too_fast_to_keep():
    mu = 1.0
    assert optimal_freq(2.0, 1.0, mu, Objective.FRESHNESS) == 0.0      # changes faster than w / mu
    slow, fast = (optimal_freq(r, 1.0, mu, Objective.FRESHNESS) for r in (0.01, 0.5))
    assert 0 < slow < fast
    # age never gives up, and revisits faster pages more often
    assert 0 < optimal_freq(0.5, 1.0, mu, Objective.AGE) < optimal_freq(2.0, 1.0, mu, Objective.AGE)
    # value weighs in
    assert optimal_freq(0.5, 4.0, mu, Objective.FRESHNESS) > optimal_freq(0.5, 1.0, mu, Objective.FRESHNESS)


def test_marginal_gains_are_equal_at_the_optimum():
    mu = 0.02
    for rate in (0.001, 0.01, 0.03):
        f = optimal_freq(rate, 1.0, mu, Objective.FRESHNESS)
        h = f * 1e-4
        gain = (freshness(rate, f + h) - freshness(rate, f - h)) / (2 * h)
        assert gain == pytest.approx(mu, rel=0.02)


def test_budget_spent_and_optimum_beats_uniform_and_proportional():
    rng = random.Random(5)
    classes = [PageClass(10 ** rng.uniform(-4, -0.5), 1.0, 1) for _ in range(400)]
    bounds = Bounds(1e-9, 1e3)
    budget = 4.0
    mu = solve_mu(classes, budget, Objective.FRESHNESS, bounds)
    best = FreqOf(mu, Objective.FRESHNESS, bounds)
    assert sum(best(c) for c in classes) == pytest.approx(budget, rel=0.01)
    total_rate = sum(c.rate for c in classes)
    uniform = expected_freshness(classes, lambda c: budget / len(classes))
    proportional = expected_freshness(classes, lambda c: budget * c.rate / total_rate)
    optimum = expected_freshness(classes, best)
    assert optimum > uniform > proportional   # Cho and Garcia-Molina: proportional is worse than uniform


def test_history_round_trip_keeps_sub_second_times_and_reads_the_former_format():
    h = History('"x"', "lm", "abcd", 1700000000.125, 1699999999.5, 0.25, 3, 1, 2.5, 123.456, "-3:1", 1.0)
    assert History.decode(h.encode()) == h
    old = History.decode('"e"\tlm\tfp\t900\t5\t2')   # before the rate estimate was kept
    assert (old.etag, old.interval_s, old.visits, old.changes) == ('"e"', 900.0, 5, 2)
    assert History.decode("garbage") == History()
    assert cell_rate(rate_cell(0.02, 2.0)) == (pytest.approx(0.02, rel=0.1), 2.0)


def _plan(policy: Policy, **kw) -> Plan:
    return Plan(policy, BOUNDS, 100.0, **kw)


def test_multiplicative_rule():
    plan = _plan(Policy.MULTIPLICATIVE)
    h, due = revisit(plan, History(), Visit(1000.0, False))
    assert (h.interval_s, due, h.visits) == (100.0, 1100.0, 1)
    h, _ = revisit(plan, h, Visit(1100.0, True))
    assert h.interval_s == 50.0 and h.changes == 1
    h, _ = revisit(plan, h, Visit(1150.0, False))
    assert h.interval_s == 75.0
    for _ in range(10):
        h, _ = revisit(plan, h, Visit(h.visited_at + 5, True))
    assert h.interval_s == 10.0   # RECRAWL_MIN_S


def test_nutch_rule_as_documented():
    plan = _plan(Policy.NUTCH)
    h, _ = revisit(plan, History(), Visit(0.0, False))
    h, due = revisit(plan, h, Visit(100.0, True))          # changed: x (1 - 0.2), synced on the change
    assert h.interval_s == pytest.approx(80.0) and due == pytest.approx(180.0)
    h, due = revisit(plan, h, Visit(180.0, False))         # unchanged: x (1 + 0.4); 80 s since the change
    assert h.interval_s == pytest.approx(112.0)
    assert due == pytest.approx(180.0 - 0.3 * 80.0 + 112.0)   # pulled back by sync_delta_rate


def test_adaptive_rule_revisits_changing_pages_sooner_within_the_plan():
    plan = _plan(Policy.ADAPTIVE, mu=5.0)
    static, busy = History(), History()
    static, _ = revisit(plan, static, Visit(0.0, False))
    busy, _ = revisit(plan, busy, Visit(0.0, False))
    for i in range(1, 30):
        static, _ = revisit(plan, static, Visit(static.visited_at + static.interval_s, False))
        busy, _ = revisit(plan, busy, Visit(busy.visited_at + busy.interval_s, i % 2 == 0))
    assert 3 * busy.interval_s < static.interval_s


def _record(url: str, fp: str, status: int = 200, depth: int = 1, at: str = "2026-12-03T00:00:00.000000Z",
            headers: dict[str, str] | None = None) -> PageRecord:
    return PageRecord(FetchedPage(url=url, depth=depth, status=status, fetched_at=at, headers=headers or {}),
                      Parsed(fingerprint=fp, indexable=status == 200))


def test_shard_plan_limits_revisits_to_the_budget(settings, rclient):
    s = dataclasses.replace(settings, CONTINUOUS=True, RECRAWL_BUDGET_PER_S=2.0, RECRAWL_CHECK_S=1.0,
                            RECRAWL_MIN_S=1.0, RECRAWL_INITIAL_S=10.0, RECRAWL_MAX_S=100.0)
    frontier = Frontier(s)
    recrawler = Recrawler(s, frontier)
    urls = [f"http://h{i % 3}.test/p{i}" for i in range(40)]
    at = "2026-12-03T00:00:00.000000Z"
    counters = recrawler.record_visits([_record(u, f"fp{u}", at=at) for u in urls], now=1.0)
    assert counters["recrawl/revisits"] == 0
    summary = recrawler.summary()
    assert summary.urls == 40
    # everything is due long after; the limiter lets through at most the burst, then the budget's rate
    t0 = 1_900_000_000.0
    burst = 2.0 * BURST_S * s.SHARDS   # the budget is per shard
    assert recrawler.requeue_due(now=t0) == burst
    assert recrawler.requeue_due(now=t0 + 0.1) == 0
    assert recrawler.requeue_due(now=t0 + 1.0) == 2.0 * s.SHARDS
    assert recrawler.requeue_due(now=t0 + 60.0) == burst      # what was not spent is not saved up
    # revisits: one page changed, the others answered 304
    at2 = "2026-12-03T00:10:00.000000Z"
    recs = [_record(urls[0], "changed", at=at2)] + [_record(u, "", status=304, at=at2) for u in urls[1:10]]
    counters = recrawler.record_visits(recs, now=2.0)
    assert counters == {"recrawl/changed": 1, "recrawl/unchanged": 9, "recrawl/revisits": 10,
                        "recrawl/not_modified": 9}
    hist = History.decode(rclient.hget(frontier.keys(frontier.shard_of("h0.test")).history, urls[0]))
    assert hist.changes == 1 and hist.fingerprint == "changed" and hist.visits == 2
    assert recs[0].revisit_s is not None and recs[0].revisit_s > 0

    lines = recrawl_lines(s, counters, elapsed_s=10.0)
    assert lines[0].startswith("recrawl: 40 URLs known, budget") and "revisits 10 (1.00/s)" in lines[0]
    assert "answered 304 90%" in lines[0] and "expected freshness" in lines[0]
    assert sum(int(line.split()[-1]) for line in lines[1:]) == 40   # the histogram covers every URL


def test_sitemap_lastmod_counts_once_the_host_proved_honest(settings, rclient):
    s = dataclasses.replace(settings, CONTINUOUS=True, RECRAWL_BUDGET_PER_S=1.0,
                            RECRAWL_MIN_S=1.0, RECRAWL_INITIAL_S=100.0, RECRAWL_MAX_S=1000.0)
    frontier = Frontier(s)
    recrawler = Recrawler(s, frontier)
    honest = [f"http://honest.test/p{i}" for i in range(8)]
    liar = [f"http://liar.test/p{i}" for i in range(8)]
    visit1, claim, visit2 = "2026-12-03T00:00:00Z", "2026-12-03T00:05:00Z", "2026-12-03T00:10:00Z"
    recrawler.record_visits([_record(u, "v1", at=visit1) for u in honest + liar], now=0)
    now = 1_900_000_000.0
    # before any claim was checked, a lastmod makes nothing due
    assert recrawler.sitemap_claims([(u, claim) for u in honest + liar], now=now) == 0
    # the next visits check the claims: the honest host changed, the liar did not
    recrawler.record_visits([_record(u, "v2", at=visit2) for u in honest]
                            + [_record(u, "v1", at=visit2) for u in liar], now=0)
    newer = "2026-12-03T00:15:00Z"
    made_due = recrawler.sitemap_claims([(u, newer) for u in honest + liar], now=now)
    assert made_due == len(honest)
    due = {m: score for m, score in rclient.zrange(frontier.keys(frontier.shard_of("honest.test")).due, 0, -1,
                                                   withscores=True)}
    assert due[f"0 {honest[0]}"] == now
    liar_due = rclient.zscore(frontier.keys(frontier.shard_of("liar.test")).due, f"0 {liar[0]}")
    assert liar_due is not None and liar_due < now   # its own schedule: long before this test's clock
    # a lastmod older than our last visit claims nothing
    assert recrawler.sitemap_claims([(honest[1], visit1)], now=now) == 0
