"""``manage.py crawl``: one command that owns every process of a crawl.

It starts (when no Redis is given) a private redis-server, then Celery worker
processes (fetch, parse/dedup, control) and beat as children in their own process
groups, shows progress, restarts a worker or beat that dies (its leased hosts come
back when their leases expire), and stops everything (beat first, then workers with
a warm shutdown, then Redis) when the crawl finishes, a limit is hit, or on Ctrl-C or
SIGTERM. Children also get SIGTERM if this process is killed (PR_SET_PDEATHSIG), so
no worker, beat or redis-server outlives it.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TextIO

import redis

from crawler_tasks.queues import CONTROL_QUEUE, DEDUP_QUEUE, fetch_queue, parse_queue
from crawler_tasks.connection import global_client
from crawler_tasks.ops.embedded import EmbeddedRedis, die_with_parent
from crawler_tasks.exceptions import ConfigError
from crawler_tasks.frontier import Frontier
from crawler_tasks.ops.maintenance import Progress, read_progress
from crawler_tasks.ops.metrics import serve_metrics
from crawler_tasks.ops.metrics import stop as stop_metrics
from crawler_tasks.stages.enqueue import seed_urls
from crawler_tasks.ops.control import Control, CrawlState
from crawler_tasks.settings import Settings
from crawler_tasks.ops.snapshot import latest_snapshot, restore

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
STATE_FILE = "crawl.json"
# Children that die are restarted, at most this many times per crawl.
MAX_RESTARTS = 10


def read_seeds_file(path: str) -> list[str]:
    """One URL per line; blank lines and ``#`` comments skipped."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ConfigError(f"cannot read seeds file {path}: {exc.strerror or exc}") from None
    seeds = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            seeds.append(line)
    return seeds


class Child:
    def __init__(self, name: str, args: list[str], env: dict[str, str], log_path: Path) -> None:
        self.name = name
        self.args = args
        self.env = env
        self.log_path = log_path
        self._log = open(log_path, "ab")
        self.proc = subprocess.Popen(args, env=env, cwd=str(REPO_ROOT), stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True, preexec_fn=die_with_parent)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def terminate(self) -> None:
        """SIGTERM the child's process group (a worker's warm shutdown)."""
        if self.alive():
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def reap(self, deadline: float) -> None:
        """Wait until ``deadline`` (monotonic), then SIGKILL whatever is left of the group."""
        try:
            self.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass
        self._log.close()


