"""Per-host learned URL rules and trap shapes, kept in Redis (snapshots carry them).

The parse stage feeds ``observe`` with a batch's records after content dedup: pairs of
fetched URLs of one host that one rule of ``dedup.dust`` relates are evidence for the
rule (same fingerprint or canonical: 2 units; near-duplicate: 1) or against it (other
content: the rule is withdrawn and blocked for good). A rule with 2 x
DUST_CONFIRMATIONS units and no counter-example is in force: the URL gate rewrites the
host's new URLs with it before the URL-seen test, so a variant maps to the spelling
already seen and is never fetched.

Rules cross hosts only as priors (``dust.known_prior``, and rules in force on
DUST_PRIOR_HOSTS hosts, counted in one global hash): a prior rewrites a host's URLs from
its first link, unless the host was drawn to check it (``dust.checks_prior``) or refuted
it. A checking host learns the rule from its own pairs, one pair enough (the rule has
evidence elsewhere); its counter-example withdraws the prior there, with the pair in
words, and counts against the prior everywhere: a prior refuted on 2 hosts and a quarter
of those that confirmed it stops being one. Only the checks cost fetches of a page
already fetched, one host in DUST_PRIOR_CHECK_EVERY, instead of ~DUST_CONFIRMATIONS on
every host.

The same records judge each fetched page of a URL shape by what it added
(``dedup.evidence``: duplicate, near-duplicate, soft 404, empty, the template of its
shape's recent pages, text they already had, or new). A shape becomes a trap on that
evidence only, never on its URLs: once TRAP_SHAPE_MIN_PAGES of its pages were fetched
(TRAP_WALK_PAGES for a shape whose pages link number steps, as calendars do;
TRAP_FACET_PAGES for parameter combinations) and TRAP_SHAPE_DUP_RATIO of them added
nothing. The gate then drops the shape's new URLs as ``filter/trap_shape``, and each
dropped URL gets one record naming the shape and its evidence (``first_drops``).
A numbered series of distinct pages is crawled whole, however long.

Policy: counts are plain HINCRBYs (two workers racing on one pair count it twice,
which only makes a rule arrive one pair early); a shape's ring of recent pages is read
and written back whole (two workers racing on one shape lose one page's sketch: one
page less to compare with, never a page judged against another shape); the gate reads
a host's rules at most every DUST_CACHE_S (at once in the worker that learned them).
A trap shape learned on one host is never applied to another.
Memory per host: at most TRAP_MAX_SHAPES_PER_HOST shapes, each a few counts and a ring
of RING sketches (~5 kB when full); ``ruledrops`` holds the URLs recorded, which are
links of the host's fetched pages.
"""
from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, cast

from redis.client import Pipeline

from crawler_tasks.connection import global_client, shard_client
from crawler_tasks.counters import Counters, bump
from crawler_tasks.dedup.dust import (
    EXACT_UNITS,
    NEAR_UNITS,
    applicable,
    apply_rules,
    candidate_rules,
    checks_prior,
    facet_shape,
    known_prior,
    same_content,
    shape,
    walks,
)
from crawler_tasks.dedup.evidence import PageSketch, Ring, Tally, TextSketch, TrapBar, Yield, page_yield
from crawler_tasks.frontier import Frontier
from crawler_tasks.keys import GlobalKeys, ShardKeys, shard_of
from crawler_tasks.records import EntryKind, PageRecord
from crawler_tasks.settings import Settings

MAX_CACHED_HOSTS = 10_000
DIRS_FIELD = "dirs"   # in a host's dust hash: it served a page at a directory URL
MAX_WALK_LINKS = 500   # links of a page looked at (a numeric walk, new links)
# a shape's counts in its host's shapes hash: ``n:`` pages, ``w:`` pages that link a
# number step, ``r:`` the ring of its recent pages, one field per yield that added nothing
_YIELD_FIELD = {Yield.DUPLICATE: "d", Yield.NEAR_DUPLICATE: "a", Yield.SOFT_404: "s", Yield.EMPTY: "e",
                Yield.TEMPLATE: "t", Yield.KNOWN_TEXT: "k"}
