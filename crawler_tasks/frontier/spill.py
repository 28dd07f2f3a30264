"""Bounded memory: front queues that grow past a bound spill their tail to disk.

The maintenance task (one per crawl, so one writer) moves the tail of any front queue
longer than FRONT_SPILL_AT entries to gzip files ``OUT/spill/s<shard>/l<level>/<seq>-<n>.gz``
(``n`` entries) in chunks, and reads the oldest file back once the queue drains below
FRONT_REFILL_AT. A hot host's back queue is capped too (HOST_QUEUE_CAP, in lease.lua):
its surplus goes to an overflow list, from there to per-host files
``OUT/spill/s<shard>/h/<host hash>/<seq>-<n>.gz``, and back (hostload.lua) once its
queue is below half the cap. Spilled URLs still count as queued (the crawl is not over
while a spill file exists).

Crash safety: a file is never changed in place. Every write goes to a ``.tmp`` file that
is fsynced and renamed (then the folder is fsynced); a host's small newest file is
replaced by a bigger one holding it plus the new group, and a partly read-back file by
one holding the rest, under the same ``<seq>``: when a crash leaves two files of one
seq, the larger is kept (it holds the other's entries, so at worst they are queued
twice). spill.lua stages a front-queue chunk in a Redis list first, deleted only once
its file is durable, and a file is deleted only after its entries are back in Redis: a
crash can queue a chunk twice but never lose one.

Error policy: a file that cannot be read whole (torn by a crash of an older version that
appended in place, or damaged on disk) gives back every complete, well-formed entry
before the damage; it is logged once, counted as ``spill/error/unreadable`` (entries
known lost as ``spill/error/lost``, and taken off the queued counters so the crawl can
still finish), and renamed ``*.damaged`` for inspection. Older layouts (``<seq>.gz``,
``h/<host hash>.gz``) are still read.
"""
from __future__ import annotations

import gzip
import hashlib
import logging
import os
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from crawler_tasks.connection import global_client, shard_client
from crawler_tasks.frontier import Entry, Frontier
from crawler_tasks.keys import GlobalKeys
from crawler_tasks.settings import Settings
from crawler_tasks.urls.normalize import host_key

log = logging.getLogger(__name__)

CHUNK = 10_000
# Chunks one maintenance run may spill from one front queue: enough to follow a burst of
# links (a sitemap, a crawl's first minutes) within a few runs, not so many that one run
# holds maintenance for long (a chunk is ~10 ms of Redis and ~20 ms of gzip).
MAX_CHUNKS_PER_RUN = 20
# A host's newest spill file with fewer entries than this takes the next group too (one
# file per maintenance run would leave thousands of tiny files for a hot host).
MERGE_BELOW = 1_000

_NAME = re.compile(r"^(\d+)(?:-(\d+))?\.gz$")


@dataclass(frozen=True, slots=True)
class SpillFile:
    path: Path
    seq: int
    count: int | None   # entries written (None: an older file that does not say)


def read_entries(path: Path) -> tuple[list[str], bool]:
    """(entries, True) for a whole file; for a torn or damaged one, every complete and
    well-formed entry before the damage, and False. Never raises for bad content."""
    data, _, intact = _decompress(path)
    entries, bad = _lines(data if intact else data[: data.rfind(b"\n") + 1])
    return entries, intact and not bad


def _decompress(path: Path) -> tuple[bytes, int, bool]:
    """(what decompresses before any damage, how much of it came from whole gzip
    members, whether the file is whole)."""
    try:
        data = path.read_bytes()
    except OSError:
        return b"", 0, False
    out = bytearray()
    whole = pos = 0
    while pos < len(data):  # one gzip member after another
        member = zlib.decompressobj(wbits=31)
        while not member.eof and pos < len(data):
            piece = data[pos:pos + 65_536]
            pos += len(piece)
            try:
                out += member.decompress(piece)
            except zlib.error:
                return bytes(out), whole, False
        if not member.eof:
            return bytes(out), whole, False  # torn: the member ends before its trailer
        whole = len(out)
        pos -= len(member.unused_data)
    return bytes(out), whole, True


def _lines(data: bytes) -> tuple[list[str], bool]:
    """(well-formed entries, whether any line was not one)."""
    entries, bad = [], False
    for line in data.decode("utf-8", "replace").split("\n"):
        if line and _well_formed(line):
            entries.append(line)
        elif line:
            bad = True
    return entries, bad


def _read(f: SpillFile) -> tuple[list[str], bool]:
    """read_entries, and a file holding fewer or more entries than its name says is
    damaged. A file of the older layout, appended in place and counted after each
    append, gives back its whole members only: a torn last member is an append a crash
    interrupted, whose URLs are still in the overflow list and were never counted."""
    if f.count is not None:
        entries, intact = read_entries(f.path)
        return entries, intact and f.count == len(entries)
    data, whole, intact = _decompress(f.path)
    entries, bad = _lines(data if intact else data[:whole])
    return entries, intact and not bad


