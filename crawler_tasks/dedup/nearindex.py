"""Near-duplicate index in Redis: simhash fingerprints within a Hamming distance.

Why permuted blocks (Manku, Jain, Das Sarma 2007): split the 64 bits into four
16-bit blocks; by pigeonhole, two fingerprints at most 3 bits apart agree exactly
on at least one block. So each page is stored in four buckets, one per block
(``<prefix>:{n<part>}:sim:<b>:<v>``: a hash of fingerprint hex -> URL for block
``b`` = 0..3 with 16-bit value ``v`` as 4 hex digits), and a lookup reads only the
page's own four buckets, never the whole index. With N pages a bucket holds
about N / 65536 entries (15 at a million pages). A larger distance (up to 6) is
checked on the same candidates: a pair 4-6 bits apart is found when it agrees on one
block, which most such pairs do (91 % at 4 bits, 77 % at 5), at no extra cost; with
word-pair simhashes unrelated pages sit ~31 bits apart, so a wider check buys recall
on short pages' copies without a false match.

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
from pathlib import Path
from typing import Any

import redis
from redis.client import Pipeline
from redis.exceptions import NoScriptError

from crawler_tasks.connection import is_cluster
from crawler_tasks.dedup.simhash import to_hex

BLOCKS = 4
BLOCK_BITS = 16
MAX_DISTANCE = 3  # what four blocks guarantee (pigeonhole: 3 differing bits miss a block)
MAX_PROBABLE = 6  # beyond 3, a pair is found when it agrees on one block: 91 % at 4 bits, 62 % at 6

_SCRIPT = (Path(__file__).parent / "nearindex.lua").read_text()


class NearDupIndex:
    """Check-and-add of (url, simhash) pairs against every page indexed so far."""

    def __init__(self, client: redis.Redis, prefix: str, parts: int = 1,
                 max_bucket: int = 64, max_distance: int = MAX_DISTANCE) -> None:
        if parts < 1:
            raise ValueError("parts must be >= 1")
        if not 0 <= max_distance <= MAX_PROBABLE:
            raise ValueError(f"max_distance must be 0..{MAX_PROBABLE} with {BLOCKS} blocks")
        if max_bucket < 1:
            raise ValueError("max_bucket must be >= 1")
        self.client = client
        self.prefix = prefix
        self.parts = parts
        self.max_bucket = max_bucket
        self.max_distance = max_distance
        self._script = client.register_script(_SCRIPT)

    # -- keys -------------------------------------------------------------------------
    def part_of(self, block: int, value: int) -> int:
        return zlib.crc32(f"{block}:{value:04x}".encode()) % self.parts if self.parts > 1 else 0

    def bucket_key(self, block: int, value: int) -> str:
        return f"{self.prefix}:{{n{self.part_of(block, value)}}}:sim:{block}:{value:04x}"

    def stats_key(self, part: int) -> str:
        return f"{self.prefix}:{{n{part}}}:sim:stats"

    # -- the check --------------------------------------------------------------------
    def check_and_add(self, items: list[tuple[str, int]]) -> list[str | None]:
        """For each (url, simhash), in order: the URL of an indexed page within
        ``max_distance`` bits (the closest one), or None; every item is then indexed."""
        return [m[0] if m else None for m in self.check_and_add_distances(items)]

    def check_and_add_distances(self, items: list[tuple[str, int]]) -> list[tuple[str, int] | None]:
        """Like :meth:`check_and_add`, with the Hamming distance of each match."""
        if not items:
            return []
        # per part: keys, args and the item indexes whose results come back, in order
        plan: dict[int, tuple[list[str], list, list[int]]] = {}
        for i, (url, h) in enumerate(items):
            if not 0 <= h < 1 << 64:
                raise ValueError(f"not a 64-bit simhash: {h!r}")
            fp = to_hex(h)
            per_part: dict[int, list[int]] = {}
            for b in range(BLOCKS):
                value = (h >> (BLOCK_BITS * (BLOCKS - 1 - b))) & 0xFFFF
                per_part.setdefault(self.part_of(b, value), []).append(b)
            for part, blocks in per_part.items():
                keys, args, idx = plan.setdefault(part, ([], [], []))
                args += [url, fp, len(blocks)]
                for b in blocks:
                    value = (h >> (BLOCK_BITS * (BLOCKS - 1 - b))) & 0xFFFF
                    keys.append(self.bucket_key(b, value))
                    args.append(b + 1)
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
        return self._script(keys=keys + [self.stats_key(part)],
                            args=[self.max_bucket, self.max_distance, len(idx)] + args, client=client)

    def _in_one_transaction(self, calls: list[tuple[list[str], list, list[int], int]]) -> list[Any]:
        """The parts' calls in one MULTI/EXEC by the script's SHA, loaded and sent again
        should the server not know it: redis-py asks SCRIPT EXISTS before every
        pipeline that holds a script, a second round trip per batch. Unknown, the
        script ran for no part (one script), so sending the calls again is safe."""
        def send() -> list[Any]:
            pipe: Pipeline = self.client.pipeline(transaction=True)
            for keys, args, idx, part in calls:
                all_keys = keys + [self.stats_key(part)]
                pipe.evalsha(self._script.sha, len(all_keys), *all_keys,
                             self.max_bucket, self.max_distance, len(idx), *args)
            return pipe.execute()

        try:
            return send()
        except NoScriptError:
            self.client.script_load(_SCRIPT)
            return send()

    # -- observing --------------------------------------------------------------------
    def stats(self) -> dict[str, int]:
        """Totals over parts: ``entries`` (bucket entries, ~4 per page), ``pages``
        (items checked), ``probes`` (buckets read), ``compared`` (candidates whose
        distance was computed), ``full`` (adds skipped: bucket at ``max_bucket``)."""
        pipe = self.client.pipeline(transaction=False)
        for part in range(self.parts):
            pipe.hgetall(self.stats_key(part))
        out = {"entries": 0, "pages": 0, "probes": 0, "compared": 0, "full": 0}
        for raw in pipe.execute():
            for name, value in raw.items():
                name = _text(name)
                out[name] = out.get(name, 0) + int(value)
        return out


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
