"""Content dedup shared by the crawl: exact fingerprints, soft-404s, near-duplicates,
the per-host duplicate signal and WARC payload digests.

It runs in the parse stage, on the node that holds the text. Exact fingerprints and
payload digests are sharded by value (``{f<k>}`` keys), not by host: a mirror's copy
lands on the same key as the original. The first URL seen with a fingerprint wins.
Soft-404 fingerprints and duplicate counts are per host, in the host's shard.

Soft 404s are earned, not probed for by default: a host is sent one probe (a random
path, ``probe_url``) only once its pages show the sign, two of its URLs answering the
very same content (a catch-all page does that). A probe on every host was 8 % of the
requests of a crawl of many small hosts, and looks like a scanner to site operators.
"""
from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping

from redis.client import Pipeline

from crawler_tasks.connection import global_client, replies_of, shard_client
from crawler_tasks.counters import Counters, bump
from crawler_tasks.dedup.nearindex import NearDupIndex
from crawler_tasks.dedup.simhash import NearPrint, from_hex
from crawler_tasks.keys import GlobalKeys, ShardKeys, shard_of
from crawler_tasks.records import EntryKind, PageRecord
from crawler_tasks.settings import Settings
from crawler_tasks.urls import host_key

PROBE_MARK = "soft404-probe"


def probe_url(scheme: str, host: str) -> str:
    """A path the host cannot have: its answer is the host's answer to a dead URL."""
    return f"{scheme}://{host}/{random.getrandbits(64):016x}-{PROBE_MARK}.html"


def _by_shard(hosts: Iterable[str], shards: int) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for host in hosts:
        out.setdefault(shard_of(host, shards), []).append(host)
    return out


