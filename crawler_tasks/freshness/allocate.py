"""Revisits spread over a budget to keep a collection fresh (Cho and Garcia-Molina,
"Effective page refresh policies", 2003).

A page of change rate ``lam`` revisited every ``1/f`` seconds is fresh a share
``F = (1 - exp(-x)) / x`` of the time, with ``x = lam / f`` the changes expected per
interval, and its copy is on average ``A = (x/2 - 1 + (1 - exp(-x))/x) / lam`` seconds old.
Given a budget of revisits per second, the weighted sum of ``F`` (or of ``-A``) is at its
maximum when every page's marginal gain per revisit is the same multiplier ``mu``:

- freshness: ``w (1 - (1 + x) exp(-x)) / lam = mu``. The left side is below ``w / lam`` for
  every ``f``, so a page that changes faster than ``w / mu`` gets no revisit at all: the
  optimum is *not* proportional to the change rate, and pages too fast to keep fresh are
  given up on;
- age: ``w (x^2/2 - 1 + (1 + x) exp(-x)) / lam^2 = mu``, which always has a solution: every
  page is revisited, faster pages more often.

A page whose rate is uncertain (a posterior over rates, ``freshness.rate``) gets the
frequency where its *expected* marginal gain meets ``mu`` (``bayes_freq``): for a page seen
changed at every visit, the posterior spreads over every rate above one change per visit,
and the gain of a visit is near ``1 / lam`` for the fast ones, so its mean rate would
overstate it. In the allocation it counts as the rate that gets that frequency
(``rate_for_freq``).

``mu`` is found by bisection so that the revisits add up to the budget; pages are grouped
in classes of the same rate and weight (a histogram), so that costs the same for a
thousand pages as for a billion. The per-page inverse uses a table of the marginal curve.
"""
from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

# The plan books this many revisits per revisit the budget allows. Visits come when due,
# so a plan that spends exactly the budget leaves the fetcher idle while the next due
# visits bunch up: in simulation it made 0.75 of the budget's visits (freshness 0.656 where
# the optimum is 0.693). Overbooked, the budget's limiter always has due URLs to choose
# from (the most overdue first) and the same simulation comes within 0.005 of the optimum.
OVERBOOK = 1.5


class Objective(StrEnum):
    FRESHNESS = "freshness"   # share of time a copy equals the live page
    AGE = "age"               # how long a copy has been out of date


def freshness(rate: float, freq: float) -> float:
    """Expected share of time fresh, revisited every ``1/freq`` s."""
    if rate <= 0:
        return 1.0
    if freq <= 0:
        return 0.0
    x = rate / freq
    return -math.expm1(-x) / x if x > 1e-12 else 1.0


def age(rate: float, freq: float) -> float:
    """Expected age of the copy in seconds, revisited every ``1/freq`` s."""
    if rate <= 0:
        return 0.0
    if freq <= 0:
        return math.inf
    x = rate / freq
    if x < 1e-6:
        return x * x / (6 * rate)
    return (x / 2 - 1 - math.expm1(-x) / x) / rate


def _fresh_marginal(x: float) -> float:
    return -math.expm1(-x) - x * math.exp(-x)


def _age_marginal(x: float) -> float:
    return x * x / 2 - 1 + (1 + x) * math.exp(-x) if x > 1e-3 else x ** 3 / 3 - x ** 4 / 8


_XS = [10 ** (-6 + i * 0.005) for i in range(1601)]   # 1e-6 .. 1e2 changes per interval
_FRESH = [_fresh_marginal(x) for x in _XS]
_AGE = [_age_marginal(x) for x in _XS]


def _invert(table: list[float], y: float) -> float:
    """x with table(x) = y, interpolated in log space; the table rises with x."""
    i = bisect.bisect_left(table, y)
    if i == 0:
        return _XS[0] * (y / table[0]) ** 0.5 if y > 0 else 0.0
    if i >= len(table):
        return _XS[-1]
    y0, y1 = table[i - 1], table[i]
    t = (math.log(y) - math.log(y0)) / (math.log(y1) - math.log(y0))
    return math.exp(math.log(_XS[i - 1]) + t * (math.log(_XS[i]) - math.log(_XS[i - 1])))


def optimal_freq(rate: float, weight: float, mu: float, objective: Objective) -> float:
    """Revisits per second for one page at multiplier ``mu`` (0: never, by this objective)."""
    if rate <= 0 or weight <= 0:
        return 0.0
    if objective == Objective.FRESHNESS:
        y = mu * rate / weight
        if y >= _FRESH[-1]:
            return 0.0
        x = _invert(_FRESH, y)
    else:
        x = _invert(_AGE, min(mu * rate * rate / weight, _AGE[-1]))
    return rate / x if x > 0 else math.inf


