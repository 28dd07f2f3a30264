"""The Redis key schema: every key the crawler touches is built here.

All keys start with ``<prefix>:``. Per-shard keys carry the shard in a hash tag
(``{s3}``) so one shard's keys live in one Redis Cluster slot and a shard can be
moved to its own server; fingerprint keys are tagged by fingerprint (``{f1}``).

Per shard ``s`` (``<prefix>:{s<s>}:...``):

========================  ======  ===================================================
``front:<level>``         list    front queue of one priority level; entries
                                  ``"<depth> <tries> <hops> <kind> <url>"`` (kind ``p`` page,
                                  ``s`` sitemap, ``x`` soft-404 probe); the host is the URL's
                                  authority, which is its politeness key once normalized
``q:<host>``              list    the host's back queue, same entries;
                                  the head stays in place while it is being fetched
``active``                set     hosts holding a back queue (Mercator's host table, <= B)
``ready``                 zset    host -> earliest next contact ``te`` (epoch s)
``lease``                 zset    host -> lease deadline (epoch s); one fetch in flight per host
``leaseowner``            hash    host -> fetch process (``<node>/<process>``) that last renewed its
                                  lease (a lost process's or node's leases are handed over at once)
``te``                    hash    host -> ``te`` of hosts without a back queue, kept so a host
                                  that comes back still waits out its delay
``hs:<host>``             hash    the host's politeness state (failures, crawl delay, ...)
``robots:<host>``         hash    cached robots.txt: status, body, fetched_at, expires
``bloom:<segment>``       string  URL-seen Bloom filter bitmap segment
``seen``                  set     exact URL-seen set for URLs that must never be lost (seeds)
``hostcount``             hash    host -> URLs enqueued (per-host budget)
``qvariants``             hash    URL without query -> distinct queries enqueued (facet traps)
``seedhosts``             set     hosts of seed URLs (larger budget)
``soft404``               hash    host -> content fingerprint of its answer to a random path
``queued``                string  URLs in the shard's front and back queues, spill files and hand-off
``handoff``               zset    fetched entries whose page is on its way to parse -> deadline
``handoffowner``          hash    such an entry -> the fetch process that parked it
``parsing``               hash    page group id -> its entries (newline-separated): handed to
                                  its node's parse workers, fetched again if that node is lost
``spilled``               string  of which in spill files on disk (spill.py)
``spilling:<level>``      list    a front-queue tail on its way to a spill file
``overflow``              list    URLs of hosts whose back queue is at HOST_QUEUE_CAP, going to disk
``spilledhosts``          set     hosts with URLs in per-host spill files
``dupstats``              hash    ``p:<host>`` pages, ``d:<host>`` (near-)duplicates: the trap signal
``dust:<host>``           hash    learned URL equivalence evidence: ``e:<rule>`` units, ``n:<rule>``
                                  pairs, ``x:<rule>`` counter-examples, ``w:<rule>`` the first
                                  one in words, ``c:<rule>`` the URL that checks a prior here
                                  (dedup/rules.py)
``dustrules:<host>``      set     the host's rules in force (applied before the URL-seen test)
``dusturls:<host>``       hash    ``u:<url>`` -> "fp simhash" of fetched pages, ``v:<url>`` ->
                                  "rule fp simhash" of a variant rewriting to it (capped)
``shapes:<host>``         hash    per URL shape: ``n:`` pages fetched, ``w:`` of which link a number
                                  step, one count per yield that added nothing (``d:``, ``a:``,
                                  ``s:``, ``e:``, ``t:``, ``k:``), ``r:`` its recent pages' text
                                  sketches (dedup/evidence.py; capped)
``trapshapes:<host>``     hash    shape -> its evidence in words: new URLs of it are dropped
``ruledrops:<host>``      set     URLs dropped by a learned rule that have their record
``hist``                  hash    URL -> change history, rate estimate and validators (continuous mode)
``due``                   zset    "<level> <url>" -> next visit (continuous mode)
``rates``                 hash    allocation class "<quarter octave>:<weight>" -> URLs in it
                                  (the histogram the revisit budget is spread over)
``census``                hash    what the shard's prior over change rates is fitted to
                                  (freshness/rate.py): ``<cell>`` -> summed posteriors of the
                                  pages seen to change, ``u<bucket>`` -> pages never seen to,
                                  by how long they are known unchanged
``hostrate``              hash    ``<host> p`` / ``<host> s``: the host's pages known, and seen to change
                                  (its tilt of the prior); ``<host> n`` / ``<host> y``: sitemap
                                  lastmod claims checked / confirmed
``rehosts``               set     hosts with a URL in ``hist`` (they set the revisit budget)
``claims``                hash    URL -> sitemap lastmod (epoch s) claiming a change since our last visit
``recrawl``               hash    the shard's revisit plan (``mu``, ``budget``, ``freshness``,
                                  ``uniform_s``, ``urls``, ``prior``) and its limiter (``tokens``,
                                  ``refill_at``)
========================  ======  ===================================================

Global (``<prefix>:{g}:...``): ``stats`` (hash of counters with slash paths),
``control`` (hash: state, started_at, ...), ``inflight`` (zset page group id -> deadline,
between fetch and enqueue), ``sessions`` (zset ``<shard>/<session id>`` -> deadline: fetch
sessions running or queued), ``sessionowner`` (hash: the same members -> the fetch process
(``<node>/<process>``) that took the session), ``groupowner`` (hash: page group id -> node
whose parse or enqueue worker has it, until enqueued), ``givenup`` (set of page groups given
up because their node was lost or their deadline passed: their pages are fetched again, and
their parse or enqueue message, should it turn up, is skipped), ``redelivered`` (hash: page
group id -> times its stage message was delivered again past its deadline), ``groupworker``
(hash: page group id -> ``<task> <worker name>`` of the stage worker running its task),
``exchanges`` (zset ``<session id>/<host>`` -> deadline: HTTP exchanges in flight, for the
progress line),
``feed`` (stream of indexable pages for indexers), ``latency`` (fetch latency buckets),
``ipte`` (hash address -> next contact, or minus the deadline of a claim in progress, when
per-address politeness is on),
``job`` (hash: ``version`` and ``values``, the live settings ``manage.py job apply`` set),
``dustpriors`` (hash: ``h:<rule>`` / ``x:<rule>``, hosts where a learned URL rule came in
force / was refuted: the priors of every host),
``timeseries`` (list of JSON samples, newest first, capped: one per maintenance run),
``settings`` (hash: the settings the control worker runs with, passwords removed),
``node:<name>`` (string: the id of the machine whose workers hold that node name, with a
time to live renewed by their heartbeat), ``nodes`` (set of the names claimed),
``proc:<node>/<process>`` (string: a fetch worker process's heartbeat, with a time to live),
``procs`` (set of those processes), ``procsuspects`` (hash: such a process whose heartbeat
was found lapsed -> when first found so).
Content (``<prefix>:{f<k>}:fp``): exact content fingerprint -> first URL;
(``<prefix>:{f<k>}:payload``): WARC payload digest -> "first URL and WARC date".
Near-duplicates (``<prefix>:{n<k>}:sim:<block>:<value>``): simhash permuted-blocks
buckets, fingerprint (and check) hex -> URL (see dedup/nearindex.py, which builds those
keys itself).
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass


def shard_of(host: str, shards: int) -> int:
    """Stable host -> shard assignment (the host splitter); never Python's hash()."""
    return zlib.crc32(host.encode("utf-8", "surrogatepass")) % shards


