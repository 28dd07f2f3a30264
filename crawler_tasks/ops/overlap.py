"""``manage.py overlap``: the relative size of two crawls by capture-recapture.

Introduction to Information Retrieval, section 19.5: draw a uniform sample of A's pages
and test each for presence in B; x = fraction of A's sample found in B estimates
|A n B| / |A|. The reverse gives y ~ |A n B| / |B|, so |A| / |B| ~ y / x.

A *page* is a record of ``pages.jsonl`` with status 200 and a content fingerprint (one
per URL). Presence is tested two ways: by URL (the crawler's normalized URL, or the
final URL after redirects), and by content (same exact fingerprint, or a simhash
within 3 bits of one of B's pages, the near-duplicate rule of the crawler's dedup).

Confidence interval (delta method on the log ratio): with n pages drawn without
replacement from N, var(x_hat) = x(1-x)/n * (N-n)/(N-1), and var(log x_hat) ~
var(x_hat) / x^2; the two samples are independent, so var(log(y/x)) is the sum, and
the 95 % interval is exp(log(y/x) +- 1.96 sd). It is asymmetric, as a ratio's should
be, and degenerates when x or y is 0 (then no interval). When every sampled page was
found (x = 1) the variance term is 0, which claimed certainty (``[2.100, 2.100]``) from
a partial sample: x is then taken as (n - 1/2)/n in the variance. An interval is of
zero width only when both samples are whole crawls, and it is printed as exact. A percentile bootstrap of
the two 0/1 samples (resampled separately) is reported beside it as a check: it needs
no normal approximation, which matters when x or y is near 0 or 1.

The query-based variant of the chapter (Bharat and Broder): for a sampled page of A,
build a conjunctive query of its QUERY_TERMS rarest terms (rarity = document frequency
in A's feed), run it against an inverted index of B's ``feed.jsonl`` texts, and count
the page as found when one of the hits is the page (same URL, fingerprint or simhash
within 3 bits). Only the query terms are indexed, so B's feed is streamed once with
memory proportional to the queries, not to B. The feed holds indexable pages only
(no duplicates, no noindex pages), so this variant measures the indexes, not the crawls.

Because both outputs are on disk, the true sizes are printed too: the estimate can be
checked against them, which is the point of running it on two crawls of one test web.
"""
from __future__ import annotations

import json
import math
import random
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crawler_tasks.output.jsonl import FEED_FILE, PAGES_FILE

NEAR_BITS = 3           # simhash distance of a near duplicate (the crawler's rule)
QUERY_TERMS = 3         # rarest terms per query
MIN_TERM_CHARS = 3
BOOTSTRAP_ROUNDS = 2000
Z95 = 1.959964

_TERM = re.compile(r"\w+", re.UNICODE)


# --------------------------------------------------------------------------- reading


def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Records of a JSON-lines file; unreadable lines are skipped (a torn last line)."""
    try:
        f = open(path, encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return
    with f:
        for line in f:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and isinstance(rec.get("url"), str):
                yield rec


def _hex64(value: Any) -> int | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return int(value, 16) & (2**64 - 1)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Page:
    url: str
    final_url: str
    fingerprint: str
    simhash: int | None


def load_pages(out_dir: Path) -> list[Page]:
    """A crawl's pages (status 200 with a fingerprint, first record per URL wins)."""
    seen: set[str] = set()
    pages = []
    for rec in _jsonl(out_dir / PAGES_FILE):
        fp = rec.get("fingerprint")
        if rec.get("status") != 200 or not isinstance(fp, str) or not fp or rec.get("kind", "page") != "page":
            continue
        url = rec["url"]
        if url in seen:
            continue
        seen.add(url)
        final = rec.get("final_url") if isinstance(rec.get("final_url"), str) else url
        pages.append(Page(url, final or url, fp, _hex64(rec.get("simhash"))))
    return pages


class NearIndex:
    """Simhashes indexed by 16-bit blocks: two values within 3 bits agree on at least one
    of the four blocks (pigeonhole), so only that block's bucket is compared."""

    def __init__(self, values: Iterable[int]) -> None:
        self.buckets: list[dict[int, list[int]]] = [{} for _ in range(4)]
        for v in values:
            for b in range(4):
                self.buckets[b].setdefault((v >> (16 * b)) & 0xFFFF, []).append(v)

    def near(self, value: int, bits: int = NEAR_BITS) -> bool:
        return any(bin(value ^ other).count("1") <= bits
                   for b in range(4) for other in self.buckets[b].get((value >> (16 * b)) & 0xFFFF, ()))