class CrawlRunner:
    def __init__(self, settings: Settings, *, seeds: list[str], workers: int = 2, parsers: int = 2,
                 resume: bool = False, restore_from: str | None = None, out: TextIO = sys.stderr) -> None:
        self.restore_from = restore_from
        self.settings = settings
        self.seeds = seeds
        self.workers = max(1, workers)
        self.parsers = max(1, parsers)
        self.resume = resume
        self.out = out
        self.out_dir = Path(settings.OUT_DIR)
        self.redis: EmbeddedRedis | None = None
        self.metrics_server: object | None = None
        self.children: list[Child] = []
        self._stop_requested = ""
        self.restarts = 0
        self.started = time.time()

    # -- lifecycle ------------------------------------------------------------------
    def run(self) -> int:
        old = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            self._prepare()
            self._start_metrics()
            self._start_children()
            progress = self._watch()
            self._summary(progress)
            return 0 if progress.state == CrawlState.FINISHED or self._stop_requested else 1
        finally:
            self._shutdown()
            for sig, handler in old.items():
                signal.signal(sig, handler)

    def _on_signal(self, signum: int, _frame: object) -> None:
        if self._stop_requested:
            raise KeyboardInterrupt  # second Ctrl-C: stop right now
        self._stop_requested = signal.Signals(signum).name
        self._say(f"\n{self._stop_requested}: stopping the crawl (again to force)")

    def _say(self, message: str) -> None:
        print(message, file=self.out, flush=True)

    def _prepare(self) -> None:
        s = self.settings
        self.out_dir.mkdir(parents=True, exist_ok=True)
        if not self.resume:
            removed = [name for name in ("pages.jsonl", "warc", "redis", "logs", STATE_FILE, "celerybeat-schedule",
                                         "snapshots", "spool", "spill")
                       if (self.out_dir / name).exists()]
            for name in removed:
                path = self.out_dir / name
                shutil.rmtree(path) if path.is_dir() else path.unlink()
            if removed:
                self._say(f"fresh crawl: removed previous output in {self.out_dir} ({', '.join(removed)}); "
                          "use --resume to continue a crawl")
        (self.out_dir / "logs").mkdir(exist_ok=True)
        if not s.REDIS_URL:
            # with EMBEDDED_REDIS_AOF a crashed redis-server comes back with all but the
            # last second; without, with its last RDB save or else the last checkpoint
            self.redis = EmbeddedRedis(self.out_dir / "redis", appendonly=s.EMBEDDED_REDIS_AOF,
                                       save="30 1000 300 1").start()
            s = self.settings = dataclasses.replace(s, REDIS_URL=self.redis.url)
            self._say(f"embedded redis-server on {self.redis.url} (data in {self.out_dir / 'redis'})")
        client = global_client(s)
        client.ping()
        control = Control(s)
        if self.restore_from:
            path = latest_snapshot(self.out_dir) if self.restore_from == "latest" else Path(self.restore_from)
            if path is None:
                raise ConfigError(f"--restore latest: no snapshot in {self.out_dir / 'snapshots'}")
            info = restore(s, path, replace=True)
            self._say(f"restored {path} ({info.keys} keys)")
        if not self.resume:
            self._clear_keys()
        elif not control.exists():
            raise ConfigError(f"--resume: no crawl state found in {s.REDIS_URL} (prefix {s.KEY_PREFIX!r})")
        control.start(started_at=self.started)
        Frontier(s).allocate_bloom()
        if self.seeds:
            added, rejected = seed_urls(s, self.seeds)
            for message in rejected:
                self._say(f"seed skipped: {message}")
            self._say(f"{added} seed URL(s) queued")
            if not added and not self.resume:
                raise ConfigError("no usable seed URL")
        elif not self.resume:
            raise ConfigError("no seed URLs: give URLs or --seeds-file")
        (self.out_dir / STATE_FILE).write_text(json.dumps({
            "redis_url": s.REDIS_URL, "key_prefix": s.KEY_PREFIX, "shards": s.SHARDS, "pid": os.getpid(),
            "started_at": self.started, "priority_levels": s.PRIORITY_LEVELS,
            "bloom_expected_urls": s.BLOOM_EXPECTED_URLS, "bloom_error_rate": s.BLOOM_ERROR_RATE,
            "redis_shard_urls": list(s.REDIS_SHARD_URLS)}))

    def _clear_keys(self) -> None:
        """A fresh crawl on a given Redis: drop this prefix's keys and our queues."""
        s = self.settings
        client = global_client(s)
        for key in client.scan_iter(match=f"{s.KEY_PREFIX}:*", count=1000):
            client.delete(key)
        frontier = Frontier(s)
        for shard in range(s.SHARDS):
            c = frontier.client(shard)
            for key in c.scan_iter(match=f"{s.KEY_PREFIX}:*", count=1000):
                c.delete(key)

    def _start_children(self) -> None:
        s = self.settings
        if "CRAWLER_MAX_FETCH_SESSIONS" not in os.environ:  # one running session per fetch slot
            s = self.settings = dataclasses.replace(s, MAX_FETCH_SESSIONS=self.workers * s.FETCH_CONCURRENCY)
        env = {**os.environ, **s.to_env(), "PYTHONPATH": os.pathsep.join(
            [str(REPO_ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))}
        tag = f"{os.getpid()}"
        celery = [sys.executable, "-m", "celery", "-A", "crawler_tasks"]
        common = ["--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "INFO"]
        if s.TASK_EVENTS:
            common.append("-E")
        fetch_queues = ",".join(fetch_queue(i) for i in range(s.SHARDS))
        # no prefork parent copying every message into a child: fetch workers run their
        # sessions on a threads pool (each session a thread per host, mostly waiting),
        # parse workers are solo
        specs = [(f"worker-fetch-{i}", celery + ["worker", "-Q", fetch_queues, "-P", "threads",
                                                 "-c", str(s.FETCH_CONCURRENCY),
                                                 "-n", f"fetch{i}-{tag}@%h"] + common)
                 for i in range(self.workers)]
        specs += [(f"worker-process-{i}", celery + ["worker", "-Q", f"{parse_queue(s.node_name)},{DEDUP_QUEUE}", "-P", "solo",
                                                    "-n", f"process{i}-{tag}@%h"] + common)
                  for i in range(self.parsers)]
        specs += [
            ("worker-control", celery + ["worker", "-Q", CONTROL_QUEUE, "-P", "solo",
                                         "-n", f"control-{tag}@%h"] + common),
            ("beat", celery + ["beat", "-s", str(self.out_dir / "celerybeat-schedule"), "-l", "INFO"]),
        ]
        for name, args in specs:
            self.children.append(Child(name, args, env, self.out_dir / "logs" / f"{name}.log"))
        self._say(f"started {len(self.children)} processes (fetch x{self.workers}, parse/dedup x{self.parsers}, "
                  f"control, beat); logs in {self.out_dir / 'logs'}")

    def _watch(self) -> Progress:
        s = self.settings
        tty = self.out.isatty()
        last_line = 0.0
        last_pages, last_at = 0, time.time()
        rate = 0.0
        while True:
            time.sleep(1.0)
            if self.redis is not None and not self.redis.alive():
                self._recover_redis()
                continue
            try:
                progress = read_progress(s)
            except redis.RedisError:
                if self.redis is not None and not self.redis.alive():
                    continue  # restarted on the next turn
                raise
            now = time.time()
            if now - last_at >= 2.0:
                rate = (progress.pages - last_pages) / (now - last_at)
                last_pages, last_at = progress.pages, now
            line = (f"{progress.state:9s} {now - self.started:7.1f}s  pages {progress.pages:7d}  "
                    f"{rate:7.1f}/s  queued {progress.queued:7d}  leased {progress.leased:4d}  "
                    f"errors {progress.errors:5d}")
            if tty:
                print("\r" + line, end="", file=self.out, flush=True)
            elif now - last_line >= 10.0:
                self._say(line)
                last_line = now
            if progress.state == CrawlState.FINISHED:
                if tty:
                    print(file=self.out)
                return progress
            for i, child in enumerate(self.children):
                if child.alive():
                    continue
                if self.restarts >= MAX_RESTARTS:
                    reason = f"{child.name} died {self.restarts} times; giving up (see {self.out_dir / 'logs'})"
                    self._say("\n" + reason)
                    Control(s).set_state(CrawlState.FINISHED, reason)
                    progress.state, progress.reason = CrawlState.FINISHED, reason
                    return progress
                # a dead worker's hosts return when their leases expire; nothing is lost
                self.restarts += 1
                self._say(f"\n{child.name} exited with {child.proc.returncode}; restarting it")
                child.reap(time.monotonic())
                self.children[i] = Child(child.name, child.args, child.env, child.log_path)
            if self._stop_requested and progress.state == CrawlState.RUNNING:
                Control(s).set_state(CrawlState.STOPPING, f"stopped by {self._stop_requested}")
            if s.MAX_SECONDS and now - self.started >= s.MAX_SECONDS and progress.state == CrawlState.RUNNING:
                Control(s).set_state(CrawlState.STOPPING, f"max seconds ({s.MAX_SECONDS:g}) reached")
            if progress.state == CrawlState.STOPPING and (self._stop_requested or s.MAX_SECONDS):
                # maintenance finishes the crawl once in-flight batches are through;
                # do not wait for that longer than a fetch can take
                stopping_for = now - (Control(s).state()[2] or now)
                if stopping_for > s.TOTAL_TIMEOUT_S + 10:
                    Control(s).set_state(CrawlState.FINISHED, "stopped with batches still in flight")

    def _recover_redis(self) -> None:
        """Restart a crashed embedded redis-server on its port from its data folder (the
        append-only file loses at most a second, an RDB save more; what was fetched since
        is fetched again, and leases it held expire and return their hosts). Without its
        data, fall back to the last checkpoint; without one, stop with a clear message
        rather than call the crawl done."""
        assert self.redis is not None
        self._say(f"\nembedded redis-server exited; restarting it from {self.out_dir / 'redis'}")
        self.redis.restart()
        self.restarts += 1
        s = self.settings
        if Control(s).exists():
            return
        path = latest_snapshot(self.out_dir)
        if path is None:
            raise ConfigError("the embedded Redis lost the crawl state and there is no checkpoint in "
                              f"{self.out_dir / 'snapshots'}; the crawl cannot continue")
        info = restore(s, path, replace=True)
        Control(s).start()
        self._say(f"crawl state restored from checkpoint {path} ({info.keys} keys)")

    def _summary(self, progress: Progress) -> None:
        elapsed = time.time() - self.started
        reason = Control(self.settings).state()[1] or progress.reason
        self._say(f"crawl finished: {reason}")
        self._say(f"  pages fetched {progress.pages} in {elapsed:.1f} s ({progress.pages / max(elapsed, 1e-9):.1f} pages/s), "
                  f"still queued {progress.queued}")
        statuses = {k.rsplit("/", 1)[1]: v for k, v in progress.stats.items() if k.startswith("fetch/status/")}
        if statuses:
            self._say("  status " + ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items())))
        errors = {k.split("/", 2)[2]: v for k, v in progress.stats.items() if k.startswith("records/error/")}
        if errors:
            self._say("  errors " + ", ".join(f"{k}: {v}" for k, v in sorted(errors.items())))
        cpu = {k.split("/", 1)[1]: v for k, v in progress.stats.items() if k.startswith("cpu_ms/")}
        if cpu and progress.pages:
            self._say("  stage CPU ms per page: " + ", ".join(
                f"{k} {v / progress.pages:.2f}" for k, v in sorted(cpu.items())))
        self._say(f"  output: {self.out_dir / 'pages.jsonl'}, {self.out_dir / 'warc'}")

    def _start_metrics(self) -> None:
        s = self.settings
        if s.METRICS_PORT < 0:
            return
        try:
            self.metrics_server, port = serve_metrics(s, s.METRICS_PORT, s.METRICS_ADDR)
        except OSError as exc:
            self._say(f"warning: metrics endpoint not started: {exc}")
            return
        self._say(f"metrics: http://{s.METRICS_ADDR}:{port}/metrics")
        state = self.out_dir / STATE_FILE
        info = json.loads(state.read_text())
        info["metrics_port"] = port
        state.write_text(json.dumps(info))

    def _shutdown(self) -> None:
        """Beat first (nothing new is scheduled), then every worker at once."""
        beat = [c for c in self.children if c.name == "beat"]
        workers = [c for c in self.children if c.name != "beat"]
        for group in (beat, workers):
            for child in group:
                child.terminate()
            deadline = time.monotonic() + 15.0
            for child in group:
                child.reap(deadline)
        self.children.clear()
        if self.metrics_server is not None:
            stop_metrics(self.metrics_server)
            self.metrics_server = None
        if self.redis is not None:
            self.redis.stop()
            self.redis = None
