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

Consistency: a snapshot taken while workers run is *not* a point-in-time image
across keys (each small key is read atomically, big keys chunk by chunk). It is
ordered to fail safe: per shard the Bloom segments and the exact seen-set first,
then the front queues, then everything else (back queues, host tables, stats). A
URL moving from a front queue to a back queue during the snapshot is therefore
captured at least once (possibly twice, then it is fetched twice); a URL whose Bloom
bits are missing may be enqueued again later. Leases present in the snapshot are
restored as-is: no worker holds them after a restore, so maintenance's lease expiry
(``Frontier.expire``, at most ``LEASE_S`` later) returns those hosts to the ready
heap, and no URL is lost because a leased host's URL stays at the head of its back
queue until ``complete``. ``restore`` also repairs host-table entries torn between
keys (a back queue whose host is not active, an active host in neither the ready
heap nor the lease table) and, by default, forgets the in-flight batch table (those
batches cannot exist in a restored crawl and would only hold back-pressure slots
until BATCH_TIMEOUT_S). What a live snapshot cannot hold: links found by batches
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
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis

from crawler_tasks.connection import bytes_client, main_url, shard_url
from crawler_tasks.exceptions import CrawlerError
from crawler_tasks.frontier.bloom import BloomSpec
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
_MUST_MATCH = ("SHARDS", "PRIORITY_LEVELS", "BLOOM_EXPECTED_URLS", "BLOOM_ERROR_RATE")


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
def _safe_url(url: str) -> str:
    """A Redis URL without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None and parts.username is None:
        return url
    netloc = parts.hostname or ""
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


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
    bloom = BloomSpec.for_capacity(max(1, settings.BLOOM_EXPECTED_URLS // settings.SHARDS), settings.BLOOM_ERROR_RATE)
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
                    first[url] += [k.bloom(s).encode() for s in range(bloom.segments)] + [k.seen.encode()]
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
    cursor = 0
    while True:
        cursor, keys = client.scan(cursor, match=_match(prefix), count=SCAN_COUNT)
        if keys:
            return True
        if cursor == 0:
            return False


def _delete_prefix(client: redis.Redis, prefix: str) -> int:
    deleted = 0
    cursor = 0
    while True:
        cursor, keys = client.scan(cursor, match=_match(prefix), count=SCAN_COUNT)
        if keys:
            deleted += int(client.unlink(*keys))
        if cursor == 0:
            return deleted


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
                + ", ".join(_safe_url(u) for u in present)
                + "; stop that crawl and restore with replace=True (manage.py restore --replace) to overwrite it")
        for url in present:
            n = _delete_prefix(loader.client(url), settings.KEY_PREFIX)
            log.warning("restore: deleted %d keys with prefix %r on %s", n, settings.KEY_PREFIX, _safe_url(url))
        for head, rec in _records(path):
            if head is not None or rec is None:
                continue
            key, type_, part, values, scores = _parse(rec)
            loader.write(key, type_, part, values, scores, int(rec.get("ttl_ms", 0)), rec.get("at") == "head")
        loader.flush()
        g = GlobalKeys(settings.KEY_PREFIX)
        if not keep_inflight:
            loader.client(main_url(settings)).delete(g.inflight, g.sessions)
        info.repaired = _reconcile(settings, loader, time.time())
    finally:
        loader.close()
    info.seconds = time.time() - started
    if info.repaired:
        log.warning("restore: repaired host tables torn by a live snapshot: %s", info.repaired)
    return info


# ----------------------------------------------------------------------------- periodic
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
    "restore",
    "rotate",
    "snapshot",
    "snapshot_dir",
    "verify",
]