def _well_formed(line: str) -> bool:
    try:
        return bool(Entry.decode(line).url)
    except ValueError:
        return False


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_chunk(folder: Path, seq: int, entries: list[str]) -> Path:
    """Write ``<seq>-<n>.gz`` durably: a .tmp file, fsync, rename, fsync the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{seq:012d}-{len(entries)}.gz"
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as raw:
        with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=3, mtime=0) as fh:
            fh.write(("\n".join(entries) + "\n").encode("utf-8"))
        raw.flush()
        os.fsync(raw.fileno())
    tmp.rename(path)
    _fsync_dir(folder)
    return path


def list_chunks(folder: Path) -> list[SpillFile]:
    """The folder's spill files, oldest first. Leftovers of a crash are cleared: .tmp
    files (never renamed, so never counted) and, of two files of one seq, the smaller."""
    by_seq: dict[int, SpillFile] = {}
    if not folder.is_dir():
        return []
    for path in folder.iterdir():
        if path.suffix == ".tmp":
            path.unlink(missing_ok=True)
            continue
        match = _NAME.match(path.name)
        if match is None:
            continue
        f = SpillFile(path, int(match[1]), int(match[2]) if match[2] else None)
        other = by_seq.get(f.seq)
        if other is not None:
            keep, drop = (f, other) if (f.count or 0) > (other.count or 0) else (other, f)
            drop.path.unlink(missing_ok=True)
            f = keep
        by_seq[f.seq] = f
    return [by_seq[seq] for seq in sorted(by_seq)]


class Spiller:
    def __init__(self, settings: Settings, frontier: Frontier) -> None:
        self.settings = settings
        self.frontier = frontier
        self.root = Path(settings.OUT_DIR) / "spill"

    def spilled_entries(self) -> Iterator[list[str]]:
        """The entries of every spill file, file by file; read only (the crawl is over:
        its record of what it left unfetched)."""
        for path in sorted(self.root.rglob("*.gz")) if self.root.is_dir() else ():
            yield read_entries(path)[0]

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
                for _ in range(MAX_CHUNKS_PER_RUN):
                    moved = self._spill_chunk(shard, level, chunk)
                    spilled += moved
                    if moved < chunk:
                        break
                if client.llen(k.front(level)) < s.FRONT_REFILL_AT:
                    loaded += self._load_one(shard, level)
        return spilled, loaded

    def _spill_chunk(self, shard: int, level: int, chunk: int) -> int:
        """One chunk of a front queue's tail past FRONT_SPILL_AT to its next file (or the
        chunk a crash left staged). Returns the entries spilled."""
        k = self.frontier.keys(shard)
        client = shard_client(self.settings, shard)
        staging = k.spill_staging(level)
        left_by_crash = client.llen(staging) > 0
        if not left_by_crash:
            self.frontier.run_script(shard, "spill", [k.front(level), staging, k.spilled],
                                     [self.settings.FRONT_SPILL_AT, chunk])
        entries = cast(list[str], client.lrange(staging, 0, -1))  # decoded clients
        if not entries:
            return 0
        folder = self._dir(shard, level)
        chunks = list_chunks(folder)
        # a crash between writing the file and deleting the list: written already
        # (a second file would be counted once and read back twice)
        if not (left_by_crash and chunks and _read(chunks[-1]) == (entries, True)):
            write_chunk(folder, chunks[-1].seq + 1 if chunks else 1, entries)
        client.delete(staging)
        return len(entries)

    def run_hosts(self, chunk: int = CHUNK) -> tuple[int, int]:
        """Per-host spill: drain overflow lists to per-host files, load files back for
        hosts whose queue has room. Returns (URLs spilled, URLs loaded)."""
        s = self.settings
        spilled = loaded = 0
        for shard in range(s.SHARDS):
            k = self.frontier.keys(shard)
            client = shard_client(s, shard)
            entries = cast(list[str], client.lrange(k.overflow, 0, chunk - 1))
            if entries:
                by_host: dict[str, list[str]] = {}
                for entry in entries:
                    url = entry.split(" ", 4)[-1]
                    by_host.setdefault(host_key(url), []).append(entry)
                for host, group in by_host.items():
                    self._add_to_host(shard, host, group, chunk)
                pipe = client.pipeline(transaction=True)
                pipe.sadd(k.spilled_hosts, *by_host)
                pipe.incrby(k.spilled, len(entries))
                pipe.ltrim(k.overflow, len(entries), -1)
                pipe.execute()
                spilled += len(entries)
            for host in cast(set[str], client.smembers(k.spilled_hosts)):
                length = client.llen(k.queue(host))
                if s.HOST_QUEUE_CAP and length >= s.HOST_QUEUE_CAP // 2:
                    continue
                loaded += self._load_host(shard, host, (s.HOST_QUEUE_CAP - length) if s.HOST_QUEUE_CAP else None)
        return spilled, loaded

    def _host_dir(self, shard: int, host: str) -> Path:
        name = hashlib.blake2b(host.encode(), digest_size=10).hexdigest()
        return self.root / f"s{shard}" / "h" / name

    def _host_chunks(self, shard: int, host: str) -> list[SpillFile]:
        """The host's files, oldest first: a file of the older single-file layout (appended
        in place) comes before the per-chunk ones."""
        folder = self._host_dir(shard, host)
        legacy = folder.with_suffix(".gz")
        older = [SpillFile(legacy, -1, None)] if legacy.exists() else []
        return older + list_chunks(folder)

    def _add_to_host(self, shard: int, host: str, group: list[str], chunk: int) -> None:
        folder = self._host_dir(shard, host)
        chunks = list_chunks(folder)
        last = chunks[-1] if chunks else None
        if last is not None and last.count is not None and last.count < MERGE_BELOW \
                and last.count + len(group) <= chunk:
            old, intact = _read(last)
            if intact:
                write_chunk(folder, last.seq, old + group)  # the larger file of that seq wins
                last.path.unlink()
                return
        write_chunk(folder, last.seq + 1 if last is not None else 1, group)

    def _load_host(self, shard: int, host: str, room: int | None) -> int:
        """Move up to ``room`` (None: all) of the host's spilled URLs back; returns how many."""
        k = self.frontier.keys(shard)
        loaded = 0
        for f in self._host_chunks(shard, host):
            if room is not None and room <= 0:
                break
            entries, intact = _read(f)
            # a damaged file is emptied at once (its entries may exceed the room a little)
            now, rest = (entries, []) if room is None or not intact else (entries[:room], entries[room:])
            if now:
                self.frontier.run_script(shard, "hostload",
                                         [k.active, k.queue(host), k.front(self.frontier.levels - 1), k.spilled],
                                         [host, *now])
                loaded += len(now)
                room = None if room is None else room - len(now)
            if not intact:
                self._set_aside(shard, f, len(entries))
            elif rest:  # replaced by a file of the rest: a crash duplicates, never loses
                if write_chunk(self._host_dir(shard, host), max(f.seq, 0), rest) != f.path:
                    f.path.unlink()
            else:
                f.path.unlink()
        if not self._host_chunks(shard, host):
            shard_client(self.settings, shard).srem(k.spilled_hosts, host)
            folder = self._host_dir(shard, host)
            if folder.is_dir() and not any(folder.iterdir()):  # *.damaged files stay
                folder.rmdir()
        return loaded

    def _load_one(self, shard: int, level: int) -> int:
        files = list_chunks(self._dir(shard, level))
        if not files:
            return 0
        entries, intact = _read(files[0])
        k = self.frontier.keys(shard)
        pipe = shard_client(self.settings, shard).pipeline(transaction=True)
        for i in range(0, len(entries), 1000):
            pipe.rpush(k.front(level), *entries[i:i + 1000])
        pipe.decrby(k.spilled, len(entries))
        pipe.execute()
        if intact:
            files[0].path.unlink()
        else:
            self._set_aside(shard, files[0], len(entries))
        return len(entries)

    def _set_aside(self, shard: int, f: SpillFile, recovered: int) -> None:
        """A damaged file, its intact entries already back in Redis: log it once, count it,
        take the entries it is known to have lost off the queued counters, and rename it
        so it is never read again."""
        lost = max(0, f.count - recovered) if f.count is not None else 0
        log.warning("spill file %s is damaged: %d entries recovered, %s lost; kept as %s.damaged",
                    f.path, recovered, lost if f.count is not None else "an unknown number", f.path.name)
        if lost:
            k = self.frontier.keys(shard)
            pipe = shard_client(self.settings, shard).pipeline(transaction=True)
            pipe.decrby(k.spilled, lost)
            pipe.decrby(k.queued, lost)
            pipe.execute()
        pipe = global_client(self.settings).pipeline(transaction=False)
        stats = GlobalKeys(self.settings.KEY_PREFIX).stats
        pipe.hincrby(stats, "spill/error/unreadable", 1)
        if lost:
            pipe.hincrby(stats, "spill/error/lost", lost)
        pipe.execute()
        f.path.rename(f.path.with_name(f.path.name + ".damaged"))

    def spilled(self) -> int:
        return sum(int(shard_client(self.settings, s).get(self.frontier.keys(s).spilled) or 0)
                   for s in range(self.settings.SHARDS))
