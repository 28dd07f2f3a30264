"""When to visit a known URL again: one URL's history and the revisit rules.

``adaptive`` (the default) estimates each URL's change rate (``rate.py``) and revisits it
at the frequency the budget's optimum gives its rate and value (``allocate.py``). The
others are kept to compare against, and for operators who know them:

- ``multiplicative``: twice as soon after a change, 1.5x later when unchanged (this
  crawler's former rule; Heritrix's WaitEvaluator and StormCrawler's AdaptiveScheduler
  work alike);
- ``nutch``: Nutch's AdaptiveFetchSchedule with its documented defaults (nutch-default.xml:
  inc_rate 0.4, dec_rate 0.2, sync_delta on, sync_delta_rate 0.3), reimplemented from its
  documentation: the interval shrinks by dec_rate after a change and grows by inc_rate
  otherwise, is at least the time since the last change, and the next visit is pulled
  back by sync_delta_rate of that time;
- ``uniform``: every URL alike, the budget spread evenly.

Every rule is bounded by [RECRAWL_MIN_S, RECRAWL_MAX_S] and starts at RECRAWL_INITIAL_S,
except ``adaptive``, which starts from the shard's prior (``rate.Prior``). Times are epoch
seconds, kept to the millisecond (sub-second intervals survive).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from crawler_tasks.freshness.allocate import Bounds, Objective, bayes_freq, optimal_freq, rate_for_freq
from crawler_tasks.freshness.rate import Evidence, Prior, census_delta

NUTCH_INC_RATE = 0.4
NUTCH_DEC_RATE = 0.2
NUTCH_SYNC_DELTA_RATE = 0.3


class Policy(StrEnum):
    ADAPTIVE = "adaptive"
    MULTIPLICATIVE = "multiplicative"
    NUTCH = "nutch"
    UNIFORM = "uniform"


_FIELDS = 13
# The chance a page changes at all is kept in quarter-octave steps down to this (below: 0),
# so pages of one rate and value share an allocation class.
_MIN_CHANGING = 2.0 ** -6


@dataclass(slots=True)
class History:
    """What is kept per known URL (about 120 bytes besides the URL)."""

    etag: str = ""
    last_modified: str = ""
    fingerprint: str = ""
    visited_at: float = 0.0     # the last visit
    changed_at: float = 0.0     # the last change known (detected, or Last-Modified)
    interval_s: float = 0.0     # the interval the rule chose at the last visit
    visits: int = 0
    changes: int = 0            # visits that found a change
    evidence: str = ""          # the visits' likelihood over rates (rate.Evidence, encoded)
    lm_age_s: float = 0.0       # Last-Modified's age at the first visit, while it is trusted
    cell: str = ""              # the allocation class the URL is counted in ("" none)
    weight: float = 1.0
    changing: float = 1.0       # the chance the page changes at all, at the last visit

    def encode(self) -> str:
        return "\t".join([self.etag, self.last_modified, self.fingerprint, f"{self.visited_at:.3f}",
                          f"{self.changed_at:.3f}", f"{self.interval_s:.3f}", str(self.visits), str(self.changes),
                          self.evidence, f"{self.lm_age_s:.6g}", self.cell, f"{self.weight:g}",
                          f"{self.changing:.4g}"])

    @classmethod
    def decode(cls, raw: str | None) -> "History":
        if not raw:
            return cls()
        parts = raw.split("\t")
        try:
            if len(parts) == _FIELDS:
                etag, lm, fp, at, ch, interval, visits, changes, evidence, lm_age, cell, weight, changing = parts
                return cls(etag, lm, fp, float(at), float(ch), float(interval), int(visits), int(changes),
                           evidence, float(lm_age), cell, float(weight), float(changing))
            if len(parts) in (6, 12):   # former formats: the validators are kept, the estimate starts again
                return cls(parts[0], parts[1], parts[2], visits=int(parts[6 if len(parts) == 12 else 4]))
        except ValueError:
            pass
        return cls()   # damaged: the history starts again


@dataclass(frozen=True, slots=True)
class Visit:
    """One visit as the revisit rules see it."""

    at: float
    changed: bool
    modified_at: float | None = None   # Last-Modified, when the server gave one


@dataclass(frozen=True, slots=True)
class Plan:
    """What the rules need beyond the URL: the shard's allocation and the settings."""

    policy: Policy
    bounds: Bounds
    initial_s: float
    prior: Prior                             # the shard's rates, what a page is believed before its visits
    mu: float = 0.0                          # adaptive: the budget's multiplier
    objective: Objective = Objective.FRESHNESS
    uniform_s: float = 0.0                   # uniform: pages / budget
    min_chance: float = 0.0                  # adaptive: RECRAWL_MIN_CHANGE_CHANCE

    def clamp(self, interval_s: float) -> float:
        return min(max(interval_s, 1.0 / self.bounds.max_freq), 1.0 / self.bounds.min_freq)