_LOW_YIELDS = tuple(_YIELD_FIELD)
_COUNT_FIELDS = ("n", "w", *_YIELD_FIELD.values())
_FIELDS_PER_SHAPE = 3 + len(_YIELD_FIELD)
MAX_LINKED_SHAPES = 256   # shapes of a batch's links whose tallies are read
MAX_CACHED_SHAPES = 16_384   # URLs whose shapes a worker keeps (~4 MB)


def _origin_host(url: str) -> str:
    """The authority of a normalized URL: its politeness key (as the gate takes it)."""
    parts = url.split("/", 3)
    return parts[2] if len(parts) > 2 else ""


def _at_directory(url: str) -> bool:
    """A URL naming a directory (``/``, ``/d/``): a page served there shows the host
    serves index files at their directory."""
    path = "/" + (url.split("/", 3)[3] if url.count("/") >= 3 else "")
    return path.endswith("/") and "?" not in path


@lru_cache(maxsize=MAX_CACHED_SHAPES)
def _shapes_of(url: str) -> tuple[tuple[str, bool], ...]:
    """The shapes a page counts for, (shape, is a facet shape): a shape without digits or
    parameters is one URL and never counted. Cached: a host's pages link the same
    pages (its menus), and each link's shapes were worked out again for every page."""
    out = [(shape(url), False), (facet_shape(url), True)]
    return tuple((name, facet) for name, facet in out if name is not None and ("#" in name or "?" in name))


def _walks(url: str, mine: tuple[tuple[str, bool], ...], links: list[str]) -> bool:
    """``dust.walks`` of the page, given only the links of its own shape (a walk step has
    it; a page whose shape has neither digits nor parameters has no number to step)."""
    own = next((name for name, facet in mine if not facet), None)
    return own is not None and walks(url, [link for link in links if (own, False) in _shapes_of(link)])


def _links_that_count(links: list[str], shapes_of: dict[str, frozenset[str]], skip: set[str]) -> list[str]:
    """A page's links that can make it worth its fetch: none of a shape in ``skip`` (its
    own shapes: a walk's next step; trap shapes; shapes whose pages so far added
    nothing: a calendar day's own "add an event" page, before it is a trap)."""
    return [link for link in links if not shapes_of.get(link, frozenset()) & skip]


@dataclass(frozen=True, slots=True)
class RuleInfo:
    """One rule of a host with its evidence, for ``manage.py hosts``."""
    rule: str
    units: int
    pairs: int
    counter_examples: int
    active: bool
    why: str = ""    # the first counter-example in words


@dataclass(frozen=True, slots=True)
class RuleDrop:
    """A URL the gate dropped by a learned rule, with the rule and its evidence: the
    text of the URL's record."""
    url: str
    host: str
    depth: int
    rule: str
    evidence: str

    @property
    def reason(self) -> str:
        return f"not fetched by the learned rule '{self.rule}' of this host: {self.evidence}"


@dataclass(frozen=True, slots=True)
class _HostRules:
    """What the gate knows of a host until ``until``: its rules in force with their
    evidence (units, pairs), the rules it refuted, and its trap shapes with theirs."""
    until: float
    rules: frozenset[str]
    traps: dict[str, str]
    evidence: dict[str, tuple[int, int]]
    refuted: frozenset[str] = frozenset()
    samples: dict[str, str] = field(default_factory=dict)   # prior -> the URL that checks it here
    serves_dirs: bool = False   # a page was served at a directory URL (/, /d/): index files are priors


@dataclass(frozen=True, slots=True)
class _Priors:
    """The rules learned across hosts until ``until``: in force on enough hosts (with
    how many), and the priors too often refuted to be ones."""
    until: float
    learned: dict[str, int]
    off: frozenset[str]


