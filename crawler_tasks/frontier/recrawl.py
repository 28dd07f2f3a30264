"""Continuous crawling: every fetched URL gets a next visit, within a revisit budget.

The rules are pure (``crawler_tasks.freshness``): by default (``RECRAWL_POLICY=adaptive``)
each URL's change rate is a belief built from its visits (a changed main-text fingerprint,
a 304, Last-Modified or the page's own modified date) over the shard's prior, which an EM
fits to all the shard's pages at every plan; the shard's revisit budget is spread over its
URLs so as to maximize the expected freshness (or minimize age, ``RECRAWL_OBJECTIVE``) of
the copies, weighted by page value (an indexable page counts 1, a seed 2, anything else,
duplicates, soft 404s, errors, 0.1) and by the chance the page changes at all.

The budget is revisits per second per shard: ``RECRAWL_BUDGET_PER_S``, or, when 0, a share
``RECRAWL_HOST_SHARE`` of the politeness capacity of the shard's known hosts (one request
per ``MIN_DELAY_S`` each). How new URLs and revisits share a host: revisits enter the top
front queue, but only as many as the budget allows (a token bucket in recrawl.lua, the most
overdue first); discovery has the rest of every host's turns. So recrawl never takes more
than its share, and discovery never starves revisits of theirs.

State in the shard's Redis: ``hist`` (URL -> ``freshness.policy.History``), ``due``
(``"<level> <url>"`` -> next visit), ``rates`` (allocation class -> URLs: the histogram the
plan is solved over), ``census`` (what the prior is fitted to, ``freshness.rate``),
``hostrate`` (per host: pages, pages seen to change, sitemap claims checked), ``rehosts`` (the hosts revisited) and
``recrawl`` (the plan, the prior and the limiter). A Beat task (``crawler.recrawl``) solves
the plan again and moves due URLs back into the front queues.

A sitemap's ``<lastmod>`` later than our last visit claims a change. A claim is checked by the
URL's next visit; once a host's claims have proved honest (``HONEST_SHARE`` of at least
``HONEST_MIN`` confirmed), a claim makes its URL due at once.
"""
from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime

from crawler_tasks.connection import shard_client
from crawler_tasks.freshness.allocate import (
    OVERBOOK,
    Bounds,
    FreqOf,
    Objective,
    PageClass,
    expected_freshness,
    solve_mu,
)
from crawler_tasks.freshness.policy import History, Plan, Policy, Visit, cell_rate, revisit
from crawler_tasks.freshness.rate import Grid, Prior
from crawler_tasks.frontier import Frontier, group_by
from crawler_tasks.records import EntryKind, PageRecord
from crawler_tasks.settings import Settings
from crawler_tasks.urls.normalize import host_key
from crawler_tasks.urls.sites import parse_sites

WEIGHT_SEED = 2.0
WEIGHT_PAGE = 1.0
WEIGHT_OTHER = 0.1
BURST_S = 2.0      # the limiter saves up at most this many seconds of budget
HONEST_MIN = 5     # sitemap lastmod claims checked before a host's are believed
HONEST_SHARE = 0.8


def page_weight(rec: PageRecord) -> float:
    """A page's value in the revisit plan."""
    if not (rec.parsed.indexable or rec.page.status == 304):
        return WEIGHT_OTHER
    return WEIGHT_SEED if rec.page.depth == 0 else WEIGHT_PAGE


def _level(weight: float, levels: int) -> int:
    return 0 if weight >= WEIGHT_PAGE else levels - 1


def _epoch(value: str | None) -> float | None:
    if not value:
        return None
    try:
        if value[:4].isdigit():
            return datetime.fromisoformat(value).timestamp()
        return parsedate_to_datetime(value).timestamp()
    except (ValueError, TypeError, IndexError, OverflowError):
        return None


@dataclass(frozen=True, slots=True)
class RecrawlSummary:
    """What ``stats`` and ``report`` show of a continuous crawl."""

    urls: int
    budget_per_s: float
    expected_freshness: float
    rate_histogram: list[tuple[str, int]]   # change period band -> URLs


