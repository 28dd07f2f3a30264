#!/usr/bin/env python3
"""Freshness of a collection under each revisit rule, simulated over long horizons.

The crawler's own rules (``crawler_tasks.freshness``) drive a simulated fetcher with a fixed
revisit bandwidth: it visits at most BUDGET pages a second, the most overdue first, as the
crawl's recrawl budget does. Pages change as Poisson processes whose rates are drawn from a
heavy-tailed distribution over four orders of magnitude (some never change). Freshness (the
share of pages whose copy equals the live page) and age are integrated exactly over time,
and reported as the mean over [0, H] for several horizons H, for:

- ``uniform``, ``multiplicative`` (the former rule), ``nutch`` (AdaptiveFetchSchedule, its
  documented defaults), ``adaptive`` with rates estimated from scratch, ``adaptive`` given
  the true rates, and the optimum's expected freshness computed from the true rates.

The gap closed is ``(adaptive - nutch) / (optimum - nutch)``.  Runs in seconds:

    python bench/freshness_sim.py [--pages 2000] [--budget 20] [--horizons 300,3600,14400,36000] [--smoke]

``--smoke``: 200 pages, 5 revisits a second, horizons of 60 and 600 s (a second or two).
"""
from __future__ import annotations

import argparse
import heapq
import math
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from crawler_tasks.freshness.allocate import (  # noqa: E402
    OVERBOOK,
    Bounds,
    FreqOf,
    Objective,
    PageClass,
    expected_freshness,
    solve_mu,
)
from crawler_tasks.freshness.policy import History, Plan, Policy, Visit, cell_rate, revisit  # noqa: E402


def draw_rates(n: int, rng: random.Random, fastest_s: float, slowest_s: float, static: float) -> list[float]:
    """Log-uniform periods between fastest_s and slowest_s; a share ``static`` never changes."""
    lo, hi = math.log(fastest_s), math.log(slowest_s)
    return [0.0 if rng.random() < static else 1.0 / math.exp(rng.uniform(lo, hi)) for _ in range(n)]


@dataclass(slots=True)
class Page:
    rate: float
    next_change: float      # the first change after the last visit (inf: none)
    last_change: float      # the last change at or before the last visit
    copy_at: float = 0.0    # when our copy was taken
    hist: History | None = None


class Meter:
    """Integrates freshness and age of the copies over time, with checkpoints."""

    def __init__(self, pages: list[Page], horizons: list[float]) -> None:
        self.pages, self.horizons = pages, sorted(horizons)
        self.fresh = [0.0] * len(horizons)
        self.age = [0.0] * len(horizons)

    def close(self, p: Page, until: float) -> None:
        """Account for the copy taken at p.copy_at, held until ``until``."""
        for i, h in enumerate(self.horizons):
            end = min(until, h)
            if end <= p.copy_at:
                continue
            stale_from = min(max(p.next_change, p.copy_at), end)
            self.fresh[i] += stale_from - p.copy_at
            self.age[i] += (end - stale_from) ** 2 / 2


def simulate(policy: Policy, rates: list[float], budget: float, horizons: list[float], bounds: Bounds,
             seed: int, given: bool = False) -> tuple[list[float], list[float], int]:
    rng = random.Random(seed)
    n = len(rates)
    h_max = max(horizons)
    initial = n / budget
    pages = [Page(r, rng.expovariate(r) if r > 0 else math.inf, 0.0) for r in rates]
    meter = Meter(pages, horizons)
    plan = Plan(policy, bounds, initial, uniform_s=initial, prior_rate=1.0 / initial)
    due: list[tuple[float, int]] = []
    for i, p in enumerate(pages):
        hist, at = revisit(plan, History(), Visit(0.0, False))
        if given:
            hist.shape, hist.exposure_s = 1e6, 1e6 / max(p.rate, 1e-9)
        p.hist = hist
        due.append((at, i))
    heapq.heapify(due)
    visits = 0
    next_plan = 0.0
    t = 0.0
    step = 1.0 / budget
    while t < h_max:
        if policy == Policy.ADAPTIVE and t >= next_plan:
            plan = _replan(plan, pages, budget, bounds)
            next_plan = t + 60.0
        if not due or due[0][0] > t:
            t = max(t + step, due[0][0] if due else h_max)
            continue
        _, i = heapq.heappop(due)
        p = pages[i]
        meter.close(p, t)
        changed = p.next_change <= t
        while p.next_change <= t:
            p.last_change = p.next_change
            p.next_change += rng.expovariate(p.rate)
        assert p.hist is not None
        hist, at = revisit(plan, p.hist, Visit(t, changed, p.last_change if p.last_change > 0 else None))
        if given:
            hist.shape, hist.exposure_s = 1e6, 1e6 / max(p.rate, 1e-9)
        p.hist, p.copy_at = hist, t
        heapq.heappush(due, (at, i))
        visits += 1
        t += step
    for p in pages:
        meter.close(p, h_max)
    fresh = [f / (n * h) for f, h in zip(meter.fresh, meter.horizons, strict=True)]
    age = [a / (n * h) for a, h in zip(meter.age, meter.horizons, strict=True)]
    return fresh, age, visits