@dataclass(slots=True)
class CrawlSet:
    """What a presence test needs of one crawl."""

    pages: list[Page]
    urls: set[str] = field(default_factory=set)
    fingerprints: set[str] = field(default_factory=set)
    near: NearIndex | None = None

    @classmethod
    def of(cls, pages: list[Page]) -> "CrawlSet":
        urls = {p.url for p in pages} | {p.final_url for p in pages}
        return cls(pages, urls, {p.fingerprint for p in pages},
                   NearIndex(p.simhash for p in pages if p.simhash is not None))

    def has_url(self, page: Page) -> bool:
        return page.url in self.urls or page.final_url in self.urls

    def has_content(self, page: Page) -> bool:
        if page.fingerprint in self.fingerprints:
            return True
        return page.simhash is not None and self.near is not None and self.near.near(page.simhash)


# --------------------------------------------------------------------------- estimates


@dataclass(frozen=True, slots=True)
class Estimate:
    """One way of testing presence, both directions."""

    method: str
    n_a: int            # A's sample size
    n_b: int
    x: float            # fraction of A's sample found in B
    y: float            # fraction of B's sample found in A
    ratio: float | None             # |A| / |B| ~ y / x
    ci: tuple[float, float] | None  # delta method, 95 %
    boot_ci: tuple[float, float] | None


def delta_ci(x: float, n_a: int, size_a: int, y: float, n_b: int, size_b: int,
             z: float = Z95) -> tuple[float, float] | None:
    """95 % interval of y/x by the delta method on log(y/x), with finite-population
    correction (samples drawn without replacement). None when x or y is 0."""
    if x <= 0 or y <= 0 or n_a == 0 or n_b == 0:
        return None

    def var_log(p: float, n: int, size: int) -> float:
        fpc = (size - n) / (size - 1) if size > 1 else 0.0
        p = min(p, (n - 0.5) / n)   # all found in a partial sample: not certainty
        return (1 - p) / (n * p) * fpc

    sd = math.sqrt(var_log(x, n_a, size_a) + var_log(y, n_b, size_b))
    r = y / x
    return r * math.exp(-z * sd), r * math.exp(z * sd)


def bootstrap_ci(hits_a: Sequence[bool], hits_b: Sequence[bool], rounds: int = BOOTSTRAP_ROUNDS,
                 seed: int = 0) -> tuple[float, float] | None:
    """Percentile 95 % interval of y/x, resampling both samples; None if x is ever 0
    in more than 2.5 % of the rounds (the upper end is then unbounded), or if every
    round gives the same ratio (all pages found, or none: nothing to resample)."""
    if not hits_a or not hits_b:
        return None
    rng = random.Random(seed)
    ha, hb = [int(h) for h in hits_a], [int(h) for h in hits_b]
    ratios = []
    for _ in range(rounds):
        x = sum(rng.choices(ha, k=len(ha)))
        y = sum(rng.choices(hb, k=len(hb)))
        ratios.append(math.inf if x == 0 else (y / len(hb)) / (x / len(ha)))
    ratios.sort()
    lo, hi = ratios[int(0.025 * rounds)], ratios[int(0.975 * rounds) - 1]
    return None if math.isinf(hi) or lo == hi else (lo, hi)   # lo == hi: the samples have no spread


def estimate(method: str, hits_a: Sequence[bool], hits_b: Sequence[bool], size_a: int, size_b: int,
             seed: int = 0) -> Estimate:
    n_a, n_b = len(hits_a), len(hits_b)
    x = sum(hits_a) / n_a if n_a else 0.0
    y = sum(hits_b) / n_b if n_b else 0.0
    return Estimate(method, n_a, n_b, x, y, y / x if x > 0 else None,
                    delta_ci(x, n_a, size_a, y, n_b, size_b), bootstrap_ci(hits_a, hits_b, seed=seed))


# --------------------------------------------------------------------------- the query variant


def terms(text: str) -> set[str]:
    return {t for t in _TERM.findall(text.lower()) if len(t) >= MIN_TERM_CHARS and not t.isdigit()}


@dataclass(slots=True)
class FeedDoc:
    url: str
    fingerprint: str
    simhash: int | None
    terms: frozenset[str]


def load_feed(out_dir: Path) -> list[FeedDoc]:
    docs, seen = [], set()
    for rec in _jsonl(out_dir / FEED_FILE):
        text = rec.get("text")
        if not isinstance(text, str) or rec["url"] in seen:
            continue
        seen.add(rec["url"])
        fp = rec.get("fingerprint")
        docs.append(FeedDoc(rec["url"], fp if isinstance(fp, str) else "", _hex64(rec.get("simhash")), frozenset(terms(text))))
    return docs


def rare_query(doc: FeedDoc, df: Counter[str], k: int = QUERY_TERMS) -> list[str]:
    """The page's k terms of lowest document frequency in its own crawl (ties by term)."""
    return sorted(doc.terms, key=lambda t: (df[t], t))[:k]