class Recrawler:
    def __init__(self, settings: Settings, frontier: Frontier) -> None:
        self.settings = settings
        self.frontier = frontier
        self.policy = Policy(settings.RECRAWL_POLICY)
        self.objective = Objective(settings.RECRAWL_OBJECTIVE)
        self.bounds = Bounds(1.0 / settings.RECRAWL_MAX_S, 1.0 / settings.RECRAWL_MIN_S)
        self.grid = Grid.for_bounds(settings.RECRAWL_MIN_S, settings.RECRAWL_MAX_S)

    def _bounds(self, host: str) -> Bounds:
        """The revisit bounds of a host: its job rule's (urls/sites.py), else the crawl's."""
        site = parse_sites(self.settings.SITES).for_host(host) if self.settings.SITES else None
        if site is None or (site.recrawl_min is None and site.recrawl_max is None):
            return self.bounds
        return Bounds(1.0 / (site.recrawl_max or self.settings.RECRAWL_MAX_S),
                      1.0 / (site.recrawl_min or self.settings.RECRAWL_MIN_S))

    def conditional_headers(self, shard: int, urls: list[str]) -> list[dict[str, str]]:
        """If-None-Match / If-Modified-Since for URLs we hold validators for."""
        if not urls:
            return []
        raw: list[str | None] = shard_client(self.settings, shard).hmget(  # type: ignore[assignment]
            self.frontier.keys(shard).history, urls)
        out = []
        for value in raw:
            h = History.decode(value)
            headers = {}
            if h.etag:
                headers["If-None-Match"] = h.etag
            if h.last_modified:
                headers["If-Modified-Since"] = h.last_modified
            out.append(headers)
        return out

    def record_visits(self, records: list[PageRecord], now: float | None = None) -> dict[str, int]:
        """Update histories and schedule next visits (``revisit_s`` on each record);
        returns counters."""
        now = time.time() if now is None else now
        counters = {"recrawl/changed": 0, "recrawl/unchanged": 0, "recrawl/revisits": 0, "recrawl/not_modified": 0}
        visited = [r for r in records if r.page.status in (200, 304) and r.page.kind != EntryKind.PROBE]
        by_shard = group_by(visited, lambda rec: self.frontier.shard_of(host_key(rec.page.url)))
        for shard, group in by_shard.items():
            k = self.frontier.keys(shard)
            client = shard_client(self.settings, shard)
            hosts = [host_key(r.page.url) for r in group]
            pipe = client.pipeline(transaction=False)
            pipe.hmget(k.history, [r.page.url for r in group])
            pipe.hmget(k.recrawl, ["mu", "uniform_s", "prior"])
            pipe.hmget(k.claims, [r.page.url for r in group])
            pipe.hmget(k.host_rates, [f"{h} {f}" for h in hosts for f in "ps"])
            old, (mu, uniform_s, prior), claims, pooled = pipe.execute()
            prior = Prior.decode(prior, self.grid)
            host_pages: dict[str, list[float]] = {}
            for i, h in enumerate(hosts):
                host_pages[h] = [float(pooled[2 * i] or 0), float(pooled[2 * i + 1] or 0)]
            census: dict[str, float] = {}
            pipe = client.pipeline(transaction=False)
            pipe.sadd(k.recrawl_hosts, *set(hosts))
            for i, (rec, raw) in enumerate(zip(group, old, strict=True)):
                prev = History.decode(raw)
                pages, seen_changed = host_pages[hosts[i]]
                plan = Plan(self.policy, self._bounds(hosts[i]), self.settings.RECRAWL_INITIAL_S,
                            prior.for_host(pages, seen_changed), mu=float(mu or 0), objective=self.objective,
                            uniform_s=float(uniform_s or 0), min_chance=self.settings.RECRAWL_MIN_CHANGE_CHANCE)
                if rec.page.status == 304:
                    changed = False
                    counters["recrawl/not_modified"] += 1
                else:
                    changed = bool(prev.visits) and (rec.parsed.fingerprint or "") != prev.fingerprint
                visit = Visit(_epoch(rec.page.fetched_at) or now, changed,
                              _epoch(rec.page.headers.get("last-modified")) or _epoch(rec.parsed.modified))
                nxt = revisit(plan, prev, visit, page_weight(rec))
                hist = nxt.history
                if not prev.visits:
                    host_pages[hosts[i]][0] += 1
                    pipe.hincrby(k.host_rates, f"{hosts[i]} p", 1)
                if nxt.first_change:
                    host_pages[hosts[i]][1] += 1
                    pipe.hincrby(k.host_rates, f"{hosts[i]} s", 1)
                for name, d in nxt.census.items():
                    census[name] = census.get(name, 0.0) + d
                hist.etag = rec.page.headers.get("etag") or (prev.etag if rec.page.status == 304 else "")
                hist.last_modified = rec.page.headers.get("last-modified") or (
                    prev.last_modified if rec.page.status == 304 else "")
                hist.fingerprint = prev.fingerprint if rec.page.status == 304 else (rec.parsed.fingerprint or "")
                if claims[i]:   # a sitemap said it changed: did it?
                    pipe.hdel(k.claims, rec.page.url)
                    pipe.hincrby(k.host_rates, f"{hosts[i]} n", 1)
                    pipe.hincrby(k.host_rates, f"{hosts[i]} y", int(changed))
                if prev.visits:
                    counters["recrawl/revisits"] += 1
                    counters["recrawl/changed" if changed else "recrawl/unchanged"] += 1
                if hist.cell != prev.cell:
                    if prev.cell:
                        pipe.hincrby(k.rates, prev.cell, -1)
                    pipe.hincrby(k.rates, hist.cell, 1)
                rec.revisit_s = round(hist.interval_s, 3)
                pipe.hset(k.history, rec.page.url, hist.encode())
                pipe.zadd(k.due, {f"{_level(hist.weight, self.settings.PRIORITY_LEVELS)} {rec.page.url}": nxt.due_at})
            for name, d in census.items():
                pipe.hincrbyfloat(k.census, name, d)
            pipe.execute()
        return counters

    def sitemap_claims(self, claims: list[tuple[str, str]], now: float | None = None) -> int:
        """Take sitemap ``(url, lastmod)`` pairs: a lastmod after our last visit of a known URL
        is a claim of change, kept for its next visit to check; where the host has proved
        honest the URL is due now. Returns the URLs made due."""
        now = time.time() if now is None else now
        made_due = 0
        by_shard = group_by([(url, _epoch(lastmod)) for url, lastmod in claims],
                            lambda c: self.frontier.shard_of(host_key(c[0])))
        for shard, group in by_shard.items():
            k = self.frontier.keys(shard)
            client = shard_client(self.settings, shard)
            hosts = [host_key(url) for url, _ in group]
            pipe = client.pipeline(transaction=False)
            pipe.hmget(k.history, [url for url, _ in group])
            pipe.hmget(k.host_rates, [f"{h} {f}" for h in hosts for f in "ny"])
            raw, honesty = pipe.execute()
            pipe = client.pipeline(transaction=False)
            for i, ((url, when), value) in enumerate(zip(group, raw, strict=True)):
                hist = History.decode(value)
                if when is None or not hist.visits or when <= hist.visited_at or when > now:
                    continue
                pipe.hset(k.claims, url, f"{when:.0f}")
                checked, confirmed = int(honesty[2 * i] or 0), int(honesty[2 * i + 1] or 0)
                if checked >= HONEST_MIN and confirmed >= HONEST_SHARE * checked:
                    pipe.zadd(k.due, {f"{_level(hist.weight, self.settings.PRIORITY_LEVELS)} {url}": now}, xx=True)
                    made_due += 1
            pipe.execute()
        return made_due

    # -- the plan ---------------------------------------------------------------------
    def budget(self, shard: int) -> float:
        """Revisits per second this shard may spend."""
        s = self.settings
        if s.RECRAWL_BUDGET_PER_S > 0:
            return s.RECRAWL_BUDGET_PER_S
        hosts = shard_client(s, shard).scard(self.frontier.keys(shard).recrawl_hosts)
        return max(hosts, 1) * s.RECRAWL_HOST_SHARE / max(s.MIN_DELAY_S, 0.01)

    def classes(self, shard: int) -> list[PageClass]:
        raw: dict[str, str] = shard_client(self.settings, shard).hgetall(  # type: ignore[assignment]
            self.frontier.keys(shard).rates)
        out = []
        for cell, count in raw.items():
            try:
                rate, weight = cell_rate(cell)
            except ValueError:
                continue
            if int(count) > 0:
                out.append(PageClass(rate, weight, int(count)))
        return out

    def replan(self, shard: int) -> float:
        """Fit the shard's prior to its census, solve its allocation for its budget, and return
        that budget (revisits/s)."""
        budget = self.budget(shard)
        classes = self.classes(shard)
        urls = sum(c.count for c in classes)
        mu = solve_mu(classes, budget * OVERBOOK, self.objective, self.bounds)
        fresh = expected_freshness(classes, FreqOf(mu, self.objective, self.bounds))
        client = shard_client(self.settings, shard)
        k = self.frontier.keys(shard)
        pipe = client.pipeline(transaction=False)
        pipe.hgetall(k.census)
        pipe.hget(k.recrawl, "prior")
        census, last = pipe.execute()
        prior = Prior.fit(self.grid, census, Prior.decode(last, self.grid))
        client.hset(k.recrawl, mapping={
            "mu": repr(mu), "budget": repr(budget), "freshness": f"{fresh:.4f}", "urls": int(urls),
            "uniform_s": repr(urls / budget if budget else 0.0), "prior": prior.encode()})
        return budget

    def requeue_due(self, now: float | None = None, limit: int = 5000) -> int:
        """Solve each shard's plan again and move its due URLs back into the front queues,
        within its budget."""
        now = time.time() if now is None else now
        moved = 0
        for shard in range(self.settings.SHARDS):
            budget = self.replan(shard)
            k = self.frontier.keys(shard)
            moved += int(self.frontier.run_script(  # type: ignore[call-overload]
                shard, "recrawl", [k.due, k.queued, k.recrawl] + k.fronts(self.frontier.levels),
                [now, limit, budget, max(1.0, budget * max(BURST_S, self.settings.RECRAWL_CHECK_S)),
                 now + self.settings.RECRAWL_CHECK_S / 2]))
        return moved

    def summary(self) -> RecrawlSummary:
        """The crawl's estimated change rates, budget and expected freshness, over all shards."""
        bands: dict[int, int] = {}
        urls = 0
        budget = fresh_sum = 0.0
        for shard in range(self.settings.SHARDS):
            classes = self.classes(shard)
            raw = shard_client(self.settings, shard).hmget(self.frontier.keys(shard).recrawl, ["budget", "freshness"])
            n = sum(c.count for c in classes)
            urls += int(n)
            budget += float(raw[0] or 0)
            fresh_sum += float(raw[1] or 0) * n
            for c in classes:
                band = math.floor(math.log10(1.0 / c.rate))
                bands[band] = bands.get(band, 0) + int(c.count)
        return RecrawlSummary(urls, budget, fresh_sum / urls if urls else 0.0,
                              [(_band_label(b), bands[b]) for b in sorted(bands)])


def _band_label(decade: int) -> str:
    def fmt(seconds: float) -> str:
        for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
            if seconds >= size:
                return f"{seconds / size:g} {unit}"
        return f"{seconds:g} s"
    return f"changes every {fmt(10.0 ** decade)}-{fmt(10.0 ** (decade + 1))}"


def recrawl_lines(settings: Settings, stats: Mapping[str, int], elapsed_s: float) -> list[str]:
    """The recrawl part of ``stats`` and ``report``: estimated change rates (a histogram),
    revisits/s, the share answered 304, and the collection's expected freshness."""
    summary = Recrawler(settings, Frontier(settings)).summary()
    if not summary.urls:
        return []
    revisits = stats.get("recrawl/revisits", 0)
    lines = [f"recrawl: {summary.urls} URLs known, budget {summary.budget_per_s:.2f} revisits/s, "
             f"revisits {revisits} ({revisits / elapsed_s if elapsed_s > 0 else 0.0:.2f}/s), "
             f"answered 304 {stats.get('recrawl/not_modified', 0) / revisits if revisits else 0.0:.0%}, "
             f"expected freshness {summary.expected_freshness:.1%}"]
    lines += [f"  {label:40s} {n}" for label, n in summary.rate_histogram]
    return lines