@dataclass(frozen=True, slots=True)
class ShardKeys:
    prefix: str
    shard: int

    @property
    def base(self) -> str:
        return f"{self.prefix}:{{s{self.shard}}}"

    def front(self, level: int) -> str:
        return f"{self.base}:front:{level}"

    def fronts(self, levels: int) -> list[str]:
        return [self.front(level) for level in range(levels)]

    @property
    def queue_prefix(self) -> str:
        return f"{self.base}:q:"

    def queue(self, host: str) -> str:
        return self.queue_prefix + host

    @property
    def active(self) -> str:
        return f"{self.base}:active"

    @property
    def ready(self) -> str:
        return f"{self.base}:ready"

    @property
    def lease(self) -> str:
        return f"{self.base}:lease"

    @property
    def te(self) -> str:
        return f"{self.base}:te"

    @property
    def lease_owner(self) -> str:
        return f"{self.base}:leaseowner"

    def host_state(self, host: str) -> str:
        return f"{self.base}:hs:{host}"

    def robots(self, host: str) -> str:
        return f"{self.base}:robots:{host}"

    def bloom(self, segment: int) -> str:
        return f"{self.base}:bloom:{segment}"

    @property
    def seen(self) -> str:
        return f"{self.base}:seen"

    def fingerprints(self, bucket: int) -> str:
        return f"{self.base}:fp:{bucket}"

    @property
    def fingerprint_count(self) -> str:
        return f"{self.base}:fpcount"

    @property
    def host_counts(self) -> str:
        return f"{self.base}:hostcount"

    @property
    def query_variants(self) -> str:
        return f"{self.base}:qvariants"

    @property
    def seed_hosts(self) -> str:
        return f"{self.base}:seedhosts"

    @property
    def dup_stats(self) -> str:
        return f"{self.base}:dupstats"

    @property
    def overflow(self) -> str:
        return f"{self.base}:overflow"

    @property
    def spilled_hosts(self) -> str:
        return f"{self.base}:spilledhosts"

    def spill_staging(self, level: int) -> str:
        return f"{self.base}:spilling:{level}"

    @property
    def spilled(self) -> str:
        return f"{self.base}:spilled"

    def dust(self, host: str) -> str:
        return f"{self.base}:dust:{host}"

    def dust_rules(self, host: str) -> str:
        return f"{self.base}:dustrules:{host}"

    def dust_urls(self, host: str) -> str:
        return f"{self.base}:dusturls:{host}"

    def shapes(self, host: str) -> str:
        return f"{self.base}:shapes:{host}"

    def trap_shapes(self, host: str) -> str:
        return f"{self.base}:trapshapes:{host}"

    def rule_drops(self, host: str) -> str:
        return f"{self.base}:ruledrops:{host}"

    @property
    def history(self) -> str:
        return f"{self.base}:hist"

    @property
    def due(self) -> str:
        return f"{self.base}:due"

    @property
    def rates(self) -> str:
        return f"{self.base}:rates"

    @property
    def host_rates(self) -> str:
        return f"{self.base}:hostrate"

    @property
    def census(self) -> str:
        return f"{self.base}:census"

    @property
    def recrawl_hosts(self) -> str:
        return f"{self.base}:rehosts"

    @property
    def claims(self) -> str:
        return f"{self.base}:claims"

    @property
    def recrawl(self) -> str:
        return f"{self.base}:recrawl"

    @property
    def queued(self) -> str:
        return f"{self.base}:queued"

    @property
    def handoff(self) -> str:
        return f"{self.base}:handoff"

    @property
    def handoff_owner(self) -> str:
        return f"{self.base}:handoffowner"

    @property
    def parsing(self) -> str:
        return f"{self.base}:parsing"

    @property
    def soft404(self) -> str:
        return f"{self.base}:soft404"


