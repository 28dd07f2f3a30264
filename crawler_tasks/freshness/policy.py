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
except ``adaptive``, which starts from the host's pooled rate. Times are epoch seconds,
kept to the millisecond (sub-second intervals survive).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from crawler_tasks.freshness.allocate import Bounds, Objective, optimal_freq
from crawler_tasks.freshness.rate import RateEstimate

NUTCH_INC_RATE = 0.4
NUTCH_DEC_RATE = 0.2
NUTCH_SYNC_DELTA_RATE = 0.3


class Policy(StrEnum):
    ADAPTIVE = "adaptive"
    MULTIPLICATIVE = "multiplicative"
    NUTCH = "nutch"
    UNIFORM = "uniform"


_FIELDS = 12


@dataclass(slots=True)
class History:
    """What is kept per known URL (about 90 bytes besides the URL)."""

    etag: str = ""
    last_modified: str = ""
    fingerprint: str = ""
    visited_at: float = 0.0     # the last visit
    changed_at: float = 0.0     # the last change known (detected, or Last-Modified)
    interval_s: float = 0.0     # the interval the rule chose at the last visit
    visits: int = 0
    changes: int = 0            # visits that found a change
    shape: float = 0.0          # the rate estimate (rate.RateEstimate)
    exposure_s: float = 0.0
    cell: str = ""              # the allocation class the URL is counted in ("" none)
    weight: float = 1.0

    def encode(self) -> str:
        return "\t".join([self.etag, self.last_modified, self.fingerprint, f"{self.visited_at:.3f}",
                          f"{self.changed_at:.3f}", f"{self.interval_s:.3f}", str(self.visits), str(self.changes),
                          f"{self.shape:.5g}", f"{self.exposure_s:.6g}", self.cell, f"{self.weight:g}"])

    @classmethod
    def decode(cls, raw: str | None) -> "History":
        if not raw:
            return cls()
        parts = raw.split("\t")
        try:
            if len(parts) == _FIELDS:
                etag, lm, fp, at, ch, interval, visits, changes, shape, exp, cell, weight = parts
                return cls(etag, lm, fp, float(at), float(ch), float(interval), int(visits), int(changes),
                           float(shape), float(exp), cell, float(weight))
            if len(parts) == 6:   # the former format: validators and the multiplicative rule's state
                etag, lm, fp, interval, visits, changes = parts
                return cls(etag, lm, fp, interval_s=float(interval), visits=int(visits), changes=int(changes))
        except ValueError:
            pass
        return cls()   # damaged: the history starts again

    @property
    def estimate(self) -> RateEstimate:
        return RateEstimate(self.shape, self.exposure_s)


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
    mu: float = 0.0                          # adaptive: the budget's multiplier
    objective: Objective = Objective.FRESHNESS
    uniform_s: float = 0.0                   # uniform: pages / budget
    prior_rate: float = 0.0                  # adaptive: the host's pooled rate

    def clamp(self, interval_s: float) -> float:
        return min(max(interval_s, 1.0 / self.bounds.max_freq), 1.0 / self.bounds.min_freq)


def rate_cell(rate: float, weight: float) -> str:
    """The allocation class of a rate: quarter octaves (rates within 19 % share one)."""
    return f"{round(4 * math.log2(max(rate, 1e-12)))}:{weight:g}"


def cell_rate(cell: str) -> tuple[float, float]:
    """(rate, weight) of a class made by ``rate_cell``."""
    k, weight = cell.split(":")
    return 2 ** (int(k) / 4), float(weight)


def revisit(plan: Plan, old: History, visit: Visit, weight: float = 1.0) -> tuple[History, float]:
    """The URL's history after ``visit`` and the time of its next visit."""
    first = old.visits == 0
    changed = visit.changed and not first
    modified = visit.modified_at if visit.modified_at and old.visited_at < visit.modified_at <= visit.at else None
    changed_at = (modified or visit.at) if changed else (old.changed_at or visit.at)
    est = old.estimate if old.exposure_s > 0 else RateEstimate.prior(plan.prior_rate or 1.0 / plan.initial_s)
    if not first and old.exposure_s > 0:   # a history of the former format has no last visit
        est.observe(visit.at - old.visited_at, changed, None if modified is None else visit.at - modified)
    due_from = visit.at
    if plan.policy == Policy.ADAPTIVE:
        freq = plan.bounds.clamp(optimal_freq(est.rate, weight, plan.mu, plan.objective))
        interval = 1.0 / freq
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
                  old.visits + 1, old.changes + int(changed), est.shape, est.exposure_s,
                  rate_cell(est.rate, weight), weight)
    return new, due_from + interval
