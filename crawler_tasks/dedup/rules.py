"""Per-host learned URL rules and trap shapes, kept in Redis (snapshots carry them).

The parse stage feeds ``observe`` with a batch's records after content dedup: pairs of
fetched URLs of one host that one rule of ``dedup.dust`` relates are evidence for the
rule (same fingerprint or canonical: 2 units; near-duplicate: 1) or against it (other
content: the rule is withdrawn and blocked for good). A rule with 2 x
DUST_CONFIRMATIONS units and no counter-example is in force: the URL gate rewrites the
host's new URLs with it before the URL-seen test, so a variant maps to the spelling
already seen and is never fetched. Rules never cross hosts.

The same records count pages per URL shape; a shape whose pages are mostly duplicates,
walk a number (calendars, pagers) or combine parameters (facets) past its budget
becomes a trap shape: the gate drops its new URLs as ``filter/trap_shape``.

Policy: counts are plain HINCRBYs (two workers racing on one pair count it twice,
which only makes a rule arrive one pair early); the gate reads a host's rules at most
every DUST_CACHE_S (at once in the worker that learned them).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from redis.client import Pipeline

from crawler_tasks.connection import shard_client
from crawler_tasks.counters import Counters, bump
from crawler_tasks.dedup.dust import (
    EXACT_UNITS,
    NEAR_UNITS,
    applicable,
    apply_rules,
    candidate_rules,
    facet_shape,
    same_content,
    shape,
    walks,
)
from crawler_tasks.keys import ShardKeys, shard_of
from crawler_tasks.records import EntryKind, PageRecord
from crawler_tasks.settings import Settings

MAX_CACHED_HOSTS = 10_000
MAX_WALK_LINKS = 500   # links of a page looked at for a numeric walk



def _origin_host(url: str) -> str:
    """The authority of a normalized URL: its politeness key (as the gate takes it)."""
    parts = url.split("/", 3)
    return parts[2] if len(parts) > 2 else ""


@dataclass(frozen=True, slots=True)
class RuleInfo:
    """One rule of a host with its evidence, for ``manage.py hosts``."""
    rule: str
    units: int
    pairs: int
    counter_examples: int
    active: bool


@dataclass(slots=True)
class _HostPlan:
    """One host's share of a batch's pipelines: where its replies are in them, and what
    its writes asked to read back."""
    host: str
    recs: list[PageRecord]
    keys: ShardKeys
    shard: int
    targets: list[list[tuple[str, str]]]
    reads_at: int
    writes_at: int = 0
    writes_end: int = 0
    refuted: bool = False
    learned: list[str] = field(default_factory=list)
    shapes: list[tuple[str, bool]] = field(default_factory=list)


class UrlRules:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._cache: dict[str, tuple[float, frozenset[str], frozenset[str]]] = {}

    @property
    def learning(self) -> bool:
        return self.settings.DUST_CONFIRMATIONS > 0

    def _keys(self, host: str) -> tuple[ShardKeys, int]:
        shard = shard_of(host, self.settings.SHARDS)
        return ShardKeys(self.settings.KEY_PREFIX, shard), shard

    # -- the gate's side ---------------------------------------------------------------
    def _host(self, host: str) -> tuple[frozenset[str], frozenset[str]]:
        now = time.monotonic()
        hit = self._cache.get(host)
        if hit is not None and hit[0] > now:
            return hit[1], hit[2]
        k, shard = self._keys(host)
        pipe = shard_client(self.settings, shard).pipeline(transaction=False)
        pipe.smembers(k.dust_rules(host))
        pipe.hkeys(k.trap_shapes(host))
        rules, traps = pipe.execute()
        if len(self._cache) >= MAX_CACHED_HOSTS:
            self._cache.clear()
        entry = (now + self.settings.DUST_CACHE_S, frozenset(rules) if self.learning else frozenset(),
                 frozenset(traps))
        self._cache[host] = entry
        return entry[1], entry[2]

    def rewrite(self, url: str, host: str, counters: Counters) -> str | None:
        """``url`` under the host's rules (the spelling to test against URL-seen), or None
        when its shape is a trap (counted ``filter/trap_shape``)."""
        rules, traps = self._host(host)
        out = apply_rules(url, rules)
        if out != url:
            bump(counters, "dust/rewritten")
        if traps and (shape(out) in traps or facet_shape(out) in traps):
            bump(counters, "filter/trap_shape")
            return None
        return out

    # -- the parse stage's side --------------------------------------------------------
    def observe(self, records: list[PageRecord], counters: Counters) -> None:
        """Count the batch's evidence for rules and its pages per shape: one pipeline of
        reads and one of writes per shard for the whole batch, whatever its hosts."""
        pages = [r for r in records if r.status == 200 and r.fingerprint and r.kind == EntryKind.PAGE
                 and not r.soft_404 and not r.error_kind]
        by_host: dict[str, list[PageRecord]] = {}
        for rec in pages:
            by_host.setdefault(_origin_host(rec.url), []).append(rec)
        if not by_host:
            return
        reads: dict[int, Pipeline] = {}
        plans: list[_HostPlan] = []
        for host, group in by_host.items():
            k, shard = self._keys(host)
            pipe = self._pipeline(reads, shard)
            plan = _HostPlan(host, group, k, shard, [applicable(r.url) for r in group], len(pipe))
            pipe.hlen(k.dust_urls(host))
            pipe.hlen(k.shapes(host))
            for rec, cands in zip(group, plan.targets, strict=True):
                pipe.hmget(k.dust_urls(host), [f"u:{t}" for _, t in cands] + [f"v:{rec.url}"])
            plans.append(plan)
        read = {shard: pipe.execute() for shard, pipe in reads.items()}
        writes: dict[int, Pipeline] = {}
        for plan in plans:
            n_urls, n_shapes, *stored = read[plan.shard][plan.reads_at:plan.reads_at + 2 + len(plan.recs)]
            pipe = self._pipeline(writes, plan.shard)
            plan.writes_at = len(pipe)
            self._weigh(pipe, plan, n_urls, n_shapes, stored, counters)
            plan.writes_end = len(pipe)
        written = {shard: pipe.execute() for shard, pipe in writes.items()}
        finals: dict[int, Pipeline] = {}
        concluded: list[tuple[_HostPlan, list[str], dict[str, str], int]] = []
        for plan in plans:
            res = written[plan.shard][plan.writes_at:plan.writes_end]
            tail = res[len(res) - 3 * len(plan.learned) - 3 * len(plan.shapes):]
            bar = EXACT_UNITS * self.settings.DUST_CONFIRMATIONS
            new = [rule for i, rule in enumerate(plan.learned)
                   if self.learning and int(tail[3 * i]) >= bar and not tail[3 * i + 2]]
            traps = self._trap_shapes(plan.shapes, tail[3 * len(plan.learned):])
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
            self._cache.pop(plan.host, None)

    def _pipeline(self, pipes: dict[int, Pipeline], shard: int) -> Pipeline:
        pipe = pipes.get(shard)
        if pipe is None:
            pipe = pipes[shard] = shard_client(self.settings, shard).pipeline(transaction=False)
        return pipe

    def _weigh(self, writes: Pipeline, plan: _HostPlan, n_urls: int, n_shapes: int, stored: list[Any],
               counters: Counters) -> None:
        """Weigh one host's pages against what is stored; queue the writes (evidence, the
        pages' URLs, shape counts) and note in ``plan`` what to read back from them."""
        s = self.settings
        host, k = plan.host, plan.keys
        urls_key, dust_key, rules_key = k.dust_urls(host), k.dust(host), k.dust_rules(host)
        known: dict[str, str] = {}      # this batch's pages: url -> "fp simhash"
        variants: dict[str, str] = {}   # target -> "rule fp simhash" of a variant
        evidence: dict[str, int] = {}   # rule -> units
        pairs: dict[str, int] = {}
        refuted: set[str] = set()
        for rec, cands, values in zip(plan.recs, plan.targets, stored, strict=True):
            mine = f"{rec.fingerprint} {rec.simhash or ''}"
            units: dict[str, int] = {}
            against: set[str] = set()

            def weigh(rule: str, other: str | None, rec: PageRecord = rec, units: dict[str, int] = units,
                      against: set[str] = against) -> None:
                if not other:
                    return
                fp, _, sim = other.partition(" ")
                n = same_content(rec.fingerprint or "", rec.simhash, fp, sim or None)
                if n:
                    units[rule] = max(units.get(rule, 0), n)
                else:
                    against.add(rule)

            for (rule, target), value in zip(cands, values, strict=False):  # values ends with the v: field
                weigh(rule, known.get(target) or value)
            variant = variants.get(rec.url) or values[-1]
            if variant:
                rule, _, other = variant.partition(" ")
                weigh(rule, other)
            for other, n in ((rec.duplicate_of, EXACT_UNITS), (rec.canonical, EXACT_UNITS),
                             (rec.near_duplicate_of, NEAR_UNITS)):
                if other and other != rec.url and _origin_host(other) == host:
                    for rule in candidate_rules(rec.url, other):
                        units[rule] = max(units.get(rule, 0), n)
            for rule in against:
                units.pop(rule, None)
            refuted |= against
            for rule, n in units.items():
                evidence[rule] = evidence.get(rule, 0) + n
                pairs[rule] = pairs.get(rule, 0) + 1
            known[rec.url] = mine
            if n_urls + len(known) <= s.DUST_MAX_URLS_PER_HOST:
                writes.hset(urls_key, f"u:{rec.url}", mine)
                for rule, target in cands:
                    variants.setdefault(target, f"{rule} {mine}")
                    writes.hsetnx(urls_key, f"v:{target}", f"{rule} {mine}")
        for rule in refuted:
            writes.hincrby(dust_key, f"x:{rule}", 1)
            writes.srem(rules_key, rule)
        if refuted:
            bump(counters, "dust/counter_examples", len(refuted))
        plan.refuted = bool(refuted)
        plan.learned = [r for r in evidence if r not in refuted]
        for rule in plan.learned:
            writes.hincrby(dust_key, f"e:{rule}", evidence[rule])
            writes.hincrby(dust_key, f"n:{rule}", pairs[rule])
            writes.hget(dust_key, f"x:{rule}")
        plan.shapes = self._count_shapes(writes, k.shapes(host), plan.recs, n_shapes)

    def _count_shapes(self, pipe: Pipeline, key: str, recs: list[PageRecord], n_shapes: int) -> list[tuple[str, bool]]:
        """Queue the shape counts of the pages; returns (shape, is facet shape) in order,
        each followed in the pipeline by HINCRBY n, then HMGET d w."""
        s = self.settings
        if not (s.TRAP_SHAPE_MIN_PAGES or s.TRAP_WALK_PAGES or s.TRAP_FACET_PAGES) \
                or n_shapes >= 3 * s.TRAP_MAX_SHAPES_PER_HOST:
            return []
        counted: dict[str, list[int]] = {}
        facets: set[str] = set()
        for rec in recs:
            dup = bool(rec.duplicate_of or rec.near_duplicate_of)
            walk = walks(rec.url, rec.links[:MAX_WALK_LINKS])
            main, facet = shape(rec.url), facet_shape(rec.url)
            for name in (main, facet):
                if name is None or ("#" not in name and "?" not in name):
                    continue   # a shape without digits or parameters is one URL
                tally = counted.setdefault(name, [0, 0, 0])
                tally[0] += 1
                tally[1] += dup
                tally[2] += walk
            if facet is not None:
                facets.add(facet)
        out: list[tuple[str, bool]] = []
        for name, (n, d, w) in counted.items():
            pipe.hincrby(key, f"n:{name}", n)
            if d:
                pipe.hincrby(key, f"d:{name}", d)
            else:
                pipe.hget(key, f"d:{name}")
            if w:
                pipe.hincrby(key, f"w:{name}", w)
            else:
                pipe.hget(key, f"w:{name}")
            out.append((name, name in facets))
        return out

    def _trap_shapes(self, shapes: list[tuple[str, bool]], values: list[Any]) -> dict[str, str]:
        s = self.settings
        out: dict[str, str] = {}
        for i, (name, facet) in enumerate(shapes):
            n, d, w = (int(v or 0) for v in values[3 * i:3 * i + 3])
            if s.TRAP_SHAPE_MIN_PAGES and n >= s.TRAP_SHAPE_MIN_PAGES and d >= s.TRAP_SHAPE_DUP_RATIO * n:
                out[name] = "dup"
            elif s.TRAP_WALK_PAGES and w >= s.TRAP_WALK_PAGES:
                out[name] = "walk"
            elif facet and s.TRAP_FACET_PAGES and n >= s.TRAP_FACET_PAGES:
                out[name] = "facet"
        return out

    # -- the operator's side -----------------------------------------------------------
    def host_rules(self, host: str) -> tuple[list[RuleInfo], dict[str, str]]:
        """The host's rules with their evidence (rules in force first) and its trap shapes."""
        k, shard = self._keys(host)
        pipe = shard_client(self.settings, shard).pipeline(transaction=False)
        pipe.hgetall(k.dust(host))
        pipe.smembers(k.dust_rules(host))
        pipe.hgetall(k.trap_shapes(host))
        fields, active, traps = pipe.execute()
        names = {f[2:] for f in fields}
        infos = [RuleInfo(r, int(fields.get(f"e:{r}", 0)), int(fields.get(f"n:{r}", 0)),
                          int(fields.get(f"x:{r}", 0)), r in active) for r in names]
        return sorted(infos, key=lambda i: (not i.active, -i.units, i.rule)), dict(traps)