PAGES_FIELD = "fetch/pages"   # the ``stats`` counter of pages fetched: the page budget's count


@dataclass(frozen=True, slots=True)
class GlobalKeys:
    prefix: str

    @property
    def stats(self) -> str:
        return f"{self.prefix}:{{g}}:stats"

    @property
    def control(self) -> str:
        return f"{self.prefix}:{{g}}:control"

    @property
    def inflight(self) -> str:
        return f"{self.prefix}:{{g}}:inflight"

    @property
    def sessions(self) -> str:
        return f"{self.prefix}:{{g}}:sessions"

    @property
    def session_owner(self) -> str:
        return f"{self.prefix}:{{g}}:sessionowner"

    @property
    def group_owner(self) -> str:
        return f"{self.prefix}:{{g}}:groupowner"

    @property
    def groups_given_up(self) -> str:
        return f"{self.prefix}:{{g}}:givenup"

    @property
    def group_worker(self) -> str:
        return f"{self.prefix}:{{g}}:groupworker"

    @property
    def groups_redelivered(self) -> str:
        return f"{self.prefix}:{{g}}:redelivered"

    @property
    def exchanges(self) -> str:
        return f"{self.prefix}:{{g}}:exchanges"

    @property
    def ip_te(self) -> str:
        return f"{self.prefix}:{{g}}:ipte"
    @property
    def feed(self) -> str:
        return f"{self.prefix}:{{g}}:feed"

    @property
    def latency(self) -> str:
        """Fetch latency: a hash of non-cumulative bucket counts, ``sum``, ``count``."""
        return f"{self.prefix}:{{g}}:latency"

    @property
    def timeseries(self) -> str:
        """Progress samples for ``manage.py report``: a capped list, newest first."""
        return f"{self.prefix}:{{g}}:timeseries"

    @property
    def settings(self) -> str:
        return f"{self.prefix}:{{g}}:settings"

    def node(self, name: str) -> str:
        """The machine that holds node name ``name`` (a string with a time to live)."""
        return f"{self.prefix}:{{g}}:node:{name}"

    @property
    def nodes(self) -> str:
        """Node names claimed since maintenance last handed over a lost one's hosts."""
        return f"{self.prefix}:{{g}}:nodes"

    def process(self, process_id: str) -> str:
        """A fetch worker process's heartbeat (a string with a time to live)."""
        return f"{self.prefix}:{{g}}:proc:{process_id}"

    @property
    def processes(self) -> str:
        """Fetch processes that beat since maintenance last handed over a lost one's work."""
        return f"{self.prefix}:{{g}}:procs"

    @property
    def process_suspects(self) -> str:
        """Fetch processes whose heartbeat maintenance found lapsed -> when it first did."""
        return f"{self.prefix}:{{g}}:procsuspects"

    @property
    def job(self) -> str:
        """The live job (runtime/livejob.py): ``version``, ``values`` (JSON)."""
        return f"{self.prefix}:{{g}}:job"

    @property
    def dust_priors(self) -> str:
        """Learned URL rules across hosts: ``h:<rule>`` hosts where it came in force,
        ``x:<rule>`` hosts where a counter-example refuted it (dedup/rules.py)."""
        return f"{self.prefix}:{{g}}:dustpriors"

    def fingerprints(self, part: int) -> str:
        return f"{self.prefix}:{{f{part}}}:fp"

    def payloads(self, part: int) -> str:
        return f"{self.prefix}:{{f{part}}}:payload"
