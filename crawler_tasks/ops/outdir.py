"""One crawl owns its output folder.

``OUT/crawl.lock`` holds an exclusive ``flock`` for the life of the process that took
it, and names that owner (pid, host, start time) for the message a second crawl gets.
The kernel drops the lock when its owner dies, however it dies (``kill -9`` too), so a
lock left by a dead owner is simply taken over; an owner that ends normally empties the
file, so a name left in it tells the next crawl that its predecessor was killed. The lock is taken before anything in the folder is written or deleted, and is
not inherited by the crawl's children (``O_CLOEXEC``; they are forked by a server that
started before it).

Its workers hold ``OUT/workers.lock`` shared (``hold_for_worker``). They outlive a runner
that was killed by a few seconds (``ops.child``); a crawl that takes the folder over waits
for them first, so that none writes there while it repairs what they left.

A folder that holds a previous crawl is never emptied unless the operator asks
(``--overwrite``); ``--resume`` and ``--restore`` continue it instead.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from crawler_tasks.exceptions import ConfigError

LOCK_FILE = "crawl.lock"
WORKERS_LOCK = "workers.lock"
# How long a crawl waits for the workers of a killed one before it kills them: they exit
# within a few seconds of losing their runner (ops.child), unless hung.
WORKERS_WAIT_S = 15.0
# What a previous crawl leaves in its folder (any one of them means "a crawl was here").
CRAWL_OUTPUTS = ("pages.jsonl", "feed.jsonl", "warc", "redis", "crawl.json", "snapshots", "spool", "spill",
                 "job.toml", "unfetched.jsonl")


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
        self.waited_s = 0.0                  # for the workers it left running
        self.killed: list[int] = []          # those that did not exit in WORKERS_WAIT_S

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
        try:
            self._outlive_workers(WORKERS_WAIT_S)
        except BaseException:
            self.release()
            raise
        return self

    def _outlive_workers(self, wait_s: float) -> None:
        """Wait until no worker of an earlier crawl holds the folder; kill those left after
        ``wait_s`` (they belong to a crawl whose runner is gone)."""
        fd = os.open(self.out_dir / WORKERS_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        started = time.monotonic()
        deadline = started + wait_s
        try:
            while not _try_flock(fd, fcntl.LOCK_EX):
                if time.monotonic() >= deadline:
                    holders = lock_holders(fd)
                    if self.killed or not holders:
                        raise ConfigError(f"processes of an earlier crawl still use {self.out_dir} (pids "
                                          f"{', '.join(map(str, holders or self.killed))}); stop them, or give another --out")
                    for pid in holders:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)
                    self.killed = holders
                    deadline = time.monotonic() + 2.0
                time.sleep(0.05)
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
            self.waited_s = time.monotonic() - started

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


def hold_for_worker(out_dir: str | os.PathLike[str]) -> None:
    """In a worker of the crawl in ``out_dir``: hold the folder's workers lock (shared) for
    the life of the process and of the processes it forks. Best effort: a folder that
    cannot be written only loses the wait of the next crawl."""
    try:
        fd = os.open(Path(out_dir) / WORKERS_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:
        return
    if not _try_flock(fd, fcntl.LOCK_SH):
        os.close(fd)   # a new crawl is checking the folder: its runner is not ours


def _try_flock(fd: int, kind: int) -> bool:
    try:
        fcntl.flock(fd, kind | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def lock_holders(fd: int) -> list[int]:
    """Pids holding a flock on the file open at ``fd`` (Linux, ``/proc/locks``)."""
    st = os.fstat(fd)
    where = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return []
    pids = []
    for line in lines:
        parts = line.split()
        # "1: FLOCK  ADVISORY  READ  1234 08:01:5678 0 EOF" (a blocked waiter adds "->")
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5] == where and parts[4].isdigit():
            pids.append(int(parts[4]))
    return sorted(set(pids) - {os.getpid()})


def previous_outputs(out_dir: Path) -> list[str]:
    """What a previous crawl left in ``out_dir`` (names), or []."""
    found = [name for name in CRAWL_OUTPUTS if (out_dir / name).exists()]
    return found + sorted(p.name for p in out_dir.glob("celerybeat-schedule*"))
