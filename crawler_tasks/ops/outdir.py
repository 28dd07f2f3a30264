"""One crawl owns its output folder.

``OUT/crawl.lock`` holds an exclusive ``flock`` for the life of the process that took
it, and names that owner (pid, host, start time) for the message a second crawl gets.
The kernel drops the lock when its owner dies, however it dies (``kill -9`` too), so a
lock left by a dead owner is simply taken over; an owner that ends normally empties the
file, so a name left in it tells the next crawl that its predecessor was killed. The lock is taken before anything in the folder is written or deleted, and is
not inherited by the crawl's children (``O_CLOEXEC``; they are forked by a server that
started before it).

A folder that holds a previous crawl is never emptied unless the operator asks
(``--overwrite``); ``--resume`` and ``--restore`` continue it instead.
"""
from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from crawler_tasks.exceptions import ConfigError

LOCK_FILE = "crawl.lock"
# What a previous crawl leaves in its folder (any one of them means "a crawl was here").
CRAWL_OUTPUTS = ("pages.jsonl", "feed.jsonl", "warc", "redis", "crawl.json", "snapshots", "spool", "spill")


@dataclass(frozen=True, slots=True)
class Owner:
    pid: int
    host: str
    started_at: float

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started_at))
        return f"pid {self.pid} on {self.host}, started {when}"


def read_owner(out_dir: Path) -> Owner | None:
    try:
        info = json.loads((out_dir / LOCK_FILE).read_text())
        return Owner(int(info["pid"]), str(info["host"]), float(info["started_at"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


class OutputLock:
    """The exclusive claim of one process on an output folder."""

    def __init__(self, out_dir: str | os.PathLike[str]) -> None:
        self.out_dir = Path(out_dir)
        self.fd: int | None = None
        self.previous: Owner | None = None   # a dead owner whose lock was taken over

    def acquire(self) -> OutputLock:
        """Take the folder, or ConfigError naming the crawl that holds it."""
        try:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.out_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise ConfigError(f"cannot use the output folder {self.out_dir}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            owner = read_owner(self.out_dir)
            who = owner.describe() if owner else "another process"
            raise ConfigError(f"the output folder {self.out_dir} is in use by a running crawl ({who}); "
                              "wait for it to end, stop it, or give another --out") from None
        self.previous = read_owner(self.out_dir)
        me = {"pid": os.getpid(), "host": socket.gethostname(), "started_at": time.time()}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode() + b"\n", 0)
        self.fd = fd
        return self

    def release(self) -> None:
        """Emptied while still held (an owner named in the file died without releasing)."""
        if self.fd is not None:
            os.ftruncate(self.fd, 0)
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> OutputLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def previous_outputs(out_dir: Path) -> list[str]:
    """What a previous crawl left in ``out_dir`` (names), or []."""
    found = [name for name in CRAWL_OUTPUTS if (out_dir / name).exists()]
    return found + sorted(p.name for p in out_dir.glob("celerybeat-schedule*"))
