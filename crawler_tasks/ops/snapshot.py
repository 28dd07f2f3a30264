"""Portable checkpoints of one crawl's Redis state (every key under ``<KEY_PREFIX>:``).

Why not an RDB file: an RDB holds a whole server (other crawls, the Celery broker),
is tied to one server of a sharded frontier and to a Redis version. A snapshot is one
gzip-compressed JSON-lines file that holds exactly one crawl, from the global Redis
and every shard server, and can be restored onto another layout (shards are routed
by their hash tag ``{s<n>}`` with the *restoring* settings' ``REDIS_SHARD_URLS``)
or under another ``KEY_PREFIX``.

File layout (``FORMAT``/``VERSION`` below)::

    {"format": "crawler-snapshot", "version": 1, "created_at": ..., "key_prefix": ...,
     "shards": ..., "counts": {"keys": ..., "records": ..., ...}, ...}     <- header
    {"key": ..., "type": "list", "part": 0, "enc": "utf8", "value": [...]}  <- records

The header is its own gzip member, written after the body is complete (so it can
carry the counts) and placed first; gzip readers see one stream. A key is one
record, or several consecutive ``part`` records when it is large (a list, set, zset
or hash of more than ``CHUNK`` elements, a string of more than ``STRING_CHUNK``
bytes), so neither side ever holds a whole big key in memory. Values are UTF-8 text
when they decode as such, else base64 (``"enc": "base64"``: Bloom bitmaps).
Large lists are read from the tail towards the head, so a concurrent LPOP cannot
make the reader skip entries (a concurrent RPUSH can only duplicate a few); their
later parts carry ``"at": "head"`` and are prepended on restore.

Consistency: a snapshot taken while workers run is *not* a point-in-time image across
keys (each small key is read atomically, big keys chunk by chunk). It is ordered to fail
safe: per shard the Bloom segments and the exact seen-set first, then the front queues,
then everything else (back queues, host tables, stats). A URL moving from a front queue
to a back queue (or on to the hand-off zset) during the snapshot is therefore captured
at least once, possibly twice: the restore drops the earlier copy
(``frontier.reclaim.drop_front_copies``, ``handoff.lua``), so it is not fetched twice; a
URL whose Bloom bits are missing may be enqueued again later. Leases present in the
snapshot are restored as-is: no worker holds them after a restore, so maintenance's
lease expiry (``Frontier.expire``, at most ``LEASE_S`` later) returns those hosts to the
ready heap, and no URL is lost because a leased host's URL stays at the head of its back
queue until ``complete``. ``ops.restore`` loads a file back; it also repairs host-table
entries torn between keys (a back queue whose host is not active, an active host in
neither the ready heap nor the lease table) and, by default, forgets the in-flight batch
table (those batches cannot exist in a restored crawl and would only hold back-pressure
slots until BATCH_TIMEOUT_S). What a live snapshot cannot hold: links found by batches
that were in flight and enqueued after the front queues were read. For an exact
checkpoint, take it while the crawl is stopped (or STOPPING with no batch in flight).
"""
from __future__ import annotations

import base64
import contextlib
import fcntl
import gzip
import io
import json
import logging
import os
import re
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis

from crawler_tasks.connection import bytes_client, is_cluster, main_url, shard_url
from crawler_tasks.exceptions import CrawlerError
from crawler_tasks.frontier.bloom import BloomSpec, FingerprintSpec
from crawler_tasks.keys import GlobalKeys, ShardKeys
from crawler_tasks.settings import Settings

log = logging.getLogger(__name__)

FORMAT = "crawler-snapshot"
VERSION = 1
# Elements per record (and per SSCAN/HSCAN/ZSCAN/LRANGE call) for collections.
CHUNK = 10_000
# Bytes per record (and per GETRANGE call) for strings.
STRING_CHUNK = 1 << 20
# Elements read or written per pipeline round trip: bounds memory and Redis latency.
PIPELINE_ELEMENTS = 50_000
PIPELINE_COMMANDS = 1_000
SCAN_COUNT = 1_000
# gzip level 4: close to level 6 in size on queue text, much faster on big frontiers.
GZIP_LEVEL = 4
SNAPSHOT_DIR = "snapshots"
_NAME_RE = re.compile(r"^snapshot-\d{8}T\d{6}\.\d{3}Z\.jsonl\.gz$")
_TYPES = ("string", "list", "set", "zset", "hash")
_SIZE_COMMAND = {"string": "STRLEN", "list": "LLEN", "set": "SCARD", "zset": "ZCARD", "hash": "HLEN"}
_SHARD_TAG = re.compile(rb"s(\d+)")
# Settings that must match between the snapshot and the restoring crawl: keys and
# Bloom bit positions depend on them.
_MUST_MATCH = ("SHARDS", "PRIORITY_LEVELS", "BLOOM_EXPECTED_URLS", "BLOOM_ERROR_RATE", "URL_SEEN")