class ContentIndex:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.gkeys = GlobalKeys(settings.KEY_PREFIX)
        self.near = NearDupIndex(global_client(settings), settings.KEY_PREFIX, parts=settings.SHARDS,
                                 max_distance=settings.NEAR_DUP_BITS)

    def _shard_keys(self, shard: int) -> ShardKeys:
        return ShardKeys(self.settings.KEY_PREFIX, shard)

    # -- marking a batch's records ------------------------------------------------------
    def mark(self, records: list[PageRecord], counters: Counters, prints: Mapping[str, NearPrint] | None = None) -> None:
        """Exact duplicates, soft 404s and near-duplicates, then the per-host counts;
        ``prints``: the pages' NearPrints by URL (see ``mark_near_duplicates``)."""
        self.mark_duplicates(records, counters)
        self.mark_soft404(records, counters)
        self.mark_near_duplicates(records, counters, prints or {})
        self.count_host_duplicates(records)

    def mark_duplicates(self, records: list[PageRecord], counters: Counters) -> None:
        """Exact content dedup: fingerprints sharded by value, first URL wins."""
        with_fp = [r for r in records if r.parsed.fingerprint and r.page.status == 200]
        if not with_fp:
            return
        pipe = global_client(self.settings).pipeline(transaction=False)
        for rec in with_fp:
            assert rec.parsed.fingerprint is not None
            key = self.gkeys.fingerprints(int(rec.parsed.fingerprint, 16) % self.settings.SHARDS)
            pipe.hsetnx(key, rec.parsed.fingerprint, rec.page.url)
            pipe.hget(key, rec.parsed.fingerprint)
        res = pipe.execute()
        for i, rec in enumerate(with_fp):
            first = res[2 * i + 1]
            if not res[2 * i] and first and first != rec.page.url:
                rec.parsed.duplicate_of = first
                bump(counters, "dedup/duplicate_content")

    def hosts_to_probe(self, records: list[PageRecord]) -> list[str]:
        """Probe URLs for hosts that show the soft-404 sign in these (marked) records and
        were never probed: a page with the same content as another URL of its host. Each
        host is claimed once (its soft-404 entry is empty until the probe's answer)."""
        if not self.settings.SOFT404_PROBE:
            return []
        signs = {host_key(r.page.url): r.page.url.split("://", 1)[0] for r in records
                 if r.parsed.duplicate_of and r.page.status == 200 and r.page.kind == EntryKind.PAGE
                 and host_key(r.parsed.duplicate_of) == host_key(r.page.url)}
        out = []
        for shard, hosts in _by_shard(signs, self.settings.SHARDS).items():
            pipe = shard_client(self.settings, shard).pipeline(transaction=False)
            for host in hosts:
                pipe.hsetnx(self._shard_keys(shard).soft404, host, "")
            out += [probe_url(signs[host], host) for host, new in zip(hosts, pipe.execute(), strict=True) if new]
        return out

    def mark_soft404(self, records: list[PageRecord], counters: Counters) -> None:
        """A probe's answer (a random path) that is 200 fixes the host's soft-404
        fingerprint; pages with that same fingerprint are soft 404s, not content."""
        if not self.settings.SOFT404_PROBE:
            return
        with_fp = [r for r in records if r.parsed.fingerprint and r.page.status == 200]
        groups: dict[int, list[PageRecord]] = {}
        for rec in with_fp:
            groups.setdefault(shard_of(host_key(rec.page.url), self.settings.SHARDS), []).append(rec)
        for shard, group in groups.items():
            key = self._shard_keys(shard).soft404
            client = shard_client(self.settings, shard)
            probes = {host_key(r.page.url): r.parsed.fingerprint for r in group
                      if r.page.kind == EntryKind.PROBE and r.parsed.fingerprint}
            if probes:
                client.hset(key, mapping=probes)  # type: ignore[arg-type]  # redis-py's Mapping key is invariant
            pages = [r for r in group if r.page.kind != EntryKind.PROBE]
            if not pages:
                continue
            known = client.hmget(key, [host_key(r.page.url) for r in pages])
            for rec, fp in zip(pages, known, strict=True):
                if fp and fp == rec.parsed.fingerprint:
                    rec.parsed.soft_404 = True
                    bump(counters, "dedup/soft_404")

    def mark_near_duplicates(self, records: list[PageRecord], counters: Counters,
                             prints: Mapping[str, NearPrint]) -> None:
        """simhash within NEAR_DUP_BITS of a page seen before, or further with agreeing
        checks (``nearindex``; a page without its NearPrint in ``prints`` is checked by its
        simhash alone): ``near_duplicate_of`` that page. Links of near-duplicates are
        still followed (a false match must not hide a site)."""
        candidates = [r for r in records if r.parsed.simhash and r.page.status == 200 and not r.parsed.duplicate_of
                      and r.page.kind == EntryKind.PAGE and not r.parsed.soft_404]
        if not candidates:
            return
        matches = self.near.check_and_add([(r.page.url, prints.get(r.page.url) or from_hex(r.parsed.simhash or ""))
                                           for r in candidates])
        for rec, match in zip(candidates, matches, strict=True):
            if match:
                rec.parsed.near_duplicate_of = match
                bump(counters, "dedup/near_duplicate")

    def count_host_duplicates(self, records: list[PageRecord]) -> None:
        """Per host: pages parsed and how many duplicated content (the trap signal)."""
        pages: dict[str, list[int]] = {}
        for rec in records:
            if rec.parsed.fingerprint and rec.page.status == 200 and rec.page.kind == EntryKind.PAGE:
                n = pages.setdefault(host_key(rec.page.url), [0, 0])
                n[0] += 1
                n[1] += bool(rec.parsed.duplicate_of or rec.parsed.near_duplicate_of)
        for shard, hosts in _by_shard(pages, self.settings.SHARDS).items():
            pipe = shard_client(self.settings, shard).pipeline(transaction=False)
            key = self._shard_keys(shard).dup_stats
            for host in hosts:
                pipe.hincrby(key, f"p:{host}", pages[host][0])
                if pages[host][1]:
                    pipe.hincrby(key, f"d:{host}", pages[host][1])
            pipe.execute()

    # -- reading the signals ------------------------------------------------------------
    def trap_hosts(self, hosts: Iterable[str]) -> set[str]:
        """Hosts whose pages keep duplicating content (DUP_TRAP_MIN_PAGES, DUP_TRAP_RATIO)."""
        s = self.settings
        trap: set[str] = set()
        for shard, group in _by_shard(set(hosts), s.SHARDS).items():
            key = self._shard_keys(shard).dup_stats
            values = shard_client(s, shard).hmget(key, [f for h in group for f in (f"p:{h}", f"d:{h}")])
            for i, host in enumerate(group):
                n_pages, n_dups = int(values[2 * i] or 0), int(values[2 * i + 1] or 0)
                if n_pages >= s.DUP_TRAP_MIN_PAGES and n_dups >= s.DUP_TRAP_RATIO * n_pages:
                    trap.add(host)
        return trap

    def queue_capture(self, pipe: Pipeline, url: str, digest: str,
                      date: str) -> Callable[[list[object]], tuple[str, str] | None]:
        """The test for an earlier capture of the very same payload bytes (this fetch is
        then stored as a revisit record; the first capture of a digest wins), queued on
        a pipeline of the global client that the caller runs with its own commands (one
        round trip). Returns the reader of its replies among the pipeline's: (url, date)
        of the earlier capture, or None; it raises a reply that is an error. Only a
        payload seen before costs a second command (and round trip): its first capture."""
        key = self.gkeys.payloads(int.from_bytes(digest.encode()[-4:], "big") % self.settings.SHARDS)
        at = len(pipe)
        pipe.hsetnx(key, digest, f"{url} {date}")

        def read(replies: list[object]) -> tuple[str, str] | None:
            if replies_of(replies, at, 1)[0]:   # the first capture of this payload
                return None
            first = global_client(self.settings).hget(key, digest)
            if not isinstance(first, str) or first == f"{url} {date}":
                return None
            first_url, first_date = first.rsplit(" ", 1)
            return None if first_url == url else (first_url, first_date)
        return read
