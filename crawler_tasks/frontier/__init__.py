"""The Mercator frontier in Redis: front queues, back queues, ready heap, leases.

Vocabulary follows URLFrontier: ``put_discovered`` (new links), ``get_urls`` (lease
ready hosts, one URL each), ``complete`` (a leased host's fetch is over). Every
multi-key change is one Lua script (files beside this module); the clock is always
an argument, so tests can freeze time.

Invariants (tests/test_frontier.py): at most one lease per host; a host's URLs come
out in FIFO order; a URL that entered the frontier is fetched, dropped with a reason,
or still queued (the head URL stays in its back queue while leased, so a dead worker
loses nothing); a host is never leased before its ``te``.
"""
from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import TypeVar, cast

import redis

from crawler_tasks.connection import global_client, replies_of, shard_client
from crawler_tasks.frontier.bloom import INTSET_ENTRIES, BloomSpec, FingerprintSpec
from crawler_tasks.keys import PAGES_FIELD, GlobalKeys, ShardKeys, shard_of
from crawler_tasks.records import Action, EntryKind
from crawler_tasks.settings import Settings
from crawler_tasks.urls.sites import parse_sites

log = logging.getLogger(__name__)
_HERE = Path(__file__).parent
T = TypeVar("T")
K = TypeVar("K")


def _script(name: str) -> str:
    return (_HERE / f"{name}.lua").read_text()


_SCRIPTS = {name: _script(name) for name in ("add", "lease", "complete", "renew", "expire", "ipclaim",
                                             "recrawl", "spill", "hostload", "ack", "handoff", "reclaim",
                                             "forget", "orphan", "unparsed", "recount")}

# Most front-queue URLs moved into back queues by one wake, per shard.
MAX_REFILL_MOVES = 2000

# URLs per add.lua call: 11 arguments each, so a shard's batch stays far below Redis's
# limit of 1,048,576 arguments per command (above ~131k URLs one call fails outright),
# and one call holds the server for tens of milliseconds, not seconds.
ADD_CHUNK_URLS = 10_000


class Verdict(IntEnum):
    """What ``put_discovered`` did with a URL; the values are add.lua's replies."""

    SEEN = 0               # the URL-seen test said seen before
    ENQUEUED = 1
    OVER_HOST_BUDGET = 2   # the host has its MAX_PAGES_PER_HOST queued or fetched
    QUERY_TRAP = 3         # the path has its MAX_QUERY_VARIANTS

    @property
    def reason(self) -> str:
        """The ``frontier/dropped/<reason>`` counter of a URL not enqueued."""
        return _DROP_REASONS[self]


_DROP_REASONS = {Verdict.SEEN: "seen", Verdict.ENQUEUED: "enqueued", Verdict.OVER_HOST_BUDGET: "host_budget",
                 Verdict.QUERY_TRAP: "query_variants"}


@dataclass(frozen=True, slots=True)
class Entry:
    """One queued URL with what the frontier needs to know about it."""

    url: str
    depth: int = 0
    tries: int = 0
    hops: int = 0       # redirect hops that led here
    kind: EntryKind = EntryKind.PAGE

    def encode(self) -> str:
        return f"{self.depth} {self.tries} {self.hops} {self.kind} {self.url}"

    @classmethod
    def decode(cls, raw: str) -> "Entry":
        depth, tries, hops, kind, url = raw.split(" ", 4)
        return cls(url, int(depth), int(tries), int(hops), EntryKind(kind))


@dataclass(frozen=True, slots=True)
class Discovered:
    """A URL to add: already normalized and filtered, with its politeness key."""

    url: str
    host: str
    depth: int = 0
    priority: int = 0       # 0 = highest
    force: bool = False     # seeds: decided by an exact set, never lost to a Bloom false positive
    again: bool = False     # fetched before, its page lost (a Redis restart): no seen test, no budget
    hops: int = 0
    kind: EntryKind = EntryKind.PAGE


def group_by(items: Iterable[T], key: Callable[[T], K]) -> dict[K, list[T]]:
    """Items grouped by key, order kept: one Redis round trip per shard, not per item."""
    out: dict[K, list[T]] = {}
    for item in items:
        out.setdefault(key(item), []).append(item)
    return out


