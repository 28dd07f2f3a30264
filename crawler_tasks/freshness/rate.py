"""A page's change rate, estimated from irregular visits.

A page is taken to change as a Poisson process of rate ``lambda`` (changes per second), as
Cho and Garcia-Molina do ("Estimating frequency of change", 2003). A visit mostly tells
only *whether* the page changed since the previous visit (its main-text fingerprint moved,
or a 304 said it did not), sometimes *when* (a Last-Modified inside the interval).

The estimate is a Gamma belief over ``lambda`` held in two numbers, ``shape`` (changes
counted) and ``exposure_s`` (seconds watched); its mean ``shape / exposure_s`` is the rate.
Each visit after ``t`` seconds updates it:

- unchanged: the likelihood ``exp(-lambda t)`` is conjugate: ``exposure_s += t``;
- changed: ``1 - exp(-lambda t)`` is not. It is replaced by the number of changes it hides,
  expected under the current mean: ``lambda t / (1 - exp(-lambda t))``, at least 1 (one step
  of EM). Counting a changed interval as one change is the bias the paper corrects; this
  corrects it without keeping every interval, and converges on the paper's
  maximum-likelihood estimate for irregular visits;
- changed, with a Last-Modified ``m`` inside the interval: the last change was at ``m``, and
  changes before it are again an expectation: ``shape += 1 + lambda (m - previous visit)``.

The belief forgets: past ``MAX_SHAPE`` changes both numbers shrink in proportion, so a page
whose rate moves is followed after about that many changes. A new URL starts from a prior
(its host's pooled rate) worth one change, so a few visits outweigh it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

MAX_SHAPE = 24.0        # changes remembered; older evidence is scaled down past this
PRIOR_SHAPE = 1.0       # a prior is worth this many changes


@dataclass(slots=True)
class RateEstimate:
    """Gamma(shape, exposure_s) belief over a page's change rate (changes per second)."""

    shape: float
    exposure_s: float

    @property
    def rate(self) -> float:
        return self.shape / self.exposure_s if self.exposure_s > 0 else 0.0

    @classmethod
    def prior(cls, rate: float, strength: float = PRIOR_SHAPE) -> "RateEstimate":
        """A belief centred on ``rate`` worth ``strength`` changes."""
        rate = max(rate, 1e-12)
        return cls(strength, strength / rate)

    def observe(self, elapsed_s: float, changed: bool, changed_before_s: float | None = None) -> None:
        """Take one visit: ``elapsed_s`` since the previous one, whether the page changed, and,
        when known, how long before the end of the interval the last change happened (from
        Last-Modified)."""
        t = max(elapsed_s, 0.0)
        if t == 0.0:
            return
        if changed:
            lam = self.rate
            if changed_before_s is not None and 0.0 <= changed_before_s <= t:
                added = 1.0 + lam * (t - changed_before_s)
            else:
                x = lam * t
                added = x / -math.expm1(-x) if x > 1e-9 else 1.0 + x / 2
            self.shape += added
        self.exposure_s += t
        if self.shape > MAX_SHAPE:
            scale = MAX_SHAPE / self.shape
            self.shape, self.exposure_s = MAX_SHAPE, self.exposure_s * scale


def pooled_rate(changes: float, exposure_s: float, default_rate: float) -> float:
    """The rate of a host's pages taken together (changes seen over seconds watched), pulled
    towards ``default_rate`` while the host has little history: the prior a new URL of that
    host starts from. Counting a changed interval as one change underestimates fast pages;
    for a prior that a few visits outweigh, that is enough."""
    return (changes + PRIOR_SHAPE) / (exposure_s + PRIOR_SHAPE / max(default_rate, 1e-12))