def query_hits(queries: Sequence[tuple[FeedDoc, list[str]]], other: Sequence[FeedDoc]) -> tuple[list[bool], float]:
    """(found per query, mean number of hits): run conjunctive queries against an
    inverted index of ``other`` restricted to the query terms."""
    wanted = {t for _, q in queries for t in q}
    postings: dict[str, set[int]] = {t: set() for t in wanted}
    for i, doc in enumerate(other):
        for t in doc.terms & wanted:
            postings[t].add(i)
    found, total = [], 0
    for doc, query in queries:
        if not query:
            found.append(False)
            continue
        hits = set.intersection(*(postings[t] for t in query))
        total += len(hits)
        found.append(any(_same(doc, other[i]) for i in hits))
    return found, total / len(queries) if queries else 0.0


def _same(a: FeedDoc, b: FeedDoc) -> bool:
    if a.url == b.url or (a.fingerprint and a.fingerprint == b.fingerprint):
        return True
    return a.simhash is not None and b.simhash is not None and bin(a.simhash ^ b.simhash).count("1") <= NEAR_BITS


# --------------------------------------------------------------------------- the whole comparison


@dataclass(slots=True)
class Overlap:
    size_a: int
    size_b: int
    estimates: list[Estimate]
    feed_a: int = 0
    feed_b: int = 0
    mean_query_hits: tuple[float, float] = (0.0, 0.0)

    @property
    def true_ratio(self) -> float | None:
        return self.size_a / self.size_b if self.size_b else None


def compare(out_a: Path, out_b: Path, sample: int = 1000, seed: int = 0, queries: int = 200) -> Overlap:
    """Capture-recapture both ways, by URL, by content and by rare-term queries."""
    a, b = CrawlSet.of(load_pages(out_a)), CrawlSet.of(load_pages(out_b))
    rng = random.Random(seed)
    sample_a = rng.sample(a.pages, min(sample, len(a.pages)))
    sample_b = rng.sample(b.pages, min(sample, len(b.pages)))
    result = Overlap(len(a.pages), len(b.pages), [
        estimate("url", [b.has_url(p) for p in sample_a], [a.has_url(p) for p in sample_b],
                 len(a.pages), len(b.pages), seed),
        estimate("content", [b.has_content(p) for p in sample_a], [a.has_content(p) for p in sample_b],
                 len(a.pages), len(b.pages), seed),
    ])
    feed_a, feed_b = load_feed(out_a), load_feed(out_b)
    result.feed_a, result.feed_b = len(feed_a), len(feed_b)
    if feed_a and feed_b and queries > 0:
        df_a = Counter(t for d in feed_a for t in d.terms)
        df_b = Counter(t for d in feed_b for t in d.terms)
        qa = [(d, rare_query(d, df_a)) for d in rng.sample(feed_a, min(queries, len(feed_a)))]
        qb = [(d, rare_query(d, df_b)) for d in rng.sample(feed_b, min(queries, len(feed_b)))]
        found_a, mean_a = query_hits(qa, feed_b)
        found_b, mean_b = query_hits(qb, feed_a)
        result.estimates.append(estimate("query", found_a, found_b, len(feed_a), len(feed_b), seed))
        result.mean_query_hits = (mean_a, mean_b)
    return result


def _interval(ci: tuple[float, float] | None, why_none: str) -> str:
    if ci is None:
        return f"n/a ({why_none})"
    if ci[0] == ci[1]:
        return f"{ci[0]:.3f} exact (both crawls sampled whole)"
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def format_result(r: Overlap) -> str:
    lines = [f"pages (status 200 with a fingerprint): A {r.size_a}, B {r.size_b}; "
             f"true |A|/|B| = {r.true_ratio:.3f}" if r.true_ratio is not None else
             f"pages: A {r.size_a}, B {r.size_b}"]
    for e in r.estimates:
        ratio = f"{e.ratio:.3f}" if e.ratio is not None else "n/a"
        lines.append(f"{e.method:8s} x = {e.x:.3f} (of {e.n_a} from A found in B)  y = {e.y:.3f} "
                     f"(of {e.n_b} from B found in A)  |A|/|B| ~ y/x = {ratio}  "
                     f"95% CI delta {_interval(e.ci, 'x or y is 0')}  "
                     f"bootstrap {_interval(e.boot_ci, 'x or y is 0, or no spread to resample')}")
    if any(e.method == "query" for e in r.estimates):
        lines.append(f"query variant: feeds A {r.feed_a}, B {r.feed_b} indexable pages (true ratio "
                     f"{r.feed_a / r.feed_b:.3f}); {QUERY_TERMS} rarest terms per query, mean hits "
                     f"{r.mean_query_hits[0]:.2f} in B, {r.mean_query_hits[1]:.2f} in A")
    return "\n".join(lines)