def rate_cell(rate: float, weight: float) -> str:
    """The allocation class of a rate: quarter octaves (rates within 19 % share one)."""
    return f"{round(4 * math.log2(max(rate, 1e-12)))}:{weight:g}"


def cell_rate(cell: str) -> tuple[float, float]:
    """(rate, weight) of a class made by ``rate_cell``."""
    k, weight = cell.split(":")
    return 2 ** (int(k) / 4), float(weight)


def _changing_level(p: float) -> float:
    """``p`` in quarter-octave steps (1, 0.84, 0.71, ...), 0 below _MIN_CHANGING."""
    if p < _MIN_CHANGING / 2 ** 0.125:
        return 0.0
    return float(f"{2.0 ** (round(4 * math.log2(min(p, 1.0))) / 4):.4g}")


def _worth_a_request(rates: list[float], cells: tuple[float, ...], interval: float, floor: float,
                     longest: float) -> float:
    """``interval`` stretched until the page has at least a ``floor`` chance of having changed
    by the visit (``longest`` at most): where the budget is plentiful, the optimum still
    spends it on pages that most likely never change, and a request that almost surely
    returns a 304 is a cost to the site for nothing."""
    def chance(t: float) -> float:
        return sum(p * -math.expm1(-lam * t) for lam, p in zip(rates, cells, strict=False))
    if chance(interval) >= floor:
        return interval
    if chance(longest) <= floor:
        return longest
    lo, hi = interval, longest
    for _ in range(40):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if chance(mid) < floor else (lo, mid)
    return hi


@dataclass(frozen=True, slots=True)
class Next:
    """A URL's history after a visit, its next visit, and what the visit changes in the shard's
    census (``rate.census_delta``)."""

    history: History
    due_at: float
    census: dict[str, float]
    first_change: bool      # the first change ever seen on this URL (its host's count of such)


def revisit(plan: Plan, old: History, visit: Visit, weight: float = 1.0) -> Next:
    """The URL's history after ``visit`` and the time of its next visit."""
    first = old.visits == 0
    changed = visit.changed and not first
    modified = visit.modified_at if visit.modified_at and old.visited_at < visit.modified_at <= visit.at else None
    changed_at = (modified or visit.at) if changed else (old.changed_at or visit.at)
    grid = plan.prior.grid
    before = Evidence.decode(old.evidence)
    evidence = Evidence(before.dated, before.unchanged_s, dict(before.undated), before.changed)
    if first:
        lm_age = visit.at - visit.modified_at if visit.modified_at and visit.modified_at <= visit.at else 0.0
    elif changed != (modified is not None):   # Last-Modified is not the content's date here
        lm_age = 0.0
    else:
        lm_age = old.lm_age_s * grid.keep(visit.at - old.visited_at)
    if not first:
        evidence.observe(grid, visit.at - old.visited_at, changed, None if modified is None else visit.at - modified)
    belief = plan.prior.belief(evidence, lm_age)
    worth = weight * _changing_level(belief.changing)
    due_from = visit.at
    rate = belief.rate
    if plan.policy == Policy.ADAPTIVE and plan.objective == Objective.FRESHNESS and worth > 0 and plan.mu > 0:
        # the frequency the whole posterior asks for, counted as the rate that gets it
        given = [p / belief.changing for p in belief.cells[:-1]]
        freq = bayes_freq(grid.rates, given, worth, plan.mu)
        rate = rate_for_freq(freq, worth, plan.mu, near=rate)
        interval = 1.0 / plan.bounds.clamp(freq)
        if plan.min_chance > 0:
            interval = _worth_a_request(grid.rates, belief.cells, interval, plan.min_chance,
                                        1.0 / plan.bounds.min_freq)
    elif plan.policy == Policy.ADAPTIVE:
        interval = 1.0 / plan.bounds.clamp(optimal_freq(belief.rate, worth, plan.mu, plan.objective))
    elif plan.policy == Policy.UNIFORM:
        interval = plan.uniform_s or plan.initial_s
    elif first:
        interval = plan.initial_s
    elif plan.policy == Policy.MULTIPLICATIVE:
        interval = old.interval_s / 2 if changed else old.interval_s * 1.5
    else:   # Policy.NUTCH
        interval = old.interval_s * ((1 - NUTCH_DEC_RATE) if changed else (1 + NUTCH_INC_RATE))
        delta = visit.at - changed_at
        interval = max(interval, delta)
        due_from = visit.at - delta * NUTCH_SYNC_DELTA_RATE
    interval = plan.clamp(interval)
    new = History(old.etag, old.last_modified, old.fingerprint, visit.at, changed_at, interval,
                  old.visits + 1, old.changes + int(changed), evidence.encode(), lm_age,
                  rate_cell(rate, worth), weight, belief.changing)
    return Next(new, due_from + interval, census_delta(plan.prior, (before, old.lm_age_s) if old.evidence else None,
                              (evidence, lm_age)),
                evidence.changed and not before.changed)
