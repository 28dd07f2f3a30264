"""Bounded memory: front queues that grow past a bound spill their tail to disk.

The maintenance task (one per crawl, so one writer) moves the tail of any front queue
longer than FRONT_SPILL_AT entries to gzip files ``OUT/spill/s<shard>/l<level>/<seq>.gz``
in chunks, and reads the oldest file back once the queue drains below
FRONT_REFILL_AT. A hot host's back queue is capped too (HOST_QUEUE_CAP, in lease.lua):
its surplus goes to an overflow list, from there to per-host files
``OUT/spill/s<shard>/h/<host hash>.gz``, and back (hostload.lua) once its queue is
below half the cap. Spilled URLs still count as queued (the crawl is not over while a
spill file exists). Crash safety: spill.lua stages the chunk in a Redis list first;
the file is fsynced before the list is deleted, and a file is deleted only after its
entries are back in Redis, so a crash can queue a chunk twice but never lose one.
"""
from __future__ import annotations

import gzip
import hashlib
import os
from pathlib import Path

from crawler_tasks.connection import shard_client
from crawler_tasks.frontier import Frontier
from crawler_tasks.settings import Settings
from crawler_tasks.urls.normalize import host_key

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
        spilled, loaded = self.run_hosts(chunk)
        if s.FRONT_SPILL_AT <= 0:
            return spilled, loaded
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

    def run_hosts(self, chunk: int = CHUNK) -> tuple[int, int]:
        """Per-host spill: drain overflow lists to per-host files, load files back for
        hosts whose queue has room. Returns (URLs spilled, URLs loaded)."""
        s = self.settings
        spilled = loaded = 0
        for shard in range(s.SHARDS):
            k = self.frontier.keys(shard)
            client = shard_client(s, shard)
            entries = client.lrange(k.overflow, 0, chunk - 1)
            if entries:
                by_host: dict[str, list[str]] = {}
                for entry in entries:
                    url = entry.split(" ", 4)[-1]
                    by_host.setdefault(host_key(url), []).append(entry)
                for host, group in by_host.items():
                    path = self._host_file(shard, host)
                    path.parent.mkdir(parents=True, exist_ok=True)
                    with gzip.open(path, "at", encoding="utf-8", compresslevel=3) as fh:
                        fh.write("\n".join(group) + "\n")
                    with open(path, "rb") as raw:
                        os.fsync(raw.fileno())
                pipe = client.pipeline(transaction=True)
                pipe.sadd(k.spilled_hosts, *by_host)
                pipe.incrby(k.spilled, len(entries))
                pipe.ltrim(k.overflow, len(entries), -1)
                pipe.execute()
                spilled += len(entries)
            for host in client.smembers(k.spilled_hosts):
                length = client.llen(k.queue(host))
                if s.HOST_QUEUE_CAP and length >= s.HOST_QUEUE_CAP // 2:
                    continue
                path = self._host_file(shard, host)
                group = []
                if path.exists():
                    with gzip.open(path, "rt", encoding="utf-8") as fh:
                        group = [line for line in fh.read().split("\n") if line]
                room = (s.HOST_QUEUE_CAP - length) if s.HOST_QUEUE_CAP else len(group)
                now, rest = group[:room], group[room:]
                if now:
                    self.frontier.run_script(shard, "hostload",
                                             [k.active, k.queue(host), k.front(self.frontier.levels - 1), k.spilled],
                                             [host, *now])
                    loaded += len(now)
                if rest:  # then the file keeps only the rest: a crash duplicates, never loses
                    tmp = path.with_suffix(".tmp")
                    with gzip.open(tmp, "wt", encoding="utf-8", compresslevel=3) as fh:
                        fh.write("\n".join(rest) + "\n")
                    with open(tmp, "rb") as raw:
                        os.fsync(raw.fileno())
                    tmp.rename(path)
                if not rest:
                    client.srem(k.spilled_hosts, host)
                    path.unlink(missing_ok=True)
        return spilled, loaded

    def _host_file(self, shard: int, host: str) -> Path:
        name = hashlib.blake2b(host.encode(), digest_size=10).hexdigest()
        return self.root / f"s{shard}" / "h" / f"{name}.gz"

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
