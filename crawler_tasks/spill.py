"""Bounded memory: front queues that grow past a bound spill their tail to disk.

The maintenance task (one per crawl, so one writer) moves the tail of any front queue
longer than FRONT_SPILL_AT entries to gzip files ``OUT/spill/s<shard>/l<level>/<seq>.gz``
in chunks, and reads the oldest file back once the queue drains below
FRONT_REFILL_AT. Spilled URLs still count as queued (the crawl is not over while a
spill file exists). Crash safety: spill.lua stages the chunk in a Redis list first;
the file is fsynced before the list is deleted, and a file is deleted only after its
entries are back in Redis, so a crash can queue a chunk twice but never lose one.
"""
from __future__ import annotations

import gzip
import os
from pathlib import Path

from .connection import shard_client
from .frontier import Frontier
from .settings import Settings

CHUNK = 10_000


class Spiller:
    def __init__(self, settings: Settings, frontier: Frontier) -> None:
        self.settings = settings
        self.frontier = frontier
        self.root = Path(settings.OUT_DIR) / "spill"

    def _dir(self, shard: int, level: int) -> Path:
        return self.root / f"s{shard}" / f"l{level}"

    def run(self, chunk: int = CHUNK) -> tuple[int, int]:
        """Spill over-long front queues and load files back into short ones.
        Returns (URLs spilled, URLs loaded)."""
        s = self.settings
        if s.FRONT_SPILL_AT <= 0:
            return 0, 0
        spilled = loaded = 0
        for shard in range(s.SHARDS):
            k = self.frontier.keys(shard)
            client = shard_client(s, shard)
            for level in range(self.frontier.levels):
                staging = k.spill_staging(level)
                if client.llen(staging) == 0:
                    self.frontier.run_script(shard, "spill", [k.front(level), staging, k.spilled],
                                             [s.FRONT_SPILL_AT, chunk])
                entries = client.lrange(staging, 0, -1)
                if entries:
                    self._write(shard, level, entries)
                    client.delete(staging)
                    spilled += len(entries)
                if client.llen(k.front(level)) < s.FRONT_REFILL_AT:
                    loaded += self._load_one(shard, level)
        return spilled, loaded

    def _write(self, shard: int, level: int, entries: list[str]) -> None:
        folder = self._dir(shard, level)
        folder.mkdir(parents=True, exist_ok=True)
        seq = max((int(p.stem) for p in folder.glob("*.gz")), default=0) + 1
        tmp = folder / f"{seq:012d}.tmp"
        with gzip.open(tmp, "wt", encoding="utf-8", compresslevel=3) as fh:
            fh.write("\n".join(entries) + "\n")
            fh.flush()
        with open(tmp, "rb") as raw:
            os.fsync(raw.fileno())
        tmp.rename(folder / f"{seq:012d}.gz")

    def _load_one(self, shard: int, level: int) -> int:
        files = sorted(self._dir(shard, level).glob("*.gz"))
        if not files:
            return 0
        with gzip.open(files[0], "rt", encoding="utf-8") as fh:
            entries = [line for line in fh.read().split("\n") if line]
        k = self.frontier.keys(shard)
        pipe = shard_client(self.settings, shard).pipeline(transaction=True)
        for i in range(0, len(entries), 1000):
            pipe.rpush(k.front(level), *entries[i:i + 1000])
        pipe.decrby(k.spilled, len(entries))
        pipe.execute()
        files[0].unlink()
        return len(entries)

    def spilled(self) -> int:
        return sum(int(shard_client(self.settings, s).get(self.frontier.keys(s).spilled) or 0)
                   for s in range(self.settings.SHARDS))
