"""Spool files: a fetch batch's page bodies, on the node that fetched them.

Bodies never cross the broker (measured: zlib + base64 + JSON + kombu's own base64 cost
more CPU than parsing); the parse task on the same node reads the batch's file. A parse
message names its batch, never a path: the file is always ``OUT/spool/<batch_id>.bin``,
and a batch id is checked before it becomes a file name, so a forged message cannot make
a worker read or delete any other file.
"""
from __future__ import annotations

import contextlib
import os
import random
import re
import time
from typing import Any

import orjson

from crawler_tasks.exceptions import MessageError
from crawler_tasks.records import BodyRef
from crawler_tasks.settings import Settings

_BATCH_ID_RE = re.compile(r"[0-9a-f]{1,16}-[0-9a-f]{1,8}-[0-9a-f]{8}")


def new_batch_id() -> str:
    """``<epoch ms>-<pid>-<random>`` in hex: unique across processes and machines."""
    return f"{int(time.time() * 1000):x}-{os.getpid():x}-{random.getrandbits(32):08x}"


def check_batch_id(batch_id: object) -> str:
    """The batch id of a task message, or MessageError: ids are ``<ms>-<pid>-<random>`` in hex."""
    if not isinstance(batch_id, str) or not _BATCH_ID_RE.fullmatch(batch_id):
        raise MessageError(f"bad batch id {str(batch_id)[:80]!r}")
    return batch_id


def spool_dir(settings: Settings) -> str:
    return os.path.join(settings.OUT_DIR, "spool")


def spool_path(settings: Settings, batch_id: str) -> str:
    return os.path.join(spool_dir(settings), f"{check_batch_id(batch_id)}.bin")


def write_spool(settings: Settings, batch_id: str, bodies: list[bytes]) -> list[BodyRef]:
    """Write the batch's bodies to its spool file; where each one lies in it."""
    os.makedirs(spool_dir(settings), exist_ok=True)
    refs, offset = [], 0
    for body in bodies:
        refs.append(BodyRef(offset, len(body)))
        offset += len(body)
    with open(spool_path(settings, batch_id), "wb") as fh:
        fh.write(b"".join(bodies))
    return refs


def read_spool(settings: Settings, batch_id: str) -> bytes:
    """The batch's bodies; OSError if the file is gone (a redelivered task)."""
    with open(spool_path(settings, batch_id), "rb") as fh:
        return fh.read()


# Markers of a batch's outputs written (``written_marker``) older than this are removed.
MARKER_TTL_S = 3600.0


def written_marker(settings: Settings, batch_id: str, output: str) -> str:
    """The file that says a batch's lines of ``output`` (``pages``, ``feed``) are written:
    an empty file beside its spool file, made under the output's lock (jsonl.append_lines)."""
    return os.path.join(spool_dir(settings), f"{check_batch_id(batch_id)}.{output}")


def prune_markers(settings: Settings, older_than_s: float = MARKER_TTL_S, now: float | None = None,
                  outputs: tuple[str, ...] = ("pages", "feed")) -> int:
    """Remove the ``outputs`` markers of batches older than ``older_than_s`` (by their id's
    time: no message of theirs is redelivered so late); how many were removed."""
    cutoff_ms = ((time.time() if now is None else now) - older_than_s) * 1000
    removed = 0
    try:
        names = os.listdir(spool_dir(settings))
    except OSError:
        return 0
    for name in names:
        stem, _, output = name.partition(".")
        if output in outputs and _BATCH_ID_RE.fullmatch(stem) and int(stem.split("-", 1)[0], 16) < cutoff_ms:
            try:
                os.unlink(os.path.join(spool_dir(settings), name))
                removed += 1
            except OSError:
                pass
    return removed


def kept_path(settings: Settings, batch_id: str) -> str:
    return os.path.join(spool_dir(settings), f"{check_batch_id(batch_id)}.msg")


def keep_message(settings: Settings, batch_id: str, task: str, items: list[Any]) -> None:
    """Keep on this node's disk the stage message about to be sent for a batch (the parse
    message, then the dedup message in its place) until the batch's records are written
    (``drop_message``). A broker can lose a message it took: kombu's Redis transport pops
    it, then records it as unacknowledged in a second write, which a Redis that has just
    begun refusing writes (disk full) refuses; the resume sends a kept message again
    when no queue holds its batch (ops/reconcile.py). Written whole (renamed into place)."""
    path = kept_path(settings, batch_id)
    os.makedirs(spool_dir(settings), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as fh:
            fh.write(orjson.dumps({"task": task, "items": items}))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def drop_message(settings: Settings, batch_id: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(kept_path(settings, batch_id))


def handed_on(settings: Settings, batch_id: str) -> bool:
    """Whether an earlier run of the batch's parse task got its records out: they are
    written (``records_written``), or its enqueue message is kept (``kept_enqueue``).
    Its pages must not be fetched again then: a Redis restart, or maintenance past the
    group's deadline, hands a parse message out again when its ack was lost or its
    worker died."""
    return records_written(settings, batch_id) or kept_enqueue(settings, batch_id) is not None


def records_written(settings: Settings, batch_id: str, output: str = "pages") -> bool:
    """Whether the batch's lines of ``output`` are written (its marker): its records in
    pages.jsonl, or its feed lines."""
    return os.path.exists(written_marker(settings, batch_id, output))


def kept_enqueue(settings: Settings, batch_id: str) -> list[Any] | None:
    """The items of the batch's enqueue message kept by its parse task (``keep_message``)."""
    kept = _read_kept(kept_path(settings, batch_id))
    return kept[1] if kept is not None and kept[0] == "enqueue" else None


def _read_kept(path: str) -> tuple[str, list[Any]] | None:
    """(task, items) of a kept message; None when it is missing or unreadable."""
    try:
        with open(path, "rb") as fh:
            kept = orjson.loads(fh.read())
        return str(kept["task"]), list(kept["items"])
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError):
        return None


def kept_messages(settings: Settings) -> dict[str, tuple[str, list[Any]]]:
    """batch id -> (task, items) of every message kept on this node (unreadable ones skipped)."""
    out: dict[str, tuple[str, list[Any]]] = {}
    try:
        names = os.listdir(spool_dir(settings))
    except OSError:
        return out
    for name in names:
        stem, _, ext = name.partition(".")
        if ext != "msg" or not _BATCH_ID_RE.fullmatch(stem):
            continue
        kept = _read_kept(os.path.join(spool_dir(settings), name))
        if kept is not None:
            out[stem] = kept
    return out


def remove_spool(settings: Settings, batch_id: str) -> None:
    try:
        os.unlink(spool_path(settings, batch_id))
    except OSError:
        pass