class SnapshotError(CrawlerError, ValueError):
    """A snapshot file is unreadable, corrupt or truncated, or cannot be restored here."""


@dataclass(slots=True)
class SnapshotInfo:
    """What a snapshot holds (from its header), plus timings of this operation."""

    path: Path
    key_prefix: str
    shards: int
    created_at: str
    keys: int
    records: int
    elements: int
    by_type: dict[str, int]
    file_bytes: int = 0
    seconds: float = 0.0
    header: dict[str, Any] = field(default_factory=dict)
    repaired: dict[str, int] = field(default_factory=dict)   # restore only


# ----------------------------------------------------------------------------- helpers
def _match(prefix: str) -> str:
    """SCAN pattern for ``<prefix>:*`` with glob characters in the prefix escaped."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", prefix) + ":*"


def _servers(settings: Settings) -> dict[str, list[int]]:
    """Distinct Redis URLs of this crawl -> the shards they hold (the main one first)."""
    servers: dict[str, list[int]] = {main_url(settings): []}
    for shard in range(settings.SHARDS):
        servers.setdefault(shard_url(settings, shard), []).append(shard)
    return servers


def _encode(items: list[bytes]) -> tuple[str, list[str]]:
    try:
        return "utf8", [b.decode("utf-8") for b in items]
    except UnicodeDecodeError:
        return "base64", [base64.b64encode(b).decode("ascii") for b in items]


def _decode(enc: str, items: list[str]) -> list[bytes]:
    if enc == "utf8":
        return [s.encode("utf-8") for s in items]
    if enc == "base64":
        return [base64.b64decode(s, validate=True) for s in items]
    raise ValueError(f"unknown encoding {enc!r}")


def _score(value: float) -> str:
    """Exact text of a zset score (repr round-trips a double; Redis reads 'inf')."""
    return repr(float(value))


def snapshot_dir(out_dir: str | os.PathLike) -> Path:
    """Where a crawl's snapshots live: ``OUT/snapshots``."""
    return Path(out_dir) / SNAPSHOT_DIR


def new_snapshot_path(out_dir: str | os.PathLike, now: float | None = None) -> Path:
    """``OUT/snapshots/snapshot-<UTC time>.jsonl.gz``; names sort by time."""
    at = datetime.fromtimestamp(time.time() if now is None else now, UTC)
    return snapshot_dir(out_dir) / f"snapshot-{at:%Y%m%dT%H%M%S}.{at.microsecond // 1000:03d}Z.jsonl.gz"


def list_snapshots(out_dir: str | os.PathLike) -> list[Path]:
    """Finished snapshots of a crawl, oldest first (temp files are never listed)."""
    folder = snapshot_dir(out_dir)
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if _NAME_RE.match(p.name) and p.is_file())


def latest_snapshot(out_dir: str | os.PathLike) -> Path | None:
    """The newest finished snapshot in ``OUT/snapshots``, or None."""
    found = list_snapshots(out_dir)
    return found[-1] if found else None


def rotate(out_dir: str | os.PathLike, keep: int = 3) -> list[Path]:
    """Delete all but the ``keep`` newest snapshots (and temp files of crashed writers,
    untouched for an hour), so periodic checkpoints do not fill the disk."""
    if keep < 0:
        raise ValueError("keep must be >= 0")
    found = list_snapshots(out_dir)
    removed = found[: max(0, len(found) - keep)]
    folder = snapshot_dir(out_dir)
    if folder.is_dir():
        cutoff = time.time() - 3600
        removed += [p for p in folder.glob(".snapshot-*.tmp") if p.stat().st_mtime < cutoff]
    for path in removed:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    return removed