def _peak_y() -> float:
    """Where ``y / x(y)`` (a page's optimal frequency, in units of ``weight / mu``, against its
    rate in units of ``weight / mu``) is at its highest: below it a faster page gets more
    visits, above it fewer."""
    best, arg = 0.0, 0.0
    for x, y in zip(_XS, _FRESH, strict=True):
        if y / x > best:
            best, arg = y / x, y
    return arg


_PEAK_Y = _peak_y()


def bayes_freq(rates: Sequence[float], probs: Sequence[float], weight: float, mu: float) -> float:
    """Revisits per second for a page whose rate is ``rates[i]`` with chance ``probs[i]``: where
    its expected marginal freshness per revisit meets ``mu`` (0: never worth a visit)."""
    if weight <= 0 or mu <= 0:
        return 0.0 if weight <= 0 else math.inf
    target = mu / weight
    pairs = [(lam, p) for lam, p in zip(rates, probs, strict=True) if p > 1e-9 and lam > 0]
    if sum(p / lam for lam, p in pairs) * _FRESH[-1] <= target:   # the gain as visits get rare
        return 0.0

    def gain(freq: float) -> float:
        return sum(p * _fresh_marginal(lam / freq) / lam for lam, p in pairs)

    lo, hi = -12.0, 6.0   # log10 of the frequency; the gain falls as the frequency rises
    for _ in range(50):
        mid = (lo + hi) / 2
        if gain(10 ** mid) > target:
            lo = mid
        else:
            hi = mid
    return 10 ** ((lo + hi) / 2)


def rate_for_freq(freq: float, weight: float, mu: float, near: float) -> float:
    """The rate whose optimal frequency (freshness) is ``freq``, on the side of the optimum's
    peak where ``near`` is (past it, pages get fewer visits the faster they change)."""
    if mu <= 0 or weight <= 0:
        return 0.0
    unit = weight / mu
    faster = near > _PEAK_Y * unit
    lo, hi = (_PEAK_Y, 1.0) if faster else (1e-12, _PEAK_Y)
    if freq <= 0:
        return unit * (1.0 + 1e-9)
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        f = optimal_freq(mid * unit, weight, mu, Objective.FRESHNESS)
        if (f < freq) != faster:
            lo = mid
        else:
            hi = mid
    return math.sqrt(lo * hi) * unit


@dataclass(frozen=True, slots=True)
class PageClass:
    """Pages alike for the allocation: their change rate, their value, how many."""

    rate: float
    weight: float
    count: float


@dataclass(frozen=True, slots=True)
class Bounds:
    """Revisit frequencies allowed to any one page (1 / RECRAWL_MAX_S .. 1 / RECRAWL_MIN_S)."""

    min_freq: float
    max_freq: float

    def clamp(self, freq: float) -> float:
        return min(max(freq, self.min_freq), self.max_freq)


def _spent(classes: Sequence[PageClass], mu: float, objective: Objective, bounds: Bounds) -> float:
    return sum(c.count * bounds.clamp(optimal_freq(c.rate, c.weight, mu, objective)) for c in classes)


def solve_mu(classes: Sequence[PageClass], budget_per_s: float, objective: Objective, bounds: Bounds) -> float:
    """The multiplier whose allocation spends ``budget_per_s`` revisits a second (clamped to
    the bounds; a budget beyond what the bounds allow gives every page its maximum)."""
    lo, hi = -40.0, 40.0   # log10 of mu
    if not classes or _spent(classes, 10 ** lo, objective, bounds) <= budget_per_s:
        return 10 ** lo
    for _ in range(80):
        mid = (lo + hi) / 2
        if _spent(classes, 10 ** mid, objective, bounds) > budget_per_s:
            lo = mid
        else:
            hi = mid
    return 10 ** hi


def expected_freshness(classes: Iterable[PageClass], freq_of: "FreqOf") -> float:
    """Weighted mean freshness of a collection whose pages are revisited at ``freq_of``."""
    num = den = 0.0
    for c in classes:
        num += c.count * c.weight * freshness(c.rate, freq_of(c))
        den += c.count * c.weight
    return num / den if den else 1.0


class FreqOf:
    """Revisit frequency of a class under one allocation (a callable, to compare policies)."""

    __slots__ = ("mu", "objective", "bounds")

    def __init__(self, mu: float, objective: Objective, bounds: Bounds) -> None:
        self.mu, self.objective, self.bounds = mu, objective, bounds

    def __call__(self, c: PageClass) -> float:
        return self.bounds.clamp(optimal_freq(c.rate, c.weight, self.mu, self.objective))
