"""Near-duplicate index in Redis: simhash fingerprints within a Hamming distance.

Why permuted blocks (Manku, Jain, Das Sarma 2007): split the 64 bits into four
16-bit blocks; by pigeonhole, two fingerprints at most 3 bits apart agree exactly
on at least one block. So each page is stored in four buckets, one per block
(``<prefix>:{n<part>}:sim:<b>:<v>``: a hash of fingerprint hex -> URL for block
``b`` = 0..3 with 16-bit value ``v`` as 4 hex digits), and a lookup reads only the
page's own four buckets, never the whole index. With N pages a bucket holds
about N / 65536 entries (15 at a million pages). A larger distance (up to 6) is
checked on the same candidates: a pair 4-6 bits apart is found when it agrees on one
block, which most such pairs do (91 % at 4 bits, 77 % at 5).

Short pages' copies land further (``bench/dedup_bench.py --scale``): a 5-word line
added to a page of ~100 word pairs flips more bits than its few features outvote, 6-10
bits, and a pair 4-5 bits apart that agrees on no block was missed too. So a page
checked with its ``simhash.NearPrint`` (not a bare simhash) also reads the buckets of
its FRAGILE_BITS fragile bits flipped (the bits whose column sums were nearest zero,
which added words flip first: a copy mostly differs from its page on those), read
only: the index still holds four entries a page. And a candidate up to
``wide_distance`` bits away is a near-duplicate when the two pages' checks (stored
after the fingerprint: 32 hex digits) are within ``check_bits`` too: the check is a
second simhash of the text XOR a simhash of the anchor text XOR a hash of the title,
which an unrelated page brought close by chance, an index page of one template with
other entries, or another man page sharing most of its text do not match. At 10^5
synthetic pages: groups flagged whole 0.87 -> 0.98, page recall 0.92 -> 0.99, no false
match; on the real corpus no distinct pair, copies of real pages found 240 -> 245 of
248. It costs 12 buckets read a page instead of 4 (Lua time 25 -> 67 us a page at 10^5
pages) and 347 -> 416 bytes a page. A bare simhash (a page known by its record alone;
an entry indexed before NearPrints, 16 digits) is matched within ``max_distance`` only.

The check runs in Lua (``nearindex.lua``), so only the matching URL comes back;
a batch is one script call per part, and with ``parts > 1`` the calls go in one
MULTI/EXEC, so a batch is atomic either way: of two near-duplicates checked at
the same time, exactly one is reported as the duplicate of the other, never both.
Items of one batch are checked and added in order, so a later item can match an
earlier one. Buckets are capped at ``max_bucket`` entries (adds to a full bucket
are skipped and counted as ``full``), bounding the work per page when a template
makes one block value hot; a page is still found through its other three blocks.

Parts spread the buckets over hash tags (one Redis Cluster slot per part, like
the exact fingerprints' ``{f<k>}``); the bucket of block ``b``, value ``v`` lives in
part ``crc32("<b>:<v>") % parts``. All parts must be on the one server of
``client`` (the MULTI/EXEC needs it).
"""
from __future__ import annotations

import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import redis
from redis.client import Pipeline
from redis.exceptions import NoScriptError

from crawler_tasks.connection import is_cluster
from crawler_tasks.dedup.simhash import NearPrint, to_hex

BLOCKS = 4
BLOCK_BITS = 16
MAX_DISTANCE = 3  # what four blocks guarantee (pigeonhole: 3 differing bits miss a block)
MAX_PROBABLE = 6  # beyond 3, a pair is found when it agrees on one block: 91 % at 4 bits, 62 % at 6
WIDE_DISTANCE = 8  # with agreeing checks (NearPrint); groups flagged whole at 10^5 pages: 0.974 at 7, 0.982 at 8
CHECK_BITS = 10    # checks this close agree (0.979 whole at 8): unrelated pages' ~32 apart, copies' as their simhashes

_SCRIPT = (Path(__file__).parent / "nearindex.lua").read_text()