# ----------------------------------------------------------------------------- writing
class _Writer:
    """Streams records as JSON lines and counts them for the header."""

    def __init__(self, fh: io.TextIOBase) -> None:
        self.fh = fh
        self.records = 0
        self.keys = 0
        self.elements = 0
        self.by_type: Counter[str] = Counter()

    def emit(self, key: bytes, type_: str, part: int, values: list[bytes], *,
             scores: list[float] | None = None, ttl_ms: int = 0, at_head: bool = False) -> None:
        key_enc, (key_text,) = _encode([key])
        enc, encoded = _encode(values)
        rec: dict[str, Any] = {"key": key_text, "type": type_, "part": part, "enc": enc, "value": encoded}
        if key_enc != "utf8":
            rec["key_enc"] = key_enc
        if scores is not None:
            rec["scores"] = [_score(s) for s in scores]
        if ttl_ms > 0 and part == 0:
            rec["ttl_ms"] = ttl_ms
        if at_head:
            rec["at"] = "head"
        self.fh.write(json.dumps(rec, ensure_ascii=False, separators=(",", ":")))
        self.fh.write("\n")
        self.records += 1
        if part == 0:
            self.keys += 1
            self.by_type[type_] += 1
        self.elements += len(values) if type_ != "hash" else len(values) // 2


def _emit_small(w: _Writer, key: bytes, type_: str, value: Any, ttl_ms: int) -> None:
    """One whole key read in one command (GET, LRANGE 0 -1, SMEMBERS, ZRANGE, HGETALL)."""
    if type_ == "string":
        w.emit(key, type_, 0, [value], ttl_ms=ttl_ms)
    elif type_ == "list":
        w.emit(key, type_, 0, list(value), ttl_ms=ttl_ms)
    elif type_ == "set":
        w.emit(key, type_, 0, sorted(value), ttl_ms=ttl_ms)
    elif type_ == "zset":
        w.emit(key, type_, 0, [m for m, _ in value], scores=[s for _, s in value], ttl_ms=ttl_ms)
    else:
        flat: list[bytes] = []
        for k, v in value.items():
            flat += [k, v]
        w.emit(key, type_, 0, flat, ttl_ms=ttl_ms)


def _emit_large(client: redis.Redis, w: _Writer, key: bytes, type_: str, ttl_ms: int) -> None:
    """One big key, chunk by chunk: memory stays at one chunk whatever its size."""
    part = 0
    if type_ == "string":
        size = int(client.strlen(key))
        for offset in range(0, max(size, 1), STRING_CHUNK):
            chunk: bytes = client.getrange(key, offset, offset + STRING_CHUNK - 1)  # type: ignore[assignment]
            w.emit(key, type_, part, [chunk], ttl_ms=ttl_ms)
            part += 1
        return
    if type_ == "list":
        # tail first: an LPOP between two reads shortens the unread head instead of
        # shifting unread entries into the part already read
        offset = 0
        while True:
            items: list[bytes] = client.lrange(key, -(offset + CHUNK), -(offset + 1))  # type: ignore[assignment]
            if not items:
                break
            w.emit(key, type_, part, items, ttl_ms=ttl_ms, at_head=part > 0)
            part += 1
            offset += len(items)
            if len(items) < CHUNK:
                break
        return
    buf: list[bytes] = []
    scores: list[float] = []
    cursor = 0
    while True:
        if type_ == "set":
            members: tuple[int, list[bytes]] = client.sscan(key, cursor, count=CHUNK)  # type: ignore[assignment]
            cursor, found = members
            buf += found
        elif type_ == "zset":
            scored: tuple[int, list[tuple[bytes, float]]] = client.zscan(  # type: ignore[assignment]
                key, cursor, count=CHUNK)
            cursor, pairs = scored
            for member, score in pairs:
                buf.append(member)
                scores.append(score)
        else:
            fields: tuple[int, dict[bytes, bytes]] = client.hscan(key, cursor, count=CHUNK)  # type: ignore[assignment]
            cursor, mapping = fields
            for k, v in mapping.items():
                buf += [k, v]
        per = 2 if type_ == "hash" else 1
        while len(buf) >= CHUNK * per or (cursor == 0 and buf):
            n = CHUNK * per
            w.emit(key, type_, part, buf[:n], scores=scores[:n] if type_ == "zset" else None, ttl_ms=ttl_ms)
            buf, scores = buf[n:], scores[n:]
            part += 1
        if cursor == 0:
            break