@dataclass(frozen=True, slots=True)
class BloomFill:
    """The URL-seen Bloom filter now: what a false positive costs is a new URL dropped
    without a record, so its expected count is reported beside the rate."""

    bits_set: int          # all shards
    fp_rate: float         # of the fullest shard: the chance a new URL is taken for seen now
    lost: float            # new URLs estimated dropped as seen so far, all shards
    fingerprints: int | None = None   # exact mode: fingerprints stored (they decide, not the filter)
    fingerprint_bits: int = 0

    def describe(self) -> str:
        if self.fingerprints is not None:
            return (f"exact: {self.fingerprints} fingerprints of {self.fingerprint_bits} bits, "
                    f"~{self.lost:.2g} new URL(s) estimated lost to a shared fingerprint")
        return (f"estimated false-positive rate {self.fp_rate:.3%}, "
                f"~{self.lost:.0f} new URL(s) estimated lost to it")


@dataclass(frozen=True, slots=True)
class Completion:
    ok: bool                 # False: the lease had been lost, nothing changed
    held: Lease | None       # the host's next lease when it was held for the caller
    spent: bool = False      # given back although the caller would hold it: the page budget is spent


@dataclass(slots=True)
class HostInfo:
    """One host's frontier state, for ``manage.py hosts`` (times in epoch seconds)."""

    host: str
    shard: int
    active: bool
    queue: list[Entry]
    next_contact: float | None
    leased_until: float | None
    enqueued: int
    pages: int
    duplicates: int
    robots: dict[str, str]
    politeness: dict[str, str]


@dataclass(frozen=True, slots=True)
class Lease:
    shard: int
    host: str
    raw: str        # the head entry as stored (complete() checks it is still the head)
    token: str      # lease deadline; proves the lease is still ours

    @property
    def entry(self) -> Entry:
        return Entry.decode(self.raw)


def _completion(lease: Lease, reply: object) -> Completion:
    """complete.lua's reply: 1 given back, 2 held (then the next head and token), 3 given
    back for the page budget, -1 the lease was lost (nothing changed)."""
    out = list(reply)  # type: ignore[call-overload]
    code = int(out[0])
    if code == 2:
        return Completion(True, Lease(lease.shard, lease.host, out[1], out[2]))
    return Completion(code in (1, 3), None, spent=code == 3)


