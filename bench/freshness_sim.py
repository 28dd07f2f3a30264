#!/usr/bin/env python3
"""Freshness of a collection under each revisit rule, simulated on several changing webs.

The crawler's own rules (``crawler_tasks.freshness``) drive a simulated fetcher with a fixed
revisit bandwidth: it visits at most BUDGET pages a second, the most overdue first, as the
crawl's recrawl budget does, after a first pass that meets every page once. Pages change as
Poisson processes; each page's change times are drawn from its own seeded stream, so every
rule meets the same change events. A server's Last-Modified is the page's last change (or
the web's start, ``--lm-origin``, for a page that never changed).

Webs (``--shapes``, rates scaled like the crawl's settings, 3600:1 by default):

- ``loguniform``: periods log-uniform from 2 s to 2 h, a fifth of the pages static;
- ``bimodal``: a fifth static, the rest split between periods near 20 s and near 40 min;
- ``hot``: mostly static (80 %), a tenth slow (1-2 h), a tenth hot (5-60 s);
- ``byhost``: log-uniform periods, but every other host's pages are 90 % static and the
  others' never are (what a host's pooled prior is for).

Freshness (the share of pages whose copy equals the live page) is integrated exactly and
reported at each horizon H as its mean over the last 70 % of [0, H] (the crawl's first
30 % is its learning time), for ``uniform``, ``nutch`` (AdaptiveFetchSchedule, its
documented defaults), ``adaptive`` (rates estimated from scratch) and ``optimal`` (the same
scheduler given the true rates). The gap closed is ``(adaptive - nutch) / (optimal - nutch)``.
``--classes`` adds the fetches/s each policy spends on each class of page in the window.
``--true-prior`` adds ``adaptive, true prior``: our rule with the shard's prior fixed to the
web's real rate distribution (every host's alike, so no host tilt) instead of learnt: what a
page-by-page learner could do if it knew the shape of the web from the start (how many pages
never change), not which page is which.

    python bench/freshness_sim.py [--shapes loguniform,bimodal,hot] [--horizons 1200,3600] [--classes] [--true-prior] [--smoke]

``--smoke``: 200 pages of the log-uniform web, horizons of 120 and 600 s (a second or two).
"""
from __future__ import annotations

import argparse
import heapq
import math
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from crawler_tasks.freshness.allocate import (  # noqa: E402
    OVERBOOK,
    Bounds,
    FreqOf,
    Objective,
    PageClass,
    expected_freshness,
    optimal_freq,
    solve_mu,
)
from crawler_tasks.freshness.policy import History, Plan, Policy, Visit, cell_rate, revisit  # noqa: E402
from crawler_tasks.freshness.rate import CELLS_PER_OCTAVE, Grid, Prior  # noqa: E402

WINDOW = 0.7            # freshness at H is the mean over [(1 - WINDOW) H, H]
CLASSES = (("static", math.inf, math.inf), ("< 1/10 min", 600.0, math.inf), ("1/10 min-1/min", 60.0, 600.0),
           ("1/min-1/10 s", 10.0, 60.0), ("> 1/10 s", 0.0, 10.0))   # (label, shortest period, longest)


def _loguniform(rng: random.Random, lo: float, hi: float) -> float:
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def _bimodal(rng: random.Random, scale: float) -> float:
    centre = 20.0 if rng.random() < 0.5 else 2400.0
    return centre * scale * math.exp(rng.gauss(0.0, 0.5))


def _hot(rng: random.Random, scale: float) -> float:
    return _loguniform(rng, 3600 * scale, 7200 * scale) if rng.random() < 0.5 else _loguniform(rng, 5 * scale, 60 * scale)