def _dump_keys(client: redis.Redis, w: _Writer, keys: list[bytes]) -> None:
    """Type, TTL and size of a batch of keys in one round trip each, then the small
    ones read together (within PIPELINE_ELEMENTS) and the big ones chunk by chunk."""
    if not keys:
        return
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.type(key)
        pipe.pttl(key)
    res = pipe.execute()
    typed = []
    for i, key in enumerate(keys):
        type_ = res[2 * i].decode() if isinstance(res[2 * i], bytes) else str(res[2 * i])
        if type_ in ("none", "stream"):
            continue  # deleted since SCAN saw it, or the indexer feed (output, not crawl state)
        if type_ not in _TYPES:
            raise SnapshotError(f"key {key!r} has type {type_}, which snapshots do not support")
        typed.append((key, type_, int(res[2 * i + 1])))
    pipe = client.pipeline(transaction=False)
    for key, type_, _ in typed:
        pipe.execute_command(_SIZE_COMMAND[type_], key)
    sizes = pipe.execute()
    small: list[tuple[bytes, str, int]] = []
    budget = 0

    def flush() -> None:
        nonlocal small, budget
        if not small:
            return
        p = client.pipeline(transaction=False)
        for key, type_, _ in small:
            if type_ == "string":
                p.get(key)
            elif type_ == "list":
                p.lrange(key, 0, -1)
            elif type_ == "set":
                p.smembers(key)
            elif type_ == "zset":
                p.zrange(key, 0, -1, withscores=True)
            else:
                p.hgetall(key)
        for (key, type_, ttl_ms), value in zip(small, p.execute(raise_on_error=False), strict=True):
            if isinstance(value, redis.ResponseError):  # type changed under us: read it again
                _dump_keys(client, w, [key])
            elif value is None or (type_ != "string" and not value):
                continue  # deleted in between
            else:
                _emit_small(w, key, type_, value, ttl_ms)
        small, budget = [], 0

    for (key, type_, ttl_ms), size in zip(typed, sizes, strict=True):
        size = int(size)
        if (type_ == "string" and size > STRING_CHUNK) or (type_ != "string" and size > CHUNK):
            _emit_large(client, w, key, type_, ttl_ms)
            continue
        small.append((key, type_, ttl_ms))
        budget += 1 if type_ == "string" else size
        if budget >= PIPELINE_ELEMENTS or len(small) >= PIPELINE_COMMANDS:
            flush()
    flush()


def _dump_scan(client: redis.Redis, w: _Writer, pattern: str, skip: set[bytes]) -> None:
    if is_cluster(client):  # a cluster client's SCAN answers one cursor per master: each is scanned in turn
        batch: list[bytes] = []
        for key in client.scan_iter(match=pattern, count=SCAN_COUNT):
            if key not in skip:
                batch.append(key)
            if len(batch) >= SCAN_COUNT:
                _dump_keys(client, w, batch)
                batch = []
        _dump_keys(client, w, batch)
        return
    cursor = 0
    while True:
        found: tuple[int, list[bytes]] = client.scan(cursor, match=pattern, count=SCAN_COUNT)  # type: ignore[assignment]
        cursor, keys = found
        _dump_keys(client, w, [k for k in keys if k not in skip])
        if cursor == 0:
            break


def _header(settings: Settings, w: _Writer, created: float, crawl: dict[str, Any]) -> dict[str, Any]:
    return {
        "format": FORMAT, "version": VERSION,
        "created_at": datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds"),
        "created_epoch": created, "key_prefix": settings.KEY_PREFIX, "shards": settings.SHARDS,
        "settings": {name: getattr(settings, name) for name in _MUST_MATCH},
        "crawl": crawl,
        "counts": {"keys": w.keys, "records": w.records, "elements": w.elements, "by_type": dict(w.by_type)},
    }


