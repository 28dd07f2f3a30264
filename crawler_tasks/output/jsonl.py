"""JSON-lines output: ``pages.jsonl`` (one record per URL) and the indexer feed.

- ``OUT/pages.jsonl``: appended by whichever worker finishes a batch, one ``write``
  of whole lines under an exclusive ``flock``, so lines never interleave.
- the indexer feed: one record per indexable page (url, title, text, outlinks with
  anchor text, lang, fingerprints, fetched_at) appended to ``OUT/feed.jsonl`` and added
  to the Redis Stream ``<prefix>:{g}:feed`` (capped near FEED_STREAM_MAXLEN), which an
  indexer reads with a consumer group (XREADGROUP). Duplicates, noindex pages, soft
  404s and non-canonical variants are not in the feed.

Policy: an append that fails (disk full...) is cut back to where it began, under its
lock, so a file never holds part of a batch and the append can be made again. A task
that meets a storage refusal (``storage_refused``: a full or failing disk, Redis
refusing writes or down) never fails on it: acknowledged as failed, its batch would be
lost. Its writes are made again in place (``once_written``) with a back-off until the
storage takes them, or until the worker is asked to stop (``WorkerStopping``: the
message is then left unacknowledged, delivered again at resume).
"""
from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import time
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import orjson
import redis

from crawler_tasks.connection import global_client
from crawler_tasks.keys import GlobalKeys
from crawler_tasks.settings import Settings

log = logging.getLogger(__name__)
T = TypeVar("T")

PAGES_FILE = "pages.jsonl"
FEED_FILE = "feed.jsonl"
JOB_FILE = "job.toml"   # the crawl's effective job (ops/job.py), also in each WARC file's warcinfo


def pages_path(settings: Settings) -> str:
    return os.path.join(settings.OUT_DIR, PAGES_FILE)


def json_line(record: dict[str, Any]) -> bytes:
    """One record as compact UTF-8 JSON. orjson takes ~1/50 of the stdlib's time on a
    page's text (0.005 ms against 0.25 for 55 kB); text it refuses (a lone surrogate
    from a broken page) is written by the stdlib with ASCII escapes, still valid JSON."""
    try:
        return orjson.dumps(record)
    except (TypeError, orjson.JSONEncodeError):
        return json.dumps(record, separators=(",", ":")).encode("ascii")


def append_jsonl(path: str | os.PathLike, records: Iterable[dict[str, Any]], marker: str | None = None) -> int:
    """Append records as JSON lines atomically with respect to other writers."""
    return append_lines(path, [json_line(r) for r in records], marker)


def append_lines(path: str | os.PathLike, lines: list[bytes], marker: str | None = None) -> int:
    """Append whole lines with one write under an exclusive lock (no interleaving); on a
    failed write the file is cut back to its length before it, so it holds all of the
    lines or none. With ``marker`` (a batch's file, ``spool.written_marker``) the lines
    are appended once: a batch run again (a redelivered message, a Redis restart that
    forgot its end) finds the marker, made under the same lock, and writes nothing."""
    if not lines:
        return 0
    raw = b"\n".join(lines) + b"\n"
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if marker is not None and os.path.exists(marker):
            return 0
        if marker is not None:
            Path(marker).parent.mkdir(parents=True, exist_ok=True)
        start = whole_lines_end(fd)
        view = memoryview(raw)
        try:
            while view:
                n = os.write(fd, view)
                view = view[n:]
            if marker is not None:
                os.close(os.open(marker, os.O_WRONLY | os.O_CREAT, 0o644))
        except BaseException:
            os.ftruncate(fd, start)   # a shorter file needs no new block: this works on a full disk
            raise
    finally:
        os.close(fd)
    return len(raw)


def whole_lines_end(fd: int, chunk: int = 65536) -> int:
    """The file's length without a torn last line, cut off if there is one. A writer
    killed (-9) inside its write() can leave part of its lines: the kernel stops a write
    to a regular file at a fatal signal. Its batch has no marker, so it is written again
    whole; the fragment would otherwise glue onto the next line."""
    size = os.fstat(fd).st_size
    if not size or os.pread(fd, 1, size - 1) == b"\n":
        return size
    end = size
    while end > 0:
        begin = max(0, end - chunk)
        newline = os.pread(fd, end - begin, begin).rfind(b"\n")
        if newline >= 0:
            end = begin + newline + 1
            break
        end = begin
    os.ftruncate(fd, end)
    return end