class NearDupIndex:
    """Check-and-add of (url, simhash) pairs against every page indexed so far."""

    def __init__(self, client: redis.Redis, prefix: str, parts: int = 1,
                 max_bucket: int = 64, max_distance: int = MAX_DISTANCE,
                 wide_distance: int = WIDE_DISTANCE, check_bits: int = CHECK_BITS) -> None:
        if parts < 1:
            raise ValueError("parts must be >= 1")
        if not 0 <= max_distance <= MAX_PROBABLE:
            raise ValueError(f"max_distance must be 0..{MAX_PROBABLE} with {BLOCKS} blocks")
        if not 0 <= check_bits <= 64 or not max_distance <= wide_distance <= 64:
            raise ValueError("need check_bits 0..64 and max_distance <= wide_distance <= 64")
        if max_bucket < 1:
            raise ValueError("max_bucket must be >= 1")
        self.client = client
        self.prefix = prefix
        self.parts = parts
        self.max_bucket = max_bucket
        self.max_distance = max_distance
        self.wide_distance = wide_distance
        self.check_bits = check_bits
        self._script = client.register_script(_SCRIPT)

    # -- keys -------------------------------------------------------------------------
    def part_of(self, block: int, value: int) -> int:
        return zlib.crc32(f"{block}:{value:04x}".encode()) % self.parts if self.parts > 1 else 0

    def bucket_key(self, block: int, value: int) -> str:
        return f"{self.prefix}:{{n{self.part_of(block, value)}}}:sim:{block}:{value:04x}"

    def stats_key(self, part: int) -> str:
        return f"{self.prefix}:{{n{part}}}:sim:stats"

    # -- the check --------------------------------------------------------------------
    def check_and_add(self, items: Sequence[tuple[str, int | NearPrint]]) -> list[str | None]:
        """For each (url, simhash or NearPrint), in order: the URL of an indexed page
        within ``max_distance`` bits, or within ``wide_distance`` with agreeing checks
        (the closest one), or None; every item is then indexed. A bare simhash (a page
        known by its record alone) reads its own four buckets only, and a pair with a
        bare one is never matched beyond ``max_distance``."""
        return [m[0] if m else None for m in self.check_and_add_distances(items)]

    def check_and_add_distances(self, items: Sequence[tuple[str, int | NearPrint]]) -> list[tuple[str, int] | None]:
        """Like :meth:`check_and_add`, with the Hamming distance of each match."""
        if not items:
            return []
        # per part: keys, args and the item indexes whose results come back, in order
        plan: dict[int, tuple[list[str], list, list[int]]] = {}
        for i, (url, item) in enumerate(items):
            h, check, fragile = (item.simhash, item.check, item.fragile) if isinstance(item, NearPrint) else (item, None, 0)
            if not 0 <= h < 1 << 64 or check is not None and not 0 <= check < 1 << 64:
                raise ValueError(f"not a 64-bit simhash: {item!r}")
            fp = to_hex(h) if check is None else to_hex(h) + to_hex(check)
            per_part: dict[int, list[tuple[str, int]]] = {}
            for block, value, own in _probes(h, fragile):
                per_part.setdefault(self.part_of(block, value), []).append((self.bucket_key(block, value), own))
            for part, probes in per_part.items():
                keys, args, idx = plan.setdefault(part, ([], [], []))
                args += [url, fp, len(probes)]
                for key, own in probes:
                    keys.append(key)
                    args.append(own)
                idx.append(i)
        parts = sorted(plan)
        replies: list[list[str | bytes | None]]
        if len(parts) == 1 or is_cluster(self.client):  # parts are in different cluster slots
            replies = [self._call(part, plan[part], self.client) for part in parts]  # type: ignore[misc]
        else:
            replies = self._in_one_transaction([plan[part] + (part,) for part in parts])
        best: list[tuple[str, int] | None] = [None] * len(items)
        for part, reply in zip(parts, replies, strict=True):
            for i, raw in zip(plan[part][2], reply, strict=True):
                if raw:
                    d, url = _text(raw).split(" ", 1)
                    current = best[i]
                    if current is None or int(d) < current[1]:
                        best[i] = (url, int(d))
        return best

    def _call(self, part: int, plan: tuple[list[str], list, list[int]], client: redis.Redis) -> object:
        keys, args, idx = plan
        return self._script(keys=keys + [self.stats_key(part)], args=self._limits() + [len(idx)] + args,
                            client=client)

    def _limits(self) -> list[int]:
        return [self.max_bucket, self.max_distance, self.wide_distance, self.check_bits]

    def _in_one_transaction(self, calls: list[tuple[list[str], list, list[int], int]]) -> list[Any]:
        """The parts' calls in one MULTI/EXEC by the script's SHA, loaded and sent again
        should the server not know it: redis-py asks SCRIPT EXISTS before every
        pipeline that holds a script, a second round trip per batch. Unknown, the
        script ran for no part (one script), so sending the calls again is safe."""
        def send() -> list[Any]:
            pipe: Pipeline = self.client.pipeline(transaction=True)
            for keys, args, idx, part in calls:
                all_keys = keys + [self.stats_key(part)]
                pipe.evalsha(self._script.sha, len(all_keys), *all_keys, *self._limits(), len(idx), *args)
            return pipe.execute()

        try:
            return send()
        except NoScriptError:
            self.client.script_load(_SCRIPT)
            return send()

    # -- observing --------------------------------------------------------------------
    def stats(self) -> dict[str, int]:
        """Totals over parts: ``entries`` (bucket entries, ~4 per page), ``pages``
        (items checked), ``probes`` (buckets read: 4 a page, and its flipped fragile
        bits), ``compared`` (candidates whose distance was computed), ``full`` (adds
        skipped: bucket at ``max_bucket``), ``confirmed`` (matches beyond
        ``max_distance``, on their checks; an item whose buckets span parts may count
        in two)."""
        pipe = self.client.pipeline(transaction=False)
        for part in range(self.parts):
            pipe.hgetall(self.stats_key(part))
        out = {"entries": 0, "pages": 0, "probes": 0, "compared": 0, "full": 0, "confirmed": 0}
        for raw in pipe.execute():
            for name, value in raw.items():
                name = _text(name)
                out[name] = out.get(name, 0) + int(value)
        return out


def _probes(h: int, fragile: int) -> Iterator[tuple[int, int, int]]:
    """(block, value, own) of each bucket a fingerprint reads: its own four (``own``: the
    block's number 1-4; the item is added there) and, for each bit of ``fragile``, its
    block's with that bit flipped (``own`` 0: read only)."""
    for block in range(BLOCKS):
        shift = BLOCK_BITS * (BLOCKS - 1 - block)
        value, flips = h >> shift & 0xFFFF, fragile >> shift & 0xFFFF
        yield block, value, block + 1
        for bit in range(BLOCK_BITS):
            if flips >> bit & 1:
                yield block, value ^ 1 << bit, 0


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