def snapshot(settings: Settings, path: str | os.PathLike) -> SnapshotInfo:
    """Write every ``KEY_PREFIX:`` key of the global and all shard Redis servers to
    ``path`` (gzip JSON lines), atomically: a reader never sees a half-written file."""
    started = time.time()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    servers = _servers(settings)
    clients = {url: bytes_client(url, settings.REDIS_TIMEOUT_S) for url in servers}
    g = GlobalKeys(settings.KEY_PREFIX)
    per_shard = max(1, settings.BLOOM_EXPECTED_URLS // settings.SHARDS)
    bloom = BloomSpec.for_capacity(per_shard, settings.BLOOM_ERROR_RATE)
    buckets = FingerprintSpec.for_capacity(per_shard).buckets if settings.URL_SEEN == "exact" else 0
    body_tmp = path.with_name(f".{path.name}.{os.getpid()}.body.tmp")
    final_tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        main = clients[main_url(settings)]
        pipe = main.pipeline(transaction=False)
        pipe.hget(g.control, "state")
        pipe.zcard(g.inflight)
        state, inflight = pipe.execute()
        crawl = {"state": state.decode() if state else None, "inflight_batches": int(inflight)}
        with gzip.open(body_tmp, "wt", encoding="utf-8", compresslevel=GZIP_LEVEL, newline="\n") as fh:
            w = _Writer(fh)
            # fail-safe order (module docstring): seen-tests, then front queues, then the rest
            first: dict[str, list[bytes]] = {url: [] for url in servers}
            fronts: dict[str, list[bytes]] = {url: [] for url in servers}
            for url, shards in servers.items():
                for shard in shards:
                    k = ShardKeys(settings.KEY_PREFIX, shard)
                    first[url] += ([k.bloom(s).encode() for s in range(bloom.segments)] + [k.seen.encode()]
                                   + [k.fingerprints(b).encode() for b in range(buckets)]
                                   + [k.fingerprint_count.encode()] * bool(buckets))
                    fronts[url] += [key.encode() for key in k.fronts(settings.PRIORITY_LEVELS)]
            for url in servers:
                _dump_keys(clients[url], w, first[url])
            for url in servers:
                _dump_keys(clients[url], w, fronts[url])
            for url in servers:
                _dump_scan(clients[url], w, _match(settings.KEY_PREFIX), set(first[url]) | set(fronts[url]))
        header = _header(settings, w, started, crawl)
        with open(final_tmp, "wb") as out:
            with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=GZIP_LEVEL, mtime=int(started)) as gz:
                gz.write(json.dumps(header, separators=(",", ":")).encode() + b"\n")
            with open(body_tmp, "rb") as body:
                shutil.copyfileobj(body, out, 1 << 20)
            out.flush()
            os.fsync(out.fileno())
        os.replace(final_tmp, path)
        _fsync_dir(path.parent)
    finally:
        for tmp in (body_tmp, final_tmp):
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        for client in clients.values():
            client.close()
    return _info(path, header, seconds=time.time() - started)


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _info(path: Path, header: dict[str, Any], seconds: float = 0.0) -> SnapshotInfo:
    counts = header["counts"]
    return SnapshotInfo(path=path, key_prefix=header["key_prefix"], shards=int(header["shards"]),
                        created_at=header["created_at"], keys=int(counts["keys"]), records=int(counts["records"]),
                        elements=int(counts["elements"]), by_type=dict(counts["by_type"]),
                        file_bytes=path.stat().st_size if path.exists() else 0, seconds=seconds, header=header)


# ----------------------------------------------------------------------------- reading
@contextlib.contextmanager
def _lock(out_dir: str | os.PathLike) -> Iterator[bool]:
    """One snapshot writer per output folder (maintenance and manage.py may overlap)."""
    folder = snapshot_dir(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "a+") as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def checkpoint(settings: Settings, out_dir: str | os.PathLike | None = None, keep: int = 3) -> SnapshotInfo | None:
    """Snapshot into ``OUT/snapshots/snapshot-<UTC>.jsonl.gz`` and keep the newest
    ``keep``; None when another snapshot of this folder is being written."""
    out = settings.OUT_DIR if out_dir is None else out_dir
    with _lock(out) as got:
        if not got:
            return None
        info = snapshot(settings, new_snapshot_path(out))
        rotate(out, keep)
        return info


def maybe_checkpoint(settings: Settings, interval_s: float, keep: int = 3,
                     now: float | None = None) -> SnapshotInfo | None:
    """``checkpoint`` when the newest snapshot is older than ``interval_s`` (cheap
    otherwise: one directory listing), for a periodic caller. 0 disables."""
    if interval_s <= 0:
        return None
    now = time.time() if now is None else now
    latest = latest_snapshot(settings.OUT_DIR)
    if latest is not None and now - latest.stat().st_mtime < interval_s:
        return None
    return checkpoint(settings, keep=keep)


def info_dict(info: SnapshotInfo) -> dict[str, Any]:
    """JSON-friendly summary for manage.py output."""
    out = asdict(info)
    out["path"] = str(info.path)
    out.pop("header", None)
    return out


__all__ = [
    "SnapshotError",
    "SnapshotInfo",
    "checkpoint",
    "info_dict",
    "latest_snapshot",
    "list_snapshots",
    "maybe_checkpoint",
    "new_snapshot_path",
    "rotate",
    "snapshot",
    "snapshot_dir",
]