# A disk that refuses writes for now (full, over quota, failing, remounted read-only).
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS})
# Redis refusing writes: it cannot write its append-only file or RDB (MISCONF), or is a replica.
REDIS_REFUSALS = ("MISCONF", "READONLY")
# Back-off between attempts while the storage refuses (doubling from the first to the cap).
RETRY_FIRST_S, RETRY_MAX_S = 0.2, 5.0
# While waiting, a worker's shutdown is looked for this often.
STOP_CHECK_S = 0.1
# While refused, the wait is said again in the log this often.
RETRY_LOG_EVERY_S = 60.0


class WorkerStopping(Exception):
    """The worker was asked to stop while a task waited for its storage: the task must
    end without being acknowledged (tasks.py turns this into Celery's WorkerShutdown)."""


def storage_refused(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it: Celery wraps a broker's errors) is the storage
    refusing a write for now: a full or failing disk, Redis down, restarting, or refusing
    writes. Waiting helps; failing the task would lose its batch."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, (redis.ConnectionError, redis.TimeoutError)):
            return True
        if isinstance(cur, redis.ResponseError) and any(word in str(cur) for word in REDIS_REFUSALS):
            return True
        if isinstance(cur, OSError) and cur.errno in STORAGE_ERRNOS:
            return True
        cur = cur.__cause__ or cur.__context__
    return False


def _worker_stopping() -> bool:
    """Whether this Celery worker got a warm or cold shutdown (never outside a worker)."""
    from celery.worker import state

    return state.should_stop is not None or state.should_terminate is not None


def once_written(write: Callable[[], T], wait_s: float | None = None) -> T:
    """Run ``write`` (an output append, or Redis bookkeeping after one) until the storage
    takes it: again and again, backing off, while ``storage_refused`` says the refusal is
    for now; ``wait_s`` bounds the wait (None: until done or the worker stops, then
    ``WorkerStopping``). Any other error is raised at once."""
    first = time.monotonic()
    said = 0.0
    delay = RETRY_FIRST_S
    while True:
        try:
            result = write()
            if said:
                log.warning("the storage takes writes again after %.1f s", time.monotonic() - first)
            return result
        except Exception as exc:
            now = time.monotonic()
            if not storage_refused(exc) or (wait_s is not None and now - first >= wait_s):
                raise
            if not said or now - said >= RETRY_LOG_EVERY_S:
                said = now
                log.warning("storage refuses a write (%s: %s); trying again every %.0f s at most",
                            type(exc).__name__, exc, RETRY_MAX_S)
            until = now + delay
            while True:   # a stop is seen within STOP_CHECK_S, not after the back-off
                if _worker_stopping():
                    raise WorkerStopping(f"stopped while the storage refused writes: {exc}") from exc
                left = until - time.monotonic()
                if left <= 0:
                    break
                time.sleep(min(left, STOP_CHECK_S))
            delay = min(RETRY_MAX_S, delay * 2)


class FeedWriter:
    """The indexer feed of one worker process."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.path = os.path.join(settings.OUT_DIR, FEED_FILE)
        self.stream = GlobalKeys(settings.KEY_PREFIX).feed

    def emit(self, records: list[dict[str, Any]], marker: str | None = None) -> None:
        """Each record is JSON-encoded once, for the file and the stream alike; with
        ``marker``, a batch's records once (``append_lines``)."""
        s = self.settings
        lines = [json_line(r) for r in records]
        if s.FEED_JSONL and not once_written(partial(append_lines, self.path, lines, marker)):
            return   # written by an earlier run of the batch, stream entries with them
        if s.FEED_STREAM_MAXLEN > 0:
            def add() -> None:
                pipe = global_client(s).pipeline(transaction=False)
                for line in lines:
                    pipe.xadd(self.stream, {"record": line}, maxlen=s.FEED_STREAM_MAXLEN, approximate=True)
                pipe.execute()

            once_written(add)
