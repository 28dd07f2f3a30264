"""Loading a snapshot back (``manage.py restore``, ``crawl --restore``): verify, then write
every record, then reconcile what the file and the server disagree on.

The file format, the dump side and checkpoints are in ``ops.snapshot``.
"""
from __future__ import annotations

import gzip
import json
import logging
import os
import time
import zlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis

from crawler_tasks.connection import bytes_client, main_url, redact, shard_url
from crawler_tasks.frontier import Frontier
from crawler_tasks.frontier.reclaim import drop_front_copies
from crawler_tasks.keys import ShardKeys
from crawler_tasks.ops.snapshot import (
    _MUST_MATCH,
    _SHARD_TAG,
    _TYPES,
    FORMAT,
    PIPELINE_COMMANDS,
    PIPELINE_ELEMENTS,
    SCAN_COUNT,
    VERSION,
    SnapshotError,
    SnapshotInfo,
    _decode,
    _info,
    _match,
    _servers,
)
from crawler_tasks.runtime.control import Control
from crawler_tasks.settings import Settings

log = logging.getLogger(__name__)

_CORRUPT = (OSError, EOFError, zlib.error, UnicodeDecodeError, json.JSONDecodeError, ValueError,
            KeyError, TypeError, IndexError, AttributeError)


def _records(path: Path) -> Iterator[tuple[dict[str, Any] | None, dict[str, Any] | None]]:
    """(header, None) first, then (None, record) per line; any damage -> SnapshotError."""
    line_no = 0
    try:
        with gzip.open(path, "rt", encoding="utf-8", newline="\n") as fh:
            first = fh.readline()
            line_no = 1
            if not first:
                raise SnapshotError(f"{path}: empty file, not a snapshot")
            header = json.loads(first)
            if not isinstance(header, dict) or header.get("format") != FORMAT:
                raise SnapshotError(f"{path}: not a crawler snapshot (no {FORMAT!r} header)")
            if header.get("version") != VERSION:
                raise SnapshotError(f"{path}: snapshot format version {header.get('version')} "
                                    f"is not supported (this code reads version {VERSION})")
            yield header, None
            for line in fh:
                line_no += 1
                if not line.endswith("\n"):
                    raise SnapshotError(f"{path}: truncated (line {line_no} is incomplete)")
                rec = json.loads(line)
                if not isinstance(rec, dict):
                    raise ValueError("record is not an object")
                yield None, rec
    except SnapshotError:
        raise
    except FileNotFoundError:
        raise SnapshotError(f"{path}: no such snapshot file") from None
    except _CORRUPT as exc:
        raise SnapshotError(f"{path}: corrupt or truncated snapshot near line {line_no + 1}: "
                            f"{type(exc).__name__}: {exc}") from exc


def _parse(rec: dict[str, Any]) -> tuple[bytes, str, int, list[bytes], list[str] | None]:
    """Validate one record: (key, type, part, values, scores)."""
    type_ = rec["type"]
    if type_ not in _TYPES:
        raise ValueError(f"unknown type {type_!r}")
    part = rec["part"]
    if not isinstance(part, int) or part < 0:
        raise ValueError(f"bad part {part!r}")
    (key,) = _decode(rec.get("key_enc", "utf8"), [rec["key"]])
    values = _decode(rec["enc"], rec["value"])
    scores = rec.get("scores")
    if type_ == "zset":
        if not isinstance(scores, list) or len(scores) != len(values):
            raise ValueError("zset record without one score per member")
        for s in scores:
            float(s)
    if type_ == "hash" and len(values) % 2:
        raise ValueError("hash record with an odd number of fields and values")
    if type_ == "string" and len(values) != 1:
        raise ValueError("string record must hold one value")
    return key, type_, part, values, scores


def verify(path: str | os.PathLike) -> SnapshotInfo:
    """Read a whole snapshot and check every record and the header's counts, without
    touching Redis: restore runs it first so a damaged file never replaces live state."""
    started = time.time()
    path = Path(path)
    header: dict[str, Any] = {}
    records = 0
    keys = 0
    it = _records(path)
    for head, rec in it:
        if head is not None:
            header = head
            continue
        try:
            _key, _type, part, _values, _scores = _parse(rec)  # type: ignore[arg-type]
        except _CORRUPT as exc:
            raise SnapshotError(f"{path}: corrupt record {records + 1}: {type(exc).__name__}: {exc}") from exc
        records += 1
        keys += part == 0
    try:
        counts = header["counts"]
        expected = (int(counts["records"]), int(counts["keys"]))
        _info(path, header)
    except _CORRUPT as exc:
        raise SnapshotError(f"{path}: corrupt header: {type(exc).__name__}: {exc}") from exc
    if (records, keys) != expected:
        raise SnapshotError(f"{path}: truncated or damaged: header promises {expected[0]} records of "
                            f"{expected[1]} keys, file holds {records} records of {keys} keys")
    return _info(path, header, seconds=time.time() - started)