class Frontier:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        # who renews leases and parks fetched URLs through this client: a fetch worker
        # process names itself (runtime/nodes.py ProcessBeat) so that its death hands them over
        self.owner = settings.node_name
        self.shards = settings.SHARDS
        self.levels = settings.PRIORITY_LEVELS
        per_shard = max(1, settings.BLOOM_EXPECTED_URLS // self.shards)
        self.bloom = BloomSpec.for_capacity(per_shard, settings.BLOOM_ERROR_RATE)
        # URL_SEEN=exact: fingerprints decide, the Bloom filter stays in front for its readers
        self.fingerprints = FingerprintSpec.for_capacity(per_shard) if settings.URL_SEEN == "exact" else None
        self._scripts: dict[tuple[int, str], redis.commands.core.Script] = {}
        self._budget_here: bool | None = None

    # -- plumbing ---------------------------------------------------------------------
    def keys(self, shard: int) -> ShardKeys:
        return ShardKeys(self.settings.KEY_PREFIX, shard)

    def client(self, shard: int) -> redis.Redis:
        return shard_client(self.settings, shard)

    def _script(self, client: redis.Redis, name: str) -> redis.commands.core.Script:
        """The named Lua script registered on ``client`` (cached per client)."""
        script = self._scripts.get((id(client), name))
        if script is None:
            script = self._scripts[(id(client), name)] = client.register_script(_SCRIPTS[name])
        return script

    def _run(self, shard: int, name: str, keys: list[str], args: list) -> object:
        client = self.client(shard)
        return self._script(client, name)(keys=keys, args=args, client=client)

    def run_script(self, shard: int, name: str, keys: list[str], args: list) -> object:
        """Run one of the frontier's Lua scripts on a shard (for recrawl.py, reclaim.py)."""
        return self._run(shard, name, keys, args)

    def shard_of(self, host: str) -> int:
        return shard_of(host, self.shards)

    # -- adding -----------------------------------------------------------------------
    def put_discovered(self, items: Iterable[Discovered]) -> list[Verdict]:
        """Add URLs not seen before to their shard's front queue.

        Returns, per item in input order, its ``Verdict`` (SEEN: a Bloom false positive
        is possible for non-forced items, at the configured rate). A shard's URLs go
        in calls of ADD_CHUNK_URLS, in input order; each call is atomic, the batch is not.
        """
        items = list(items)
        by_shard = group_by(range(len(items)), lambda i: self.shard_of(items[i].host))
        result = [Verdict.SEEN] * len(items)
        top = self.levels - 1
        s = self.settings
        sites = parse_sites(s.SITES)   # a job's per-site page budgets
        for shard, all_indexes in by_shard.items():
            k = self.keys(shard)
            fixed = (k.fronts(self.levels) + [k.bloom(s) for s in range(self.bloom.segments)]
                     + [k.seen, k.host_counts, k.query_variants, k.seed_hosts, k.queued, k.fingerprint_count])
            for start in range(0, len(all_indexes), ADD_CHUNK_URLS):
                indexes = all_indexes[start:start + ADD_CHUNK_URLS]
                keys = list(fixed)
                at: dict[int, int] = {}   # fingerprint bucket -> its KEYS index (1-based)
                args: list = [self.levels, self.bloom.segments, self.bloom.hashes, self.bloom.segment_bits,
                              s.MAX_PAGES_PER_HOST, s.seed_host_budget, s.MAX_QUERY_VARIANTS,
                              int(self.fingerprints is not None)]
                for i in indexes:
                    item = items[i]
                    segment, h1, h2 = self.bloom.hashes_of(item.url)
                    entry = Entry(item.url, item.depth, 0, item.hops, item.kind).encode()
                    qkey = item.url.split("?", 1)[0] if "?" in item.url else ""
                    bucket_at, member = 0, 0
                    if self.fingerprints is not None:
                        bucket, member = self.fingerprints.of(item.url)
                        if bucket not in at:
                            keys.append(k.fingerprints(bucket))
                            at[bucket] = len(keys)
                        bucket_at = at[bucket]
                    site = sites.for_host(item.host) if sites else None
                    args += ["2" if item.again else "1" if item.force else "0", min(max(item.priority, 0), top), entry, segment + 1,
                             h1, h2, item.host, qkey, bucket_at, member,
                             site.max_pages if site is not None and site.max_pages is not None else -1]
                verdicts = self._run(shard, "add", keys, args)
                for i, verdict in zip(indexes, verdicts, strict=True):  # type: ignore[call-overload]
                    result[i] = Verdict(int(verdict))
        return result

    # -- leasing ----------------------------------------------------------------------
    def get_urls(self, shard: int, max_hosts: int, lease_s: float | None = None,
                 now: float | None = None, seed: int | None = None, owner: str = "") -> list[Lease]:
        """Refill back queues, then lease up to ``max_hosts`` ready hosts of one shard.

        Each lease carries the host's head URL; the host is not given out again until
        ``complete`` or lease expiry. ``max_hosts=0`` only refills. ``owner``: the fetch
        process the leases are for (its death hands them over, ``release_owner``).
        """
        now = time.time() if now is None else now
        lease_s = self.settings.LEASE_S if lease_s is None else lease_s
        k = self.keys(shard)
        budget_keys, budget_args = self._budget()
        out = self._run(shard, "lease", [k.active, k.ready, k.lease, k.te, k.lease_owner, *k.fronts(self.levels),
                                         *budget_keys], [
            now, lease_s, max_hosts, self.settings.MAX_ACTIVE_HOSTS, k.queue_prefix,
            random.getrandbits(31) if seed is None else seed, MAX_REFILL_MOVES,
            self.settings.HOST_QUEUE_CAP, k.overflow, owner, *budget_args, len(budget_keys),
        ])
        flat = list(out)[1:]  # type: ignore[call-overload]
        return [Lease(shard, flat[i], flat[i + 1], flat[i + 2]) for i in range(0, len(flat), 3)]

    def own_leases(self, shard: int, hosts: list[str], owner: str) -> None:
        """Name who the hosts just leased are for (wake: the session they start, until its
        process renews them), so that they are handed over should it never run."""
        if hosts:
            self.client(shard).hset(self.keys(shard).lease_owner, mapping=dict.fromkeys(hosts, owner))

    def renew(self, leases: list[Lease], lease_s: float | None = None,
              now: float | None = None) -> list[Lease | None]:
        """Extend leases about to be used; None where the lease was lost (skip that host)."""
        now = time.time() if now is None else now
        deadline = now + (self.settings.LEASE_S if lease_s is None else lease_s)
        out: list[Lease | None] = [None] * len(leases)
        by_shard = group_by(range(len(leases)), lambda i: leases[i].shard)
        for shard, indexes in by_shard.items():
            args: list = [deadline, self.owner]
            for i in indexes:
                args += [leases[i].host, leases[i].token]
            k = self.keys(shard)
            tokens = self._run(shard, "renew", [k.lease, k.lease_owner], args)
            for i, token in zip(indexes, tokens, strict=True):  # type: ignore[call-overload]
                if token:
                    out[i] = Lease(shard, leases[i].host, leases[i].raw, token)
        return out

    def complete(self, lease: Lease, te: float, action: Action = Action.DONE,
                 host_state: dict[str, str] | None = None) -> bool:
        """Finish a lease: ``done`` pops the head URL, ``retry`` moves it to the tail with
        one more try, ``keep`` leaves it for later; ``host_state`` (politeness fields)
        is saved in the same round trip. Returns False if the lease had expired and
        been given to someone else (then nothing changed but the host state)."""
        return self.finish(lease, te, action, host_state).ok

    def finish(self, lease: Lease, te: float, action: Action = Action.DONE,
               host_state: dict[str, str] | None = None, hold_until: float = 0.0,
               handoff_until: float = 0.0) -> Completion:
        """``complete``, and with ``hold_until`` > 0 keep the host leased to the caller
        (until then) when it has URLs left: ``Completion.held`` is the lease of its next
        head URL, to be fetched at ``te`` by the caller itself. With ``handoff_until`` > 0
        a ``done`` URL stays parked (still queued) until ``ack``ed: its page is not yet
        handed on, and it is fetched again if that never happens (``return_handoffs``)."""
        keys, args = self._finish_call(lease, te, action, host_state, hold_until, handoff_until)
        return _completion(lease, self._run(lease.shard, "complete", keys, args))

    def queue_finish(self, pipe: redis.client.Pipeline, lease: Lease, te: float, action: Action = Action.DONE,
                     host_state: dict[str, str] | None = None, hold_until: float = 0.0,
                     handoff_until: float = 0.0, count_page: bool = False) -> Callable[[list[object]], Completion]:
        """``finish`` queued on ``pipe``, a pipeline to the shard's server that the caller
        runs with its own commands (``same_server``): one round trip for both. Returns the
        reader of its reply among the pipeline's (it runs ``finish`` again if the server
        lost the script). ``count_page`` (only where ``budget_in_scripts``): the turn's page
        is counted in the page budget by the script, once however often the call is sent
        (a HINCRBY beside it counted a page twice when redis-py sent the pipeline again)."""
        keys, args = self._finish_call(lease, te, action, host_state, hold_until, handoff_until, count_page)
        at = len(pipe)
        pipe.evalsha(self._script(self.client(lease.shard), "complete").sha, len(keys), *keys, *args)

        def read(replies: list[object]) -> Completion:
            reply = replies[at]
            if isinstance(reply, redis.exceptions.NoScriptError):
                reply = self._run(lease.shard, "complete", keys, args)
            elif isinstance(reply, Exception):
                raise reply
            return _completion(lease, reply)

        return read

    def same_server(self, shard: int, client: redis.Redis) -> bool:
        """Whether the shard's keys live on ``client``'s server, so that one pipeline
        reaches both (a cluster's pipelines refuse scripts)."""
        return self.client(shard) is client and not isinstance(client, redis.cluster.RedisCluster)

    def _finish_call(self, lease: Lease, te: float, action: Action, host_state: dict[str, str] | None,
                     hold_until: float, handoff_until: float,
                     count_page: bool = False) -> tuple[list[str], list[str | float]]:
        action = Action(action)
        k = self.keys(lease.shard)
        retry_raw = ""
        if action == Action.RETRY:
            e = lease.entry
            retry_raw = Entry(e.url, e.depth, e.tries + 1, e.hops, e.kind).encode()
        keys = [k.active, k.ready, k.lease, k.te, k.queue(lease.host), k.queued, k.handoff, k.handoff_owner,
                k.lease_owner]
        if count_page and not self.budget_in_scripts:
            raise ValueError("the script counts pages only where it keeps the page budget")
        budget_keys, budget_args = self._budget() if hold_until > 0 or count_page else ([], [0, ""])
        args: list[str | float] = [lease.host, lease.token, action.value, te, lease.raw, retry_raw, hold_until,
                                   handoff_until, self.owner, *budget_args, int(count_page)]
        if host_state:   # saved by the same script (one slot: cluster-safe, one round trip)
            keys.append(k.host_state(lease.host))
            for name, value in host_state.items():
                args += [name, value]
        return keys + budget_keys, args

    @property
    def budget_in_scripts(self) -> bool:
        """Whether the leasing and holding scripts keep the page budget themselves: with
        ``MAX_PAGES``, when every shard lives on the server of the crawl's counters (one
        Redis, the common case). Otherwise the fetch sessions hold it from their reads of
        the counters, which can trail by the pages of a round trip."""
        if self._budget_here is None:
            client = global_client(self.settings)
            self._budget_here = bool(self.settings.MAX_PAGES) and all(
                self.same_server(shard, client) for shard in range(self.shards))
        return self._budget_here

    def _budget(self) -> tuple[list[str], list[str | int]]:
        """lease.lua's and complete.lua's page-budget keys (the counters' hash, every
        shard's lease zset) and arguments (the budget, its counter's field); none when the
        scripts cannot keep it (``budget_in_scripts``)."""
        if not self.budget_in_scripts:
            return [], [0, ""]
        keys = [GlobalKeys(self.settings.KEY_PREFIX).stats, *(self.keys(shard).lease for shard in range(self.shards))]
        return keys, [self.settings.MAX_PAGES, PAGES_FIELD]

    def give_back(self, held: list[tuple[Lease, float]]) -> int:
        """Give leased hosts back at their next contact time (``complete`` with KEEP), one
        round trip per shard whatever their number. Returns how many were still ours."""
        ok = 0
        for shard, group in group_by(held, lambda item: item[0].shard).items():
            client = self.client(shard)
            if isinstance(client, redis.cluster.RedisCluster):   # its pipelines refuse scripts
                ok += sum(self.complete(lease, te, Action.KEEP) for lease, te in group)
                continue
            pipe = client.pipeline(transaction=False)
            readers = [self.queue_finish(pipe, lease, te, Action.KEEP) for lease, te in group]
            replies = pipe.execute(raise_on_error=False)
            ok += sum(read(replies).ok for read in readers)
        return ok

    def ack(self, shard: int, entries: list[str], group_id: str) -> int:
        """Fetched entries whose pages were handed on to parse in page group ``group_id``:
        they leave the queues, and are kept under the group until it is no longer in
        flight, to be fetched again if its node is lost first (``return_groups``)."""
        if not entries:
            return 0
        k = self.keys(shard)
        return int(self._run(shard, "ack", [k.handoff, k.queued, k.handoff_owner, k.parsing],  # type: ignore[call-overload]
                             [group_id, *entries]))

    def recount_queued(self, shard: int) -> int:
        """Set the shard's queued counter from its keys while no host of it is active
        (``recount.lua``). Returns the error corrected (0 when none or not checked)."""
        k = self.keys(shard)
        keys = [k.queued, k.active, k.handoff, k.overflow, k.spilled, *k.fronts(self.levels),
                *(k.spill_staging(level) for level in range(self.levels))]
        return int(self._run(shard, "recount", keys, []) or 0)  # type: ignore[call-overload]

    def return_groups(self, group_ids: list[str], now: float | None = None) -> int:
        """Page groups a lost node never parsed: their fetched URLs are queued again.
        Returns how many."""
        if not group_ids:
            return 0
        now = time.time() if now is None else now
        n = 0
        for shard in range(self.shards):
            k = self.keys(shard)
            n += int(self._run(shard, "unparsed", [k.parsing, k.active, k.ready, k.te, k.queued, k.lease],  # type: ignore[call-overload]
                               [now, k.queue_prefix, *group_ids]))
        return n

    def parsing_groups(self) -> dict[int, list[str]]:
        """shard -> page groups whose entries it keeps (see ``ack``)."""
        out: dict[int, list[str]] = {}
        for shard in range(self.shards):
            ids: list[str] = self.client(shard).hkeys(self.keys(shard).parsing)  # type: ignore[assignment]
            if ids:
                out[shard] = ids
        return out

    def forget_groups(self, shard: int, group_ids: list[str]) -> None:
        """Page groups no longer in flight (parsed and enqueued, or given up): their
        entries are no longer needed."""
        if group_ids:
            self.client(shard).hdel(self.keys(shard).parsing, *group_ids)

    def return_handoffs(self, shard: int, now: float | None = None, limit: int = 10_000, *,
                        every: bool = False) -> int:
        """Parked entries past their deadline (their worker died before handing the page
        on), or ``every`` one, go back to the head of their host's queue. Returns how many."""
        now = time.time() if now is None else now
        k = self.keys(shard)
        return int(self._run(shard, "handoff", [k.handoff, k.active, k.ready, k.te, k.handoff_owner, k.lease],  # type: ignore[call-overload]
                             [now, k.queue_prefix, limit, "+inf" if every else now]))

    def claim_ip(self, ip: str, now: float | None = None) -> float:
        """Per-address politeness across processes: 0.0 if the address may be contacted now
        (it is then claimed until released or the lease time passes), else when it rests
        until (> 0), or minus the deadline of another host's claim in progress (< 0)."""
        now = time.time() if now is None else now
        client = global_client(self.settings)
        res = self._script(client, "ipclaim")(keys=[GlobalKeys(self.settings.KEY_PREFIX).ip_te],
                                              args=[ip, now, now + self.settings.LEASE_S], client=client)
        return float(res[0])

    def host_te(self, shard: int, host: str) -> float | None:
        """The host's next contact time, wherever it is kept (ready heap or te table)."""
        k = self.keys(shard)
        pipe = self.client(shard).pipeline(transaction=False)
        pipe.zscore(k.ready, host)
        pipe.hget(k.te, host)
        ready, te = pipe.execute()
        value = ready if ready is not None else te
        return float(value) if value is not None else None

    def release_ip(self, ip: str, te: float) -> None:
        """The address's next contact after a claim (what next_contact computed)."""
        global_client(self.settings).hset(GlobalKeys(self.settings.KEY_PREFIX).ip_te, ip, te)

    def expire(self, shard: int, now: float | None = None) -> list[str]:
        """Return hosts whose lease deadline passed to the ready heap."""
        now = time.time() if now is None else now
        k = self.keys(shard)
        return list(self._run(shard, "expire", [k.lease, k.ready, k.lease_owner], [now]))  # type: ignore[call-overload]

    def release_owner(self, shard: int, owner: str, now: float | None = None) -> tuple[list[str], int]:
        """What a lost fetch process (or node) held, handed over at once: its leased hosts
        back to the ready heap (waiting out their leases only stalls them), the URLs it
        fetched and never handed on due for ``return_handoffs``. Returns (hosts, URLs)."""
        now = time.time() if now is None else now
        k = self.keys(shard)
        s = self.settings
        out = list(self._run(shard, "orphan", [k.lease, k.ready, k.lease_owner, k.handoff, k.handoff_owner],  # type: ignore[call-overload]
                             [owner, now, s.LEASE_S, k.host_state(""), s.MIN_DELAY_S,
                              s.MAX_CRAWL_DELAY_S if s.HONOUR_CRAWL_DELAY else 0]))
        return [str(h) for h in out[1:]], int(out[0])

    # -- observing --------------------------------------------------------------------
    def sizes(self, shard: int) -> dict[str, int]:
        """Queue sizes of one shard (front URLs, back-queued URLs, hosts by state); a few
        O(1) commands, cheap enough for progress displays and metrics."""
        k = self.keys(shard)
        pipe = self.client(shard).pipeline(transaction=False)
        for key in k.fronts(self.levels):
            pipe.llen(key)
        pipe.get(k.queued)
        pipe.get(k.spilled)
        pipe.scard(k.active)
        pipe.zcard(k.ready)
        pipe.zcard(k.lease)
        res = pipe.execute()
        front = sum(res[: self.levels])
        queued, spilled, active, ready, leased = res[self.levels:]
        spilled = int(spilled or 0)
        return {"front": front + spilled, "back": max(0, int(queued or 0) - front - spilled),
                "spilled": spilled, "active_hosts": active, "ready_hosts": ready, "leased_hosts": leased}

    # -- per-host state ---------------------------------------------------------------
    def host_states(self, leases: list[Lease]) -> dict[str, dict[str, str]]:
        """Politeness fields of every leased host (``fetch.politeness.HostState``), one
        round trip per shard."""
        out: dict[str, dict[str, str]] = {}
        for shard, group in group_by(leases, lambda lease: lease.shard).items():
            pipe = self.client(shard).pipeline(transaction=False)
            for lease in group:
                pipe.hgetall(self.keys(shard).host_state(lease.host))
            for lease, raw in zip(group, pipe.execute(), strict=True):
                out[lease.host] = raw
        return out

    def load_robots(self, host: str) -> dict[str, str]:
        """The crawl's shared copy of the host's robots.txt (``robots.cache.RobotsStore``)."""
        shard = self.shard_of(host)
        return self.client(shard).hgetall(self.keys(shard).robots(host))  # type: ignore[return-value]

    def save_robots(self, host: str, fields: dict[str, str | float | int]) -> None:
        shard = self.shard_of(host)
        key = self.keys(shard).robots(host)
        pipe = self.client(shard).pipeline(transaction=False)
        pipe.delete(key)
        pipe.hset(key, mapping=fields)  # type: ignore[arg-type]  # redis-py's Mapping key is invariant
        pipe.execute()

    def host_info(self, host: str) -> HostInfo:
        shard = self.shard_of(host)
        k, c = self.keys(shard), self.client(shard)
        pipe = c.pipeline(transaction=False)
        pipe.zscore(k.ready, host)
        pipe.zscore(k.lease, host)
        pipe.hget(k.te, host)
        pipe.sismember(k.active, host)
        pipe.hget(k.host_counts, host)
        pipe.hmget(k.dup_stats, ["p:" + host, "d:" + host])
        pipe.hgetall(k.robots(host))
        pipe.hgetall(k.host_state(host))
        ready, lease, te, active, enqueued, (pages, dups), robots, state = pipe.execute()
        when = ready if ready is not None else (float(te) if te else None)
        return HostInfo(host, shard, bool(active), self.host_queue(shard, host), when, lease,
                        int(enqueued or 0), int(pages or 0), int(dups or 0), robots, state)

    def top_hosts(self, n: int = 10, max_scan: int = 100_000) -> list[tuple[str, int]]:
        """Hosts with the most URLs enqueued (skipped on frontiers with very many hosts)."""
        counts: dict[str, int] = {}
        for shard in range(self.shards):
            client, key = self.client(shard), self.keys(shard).host_counts
            if client.hlen(key) > max_scan:
                return []
            raw: dict[str, str] = client.hgetall(key)  # type: ignore[assignment]
            counts.update({h: int(v) for h, v in raw.items()})
        return sorted(counts.items(), key=lambda kv: -kv[1])[:n]

    def enqueued_for(self, host: str) -> int:
        """URLs of the host enqueued over the crawl so far."""
        shard = self.shard_of(host)
        return int(self.client(shard).hget(self.keys(shard).host_counts, host) or 0)

    def leased_hosts(self) -> int:
        """Hosts leased over all shards (fetches in flight): one round trip per server."""
        client = self.client(0)
        pipe = client.pipeline(transaction=False)
        read = self.queue_leased_hosts(pipe, client)
        return read(pipe.execute(raise_on_error=False))

    def queue_leased_hosts(self, pipe: redis.client.Pipeline, client: redis.Redis) -> Callable[[list[object]], int]:
        """``leased_hosts`` with the shards on ``client``'s server (``same_server``) queued
        on ``pipe``, a pipeline of that client the caller runs: one round trip for them
        and the caller's commands. Returns the reader of the total (it reads the other
        shards itself; an error reply raises)."""
        here = [s for s in range(self.shards) if self.same_server(s, client)]
        at = len(pipe)
        for shard in here:
            pipe.zcard(self.keys(shard).lease)

        def read(replies: list[object]) -> int:
            total = sum(int(reply) for reply in replies_of(replies, at, len(here)))  # type: ignore[call-overload]
            return total + sum(int(self.client(s).zcard(self.keys(s).lease))
                               for s in range(self.shards) if s not in here)
        return read

    def add_head(self, shard: int, host: str, entry: Entry) -> None:
        """Put an entry at the head of a leased host's back queue (it is fetched next)."""
        k = self.keys(shard)
        pipe = self.client(shard).pipeline(transaction=False)
        pipe.lpush(k.queue(host), entry.encode())
        pipe.incr(k.queued)
        pipe.execute()

    def host_queue(self, shard: int, host: str) -> list[Entry]:
        raws: list[str] = self.client(shard).lrange(self.keys(shard).queue(host), 0, -1)  # type: ignore[assignment]
        return [Entry.decode(raw) for raw in raws]

    def allocate_bloom(self) -> None:
        """Create every Bloom segment at its full size before the crawl fills it: Redis
        grows a bitmap written bit by bit with up to 2x slack (1.2 -> 2.2 bytes per URL
        measured at 1M URLs); an exact allocation keeps the textbook 1.2 bytes."""
        nbytes = (self.bloom.segment_bits + 7) // 8
        for shard in range(self.shards):
            client = self.client(shard)
            for seg in range(self.bloom.segments):
                key = self.keys(shard).bloom(seg)
                if nbytes <= 64 * 2**20:
                    client.set(key, b"\0" * nbytes, nx=True)
                elif not client.exists(key):  # huge: 1 MB of slack at most, no giant write
                    client.setbit(key, self.bloom.segment_bits - 1, 0)

    def seen_test(self, shard: int, urls: list[str]) -> list[bool]:
        """Whether the URL-seen test knows each URL (read-only): the exact seed set, then
        the fingerprints (exact mode) or every Bloom bit."""
        k = self.keys(shard)
        pipe = self.client(shard).pipeline(transaction=False)
        for url in urls:
            pipe.sismember(k.seen, url)
            if self.fingerprints is not None:
                bucket, member = self.fingerprints.of(url)
                pipe.sismember(k.fingerprints(bucket), str(member))
            else:
                # one BITFIELD for the k bits: a GETBIT each was 8 replies a URL to parse
                segment, positions = self.bloom.positions(url)
                pipe.execute_command("BITFIELD", k.bloom(segment), *(a for pos in positions for a in ("GET", "u1", pos)))
        replies = iter(pipe.execute())
        out = []
        for _ in urls:
            exact, known = next(replies), next(replies)
            out.append(bool(exact) or (all(known) if isinstance(known, list) else bool(known)))
        return out

    def remember(self, shard: int, urls: list[str]) -> None:
        """Make the URL-seen test know ``urls`` (their Bloom bits, and fingerprints in
        exact mode) without queueing them."""
        k = self.keys(shard)
        pipe = self.client(shard).pipeline(transaction=False)
        for url in urls:
            segment, positions = self.bloom.positions(url)
            for pos in positions:
                pipe.setbit(k.bloom(segment), pos, 1)
            if self.fingerprints is not None:
                bucket, member = self.fingerprints.of(url)
                pipe.sadd(k.fingerprints(bucket), member)
        replies = pipe.execute()
        if self.fingerprints is not None:
            added = sum(int(r) for r in replies[self.bloom.hashes::self.bloom.hashes + 1])
            if added:
                self.client(shard).incrby(k.fingerprint_count, added)

    def size_intsets(self) -> None:
        """Exact mode: let a fingerprint bucket stay an intset (4 bytes a member) up to
        INTSET_ENTRIES; past Redis's default of 512 it would turn into a hash table of
        ~50 bytes a member. The embedded server is configured so; another is asked."""
        if self.fingerprints is None:
            return
        for shard in range(self.shards):
            client = self.client(shard)
            try:
                current = int(cast(dict, client.config_get("set-max-intset-entries"))["set-max-intset-entries"])
                if current < INTSET_ENTRIES:
                    client.config_set("set-max-intset-entries", INTSET_ENTRIES)
            except (redis.ResponseError, KeyError, ValueError) as exc:
                log.warning("URL_SEEN=exact: set set-max-intset-entries %d on the frontier's Redis (%s); "
                            "fingerprint buckets past 512 members cost ~50 bytes each instead of 4",
                            INTSET_ENTRIES, exc)
                return

    def bloom_fill(self) -> BloomFill:
        """The URL-seen test's state over all shards (BITCOUNT: ~0.1 s per 100 MB)."""
        total, worst, lost, stored = 0, 0.0, 0.0, 0
        for shard in range(self.shards):
            k = self.keys(shard)
            client = self.client(shard)
            bits = sum(int(client.bitcount(k.bloom(s))) for s in range(self.bloom.segments))
            total += bits
            worst = max(worst, self.bloom.false_positive_rate(bits))
            if self.fingerprints is None:
                lost += self.bloom.expected_losses(bits)
            else:
                count = int(client.get(k.fingerprint_count) or 0)
                stored += count
                lost += self.fingerprints.expected_losses(count)
        if self.fingerprints is None:
            return BloomFill(total, worst, lost)
        return BloomFill(total, worst, lost, stored, self.fingerprints.bits)

    def queued(self, shard: int) -> int:
        """URLs queued in one shard, parked ones (fetched, page not yet handed on) included."""
        return int(self.client(shard).get(self.keys(shard).queued) or 0)

    def next_ready_in(self, shard: int, now: float | None = None) -> float | None:
        """Seconds until the shard's earliest host becomes ready (None if none waits)."""
        now = time.time() if now is None else now
        first: list[tuple[str, float]] = self.client(shard).zrange(  # type: ignore[assignment]
            self.keys(shard).ready, 0, 0, withscores=True)
        return max(0.0, first[0][1] - now) if first else None
