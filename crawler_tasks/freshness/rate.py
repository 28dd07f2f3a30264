"""A page's change rate, as a belief over a grid of rates learned from irregular visits.

A page is taken to change as a Poisson process of rate ``lambda`` (changes per second), as
Cho and Garcia-Molina do ("Estimating frequency of change", 2003), or not at all. A visit
mostly tells only *whether* the page changed since the previous one (its main-text
fingerprint moved, or a 304 said it did not), sometimes *when* (a Last-Modified inside the
interval). Each such fact is a likelihood over ``lambda``, and they multiply:

- unchanged for ``t`` seconds: ``exp(-lambda t)``;
- changed within ``t``: ``1 - exp(-lambda t)``: a page that changes at every visit is only
  known to be fast, *how* fast is the prior's to say (a single Gamma belief updated by its
  mean creeps up and leaves such pages where the budget is best spent);
- changed, the last change ``a`` seconds ago (Last-Modified): ``lambda exp(-lambda a)``;
- a Last-Modified ``A`` seconds old at the first visit: ``exp(-lambda A)``, kept apart
  (``lm_age_s`` in the history) and dropped once the page changes without its
  Last-Modified moving: a server whose date is not the content's cannot vouch for it.

The evidence is kept as the likelihood's sufficient statistics: the seconds the page is
known unchanged and the dated changes (together ``lambda^n exp(-lambda t)``, exact however
small a visit's share), and the undated changes counted by the length of their interval (in
``CELLS_PER_OCTAVE`` buckets an octave). Beliefs are taken on a grid of rates, from
``SLOWER`` times slower than one change per ``RECRAWL_MAX_S`` to ``FASTER`` times faster
than one per ``RECRAWL_MIN_S``. A *static* page, that never changes, is a hypothesis of its
own, ruled out by the first change seen (a page that stops changing is then one of the
slowest cell, which the allocation visits as seldom). Evidence fades with time (``MEMORY``
times ``RECRAWL_MAX_S``), so a page whose rate moves is followed.

The prior is empirical (Robbins' empirical Bayes): the distribution of rates over the
shard's own pages, so the crawl learns the shape of its web (how many pages never change,
how many change faster than they can be followed) and a new page starts from it. The shard
keeps a census: the summed posteriors of the pages seen to change, and a count of the
others by how long they are known unchanged. At every plan an EM fits the prior to the
census (``Prior.fit``); telling a static page from a slow one takes the whole census, not one
page's visits. A host's pages start from the shard's prior tilted by how often its own pages
are seen to change (``Prior.for_host``): a host whose pages never change pulls its new pages
towards static. A posterior then tells the allocation two things: the chance the page
changes at all, and its mean rate if it does.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

CELLS_PER_OCTAVE = 2
SLOWER = 8.0          # the grid reaches this many times slower than 1 / RECRAWL_MAX_S
FASTER = 2.0          # and this many times faster than 1 / RECRAWL_MIN_S
MEMORY = 32.0         # evidence fades with a time constant of this many RECRAWL_MAX_S
PRIOR_PAGES = 4.0     # the flat prior under the shard's is worth this many pages
EM_ROUNDS = 40        # EM steps per fit of the prior (each fit starts from the last)
HOST_PAGES = 8.0      # a host's own share of pages seen to change is pooled with this many of the shard's
MAX_BUCKETS = 64      # interval lengths kept per page (a damaged history has no more)


@dataclass(frozen=True, slots=True)
class Grid:
    """The rates a belief is kept over: absolute cells ``k`` (rate ``2 ** (k / CELLS_PER_OCTAVE)``)
    from ``lo`` to ``hi``, so beliefs stored under other bounds still line up."""

    lo: int
    hi: int
    memory_s: float

    @classmethod
    def for_bounds(cls, min_s: float, max_s: float) -> "Grid":
        return cls(math.floor(CELLS_PER_OCTAVE * math.log2(1.0 / (SLOWER * max_s))),
                   math.ceil(CELLS_PER_OCTAVE * math.log2(FASTER / min_s)), MEMORY * max_s)

    def keep(self, elapsed_s: float) -> float:
        """The share of old evidence still held ``elapsed_s`` later."""
        return math.exp(-max(elapsed_s, 0.0) / self.memory_s)

    @property
    def cells(self) -> range:
        return range(self.lo, self.hi + 1)

    def rate(self, k: int) -> float:
        return 2.0 ** (k / CELLS_PER_OCTAVE)

    @property
    def rates(self) -> list[float]:
        return [self.rate(k) for k in self.cells]


@dataclass(slots=True)
class Evidence:
    """A page's visits: ``unchanged_s`` seconds known unchanged, ``dated`` changes whose time is
    known, ``undated`` changes counted by interval bucket, and whether a change was ever seen."""

    dated: float = 0.0
    unchanged_s: float = 0.0
    undated: dict[int, float] = field(default_factory=dict)
    changed: bool = False

    def encode(self) -> str:
        undated = ",".join(f"{b}:{n:.3g}" for b, n in sorted(self.undated.items()))
        return f"{self.dated:.4g}~{self.unchanged_s:.6g}~{int(self.changed)}~{undated}"

    @classmethod
    def decode(cls, raw: str) -> "Evidence":
        """The evidence stored by ``encode``; empty or damaged: no evidence."""
        try:
            dated, unchanged, changed, undated = raw.split("~")
            ev = cls(float(dated), float(unchanged), {}, changed == "1")
            for pair in filter(None, undated.split(",")[:MAX_BUCKETS]):
                b, n = pair.split(":")
                ev.undated[int(b)] = float(n)
        except ValueError:
            return cls()
        values = [ev.dated, ev.unchanged_s, *ev.undated.values()]
        if not all(0.0 <= v < math.inf for v in values) or any(abs(b) > 200 for b in ev.undated):
            return cls()
        return ev

    def observe(self, grid: Grid, elapsed_s: float, changed: bool, changed_before_s: float | None = None) -> None:
        """Take one visit ``elapsed_s`` after the previous: whether the page changed and, when
        known, how long before this visit it last did (Last-Modified)."""
        t = max(elapsed_s, 0.0)
        keep = grid.keep(t)
        self.unchanged_s *= keep
        self.dated *= keep
        self.undated = {b: n * keep for b, n in self.undated.items() if n * keep > 0.01}
        if not changed:
            self.unchanged_s += t
            return
        self.changed = True
        if changed_before_s is not None and 0.0 <= changed_before_s <= t:
            self.dated += 1.0
            self.unchanged_s += changed_before_s
        elif t > 0:
            b = _bucket(t)
            self.undated[b] = self.undated.get(b, 0.0) + 1.0

    def loglik(self, grid: Grid, extra_unchanged_s: float = 0.0) -> list[float]:
        """The log-likelihood of each cell of ``grid`` (up to a constant)."""
        unchanged = self.unchanged_s + extra_unchanged_s
        out = []
        for k in grid.cells:
            lam = grid.rate(k)
            v = self.dated * math.log(lam) - lam * unchanged
            for b, n in self.undated.items():
                v += n * math.log(-math.expm1(-lam * _bucket_s(b)))
            out.append(v)
        return out


@dataclass(frozen=True, slots=True)
class Belief:
    """What a posterior tells the allocation."""

    changing: float        # the chance the page changes at all
    rate: float            # its mean rate if it does (changes per second)
    cells: tuple[float, ...]   # the posterior over the grid's cells, then the static cell


class Prior:
    """A shard's prior over the grid's cells, then the static page (``weights``, summing to 1),
    and the share of its pages seen to change (``seen_changed``: what a host is compared with)."""

    __slots__ = ("grid", "weights", "seen_changed")

    def __init__(self, grid: Grid, weights: Sequence[float] | None = None, seen_changed: float = 0.5) -> None:
        self.grid = grid
        n = len(grid.cells) + 1
        self.weights = list(weights) if weights is not None and len(weights) == n else [1.0 / n] * n
        self.seen_changed = seen_changed

    def encode(self) -> str:
        return f"{self.grid.lo}~" + ",".join(f"{w:.4g}" for w in self.weights) + f"~{self.seen_changed:.4g}"

    @classmethod
    def decode(cls, raw: str | None, grid: Grid) -> "Prior":
        """The prior stored by ``encode`` (flat when missing, damaged or for other bounds)."""
        lo, _, rest = (raw or "").partition("~")
        weights, _, share = rest.partition("~")
        try:
            values = [float(w) for w in weights.split(",")]
            seen = float(share)
        except ValueError:
            return cls(grid)
        if lo != str(grid.lo) or not all(0.0 <= v < math.inf for v in values) or not sum(values) > 0 \
                or not 0.0 <= seen <= 1.0:
            return cls(grid)
        return cls(grid, [v / sum(values) for v in values], seen)

    def for_host(self, pages: float, seen_changed: float) -> "Prior":
        """The prior of a host of ``pages`` pages of which ``seen_changed`` were seen to change:
        the shard's, its static page and changing pages reweighed by how much more (or less)
        often the host's pages change than the shard's, pooled over HOST_PAGES pages of the
        shard's share (a host of few pages is the shard's)."""
        q = min(max(self.seen_changed, 0.01), 0.99)
        h = (seen_changed + HOST_PAGES * q) / (pages + HOST_PAGES)
        h = min(max(h, 0.001), 0.999)
        if abs(h - q) < 1e-6:
            return self
        weights = [w * h / q for w in self.weights[:-1]] + [self.weights[-1] * (1 - h) / (1 - q)]
        total = sum(weights)
        return Prior(self.grid, [w / total for w in weights], self.seen_changed)

    @classmethod
    def fit(cls, grid: Grid, census: Mapping[str, float], start: "Prior | None" = None,
            rounds: int = EM_ROUNDS) -> "Prior":
        """The prior that best explains the census (EM from ``start``), over a flat prior worth
        PRIOR_PAGES pages."""
        rates = [grid.rate(k) for k in grid.cells]
        changed = [max(float(census.get(str(k), 0.0)), 0.0) for k in grid.cells]
        unchanged = []
        for name, count in census.items():
            if name.startswith("u") and float(count) > 0.5:
                try:
                    exposure = _bucket_s(int(name[1:]))
                except ValueError:
                    continue
                unchanged.append((float(count), [math.exp(-lam * exposure) for lam in rates]))
        pages = sum(changed) + sum(n for n, _ in unchanged)
        flat = PRIOR_PAGES / (len(rates) + 1)
        weights = (start or cls(grid)).weights
        for _ in range(rounds if unchanged else 1):
            mass = [*changed, 0.0]
            for n, survive in unchanged:
                post = [w * p for w, p in zip(weights, survive, strict=False)]
                post.append(weights[-1])
                scale = n / sum(post)
                for i, p in enumerate(post):
                    mass[i] += p * scale
            weights = [(m + flat) / (pages + PRIOR_PAGES) for m in mass]
        return cls(grid, weights, sum(changed) / pages if pages > 0 else 0.5)

    def belief(self, evidence: Evidence, lm_age_s: float = 0.0) -> Belief:
        """The posterior of a page with ``evidence``, and a Last-Modified ``lm_age_s`` old at its
        first visit (0: none, or not to be trusted)."""
        ll = evidence.loglik(self.grid, lm_age_s)
        best = max(ll)
        post = [w * math.exp(v - best) for w, v in zip(self.weights, ll, strict=False)]
        # the static page: likelihood 1 while no change is seen, against the best cell's
        post.append(0.0 if evidence.changed else self.weights[-1] * math.exp(min(-best, 700.0)))
        total = sum(post)
        post = [p / total for p in post]
        moving = 1.0 - post[-1]
        mean = sum(p * self.grid.rate(k) for p, k in zip(post, self.grid.cells, strict=False))
        return Belief(moving, mean / moving if moving > 1e-12 else self.grid.rate(self.grid.lo), tuple(post))


def _bucket(exposure_s: float) -> int:
    return math.floor(CELLS_PER_OCTAVE * math.log2(max(exposure_s, 1.0)))


def _bucket_s(bucket: int) -> float:
    return 2.0 ** ((bucket + 0.5) / CELLS_PER_OCTAVE)


def census_delta(prior: Prior, old: tuple[Evidence, float] | None, new: tuple[Evidence, float]) -> dict[str, float]:
    """What a visit changes in its shard's census (``old`` None: a new page): a page never seen
    to change is counted in the bucket of the seconds it is known unchanged (``u<bucket>``),
    one that changed adds its posterior over the cells (``<cell>``)."""
    out: dict[str, float] = {}
    for (evidence, lm_age_s), sign in ((new, 1.0), *(((old, -1.0),) if old is not None else ())):
        if evidence.changed:
            for k, p in zip(prior.grid.cells, prior.belief(evidence, lm_age_s).cells, strict=False):
                out[str(k)] = out.get(str(k), 0.0) + sign * p
        else:
            name = f"u{_bucket(evidence.unchanged_s + lm_age_s)}"
            out[name] = out.get(name, 0.0) + sign
    return {name: d for name, d in out.items() if abs(d) > 1e-4}