# ----------------------------------------------------------------------------- restoring
class _Loader:
    """Routes records to their server and writes them in bounded pipelines."""

    def __init__(self, settings: Settings, old_prefix: str) -> None:
        self.settings = settings
        self.old = old_prefix.encode() + b":"
        self.new = settings.KEY_PREFIX.encode() + b":"
        self.clients: dict[str, redis.Redis] = {}
        self.pipes: dict[str, tuple[Any, int, int]] = {}   # url -> (pipeline, commands, elements)
        self.queue_hosts: dict[int, set[str]] = {}        # shard -> hosts with a restored back queue

    def client(self, url: str) -> redis.Redis:
        if url not in self.clients:
            self.clients[url] = bytes_client(url, self.settings.REDIS_TIMEOUT_S)
        return self.clients[url]

    def route(self, key: bytes) -> tuple[str, int | None]:
        """Redis Cluster hash-tag rule: the text between the first '{' and the next '}'."""
        start = key.find(b"{")
        end = key.find(b"}", start + 1) if start >= 0 else -1
        if end > start + 1:
            m = _SHARD_TAG.fullmatch(key[start + 1:end])
            if m:
                shard = int(m.group(1))
                return shard_url(self.settings, shard), shard
        return main_url(self.settings), None

    def write(self, key: bytes, type_: str, part: int, values: list[bytes], scores: list[str] | None,
              ttl_ms: int, at_head: bool) -> None:
        if not key.startswith(self.old):
            raise SnapshotError(f"record key {key!r} lacks the snapshot's prefix {self.old.decode()!r}")
        key = self.new + key[len(self.old):]
        url, shard = self.route(key)
        if shard is not None:
            marker = b"}:q:"
            i = key.find(marker)
            if i >= 0 and values:
                self.queue_hosts.setdefault(shard, set()).add(key[i + len(marker):].decode("utf-8", "replace"))
        pipe, commands, elements = self.pipes.get(url) or (self.client(url).pipeline(transaction=False), 0, 0)
        if type_ == "string":
            pipe.execute_command("SET" if part == 0 else "APPEND", key, values[0])
        else:
            if part == 0:
                pipe.delete(key)  # SCAN may return a key twice: the last copy wins
            if values:
                if type_ == "list":
                    if at_head:
                        pipe.execute_command("LPUSH", key, *reversed(values))
                    else:
                        pipe.execute_command("RPUSH", key, *values)
                elif type_ == "set":
                    pipe.execute_command("SADD", key, *values)
                elif type_ == "zset":
                    flat: list[Any] = []
                    for member, score in zip(values, scores or (), strict=False):
                        flat += [score, member]
                    pipe.execute_command("ZADD", key, *flat)
                else:
                    pipe.execute_command("HSET", key, *values)
        if ttl_ms > 0 and part == 0:
            pipe.pexpire(key, ttl_ms)
        commands += 3
        elements += len(values)
        self.pipes[url] = (pipe, commands, elements)
        if commands >= PIPELINE_COMMANDS or elements >= PIPELINE_ELEMENTS:
            self.flush(url)

    def flush(self, url: str | None = None) -> None:
        for u in [url] if url else list(self.pipes):
            entry = self.pipes.pop(u, None)
            if entry:
                entry[0].execute()

    def close(self) -> None:
        for client in self.clients.values():
            client.close()


def _existing(client: redis.Redis, prefix: str) -> bool:
    """scan_iter, not scan: a cluster client's SCAN answers a cursor per master."""
    return next(iter(client.scan_iter(match=_match(prefix), count=SCAN_COUNT)), None) is not None


def _delete_prefix(client: redis.Redis, prefix: str) -> int:
    deleted = 0
    batch: list[bytes] = []
    for key in client.scan_iter(match=_match(prefix), count=SCAN_COUNT):
        batch.append(key)
        if len(batch) >= SCAN_COUNT:
            deleted += int(client.unlink(*batch))
            batch = []
    return deleted + (int(client.unlink(*batch)) if batch else 0)


