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
    bayes_freq,
    expected_freshness,
    freshness,
    optimal_freq,
    rate_for_freq,
    solve_mu,
)
from crawler_tasks.freshness.policy import History, Plan, Policy, Visit, cell_rate, rate_cell, revisit
from crawler_tasks.freshness.rate import Evidence, Grid, Prior, census_delta
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


GRID = Grid.for_bounds(10.0, 1000.0)


def _belief(visits, prior: Prior | None = None, dated: bool = False):
    ev = Evidence()
    for gap, changed, since in visits:
        ev.observe(GRID, gap, changed, since if dated and changed else None)
    return (prior or Prior(GRID)).belief(ev)


@pytest.mark.parametrize("rate,mean_gap", [(1 / 50, 20.0), (1 / 50, 100.0), (1 / 2000, 500.0)])
def test_estimate_converges_where_counting_changed_intervals_does_not(rate, mean_gap):
    """Visits as often as changes and rarer: counting each changed interval as one change
    (changes / time) falls short by the changes it hides; the belief does not."""
    ests = []
    for seed in range(20):
        visits = _poisson_visits(rate, random.Random(seed), 300, mean_gap)
        naive = sum(c for _, c, _ in visits) / sum(g for g, _, _ in visits)
        ests.append((_belief(visits).rate, naive))
    ours = sorted(e for e, _ in ests)[len(ests) // 2]
    naive = sorted(n for _, n in ests)[len(ests) // 2]
    assert abs(ours / rate - 1) < 0.3, (ours, rate)
    if rate * mean_gap >= 0.4:   # changes hide in intervals: the naive count falls short
        assert abs(ours / rate - 1) < abs(naive / rate - 1)


def test_last_modified_sharpens_the_estimate():
    rate = 1 / 40
    errs = {False: [], True: []}
    for seed in range(30):
        visits = _poisson_visits(rate, random.Random(seed), 25, 120.0)
        for dated in (False, True):
            errs[dated].append(abs(math.log(_belief(visits, dated=dated).rate / rate)))
    assert sum(errs[True]) < sum(errs[False])


def test_a_page_that_changes_at_every_visit_is_known_only_to_be_fast():
    """Every visit 60 s apart found a change: the belief puts the page at or above one change
    a minute, as fast as the prior allows, not at the rate where the budget buys most."""
    always = _belief([(60.0, True, 0.0)] * 30)
    assert always.rate > 1 / 20 and always.changing == 1.0


def test_static_page_becomes_likely_with_time_and_one_change_rules_it_out():
    flat = Prior(GRID)
    young = flat.belief(_evidence([(100.0, False)] * 2))
    old = flat.belief(_evidence([(1000.0, False)] * 20))
    assert old.changing < young.changing < 1.0
    assert flat.belief(_evidence([(1000.0, False)] * 20 + [(1000.0, True)])).changing == 1.0


def _evidence(visits) -> Evidence:
    ev = Evidence()
    for gap, changed in visits:
        ev.observe(GRID, gap, changed)
    return ev


def test_prior_fitted_to_the_census_learns_how_many_pages_never_change():
    """A web of 800 static pages and 200 changing about once in 100 s, each watched 2,000 s:
    the EM's prior puts about 0.8 on the static page, and a page unchanged for 300 s is then
    believed static more firmly than under a flat prior."""
    rng = random.Random(3)
    census: dict[str, float] = {}
    flat = Prior(GRID)
    for i in range(1000):
        rate = 0.0 if i < 800 else 1 / 100
        visits = [(g, c) for g, c, _ in _poisson_visits(rate, rng, 20, 100.0)] if rate else [(100.0, False)] * 20
        for name, d in census_delta(flat, None, (_evidence(visits), 0.0)).items():
            census[name] = census.get(name, 0.0) + d
    prior = Prior.fit(GRID, census)
    assert prior.weights[-1] == pytest.approx(0.8, abs=0.05)
    again = Prior.decode(prior.encode(), GRID)
    assert again.weights == pytest.approx(prior.weights, rel=1e-3)
    quiet = _evidence([(100.0, False)] * 3)
    assert prior.belief(quiet).changing < flat.belief(quiet).changing / 2


def test_evidence_survives_its_encoding():
    ev = _evidence([(50.0, True), (30.0, False), (80.0, True)])
    ev.observe(GRID, 40.0, True, 10.0)
    again = Evidence.decode(ev.encode())
    assert again.changed and again.dated == pytest.approx(ev.dated, rel=1e-3)
    assert again.unchanged_s == pytest.approx(ev.unchanged_s, rel=1e-5)
    assert again.undated == pytest.approx(ev.undated, rel=1e-2) and len(again.undated) == 2
    for raw in ("", "garbage", "1~x~1~", "-1~3~0~", "1~3~0~5:nan", "1~3~0~9999:1", "1~3~0~a:b"):
        assert Evidence.decode(raw) == Evidence()
    assert Prior.decode("nonsense", GRID).weights == Prior(GRID).weights
    assert Prior.decode(Prior(GRID).encode(), Grid.for_bounds(1.0, 5000.0)).weights == Prior(
        Grid.for_bounds(1.0, 5000.0)).weights   # a prior of other bounds: flat


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


def test_bayes_frequency_of_an_uncertain_rate():
    mu = 2.0
    for rate in (0.001, 0.05, 0.3):   # a certain rate: the optimum's frequency, and back
        f = optimal_freq(rate, 1.0, mu, Objective.FRESHNESS)
        assert bayes_freq([rate], [1.0], 1.0, mu) == pytest.approx(f, rel=1e-3)
        assert rate_for_freq(f, 1.0, mu, near=rate) == pytest.approx(rate, rel=1e-3)
    # known only to change at least once in 10 s: the mean (1.1) would be given up on; the
    # posterior's slower part still buys freshness, so the page keeps a few visits
    spread = [0.1, 0.3, 1.0, 3.0]
    assert optimal_freq(sum(spread) / 4, 1.0, 1.0, Objective.FRESHNESS) == 0.0
    f = bayes_freq(spread, [0.25] * 4, 1.0, 1.0)
    assert 0 < f < optimal_freq(0.1, 1.0, 1.0, Objective.FRESHNESS)
    assert bayes_freq([4.0], [1.0], 1.0, 1.0) == 0.0   # too fast to keep at all


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
    h = History('"x"', "lm", "abcd", 1700000000.125, 1699999999.5, 0.25, 3, 1, "-3~0a~1~2.5~1", 12.5, "-3:1", 1.0,
                0.75)
    assert History.decode(h.encode()) == h
    old = History.decode('"e"\tlm\tfp\t900\t5\t2')   # before the rate estimate was kept
    assert (old.etag, old.visits, old.evidence) == ('"e"', 5, "")
    older = History.decode("\t".join(['"e"', "lm", "fp", "1.5", "1", "9", "4", "1", "2.5", "100", "-3:1", "1"]))
    assert (older.etag, older.visits, older.evidence) == ('"e"', 4, "")   # the Gamma estimate starts again
    assert History.decode("garbage") == History()
    assert cell_rate(rate_cell(0.02, 2.0)) == (pytest.approx(0.02, rel=0.1), 2.0)


def _plan(policy: Policy, **kw) -> Plan:
    return Plan(policy, BOUNDS, 100.0, Prior(GRID), **kw)


def _step(plan: Plan, h: History, visit: Visit) -> tuple[History, float]:
    nxt = revisit(plan, h, visit)
    return nxt.history, nxt.due_at


def test_multiplicative_rule():
    plan = _plan(Policy.MULTIPLICATIVE)
    h, due = _step(plan, History(), Visit(1000.0, False))
    assert (h.interval_s, due, h.visits) == (100.0, 1100.0, 1)
    h, _ = _step(plan, h, Visit(1100.0, True))
    assert h.interval_s == 50.0 and h.changes == 1
    h, _ = _step(plan, h, Visit(1150.0, False))
    assert h.interval_s == 75.0
    for _ in range(10):
        h, _ = _step(plan, h, Visit(h.visited_at + 5, True))
    assert h.interval_s == 10.0   # RECRAWL_MIN_S


def test_nutch_rule_as_documented():
    plan = _plan(Policy.NUTCH)
    h, _ = _step(plan, History(), Visit(0.0, False))
    h, due = _step(plan, h, Visit(100.0, True))          # changed: x (1 - 0.2), synced on the change
    assert h.interval_s == pytest.approx(80.0) and due == pytest.approx(180.0)
    h, due = _step(plan, h, Visit(180.0, False))         # unchanged: x (1 + 0.4); 80 s since the change
    assert h.interval_s == pytest.approx(112.0)
    assert due == pytest.approx(180.0 - 0.3 * 80.0 + 112.0)   # pulled back by sync_delta_rate


def test_adaptive_rule_revisits_changing_pages_sooner_within_the_plan():
    plan = _plan(Policy.ADAPTIVE, mu=5.0)
    static, busy = History(), History()
    static, _ = _step(plan, static, Visit(0.0, False))
    busy, _ = _step(plan, busy, Visit(0.0, False))
    for i in range(1, 30):
        static, _ = _step(plan, static, Visit(static.visited_at + static.interval_s, False))
        busy, _ = _step(plan, busy, Visit(busy.visited_at + busy.interval_s, i % 2 == 0))
    assert 3 * busy.interval_s < static.interval_s
    assert static.changing < busy.changing == 1.0


def test_adaptive_rule_gives_up_on_pages_faster_than_it_can_follow():
    """A page found changed at every visit, however soon, gets fewer visits than one that
    changes about once between two: the optimum's treatment, not more visits."""
    plan = _plan(Policy.ADAPTIVE, mu=5.0)
    fast, medium = History(), History()
    fast, _ = _step(plan, fast, Visit(0.0, False))
    medium, _ = _step(plan, medium, Visit(0.0, False))
    for i in range(1, 40):
        fast, _ = _step(plan, fast, Visit(fast.visited_at + fast.interval_s, True, fast.visited_at + fast.interval_s - 0.5))
        medium, _ = _step(plan, medium, Visit(medium.visited_at + medium.interval_s, i % 3 == 0))
    assert fast.interval_s > medium.interval_s


def test_last_modified_age_counts_until_the_server_proves_it_is_not_the_content_date():
    plan = _plan(Policy.ADAPTIVE, mu=5.0)
    now = 1_000_000.0
    aged, _ = _step(plan, History(), Visit(now, False, now - 400 * 86_400))   # unchanged for 400 days
    fresh, _ = _step(plan, History(), Visit(now, False, now - 5))
    assert aged.lm_age_s == pytest.approx(400 * 86_400) and aged.changing < fresh.changing
    assert aged.interval_s > fresh.interval_s
    # the content changed, Last-Modified did not move: its age no longer counts
    liar, _ = _step(plan, aged, Visit(now + 100, True, now - 400 * 86_400))
    assert liar.lm_age_s == 0.0 and liar.changing == 1.0


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
    # the census counts every page once (none seen to change yet), and each plan fits the prior to it
    shards = [frontier.keys(i) for i in range(s.SHARDS)]
    assert sum(float(v) for k in shards for v in rclient.hgetall(k.census).values()) == pytest.approx(40)
    grid = Grid.for_bounds(s.RECRAWL_MIN_S, s.RECRAWL_MAX_S)
    priors = [Prior.decode(rclient.hget(k.recrawl, "prior"), grid) for k in shards if rclient.hlen(k.census)]
    assert priors and all(p.weights != Prior(grid).weights and sum(p.weights) == pytest.approx(1) for p in priors)
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


def test_a_page_dated_by_itself_counts_as_long_unchanged(settings, rclient):
    """No Last-Modified header, but the page says when it was last modified (meta or
    JSON-LD, ``Parsed.modified``): its age is evidence, as a header's would be."""
    s = dataclasses.replace(settings, CONTINUOUS=True, RECRAWL_BUDGET_PER_S=1.0,
                            RECRAWL_MIN_S=1.0, RECRAWL_INITIAL_S=100.0, RECRAWL_MAX_S=1000.0)
    frontier = Frontier(s)
    recrawler = Recrawler(s, frontier)
    dated, undated = _record("http://a.test/old", "x"), _record("http://a.test/new", "y")
    dated.parsed.modified = "2024-01-01T00:00:00+00:00"
    recrawler.record_visits([dated, undated], now=0)
    k = frontier.keys(frontier.shard_of("a.test"))
    old, new = (History.decode(rclient.hget(k.history, r.page.url)) for r in (dated, undated))
    assert old.lm_age_s > 300 * 86_400 and new.lm_age_s == 0.0
    assert old.changing < new.changing


def test_a_revisit_waits_until_a_change_is_worth_a_request():
    """With a plentiful budget (a small ``mu``) a page unchanged for days is still worth a
    visit every few minutes to the optimum; RECRAWL_MIN_CHANGE_CHANCE puts it off until it
    has a 2 % chance of having changed, and leaves a page that changes alone."""
    quiet = History()
    busy = History()
    for plan in (_plan(Policy.ADAPTIVE, mu=1e-4), _plan(Policy.ADAPTIVE, mu=1e-4, min_chance=0.02)):
        h, _ = _step(plan, History(), Visit(0.0, False))
        b, _ = _step(plan, History(), Visit(0.0, False))
        for _ in range(40):
            h, _ = _step(plan, h, Visit(h.visited_at + 100.0, False))
            b, _ = _step(plan, b, Visit(b.visited_at + 100.0, True, b.visited_at + 60.0))
        if plan.min_chance:
            assert h.interval_s > 2 * quiet.interval_s and b.interval_s == pytest.approx(busy.interval_s)
        quiet, busy = h, b


def test_requeue_moves_what_falls_due_before_the_next_half_tick(settings, rclient):
    s = dataclasses.replace(settings, CONTINUOUS=True, RECRAWL_BUDGET_PER_S=100.0, RECRAWL_CHECK_S=2.0)
    frontier = Frontier(s)
    recrawler = Recrawler(s, frontier)
    now = 1_900_000_000.0
    k = frontier.keys(frontier.shard_of("h.test"))
    rclient.zadd(k.due, {"0 http://h.test/soon": now + 0.9, "0 http://h.test/later": now + 1.1})
    assert recrawler.requeue_due(now=now) == 1
    assert [m for m in rclient.zrange(k.due, 0, -1)] == ["0 http://h.test/later"]
    assert recrawler.requeue_due(now=now + 0.2) == 1 and rclient.zcard(k.due) == 0