@dataclass(slots=True)
class _HostPlan:
    """One host's share of a batch's pipelines: where its replies are in them, and what
    its writes asked to read back."""
    host: str
    recs: list[PageRecord]
    shaped: list[PageRecord]
    keys: ShardKeys
    shard: int
    targets: list[list[tuple[str, str]]]
    shape_names: list[str]
    reads_at: int
    link_shapes: dict[str, frozenset[str]] = field(default_factory=dict)   # link -> its counted shapes
    linked: list[str] = field(default_factory=list)   # shapes of the links (not the pages') read
    weighed_end: int = 0   # the pipeline's length after the URL rules' writes
    writes_end: int = 0
    refuted: bool = False
    refuted_at: list[tuple[str, int]] = field(default_factory=list)   # (rule, its x: count's reply)
    learned: list[str] = field(default_factory=list)
    shapes: list[tuple[str, bool]] = field(default_factory=list)


class UrlRules:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._cache: dict[str, _HostRules] = {}
        self._priors = _Priors(0.0, {}, frozenset())

    @property
    def learning(self) -> bool:
        return self.settings.DUST_CONFIRMATIONS > 0

    def _keys(self, host: str) -> tuple[ShardKeys, int]:
        shard = shard_of(host, self.settings.SHARDS)
        return ShardKeys(self.settings.KEY_PREFIX, shard), shard

    # -- the gate's side ---------------------------------------------------------------
    def _host(self, host: str) -> _HostRules:
        hit = self._cache.get(host)
        if hit is not None and hit.until > time.monotonic():
            return hit
        return self._read([host])[host]

    def prefetch(self, hosts: Iterable[str]) -> None:
        """Read what the gate knows of the hosts not cached (or cached too long ago) at
        once, in one round trip per shard, and the priors: a batch's links name dozens of
        hosts, each read on its own before."""
        now = time.monotonic()
        stale = [h for h in dict.fromkeys(hosts) if (hit := self._cache.get(h)) is None or hit.until <= now]
        if stale:
            self._read(stale)
        if self.settings.DUST_PRIORS and self.learning:
            self._learned_priors()

    def _read(self, hosts: list[str]) -> dict[str, _HostRules]:
        """Each host's rules in force with their evidence, the rules it refuted and its
        trap shapes, cached; one round trip per shard."""
        pipes: dict[int, Pipeline] = {}
        for host in hosts:
            k, shard = self._keys(host)
            pipe = self._pipeline(pipes, shard)
            pipe.smembers(k.dust_rules(host))
            pipe.hgetall(k.trap_shapes(host))
            pipe.hgetall(k.dust(host))
        replies = {shard: iter(pipe.execute()) for shard, pipe in pipes.items()}
        if len(self._cache) + len(hosts) > MAX_CACHED_HOSTS:
            self._cache.clear()
        until = time.monotonic() + self.settings.DUST_CACHE_S
        out: dict[str, _HostRules] = {}
        for host in hosts:
            shard = self._keys(host)[1]
            rules, traps, fields = next(replies[shard]), next(replies[shard]), next(replies[shard])
            rules = rules if self.learning else set()
            out[host] = self._cache[host] = _HostRules(
                until, frozenset(rules), dict(traps),
                {r: (int(fields.get(f"e:{r}", 0)), int(fields.get(f"n:{r}", 0))) for r in rules},
                frozenset(f[2:] for f in fields if f.startswith("x:")),
                {f[2:]: url for f, url in fields.items() if f.startswith("c:")}, DIRS_FIELD in fields)
        return out

    def _learned_priors(self) -> _Priors:
        """The rules in force on DUST_PRIOR_HOSTS hosts and the priors refuted too often,
        read at most every DUST_CACHE_S."""
        if self._priors.until > time.monotonic():
            return self._priors
        key = GlobalKeys(self.settings.KEY_PREFIX).dust_priors
        counts = cast("dict[str, str]", global_client(self.settings).hgetall(key))
        confirmed = {f[2:]: int(n) for f, n in counts.items() if f.startswith("h:")}
        refuted = {f[2:]: int(n) for f, n in counts.items() if f.startswith("x:")}
        self._priors = _Priors(
            time.monotonic() + self.settings.DUST_CACHE_S,
            {r: n for r, n in confirmed.items() if n >= self.settings.DUST_PRIOR_HOSTS},
            frozenset(r for r, x in refuted.items() if x >= 2 and 4 * x >= confirmed.get(r, 0)))
        return self._priors

    def is_prior(self, rule: str) -> bool:
        """A rule every host starts from (known to the web, or learned on enough hosts)."""
        if not self.settings.DUST_PRIORS:
            return False
        priors = self._learned_priors()
        learned = rule in priors.learned and not rule.startswith("i:")   # files: dust's doc
        return (known_prior(rule) or learned) and rule not in priors.off

    def _priors_of(self, url: str, host: str, known: _HostRules) -> dict[str, str]:
        """The priors that rewrite ``url`` on this host -> their evidence in words. On a
        host drawn to check a prior, its first URL is let through (its sample: fetched,
        with the spelling the prior gives the others, it makes the pair that decides)."""
        if not self.settings.DUST_PRIORS or not self.learning:
            return {}
        out: dict[str, str] = {}
        for rule, _ in applicable(url):
            if rule in known.rules or rule in known.refuted or not self.is_prior(rule) \
                    or (rule.startswith("i:") and not known.serves_dirs):
                continue
            if checks_prior(host, rule, self.settings.DUST_PRIOR_CHECK_EVERY) \
                    and self._sample(host, rule, url, known) == url:
                continue
            hosts = self._priors.learned.get(rule)
            out[rule] = (f"in force on {hosts} other hosts" if hosts and not known_prior(rule)
                         else "a spelling the web is known to use for the same page")
        return out

    def _sample(self, host: str, rule: str, url: str, known: _HostRules) -> str:
        """The URL that checks the prior on this host: the first one claimed, by any worker."""
        sample = known.samples.get(rule)
        if sample is None:
            k, shard = self._keys(host)
            pipe = shard_client(self.settings, shard).pipeline(transaction=False)
            pipe.hsetnx(k.dust(host), f"c:{rule}", url)
            pipe.hget(k.dust(host), f"c:{rule}")
            sample = known.samples[rule] = str(pipe.execute()[1])
        return sample

    def judge(self, url: str, host: str, counters: Counters, depth: int = 0,
              drops: list[RuleDrop] | None = None) -> str | None:
        """``url`` under the host's rules, or None when its shape is a trap on this host.
        A URL the rules respell or drop is appended to ``drops`` with the rule and its
        evidence (its own spelling is never fetched)."""
        known = self._host(host)
        priors = self._priors_of(url, host, known)
        out = apply_rules(url, known.rules | set(priors))
        if out != url:
            bump(counters, "dust/rewritten")
            if priors:
                bump(counters, "dust/prior_rewritten")
            if drops is not None:
                applied = [r for r in sorted(known.rules | set(priors)) if apply_rules(url, {r}) != url]
                own = [r for r in applied if r not in priors]
                units, pairs = (sum(known.evidence.get(r, (0, 0))[i] for r in own) for i in (0, 1))
                why = [f"{units} evidence units from {pairs} pairs of same-content pages of this host, "
                       "no counter-example"] if own else []
                why += [f"prior {r}: {priors[r]}, not refuted on this host" for r in applied if r in priors]
                drops.append(RuleDrop(url, host, depth, "URL rule " + " ".join(applied),
                                      f"the same page as {out} ({'; '.join(why)})"))
        for name, _ in _shapes_of(out) if known.traps else ():   # a trap is one of the shapes counted
            if name in known.traps:
                bump(counters, "filter/trap_shape")
                if drops is not None:
                    drops.append(RuleDrop(url, host, depth, f"trap shape {name}", known.traps[name]))
                return None
        return out

    def first_drops(self, drops: list[RuleDrop], frontier: Frontier) -> list[RuleDrop]:
        """The drops to record: URLs that never entered the frontier (the URL-seen test
        does not know them: a URL queued or fetched before a rule came has, or will get,
        a record of its own) and have no record yet (each is recorded once). The URL-seen
        test then knows them: a URL recorded as filtered stays so, even if its rule is
        withdrawn later (a prior refuted on its host). A URL-seen false positive (Bloom
        mode) leaves a drop without a record; it is still counted."""
        by_shard: dict[int, list[RuleDrop]] = {}
        for drop in drops:
            by_shard.setdefault(self._keys(drop.host)[1], []).append(drop)
        unseen = [drop for shard, group in by_shard.items()
                  for drop, seen in zip(group, frontier.seen_test(shard, [d.url for d in group]), strict=True)
                  if not seen]
        pipes: dict[int, Pipeline] = {}
        for drop in unseen:
            k, shard = self._keys(drop.host)
            self._pipeline(pipes, shard).sadd(k.rule_drops(drop.host), drop.url)
        added = {shard: iter(pipe.execute()) for shard, pipe in pipes.items()}
        first = [drop for drop in unseen if next(added[self._keys(drop.host)[1]])]
        chosen = set(first)
        for shard, group in by_shard.items():
            urls = [drop.url for drop in group if drop in chosen]
            if urls:
                frontier.remember(shard, urls)
        return first

    # -- the parse stage's side --------------------------------------------------------
    def observe(self, records: list[PageRecord], counters: Counters,
                texts: Mapping[str, TextSketch] | None = None) -> None:
        """Count the batch's evidence for rules and judge its pages per shape (``texts``:
        url -> sketch of the main text of the batch's pages, for the template and known-text tests):
        one pipeline of reads and one of writes per shard for the whole batch."""
        shaped = [r for r in records
                  if r.page.status == 200 and r.page.kind == EntryKind.PAGE and not r.page.error_kind]
        by_host: dict[str, tuple[list[PageRecord], list[PageRecord]]] = {}
        for rec in shaped:
            lists = by_host.setdefault(_origin_host(rec.page.url), ([], []))
            lists[1].append(rec)
            if rec.parsed.fingerprint and not rec.parsed.soft_404:
                lists[0].append(rec)
        if not by_host:
            return
        if texts:   # their trap shapes: links to them make no page worth its fetch
            self.prefetch(by_host)
        reads: dict[int, Pipeline] = {}
        plans: list[_HostPlan] = []
        for host, (group, with_shape) in by_host.items():
            k, shard = self._keys(host)
            pipe = self._pipeline(reads, shard)
            names = list(dict.fromkeys(name for rec in with_shape for name, _ in _shapes_of(rec.page.url)))
            plan = _HostPlan(host, group, with_shape, k, shard, [applicable(r.page.url) for r in group], names,
                             len(pipe))
            linked: dict[str, None] = {}
            if texts:
                for rec in with_shape:
                    for link in rec.found.links[:MAX_WALK_LINKS]:
                        if link not in plan.link_shapes:
                            plan.link_shapes[link] = found = frozenset(name for name, _ in _shapes_of(link))
                            linked.update(dict.fromkeys(found))
            plan.linked = [name for name in linked if name not in names][:MAX_LINKED_SHAPES]
            pipe.hlen(k.dust_urls(host))
            pipe.hlen(k.shapes(host))
            pipe.hmget(k.shapes(host), [f"r:{name}" for name in names] or ["r:"])
            pipe.hmget(k.shapes(host), [f"{f}:{name}" for name in plan.linked for f in _COUNT_FIELDS] or ["n:"])
            for rec, cands in zip(group, plan.targets, strict=True):
                pipe.hmget(k.dust_urls(host), [f"u:{t}" for _, t in cands] + [f"v:{rec.page.url}"])
            plans.append(plan)
        read = {shard: pipe.execute() for shard, pipe in reads.items()}
        writes: dict[int, Pipeline] = {}
        for plan in plans:
            n_urls, n_shapes, rings, linked_counts, *stored = \
                read[plan.shard][plan.reads_at:plan.reads_at + 4 + len(plan.recs)]
            pipe = self._pipeline(writes, plan.shard)
            self._weigh(pipe, plan, n_urls, stored, counters)
            plan.weighed_end = len(pipe)
            poor = {name for i, name in enumerate(plan.linked)
                    if self._tally(linked_counts[len(_COUNT_FIELDS) * i:len(_COUNT_FIELDS) * (i + 1)]).poor(
                        self.settings.TRAP_SHAPE_DUP_RATIO)}
            plan.shapes = self._count_shapes(pipe, plan, n_shapes, dict(zip(plan.shape_names, rings, strict=False)),
                                             texts or {}, poor)
            plan.writes_end = len(pipe)
        written = {shard: pipe.execute() for shard, pipe in writes.items()}
        finals: dict[int, Pipeline] = {}
        concluded: list[tuple[_HostPlan, list[str], dict[str, str], int]] = []
        across: dict[str, int] = {}   # the global counts: h:/x:<rule> -> hosts
        for plan in plans:
            res = written[plan.shard]
            for rule, at in plan.refuted_at:
                if int(res[at]) == 1:   # this host's first counter-example to the rule
                    across[f"x:{rule}"] = across.get(f"x:{rule}", 0) + 1
            learned = res[plan.weighed_end - 3 * len(plan.learned):plan.weighed_end]
            new = [rule for i, rule in enumerate(plan.learned)
                   if self.learning and int(learned[3 * i]) >= self._bar(rule) and not learned[3 * i + 2]]
            traps = self._trap_shapes(plan.shapes, res[plan.writes_end - len(plan.shapes):plan.writes_end])
            if plan.refuted:
                self._cache.pop(plan.host, None)
            if not new and not traps:
                continue
            pipe = self._pipeline(finals, plan.shard)
            concluded.append((plan, new, traps, len(pipe)))
            for rule in new:
                pipe.sadd(plan.keys.dust_rules(plan.host), rule)
            for name, reason in traps.items():
                pipe.hsetnx(plan.keys.trap_shapes(plan.host), name, reason)
        added_by_shard = {shard: pipe.execute() for shard, pipe in finals.items()}
        for plan, new, traps, at in concluded:
            added = added_by_shard[plan.shard][at:at + len(new) + len(traps)]
            bump(counters, "dust/rules_learned", sum(map(int, added[:len(new)])))
            bump(counters, "dust/trap_shapes", sum(map(int, added[len(new):])))
            for rule, first in zip(new, added, strict=False):
                if int(first):
                    across[f"h:{rule}"] = across.get(f"h:{rule}", 0) + 1
            self._cache.pop(plan.host, None)
        if across:
            pipe = global_client(self.settings).pipeline(transaction=False)
            for name, n in across.items():
                pipe.hincrby(GlobalKeys(self.settings.KEY_PREFIX).dust_priors, name, n)
            pipe.execute()
            self._priors = _Priors(0.0, {}, frozenset())

    def _bar(self, rule: str) -> int:
        """Evidence units that put a rule in force on a host: one pair for a prior (the
        host is checking it), DUST_CONFIRMATIONS pairs for any other."""
        return EXACT_UNITS * (1 if self.is_prior(rule) else self.settings.DUST_CONFIRMATIONS)

    def _pipeline(self, pipes: dict[int, Pipeline], shard: int) -> Pipeline:
        pipe = pipes.get(shard)
        if pipe is None:
            pipe = pipes[shard] = shard_client(self.settings, shard).pipeline(transaction=False)
        return pipe

    def _weigh(self, writes: Pipeline, plan: _HostPlan, n_urls: int, stored: list[Any], counters: Counters) -> None:
        """Weigh one host's pages against what is stored; queue the writes (evidence, the
        pages' URLs) and note in ``plan`` what to read back from them. Evidence is content
        only: two URLs are one page when their texts are (a canonical link is a hint), and
        a text too short for a simhash (SIMHASH_MIN_WORDS) is no evidence that they are:
        the pages of a pager whose items are links share one text of chrome."""
        s = self.settings
        host, k = plan.host, plan.keys
        urls_key, dust_key, rules_key = k.dust_urls(host), k.dust(host), k.dust_rules(host)
        known: dict[str, str] = {}      # this batch's pages: url -> "fp simhash"
        variants: dict[str, str] = {}   # target -> "rule fp simhash" of a variant
        evidence: dict[str, int] = {}   # rule -> units
        pairs: dict[str, int] = {}
        refuted: dict[str, str] = {}   # rule -> its first counter-example in words
        for rec, cands, values in zip(plan.recs, plan.targets, stored, strict=True):
            mine = f"{rec.parsed.fingerprint} {rec.parsed.simhash or ''}"
            units: dict[str, int] = {}
            against: dict[str, str] = {}

            def weigh(rule: str, other: str | None, other_url: str, rec: PageRecord = rec,
                      units: dict[str, int] = units, against: dict[str, str] = against) -> None:
                if not other:
                    return
                fp, _, sim = other.partition(" ")
                n = same_content(rec.parsed.fingerprint or "", rec.parsed.simhash, fp, sim or None)
                if not n:
                    against.setdefault(rule, f"{rec.page.url} and {other_url} have other content")
                elif rec.parsed.simhash:   # a thin text (a pager's chrome) tells no pages apart
                    units[rule] = max(units.get(rule, 0), n)

            for (rule, target), value in zip(cands, values, strict=False):  # values ends with the v: field
                weigh(rule, known.get(target) or value, target)
            variant = variants.get(rec.page.url) or values[-1]
            if variant:
                rule, _, other = variant.partition(" ")
                weigh(rule, other, "its variant by this rule")
            for other, n in ((rec.parsed.duplicate_of, EXACT_UNITS), (rec.parsed.near_duplicate_of, NEAR_UNITS)):
                if other and other != rec.page.url and _origin_host(other) == host and rec.parsed.simhash:
                    for rule in candidate_rules(rec.page.url, other):
                        units[rule] = max(units.get(rule, 0), n)
            for rule in against:
                units.pop(rule, None)
            refuted = {**against, **refuted}
            for rule, n in units.items():
                evidence[rule] = evidence.get(rule, 0) + n
                pairs[rule] = pairs.get(rule, 0) + 1
            known[rec.page.url] = mine
            if n_urls + len(known) <= s.DUST_MAX_URLS_PER_HOST:
                writes.hset(urls_key, f"u:{rec.page.url}", mine)
                for rule, target in cands:
                    variants.setdefault(target, f"{rule} {mine}")
                    writes.hsetnx(urls_key, f"v:{target}", f"{rule} {mine}")
        for rule, why in refuted.items():
            plan.refuted_at.append((rule, len(writes)))
            writes.hincrby(dust_key, f"x:{rule}", 1)
            writes.hsetnx(dust_key, f"w:{rule}", why)
            writes.srem(rules_key, rule)
        if refuted:
            bump(counters, "dust/counter_examples", len(refuted))
        plan.refuted = bool(refuted)
        cached = self._cache.get(host)
        if (cached is None or not cached.serves_dirs) and any(_at_directory(r.page.url) for r in plan.shaped):
            writes.hsetnx(dust_key, DIRS_FIELD, "1")
            self._cache.pop(host, None)
        plan.learned = [r for r in evidence if r not in refuted]
        for rule in plan.learned:
            writes.hincrby(dust_key, f"e:{rule}", evidence[rule])
            writes.hincrby(dust_key, f"n:{rule}", pairs[rule])
            writes.hget(dust_key, f"x:{rule}")

    def _count_shapes(self, pipe: Pipeline, plan: _HostPlan, n_fields: int, rings: dict[str, str | None],
                      texts: Mapping[str, TextSketch], poor: set[str]) -> list[tuple[str, bool]]:
        """Judge each page of the batch per shape (``dedup.evidence``) and queue the
        counts, the shapes' rings, then one HMGET of each shape's counts; returns
        (shape, is facet shape) in the order of those HMGETs."""
        s = self.settings
        if not s.TRAP_SHAPE_MIN_PAGES or n_fields >= _FIELDS_PER_SHAPE * s.TRAP_MAX_SHAPES_PER_HOST:
            return []
        key = plan.keys.shapes(plan.host)
        counted: dict[str, dict[str, int]] = {}
        facets: set[str] = set()
        ring = {name: Ring.load(rings.get(name)) for name in plan.shape_names}
        skip = (set(self._host(plan.host).traps) | poor) if texts else set()
        for rec in plan.shaped:
            text = texts.get(rec.page.url)
            links = rec.found.links[:MAX_WALK_LINKS]
            mine = _shapes_of(rec.page.url)
            sketch = None if text is None else PageSketch.joined(
                text, _links_that_count(links, plan.link_shapes, skip | {name for name, _ in mine}))
            walk = s.TRAP_WALK_PAGES and _walks(rec.page.url, mine, links)
            for name, facet in mine:
                verdict = page_yield(duplicate=bool(rec.parsed.duplicate_of),
                                     near_duplicate=bool(rec.parsed.near_duplicate_of), soft_404=rec.parsed.soft_404,
                                     empty=not rec.parsed.fingerprint, ring=ring[name], sketch=sketch)
                tally = counted.setdefault(name, {})
                for f in ("n", _YIELD_FIELD.get(verdict), "w" if walk else None):
                    if f:
                        tally[f] = tally.get(f, 0) + 1
                if facet:
                    facets.add(name)
        for name, tally in counted.items():
            for f, n in tally.items():
                pipe.hincrby(key, f"{f}:{name}", n)
            if texts:
                pipe.hset(key, f"r:{name}", ring[name].dump())
        out = [(name, name in facets) for name in counted]
        for name, _ in out:
            pipe.hmget(key, [f"{f}:{name}" for f in _COUNT_FIELDS])
        return out

    @staticmethod
    def _tally(counts: list[Any]) -> Tally:
        """A shape's tally from its ``_COUNT_FIELDS`` values."""
        n, w, *low = (int(v or 0) for v in counts)
        return Tally(n, {y: c for y, c in zip(_LOW_YIELDS, low, strict=True) if c}, w)

    def _trap_shapes(self, shapes: list[tuple[str, bool]], values: list[Any]) -> dict[str, str]:
        """Shapes whose counts make them traps -> the evidence in words."""
        s = self.settings
        bar = TrapBar(s.TRAP_SHAPE_MIN_PAGES, s.TRAP_SHAPE_DUP_RATIO, s.TRAP_WALK_PAGES, s.TRAP_FACET_PAGES)
        out: dict[str, str] = {}
        for (name, facet), counts in zip(shapes, values, strict=True):
            verdict = self._tally(counts).verdict(bar, facet)
            if verdict is not None:
                out[name] = verdict
        return out

    # -- the operator's side -----------------------------------------------------------
    def host_rules(self, host: str) -> tuple[list[RuleInfo], dict[str, str]]:
        """The host's rules with their evidence (rules in force first) and its trap shapes
        with theirs."""
        k, shard = self._keys(host)
        pipe = shard_client(self.settings, shard).pipeline(transaction=False)
        pipe.hgetall(k.dust(host))
        pipe.smembers(k.dust_rules(host))
        pipe.hgetall(k.trap_shapes(host))
        fields, active, traps = pipe.execute()
        names = {f[2:] for f in fields}
        infos = [RuleInfo(r, int(fields.get(f"e:{r}", 0)), int(fields.get(f"n:{r}", 0)),
                          int(fields.get(f"x:{r}", 0)), r in active, fields.get(f"w:{r}", "")) for r in names]
        return sorted(infos, key=lambda i: (not i.active, -i.units, i.rule)), dict(traps)