def draw_rates(shape: str, n: int, seed: int, scale: float = 1.0, host_pages: int = 150) -> list[float]:
    """Change rates (per second) of ``n`` pages of one web shape (page i on host
    i // host_pages); 0 is a static page."""
    rng = random.Random(f"{shape}-{seed}")
    draw: Callable[[], float] = {
        "loguniform": lambda: _loguniform(rng, 2 * scale, 7200 * scale),
        "byhost": lambda: _loguniform(rng, 2 * scale, 7200 * scale),
        "bimodal": lambda: _bimodal(rng, scale),
        "hot": lambda: _hot(rng, scale),
    }[shape]

    def static(i: int) -> float:
        if shape == "byhost":
            return 0.9 if (i // host_pages) % 2 == 0 else 0.0
        return 0.8 if shape == "hot" else 0.2
    return [0.0 if rng.random() < static(i) else 1.0 / draw() for i in range(n)]


def rate_class(rate: float) -> int:
    if rate <= 0:
        return 0
    period = 1.0 / rate
    return next(i for i, (_, lo, hi) in enumerate(CLASSES) if i and lo <= period < hi)


@dataclass(slots=True)
class Page:
    rate: float
    rng: random.Random
    next_change: float = math.inf   # the first change after our copy (inf: none)
    last_change: float = 0.0        # the last change at or before the last visit (0: the web's start)
    copy_at: float = -1.0           # when our copy was taken (-1: none yet)
    hist: History = field(default_factory=History)

    def __post_init__(self) -> None:
        if self.rate > 0:
            self.next_change = self.rng.expovariate(self.rate)

    def advance(self, t: float) -> bool:
        """Move the change stream to ``t``; whether the page changed since our copy."""
        changed = self.next_change <= t
        while self.next_change <= t:
            self.last_change = self.next_change
            self.next_change += self.rng.expovariate(self.rate)
        return changed


class Meter:
    """Integrates freshness over each window [(1 - WINDOW) H, H] and counts visits there."""

    def __init__(self, n: int, horizons: list[float]) -> None:
        self.n, self.horizons = n, horizons
        self.windows = [((1 - WINDOW) * h, h) for h in horizons]
        self.fresh = [0.0] * len(horizons)
        self.fresh_by = [[0.0] * len(CLASSES) for _ in horizons]
        self.sizes = [0] * len(CLASSES)
        self.visits = [[0] * len(CLASSES) for _ in horizons]
        self.late = [[0, 0] for _ in horizons]   # revisits after the first 10 % of H: all, static

    def close(self, p: Page, until: float) -> None:
        """Account for the copy taken at p.copy_at, held until ``until``."""
        if p.copy_at < 0:
            return
        stale_from = max(p.next_change, p.copy_at)
        for i, (a, b) in enumerate(self.windows):
            lo, hi = max(a, p.copy_at), min(b, until, stale_from)
            if hi > lo:
                self.fresh[i] += hi - lo
                self.fresh_by[i][rate_class(p.rate)] += hi - lo

    def visit(self, p: Page, t: float) -> None:
        for i, (a, b) in enumerate(self.windows):
            if a <= t < b:
                self.visits[i][rate_class(p.rate)] += 1
            if 0.1 * b <= t < b:
                self.late[i][0] += 1
                self.late[i][1] += p.rate <= 0

    def static_share(self) -> list[float]:
        return [s / a if a else 0.0 for a, s in self.late]

    def result(self) -> "Result":
        fresh = [f / (self.n * (b - a)) for f, (a, b) in zip(self.fresh, self.windows, strict=True)]
        per_s = [[v / (b - a) for v in row] for row, (a, b) in zip(self.visits, self.windows, strict=True)]
        by = [[f / (max(n, 1) * (b - a)) for f, n in zip(row, self.sizes, strict=True)]
              for row, (a, b) in zip(self.fresh_by, self.windows, strict=True)]
        return Result(fresh, per_s, self.static_share(), 0, by)


@dataclass
class Result:
    freshness: list[float]        # per horizon: mean over its window
    per_s: list[list[float]]      # per horizon: fetches/s per class in its window
    static_share: list[float]     # per horizon: share of the revisits after 10 % of it spent on static pages
    visits: int
    fresh_by: list[list[float]]   # per horizon: mean freshness of each class


@dataclass(frozen=True)
class Setup:
    budget: float
    bounds: Bounds
    initial_s: float
    discover_per_s: float
    replan_s: float
    lm_origin: float
    seed: int
    last_modified: bool = True
    host_pages: int = 150
    min_chance: float = 0.02   # RECRAWL_MIN_CHANGE_CHANCE


def simulate(policy: Policy | None, rates: list[float], horizons: list[float], s: Setup,
             known: Prior | None = None) -> Result:
    """``policy`` None: the scheduler given the true rates (the optimum's allocation, visited
    the same way); ``known``: the shard's prior, instead of one fitted to the census."""
    n = len(rates)
    pages = [Page(r, random.Random(f"{s.seed}-{i}")) for i, r in enumerate(rates)]
    meter = Meter(n, horizons)
    for r in rates:
        meter.sizes[rate_class(r)] += 1
    grid = Grid.for_bounds(1.0 / s.bounds.max_freq, 1.0 / s.bounds.min_freq)
    census: dict[str, float] = {}
    hosts: dict[int, list[float]] = {}   # host -> [pages, pages seen to change]
    plan = Plan(policy or Policy.ADAPTIVE, s.bounds, s.initial_s, Prior(grid), uniform_s=n / s.budget,
                min_chance=s.min_chance)
    true_mu = solve_mu([PageClass(r, 1.0, 1) for r in rates], s.budget * OVERBOOK, Objective.FRESHNESS, s.bounds)
    # the first pass: one visit per page, spread as discovery would find them
    due = [(i / s.discover_per_s, 0, i) for i in range(n)]
    heapq.heapify(due)
    visits, next_plan, t, step = 0, 0.0, 0.0, 1.0 / s.budget
    h_max = max(horizons)
    while t < h_max and due:
        if t >= next_plan:
            plan = _replan(plan, pages, census, s, known)
            next_plan = t + s.replan_s
        at, first, i = due[0]
        if at > t:
            t = at if first == 0 else max(t + step, at)
            continue
        heapq.heappop(due)
        p = pages[i]
        meter.close(p, t)
        changed = p.advance(t)
        if policy is None:
            freq = s.bounds.clamp(optimal_freq(p.rate, 1.0, true_mu, Objective.FRESHNESS)) if p.rate > 0 \
                else s.bounds.min_freq
            nxt = t + 1.0 / freq
        else:
            modified = (p.last_change if p.last_change > 0 else s.lm_origin) if s.last_modified else None
            host = hosts.setdefault(i // s.host_pages, [0.0, 0.0])
            local = plan if known else replace(plan, prior=plan.prior.for_host(*host))
            step_ = revisit(local, p.hist, Visit(t, changed, modified))
            host[0] += not p.hist.visits
            host[1] += step_.first_change
            p.hist, nxt = step_.history, step_.due_at
            for name, d in step_.census.items():
                census[name] = census.get(name, 0.0) + d
        p.copy_at = t
        meter.visit(p, t)
        heapq.heappush(due, (nxt, 1, i))
        visits += 1
        if first:   # a revisit spends the budget; the first pass is discovery's
            t += step
    for p in pages:
        meter.close(p, h_max)
    result = meter.result()
    result.visits = visits
    return result


def _replan(plan: Plan, pages: list[Page], census: dict[str, float], s: Setup, known: Prior | None) -> Plan:
    prior = known or Prior.fit(plan.prior.grid, census, plan.prior)
    if plan.policy != Policy.ADAPTIVE:
        return replace(plan, prior=prior)
    cells: dict[str, int] = {}
    for p in pages:
        if p.hist.cell:
            cells[p.hist.cell] = cells.get(p.hist.cell, 0) + 1
    classes = [PageClass(*cell_rate(c), count=k) for c, k in cells.items()]
    mu = solve_mu(classes, s.budget * OVERBOOK, Objective.FRESHNESS, s.bounds)
    return replace(plan, prior=prior, mu=mu)


def true_prior(rates: list[float], grid: Grid) -> Prior:
    """The prior that is the web's own rate distribution, on ``grid``."""
    weights = [0.0] * (len(grid.cells) + 1)
    for r in rates:
        k = len(weights) - 1 if r <= 0 else min(max(round(CELLS_PER_OCTAVE * math.log2(r)), grid.lo), grid.hi) - grid.lo
        weights[k] += 1.0 / len(rates)
    return Prior(grid, weights)


def expected_optimum(rates: list[float], budget: float, bounds: Bounds) -> float:
    classes = [PageClass(r, 1.0, 1) for r in rates]
    return expected_freshness(classes, FreqOf(solve_mu(classes, budget, Objective.FRESHNESS, bounds),
                                              Objective.FRESHNESS, bounds))


POLICIES: tuple[tuple[str, Policy | None], ...] = (
    ("uniform", Policy.UNIFORM), ("nutch", Policy.NUTCH), ("adaptive", Policy.ADAPTIVE), ("optimal", None))


def run_shape(shape: str, a: argparse.Namespace, horizons: list[float], s: Setup) -> dict[str, list[float]]:
    rates = draw_rates(shape, a.pages, a.seed, a.scale)
    counts = [0] * len(CLASSES)
    for r in rates:
        counts[rate_class(r)] += 1
    print(f"\n== {shape}: {a.pages} pages ({', '.join(f'{lab} {c}' for (lab, _, _), c in zip(CLASSES, counts, strict=True))}), "
          f"budget {a.budget:g}/s; steady-state optimum {expected_optimum(rates, a.budget, s.bounds):.3f}")
    head = "".join(f"{'H=' + format(h, 'g') + 's':>10}" for h in horizons)
    print(f"{'freshness, last 70 % of H':28s}{head}")
    rows: dict[str, list[float]] = {}
    spend: dict[str, list[list[float]]] = {}
    fresh_by: dict[str, list[list[float]]] = {}
    runs: list[tuple[str, Policy | None, Prior | None]] = [(label, policy, None) for label, policy in POLICIES]
    if a.true_prior:
        runs.insert(3, ("adaptive, true prior", Policy.ADAPTIVE,
                        true_prior(rates, Grid.for_bounds(1.0 / s.bounds.max_freq, 1.0 / s.bounds.min_freq))))
    for label, policy, known in runs:
        t0 = time.perf_counter()
        res = simulate(policy, rates, horizons, s, known)
        rows[label], spend[label], fresh_by[label] = res.freshness, res.per_s, res.fresh_by
        print(f"{label:28s}" + "".join(f"{f:10.3f}" for f in res.freshness) + "   static share "
              + " ".join(f"{x:.1%}" for x in res.static_share)
              + f"   ({res.visits} visits, {time.perf_counter() - t0:.1f} s)")
    nutch, best = rows["nutch"], rows["optimal"]
    for label in [r[0] for r in runs if r[0].startswith("adaptive")]:
        print(f"{'gap, ' + label:28s}" + "".join(
            f"{(e - n) / (g - n) if g > n else math.nan:10.2f}" for e, n, g in zip(rows[label], nutch, best, strict=True)))
    if a.classes:
        for hi, h in enumerate(horizons):
            print(f"  fetches/s in the window of H={h:g}s: " + " | ".join(f"{lab}" for lab, _, _ in CLASSES))
            for label, _, _ in runs:
                print(f"    {label:22s}" + "".join(f"{v:9.2f}" for v in spend[label][hi])
                      + "   freshness " + " ".join(f"{v:.3f}" for v in fresh_by[label][hi]))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="loguniform,bimodal,hot,byhost")
    ap.add_argument("--pages", type=int, default=1200)
    ap.add_argument("--budget", type=float, default=20.0, help="revisits per second")
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies every change period")
    ap.add_argument("--horizons", default="1200,3600")
    ap.add_argument("--min-s", type=float, default=1.0)
    ap.add_argument("--initial-s", type=float, default=24.0)
    ap.add_argument("--max-s", type=float, default=720.0)
    ap.add_argument("--discover", type=float, default=40.0, help="first-pass fetches per second")
    ap.add_argument("--replan-s", type=float, default=5.0)
    ap.add_argument("--lm-origin", type=float, default=0.0,
                    help="Last-Modified of a page that never changed, s from the web's start (negative: older)")
    ap.add_argument("--no-last-modified", action="store_true", help="the server sends no Last-Modified")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--classes", action="store_true", help="fetches/s per change-rate class")
    ap.add_argument("--true-prior", action="store_true", help="also our rule given the web's rate distribution")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: a second or two")
    a = ap.parse_args()
    if a.smoke:
        a.shapes, a.pages, a.budget, a.horizons = "loguniform", 200, 5.0, "120,600"
    horizons = [float(h) for h in a.horizons.split(",")]
    s = Setup(a.budget, Bounds(1.0 / a.max_s, 1.0 / a.min_s), a.initial_s, a.discover, a.replan_s, a.lm_origin, a.seed,
              not a.no_last_modified)
    print(f"revisit bounds {a.min_s:g}-{a.max_s:g} s, initial {a.initial_s:g} s, first pass at {a.discover:g} pages/s")
    for shape in a.shapes.split(","):
        run_shape(shape, a, horizons, s)


if __name__ == "__main__":
    main()