def _check_compatible(settings: Settings, header: dict[str, Any], path: Path) -> None:
    saved = header.get("settings", {})
    wrong = [f"{name}={saved[name]!r} (these settings have {getattr(settings, name)!r})"
             for name in _MUST_MATCH if name in saved and saved[name] != getattr(settings, name)]
    if int(header["shards"]) != settings.SHARDS and not any(w.startswith("SHARDS") for w in wrong):
        wrong.insert(0, f"SHARDS={header['shards']} (these settings have {settings.SHARDS})")
    if wrong:
        raise SnapshotError(f"{path} was taken with " + ", ".join(wrong)
                            + "; restore with the same settings (host->shard mapping, front queue levels "
                              "and Bloom bit positions depend on them)")


def _reconcile(settings: Settings, loader: _Loader, now: float) -> dict[str, int]:
    """Repair host tables torn by a live snapshot so every queued URL can be leased again."""
    fixed: Counter[str] = Counter()
    for shard in range(settings.SHARDS):
        k = ShardKeys(settings.KEY_PREFIX, shard)
        client = loader.client(shard_url(settings, shard))
        pipe = client.pipeline(transaction=False)
        pipe.smembers(k.active)
        pipe.zrange(k.ready, 0, -1)
        pipe.zrange(k.lease, 0, -1)
        active_raw, ready_raw, lease_raw = pipe.execute()
        active = {h.decode("utf-8", "replace") for h in active_raw}
        ready = {h.decode("utf-8", "replace") for h in ready_raw}
        leased = {h.decode("utf-8", "replace") for h in lease_raw}
        queues = loader.queue_hosts.get(shard, set())
        pipe = client.pipeline(transaction=False)
        for host in sorted(queues - active):            # back queue of a host not in the table
            pipe.sadd(k.active, host)
            if host not in leased:
                pipe.zadd(k.ready, {host: now})
            pipe.hdel(k.te, host)
            fixed["orphan_queues"] += 1
        for host in sorted(active - ready - leased):     # active but never schedulable
            if host in queues:
                pipe.zadd(k.ready, {host: now})
                fixed["unscheduled_hosts"] += 1
            else:
                pipe.srem(k.active, host)
                fixed["empty_hosts"] += 1
        for host in sorted(ready & leased):              # the lease stands until it expires
            pipe.zrem(k.ready, host)
            fixed["ready_and_leased"] += 1
        pipe.execute()
    return dict(fixed)


def restore(settings: Settings, path: str | os.PathLike, *, replace: bool = False,
            keep_inflight: bool = False) -> SnapshotInfo:
    """Load a snapshot into the Redis servers of ``settings`` (keys renamed to its
    KEY_PREFIX, shard keys routed by ``REDIS_SHARD_URLS``). Refuses when keys with
    the prefix exist unless ``replace`` (then they are deleted first, after the whole
    file was verified). Restore into a stopped crawl, then ``manage.py crawl --resume``."""
    started = time.time()
    path = Path(path)
    info = verify(path)
    header = info.header
    _check_compatible(settings, header, path)
    loader = _Loader(settings, header["key_prefix"])
    try:
        urls = list(_servers(settings))
        present = [url for url in urls if _existing(loader.client(url), settings.KEY_PREFIX)]
        if present and not replace:
            raise SnapshotError(
                f"keys with prefix {settings.KEY_PREFIX + ':'!r} already exist on "
                + ", ".join(redact(u) for u in present)
                + "; stop that crawl and restore with replace=True (manage.py restore --replace) to overwrite it")
        for url in present:
            n = _delete_prefix(loader.client(url), settings.KEY_PREFIX)
            log.warning("restore: deleted %d keys with prefix %r on %s", n, settings.KEY_PREFIX, redact(url))
        for head, rec in _records(path):
            if head is not None or rec is None:
                continue
            key, type_, part, values, scores = _parse(rec)
            loader.write(key, type_, part, values, scores, int(rec.get("ttl_ms", 0)), rec.get("at") == "head")
        loader.flush()
        if not keep_inflight:
            Control(settings).forget_batches()
        info.repaired = _reconcile(settings, loader, time.time())
        frontier = Frontier(settings)
        twice = sum(drop_front_copies(frontier, shard) for shard in range(settings.SHARDS))
        if twice:
            info.repaired["front_copies_dropped"] = twice
        if not keep_inflight:   # no worker of the old processes will hand their pages on
            returned = sum(frontier.return_handoffs(shard, every=True) for shard in range(settings.SHARDS))
            if returned:
                info.repaired["handoffs_returned"] = returned
    finally:
        loader.close()
    info.seconds = time.time() - started
    if info.repaired:
        log.warning("restore: repaired host tables torn by a live snapshot: %s", info.repaired)
    return info


# ----------------------------------------------------------------------------- periodic