def _replan(plan: Plan, pages: list[Page], budget: float, bounds: Bounds) -> Plan:
    cells: dict[str, int] = {}
    for p in pages:
        if p.hist is not None and p.hist.cell:
            cells[p.hist.cell] = cells.get(p.hist.cell, 0) + 1
    classes = [PageClass(*cell_rate(c), count=k) for c, k in cells.items()]
    mu = solve_mu(classes, budget * OVERBOOK, Objective.FRESHNESS, bounds)
    return Plan(plan.policy, bounds, plan.initial_s, mu=mu, uniform_s=plan.uniform_s, prior_rate=plan.prior_rate)


def optimum(rates: list[float], budget: float, bounds: Bounds) -> float:
    classes = [PageClass(r, 1.0, 1) for r in rates]
    mu = solve_mu(classes, budget, Objective.FRESHNESS, bounds)
    return expected_freshness(classes, FreqOf(mu, Objective.FRESHNESS, bounds))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", type=int, default=2000)
    ap.add_argument("--budget", type=float, default=20.0, help="revisits per second")
    ap.add_argument("--fastest", type=float, default=2.0, help="shortest change period, s")
    ap.add_argument("--slowest", type=float, default=20_000.0, help="longest change period, s")
    ap.add_argument("--static", type=float, default=0.1, help="share of pages that never change")
    ap.add_argument("--horizons", default="300,3600,7200,14400,36000")
    ap.add_argument("--min-s", type=float, default=1.0)
    ap.add_argument("--max-s", type=float, default=86_400.0)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: a few seconds")
    a = ap.parse_args()
    if a.smoke:
        a.pages, a.budget, a.horizons = 200, 5.0, "60,600"
    horizons = [float(h) for h in a.horizons.split(",")]
    rates = draw_rates(a.pages, random.Random(a.seed), a.fastest, a.slowest, a.static)
    bounds = Bounds(1.0 / a.max_s, 1.0 / a.min_s)
    best = optimum(rates, a.budget, bounds)
    print(f"{a.pages} pages, periods {a.fastest:g}-{a.slowest:g} s ({a.static:.0%} static), "
          f"budget {a.budget:g} revisits/s, uniform interval {a.pages / a.budget:.0f} s")
    print(f"optimum from the true rates (expected, steady state): freshness {best:.3f}")
    head = "".join(f"{'H=' + format(h, 'g') + 's':>10}" for h in horizons)
    print(f"{'mean freshness over [0, H]':34s}{head}")
    rows: dict[str, list[float]] = {}
    for label, policy, given in (("uniform", Policy.UNIFORM, False), ("multiplicative", Policy.MULTIPLICATIVE, False),
                                 ("nutch", Policy.NUTCH, False), ("adaptive (rates estimated)", Policy.ADAPTIVE, False),
                                 ("adaptive (true rates given)", Policy.ADAPTIVE, True)):
        t0 = time.perf_counter()
        fresh, _, visits = simulate(policy, rates, a.budget, horizons, bounds, a.seed, given)
        rows[label] = fresh
        print(f"{label:34s}" + "".join(f"{f:10.3f}" for f in fresh)
              + f"   ({visits} visits, {time.perf_counter() - t0:.1f} s)")
    nutch, est = rows["nutch"], rows["adaptive (rates estimated)"]
    given_row = rows["adaptive (true rates given)"]
    print(f"{'optimum / nutch':34s}" + "".join(f"{g / n:10.3f}" for g, n in zip(given_row, nutch, strict=True)))
    print(f"{'gap closed (estimated)':34s}" + "".join(
        f"{(e - n) / (g - n) if g > n else float('nan'):10.2f}" for e, n, g in zip(est, nutch, given_row, strict=True)))


if __name__ == "__main__":
    main()
