"""``manage.py crawl``: one command that owns every process of a crawl.

It starts (when no Redis is given) a private redis-server, then Celery worker
processes (fetch, parse/dedup, and control, which runs Beat in a thread; with one fetch
worker, as on a machine of fewer than 16 cores, that one runs control and Beat), each in its
own process group and forked by a fork server that imported them once (ops/child.py;
exec'd when that server is gone), shows progress, restarts a worker that dies (its
leased hosts come back when their leases expire), and stops everything (workers with a
warm shutdown, then Redis) when the crawl finishes, a limit is hit, or on Ctrl-C or
SIGTERM. Children also get SIGTERM if this process is killed (PR_SET_PDEATHSIG; forked
ones when their server dies, which dies with this process), so no worker or
redis-server outlives it. Near the end it polls faster and makes the stop decision
itself (``maintenance.settle``), so the crawl ends when its last batch does.

A child that exits before it ever said it was ready (a worker's "ready.") did not fail
by bad luck: the crawl stops at once with its name, exit code and last log lines
instead of restarting it. Every path handed to a child is absolute (the children run in
the repository folder). The state file ``crawl.json``
holds the Redis URL with its password: it is written mode 0600, and logs/ and redis/
are 0700.
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
from wsgiref.simple_server import WSGIServer

import redis

from crawler_tasks.connection import broker_url, global_client, ping_once, redact, unblock_consumers
from crawler_tasks.exceptions import ConfigError, CrawlerError
from crawler_tasks.frontier import Frontier
from crawler_tasks.frontier.reclaim import entries_of, queued_entries, queued_sample
from crawler_tasks.frontier.spill import Spiller
from crawler_tasks.ops.child import ForkedProc, ForkServer, die_with_parent
from crawler_tasks.ops.embedded import EmbeddedRedis, error_line, log_tail, private_dir, write_private
from crawler_tasks.ops.messages import listed
from crawler_tasks.ops.metrics import serve_metrics
from crawler_tasks.ops.metrics import stop as stop_metrics
from crawler_tasks.ops.outdir import OutputLock, previous_outputs
from crawler_tasks.ops.progress import StatusLine, eta_s, progress_line
from crawler_tasks.ops.reconcile import forget_recorded, reconcile, remember_recorded_tail, roll_back
from crawler_tasks.ops.restore import restore
from crawler_tasks.ops.seeds import seed_urls
from crawler_tasks.ops.snapshot import latest_snapshot
from crawler_tasks.ops.waiting import WaitingHost, WaitReason, describe, waiting_hosts
from crawler_tasks.output.jsonl import JOB_FILE
from crawler_tasks.queues import CONTROL_QUEUE, ENQUEUE_QUEUES, fetch_queue, parse_queue
from crawler_tasks.runtime.control import Control, CrawlState
from crawler_tasks.runtime.livejob import live
from crawler_tasks.runtime.maintenance import Progress, read_progress, settle
from crawler_tasks.settings import Settings
from crawler_tasks.stages.gate import UrlGate

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
STATE_FILE = "crawl.json"
# Children that die are restarted, at most this many times per crawl.
MAX_RESTARTS = 10
# How the runner starts a worker (Celery's, without its command line).
CHILD_COMMAND = [sys.executable, "-m", "crawler_tasks.ops.child"]
# What a worker writes to its log once it is up (at log level INFO).
READY_MARKER = b" ready."
# Unreachable hosts named one by one while the crawl runs; after that only counted.
MAX_HOSTS_NAMED = 10
# Hosts examined per shard for the final summary.
SUMMARY_HOSTS_PER_SHARD = 10_000
# URLs a stopped crawl's summary names among those still queued.
SUMMARY_QUEUED_URLS = 10
UNFETCHED_FILE = "unfetched.jsonl"   # the URLs a stopped crawl left queued, with their outcome
# How often the runner reads progress, checks its children and limits.
WATCH_S = 0.5
# The same once the end is near (stopping, a finite crawl with nothing queued, the page
# budget or the time limit within a second): the runner makes the stop decision itself,
# so the limit and the last batch's end are seen this soon.
WATCH_ENDING_S = 0.05
UNBLOCK_EVERY_S = 0.02   # how often a stopping worker's BRPOP is ended for it (see _unblock_workers)
# Exit code of a crawl stopped because its disk is nearly full (EX_TEMPFAIL: free space, then --resume).
DISK_LOW_EXIT = 75


class StartupError(CrawlerError):
    """A process of the crawl exited before it was up; the message holds its log lines."""


def read_seeds_file(path: str) -> list[str]:
    """One URL per line; blank lines and ``#`` comments skipped. A file that is not UTF-8
    text (a binary given by mistake) is refused whole, not read as lines of mojibake."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read seeds file {path}: {exc.strerror or exc}") from None
    nul = data.find(b"\0")
    try:
        if nul >= 0:
            raise ValueError(f"a NUL byte at offset {nul}")
        text = data.decode("utf-8")
    except ValueError as exc:
        raise ConfigError(f"seeds file {path} is not UTF-8 text ({exc}); give one URL per line") from None
    seeds = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            seeds.append(line)
    return seeds


def default_fetch_workers() -> int:
    """One fetch process holds up to FETCH_MAX_HOSTS hosts, and its fetch CPU (~1.3 ms a
    page) is a fraction of parsing's: a second one on a small machine only adds memory
    (on two cores, two of them made 6.5 instead of 5.6 ms of CPU a page)."""
    return max(1, (os.cpu_count() or 1) // 8)


class Child:
    """One worker: forked by the fork server when it is up and ``args`` run
    ops/child.py, else its own interpreter."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log_path: Path,
                 forks: ForkServer | None = None) -> None:
        self.name = name
        self.args = args
        self.env = env
        self.log_path = log_path
        self.forks = forks
        self._log = open(log_path, "ab")
        self.log_start = self._log.tell()
        self._up = False
        self._terminated = False
        forked = None
        if forks is not None and args[:3] == CHILD_COMMAND:
            forked = forks.spawn(args[3:], log_path)
        self.proc: subprocess.Popen[bytes] | ForkedProc = forked or subprocess.Popen(
            args, env=env, cwd=str(REPO_ROOT), stdin=subprocess.DEVNULL, stdout=self._log,
            stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=die_with_parent)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def came_up(self) -> bool:
        """Whether this incarnation logged that it is ready."""
        if not self._up:
            try:
                with open(self.log_path, "rb") as f:
                    f.seek(self.log_start)
                    self._up = READY_MARKER in f.read()
            except OSError:
                pass
        return self._up

    def terminate(self) -> None:
        """SIGTERM the child's process group (a worker's warm shutdown), once."""
        if self.alive() and not self._terminated:
            self._terminated = True
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
    def __init__(self, settings: Settings, *, seeds: list[str], workers: int | None = None, parsers: int = 2,
                 resume: bool = False, restore_from: str | None = None, out: TextIO = sys.stderr,
                 forks: ForkServer | None = None, overwrite: bool = False, job: str = "") -> None:
        self.restore_from = restore_from
        self.job = job   # the effective job (ops/job.py), written to OUT/job.toml
        self.overwrite = overwrite
        self.lock = OutputLock(Path(settings.OUT_DIR).resolve())
        self.settings = settings
        self.seeds = seeds
        self.workers = max(1, workers or default_fetch_workers())
        self.parsers = max(1, parsers)
        self.resume = resume
        self.out = out
        self.status = StatusLine(out)
        # resolved once: children run in another folder
        self.out_dir = Path(settings.OUT_DIR).resolve()
        self.settings = dataclasses.replace(settings, OUT_DIR=str(self.out_dir))
        self.redis: EmbeddedRedis | None = None
        self.metrics_server: WSGIServer | None = None
        self.children: list[Child] = []
        self.forks = forks  # started by the caller as early as it can, or by run()
        self._stop_requested = ""
        self.restarts = 0
        self.started = time.time()
        self.unreachable: dict[str, WaitingHost] = {}
        self._unreachable_count = 0
        self._pages_before = 0   # fetched by the runs this one resumes
        self._scan_from = self.started
        self._scan_until = 0.0
        self._disk_low = False
        self.save_error = ""

    # -- lifecycle ------------------------------------------------------------------
    def run(self) -> int:
        old = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            if self.forks is None:  # it imports while the crawl is prepared
                self.forks = ForkServer(str(REPO_ROOT))
            self._prepare()
            self._start_metrics()
            self._start_children()
            try:
                progress: Progress | None = self._watch()
            except redis.ResponseError as exc:   # MISCONF: Redis refuses writes it cannot save
                if "MISCONF" not in str(exc):   # alone, or as a script's error
                    raise
                self._disk_low, progress = True, None
                self._say(f"stopping: Redis cannot save the crawl state under {self.out_dir} "
                          f"({str(exc).split('MISCONF', 1)[1].strip()}); every change it accepted is kept")
            self.status.close()
            for child in self.children:  # they wind down while the summary is read
                child.terminate()
            if progress is not None:
                self._summary(progress)
            code = 0 if progress and (progress.state == CrawlState.FINISHED or self._stop_requested) else 1
            if (progress and progress.state == CrawlState.FINISHED and not progress.pages
                    and Control(self.settings).read().idle):
                code = 1   # it ran out of work having fetched nothing (not stopped at a limit): said above
            code = DISK_LOW_EXIT if self._disk_low else code
        finally:
            self.status.close()
            self._shutdown()
            self.lock.release()
            for sig, handler in old.items():
                signal.signal(sig, handler)
        if self.save_error:   # never "finished" over a state that did not reach the disk
            kept = ("; its append-only file keeps every change Redis accepted: free some space, then crawl --resume"
                    if self.settings.EMBEDDED_REDIS_AOF else "")
            self._say(f"error: the final save of the crawl state in {self.out_dir / 'redis'} failed: "
                      f"{self.save_error}{kept}")
            return code or 1
        return code

    def _on_signal(self, signum: int, _frame: object) -> None:
        if self._stop_requested:
            raise KeyboardInterrupt  # second Ctrl-C: stop right now
        self._stop_requested = signal.Signals(signum).name
        self._say(f"\n{self._stop_requested}: stopping the crawl (again to force)")

    def _say(self, message: str) -> None:
        self.status.say(message)

    def _prepare(self) -> None:
        s = self.settings
        if not self.resume and not any(UrlGate(s).admit(url, 0, {}, force=True) for url in self.seeds):
            # said before the folder is touched: a mistyped seed costs nothing
            raise ConfigError("no usable seed URL" + (f" (first: {self.seeds[0][:200]!r})" if self.seeds else ""))
        lock = self.lock.acquire()
        if lock.previous is not None:
            self._say(f"the previous crawl in {self.out_dir} ({lock.previous.describe()}) was killed; its lock is taken over")
        if lock.killed:
            self._say(f"killed {len(lock.killed)} process(es) of an earlier crawl that still used the folder "
                      f"after {lock.waited_s:.0f} s")
        elif lock.waited_s >= 0.5:
            self._say(f"waited {lock.waited_s:.1f} s for the processes of an earlier crawl to exit")
        if not self.resume:
            removed = previous_outputs(self.out_dir)
            if removed and not self.overwrite:
                raise ConfigError(f"{self.out_dir} holds a previous crawl ({', '.join(removed)}): give --resume to "
                                  "continue it, --overwrite to delete it, or another --out")
            if removed and (self.out_dir / "logs").exists():
                removed.append("logs")   # the previous crawl's: not to be mixed with this one's
            for name in removed:
                old = self.out_dir / name
                shutil.rmtree(old) if old.is_dir() else old.unlink()
            if removed:
                self._say(f"--overwrite: removed the previous crawl in {self.out_dir} ({', '.join(removed)})")
        free = shutil.disk_usage(self.out_dir).free
        if free < s.DISK_MIN_FREE_BYTES:
            raise ConfigError(f"disk nearly full: {self.out_dir} has {free / 2**20:.1f} MiB free (below "
                              f"{s.DISK_MIN_FREE_BYTES / 2**20:.0f} MiB, CRAWLER_DISK_MIN_FREE_BYTES)")
        private_dir(self.out_dir / "logs")
        if self.job:   # before any worker writes a WARC file: its warcinfo record carries it
            (self.out_dir / JOB_FILE).write_text(self.job, encoding="utf-8")
        if not s.REDIS_URL:
            # with EMBEDDED_REDIS_AOF (the default) a crashed redis-server comes back with all
            # it acknowledged, and RDB saves would only fork a copy of it every 30 s (the
            # tree's peak memory: 184 -> 90 MiB for redis on the 5,000-page bench); without,
            # it comes back with its last RDB save or else the last checkpoint
            self.redis = EmbeddedRedis(self.out_dir / "redis", appendonly=s.EMBEDDED_REDIS_AOF,
                                       save="" if s.EMBEDDED_REDIS_AOF else "30 1000 300 1").start()
            s = self.settings = dataclasses.replace(s, REDIS_URL=self.redis.url)
            self._say(f"embedded redis-server on {redact(self.redis.url)} (data in {self.out_dir / 'redis'})")
        for url in dict.fromkeys((s.REDIS_URL, *s.REDIS_SHARD_URLS)):
            try:  # one quick attempt: a wrong URL or password is said at once, not after retries
                ping_once(url)
            except redis.RedisError as exc:
                raise ConfigError(f"cannot use Redis {redact(url)}: {exc}") from None
        control = Control(s)
        if self.restore_from:
            path: Path | None = latest_snapshot(self.out_dir) if self.restore_from == "latest" else Path(self.restore_from)
            if path is None:
                raise ConfigError(f"--restore latest: no snapshot in {self.out_dir / 'snapshots'}")
            info = restore(s, path, replace=True)
            rolled = roll_back(s, self.out_dir, float(info.header.get("created_epoch", 0.0)))
            self._say(f"restored {path} ({info.keys} keys)" + (
                f"; {rolled} record(s) of pages fetched since then, which it fetches again, moved to "
                "pages.jsonl.rolled-back" if rolled else ""))
        if not self.resume:
            self._clear_keys()
        elif not control.exists():
            raise ConfigError(f"--resume: no crawl state found in {redact(s.REDIS_URL)} (prefix {s.KEY_PREFIX!r})")
        else:   # no worker runs yet: what the dead crawl held comes back now, recorded pages stay done
            control.forget_batches()
            self._say(f"resume: {reconcile(s, self.out_dir).summary()}")
        control.start(started_at=self.started)
        if control.read().state == CrawlState.PAUSED:
            self._say(f"the crawl is paused: `manage.py resume --out {self.out_dir}` lets it go on")
        if self.resume:
            self._pages_before = control.stats().get("fetch/pages", 0)
        frontier = Frontier(s)
        frontier.allocate_bloom()
        frontier.size_intsets()
        if self.seeds:
            added, rejected, waiting = seed_urls(s, self.seeds)
            for message in listed(rejected):
                self._say(f"seed skipped: {message}")
            self._say(f"{added} seed URL(s) queued" + (f", {len(waiting)} already queued" if waiting else ""))
            if not added and not self.resume:
                raise ConfigError("no usable seed URL")
        elif not self.resume:
            raise ConfigError("no seed URLs: give URLs or --seeds-file")
        write_private(self.out_dir / STATE_FILE, json.dumps({
            "redis_url": s.REDIS_URL, "key_prefix": s.KEY_PREFIX, "shards": s.SHARDS, "pid": os.getpid(),
            "started_at": self.started, "priority_levels": s.PRIORITY_LEVELS,
            "bloom_expected_urls": s.BLOOM_EXPECTED_URLS, "bloom_error_rate": s.BLOOM_ERROR_RATE,
            "redis_shard_urls": list(s.REDIS_SHARD_URLS)}))
        (self.out_dir / "pages.jsonl").touch()  # exists even if no page is ever fetched

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
        if self.redis is not None and "CRAWLER_FEED_STREAM_MAXLEN" not in os.environ:
            # an embedded Redis lives as long as the crawl: its feed is feed.jsonl, and the
            # stream's copy of every page text would cost Redis ~0.5 ms of CPU a page and
            # the crawl ~60-125 MB (its entries, and the forks that rewrite its AOF)
            s = self.settings = dataclasses.replace(s, FEED_STREAM_MAXLEN=0)
        env = {**os.environ, **s.to_env(), "PYTHONPATH": os.pathsep.join(
            [str(REPO_ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))}
        tag = f"{os.getpid()}"
        celery = CHILD_COMMAND
        common = ["-E"] if s.TASK_EVENTS else []
        fetch_queues = ",".join(fetch_queue(i) for i in range(s.SHARDS))
        # no prefork parent copying every message into a child: fetch workers run their
        # sessions on a threads pool (each session a thread per host, mostly waiting),
        # parse workers are solo
        beat = ["-B", str(self.out_dir / "celerybeat-schedule")]
        # one fetch worker whose sessions leave a thread of its pool free also runs the
        # control tasks and Beat: a process less (~40 MiB), the same CPU a page
        folded = self.workers == 1 and s.MAX_FETCH_SESSIONS <= s.FETCH_CONCURRENCY
        specs = [(f"worker-fetch-{i}", celery + ["worker", "-Q", fetch_queues + (f",{CONTROL_QUEUE}" if folded else ""),
                                                 "-P", "threads", "-c", str(s.FETCH_CONCURRENCY + (1 if folded else 0)),
                                                 "-n", f"fetch{i}-{tag}@%h"] + (beat if folded else []) + common)
                 for i in range(self.workers)]
        specs += [(f"worker-process-{i}", celery + ["worker", "-Q", ",".join([parse_queue(s.node_name), *ENQUEUE_QUEUES]), "-P", "solo",
                                                    "-n", f"process{i}-{tag}@%h"] + common)
                  for i in range(self.parsers)]
        if not folded:
            specs.append(("worker-control", celery + ["worker", "-Q", CONTROL_QUEUE, "-P", "solo",
                                                      "-n", f"control-{tag}@%h"] + beat + common))
        # forks every child (a dead one too); without it, each is exec'd
        assert self.forks is not None
        self.forks.configure(env, self.out_dir / "logs" / "forkserver.log")
        for name, args in specs:
            self.children.append(Child(name, args, env, self.out_dir / "logs" / f"{name}.log", self.forks))
        control = "control and beat in the fetch worker" if folded else "control with beat"
        self._say(f"started {len(self.children)} processes (fetch x{self.workers}, parse/dedup x{self.parsers}, "
                  f"{control}); logs in {self.out_dir / 'logs'}")

    def _watch(self) -> Progress:
        s = self.settings
        last_pages, last_at = 0, time.time()
        seen_pages, seen_at = 0, last_at
        rate = 0.0
        interval = WATCH_S
        while True:
            time.sleep(interval)
            if self.redis is not None and not self.redis.alive():
                self._recover_redis()
                continue
            try:
                s = live(self.settings)   # its limits as `manage.py job apply` left them
                control = Control(s)
                before_inflight = control.inflight()
                progress = read_progress(s)
                # like maintenance, which runs once the control worker and beat are up
                if progress.state != CrawlState.FINISHED and all(c.came_up() for c in self.children):
                    settle(s, control, progress, before_inflight)
            except redis.RedisError:
                if self.redis is not None and not self.redis.alive():
                    continue  # restarted on the next turn
                raise
            now = time.time()
            recent = (progress.pages - seen_pages) / max(now - seen_at, 1e-3)  # since the last look
            seen_pages, seen_at = progress.pages, now
            if now - last_at >= 2.0:
                rate = (progress.pages - last_pages) / (now - last_at)
                last_pages, last_at = progress.pages, now
            self._report_unreachable(progress, now)
            elapsed = now - self.started
            eta = eta_s(progress.pages, rate, elapsed, s.MAX_PAGES, s.MAX_SECONDS)
            line = progress_line(progress, elapsed, rate, eta, len(self.unreachable),
                                 bounded=bool(s.MAX_PAGES or s.MAX_SECONDS))
            self.status.update(line, now)
            if progress.state == CrawlState.FINISHED:
                return progress
            # the end is this close (the frontier could be exhausted or a limit reached within
            # two looks, or no host is being fetched): the stop is decided here, so look more often
            soon = 2 * WATCH_S * max(rate, recent)
            ending = progress.state != CrawlState.PAUSED and (progress.state == CrawlState.STOPPING
                      or ((progress.queued <= soon or not progress.leased) and not s.CONTINUOUS)
                      or bool(s.MAX_PAGES and s.MAX_PAGES - progress.pages <= soon)
                      or bool(s.MAX_SECONDS and elapsed >= s.MAX_SECONDS - WATCH_S))
            interval = WATCH_ENDING_S if ending else WATCH_S
            if progress.state == CrawlState.RUNNING and not self._disk_low:
                self._check_disk()
            for i, child in enumerate(self.children):
                if child.alive() or self._disk_low:   # stopping for want of space: no restart
                    continue
                why = error_line(child.log_path)
                if not child.came_up():
                    raise StartupError(
                        f"{child.name} exited with code {child.proc.returncode} before it was ready"
                        + (f": {why}" if why else "")
                        + f"\nlast lines of {child.log_path}:\n{log_tail(child.log_path, 15) or '(empty log)'}")
                if self.restarts >= MAX_RESTARTS:
                    reason = f"{child.name} died {self.restarts} times; giving up (see {self.out_dir / 'logs'})"
                    self._say(reason)
                    Control(s).set_state(CrawlState.FINISHED, reason)
                    progress.state, progress.reason = CrawlState.FINISHED, reason
                    return progress
                # a dead worker's hosts return when their leases expire; nothing is lost
                self.restarts += 1
                self._say(f"{child.name} exited with {child.proc.returncode}"
                          + (f": {why}" if why else "") + f"; restarting it (log: {child.log_path})")
                child.reap(time.monotonic())
                self.children[i] = Child(child.name, child.args, child.env, child.log_path, child.forks)
            if self._stop_requested and progress.state in (CrawlState.RUNNING, CrawlState.PAUSED):
                Control(s).set_state(CrawlState.STOPPING, f"stopped by {self._stop_requested}")
            if s.MAX_SECONDS and now - self.started >= s.MAX_SECONDS and progress.state in (CrawlState.RUNNING,
                                                                                            CrawlState.PAUSED):
                Control(s).set_state(CrawlState.STOPPING, f"max seconds ({s.MAX_SECONDS:g}) reached")
            if progress.state == CrawlState.STOPPING and (self._stop_requested or s.MAX_SECONDS or self._disk_low):
                # maintenance finishes the crawl once in-flight batches are through;
                # do not wait for that longer than a fetch can take
                stopping_for = now - (Control(s).state()[2] or now)
                if stopping_for > s.TOTAL_TIMEOUT_S + 10:
                    Control(s).set_state(CrawlState.FINISHED, "stopped with batches still in flight")

    def _check_disk(self) -> None:
        """Stop cleanly while there is room to: the exchanges in flight, the final save
        and a checkpoint must still fit (DISK_MIN_FREE_BYTES)."""
        try:
            free = shutil.disk_usage(self.out_dir).free
        except OSError:
            return
        if free >= self.settings.DISK_MIN_FREE_BYTES:
            return
        self._disk_low = True
        reason = (f"disk nearly full: {self.out_dir} has {free / 2**20:.1f} MiB free (below "
                  f"{self.settings.DISK_MIN_FREE_BYTES / 2**20:.0f} MiB); stopping with the state saved, "
                  "free some space, then crawl --resume")
        self._say(reason)
        Control(self.settings).set_state(CrawlState.STOPPING, reason)

    def _report_unreachable(self, progress: Progress, now: float) -> None:
        """Name each host whose robots.txt could not be fetched, the first time. The
        stage counts ``robots/unreachable``, puts the host back after its politeness
        gap (up to MAX_FACTOR_DELAY_S), and at the next lease parks it until the robots
        entry expires (ROBOTS_ERROR_TTL_S later); so for a while after the counter moves,
        only the ready heap's slice for that interval is read."""
        count = progress.stats.get("robots/unreachable", 0)
        if count != self._unreachable_count:
            self._unreachable_count = count
            self._scan_until = now + self.settings.MAX_FACTOR_DELAY_S + 15.0
        if now > self._scan_until:
            self._scan_from = now
            return
        ttl = self.settings.ROBOTS_ERROR_TTL_S
        # the failed attempt may be a batch (TOTAL_TIMEOUT_S) older than its count
        since = max(self._scan_from, now - self.settings.MAX_FACTOR_DELAY_S - 60.0) - self.settings.TOTAL_TIMEOUT_S
        found = waiting_hosts(Frontier(self.settings), now=now, min_te=since + ttl - 5.0, max_te=now + ttl + 5.0)
        for host in found:
            if host.reason != WaitReason.ROBOTS or host.host in self.unreachable:
                continue
            self.unreachable[host.host] = host
            if len(self.unreachable) <= MAX_HOSTS_NAMED:
                self._say(f"host unreachable: {describe(host)} (its URLs wait; robots.txt is asked again then)")
            elif len(self.unreachable) == MAX_HOSTS_NAMED + 1:
                self._say("more hosts unreachable: counted in the progress line and listed by `manage.py stats`")

    def _recover_redis(self) -> None:
        """Restart a crashed embedded redis-server on its port from its data folder (the
        append-only file loses at most a second, an RDB save more; what was fetched since
        is fetched again, and leases it held expire and return their hosts). Without its
        data, fall back to the last checkpoint; without one, stop with a clear message
        rather than call the crawl done. The repairs run fenced (``EmbeddedRedis.fenced``):
        a worker that reconnected first could fetch again a URL whose record is written
        (its completion was in the lost second) before ``forget_recorded`` dropped it."""
        assert self.redis is not None
        self._say(f"\nembedded redis-server exited; restarting it from {self.out_dir / 'redis'}")
        restarted_at = time.time()
        self.restarts += 1
        with self.redis.fenced() as url:
            self._repair_after_crash(dataclasses.replace(self.settings, REDIS_URL=url), restarted_at)

    def _repair_after_crash(self, s: Settings, restarted_at: float) -> None:
        if Control(s).exists():
            from crawler_tasks.celery import requeue_unacked

            forgotten = forget_recorded(s, self.out_dir)
            if forgotten:
                self._say(f"{forgotten} fetched URL(s) already recorded, which the restart had put back, dropped")
            remember_recorded_tail(s, self.out_dir)

            try:
                requeued = requeue_unacked(broker_url(s), {parse_queue(s.node_name), *ENQUEUE_QUEUES}, restarted_at)
            except Exception as exc:  # noqa: BLE001 - the crawl goes on; those tasks come back after the visibility timeout
                self._say(f"warning: the tasks the crash interrupted wait for the visibility timeout: {exc}")
                requeued = 0
            if requeued:
                self._say(f"{requeued} parse/dedup task(s) the crash interrupted are queued again")
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
        pages = progress.pages - self._pages_before
        since = f", {progress.pages} since the crawl began" if self._pages_before else ""
        self._say(f"  pages fetched {pages} in {elapsed:.1f} s ({pages / max(elapsed, 1e-9):.1f} pages/s){since}, "
                  f"still queued {progress.queued}")
        frontier = Frontier(self.settings)
        if progress.queued:
            self._say_still_queued(frontier, progress.queued)
        self._write_unfetched(frontier, reason)
        statuses = {k.rsplit("/", 1)[1]: v for k, v in progress.stats.items() if k.startswith("fetch/status/")}
        if statuses:
            self._say("  status " + ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items())))
        errors = {k.split("/", 2)[2]: v for k, v in progress.stats.items()
                  if k.startswith("records/error/") and k != "records/error/robots"}
        if errors:
            self._say("  errors " + ", ".join(f"{k}: {v}" for k, v in sorted(errors.items())))
        if progress.robots_excluded:
            self._say(f"  excluded by robots.txt: {progress.robots_excluded}")
        if progress.dns_lookups:
            st = progress.stats
            self._say(f"  DNS: {progress.dns_lookups} lookups ({st.get('dns/queries', 0)} queries), "
                      f"{st.get('dns/nxdomain', 0)} NXDOMAIN, {st.get('dns/nodata', 0)} no address, "
                      f"{st.get('dns/temporary', 0)} no server answer")
        try:
            bloom = frontier.bloom_fill()
        except redis.RedisError as exc:
            self._say(f"  URL-seen: the Bloom filter could not be read: {exc}")
        else:
            if bloom.bits_set:
                sized = "" if bloom.fingerprints is not None else (
                    f" (BLOOM_ERROR_RATE {self.settings.BLOOM_ERROR_RATE:g} at {self.settings.BLOOM_EXPECTED_URLS} URLs)")
                self._say(f"  URL-seen: {bloom.describe()}{sized}")
        for line in summarize_waiting(progress, waiting_hosts(frontier,
                                                              limit_per_shard=SUMMARY_HOSTS_PER_SHARD), reason):
            self._say("  " + line)
        cpu = {k.split("/", 1)[1]: v for k, v in progress.stats.items() if k.startswith("cpu_ms/")}
        if cpu and progress.pages:
            self._say("  stage CPU ms per page: " + ", ".join(
                f"{k} {v / progress.pages:.2f}" for k, v in sorted(cpu.items())))
        if not progress.pages:
            self._say(f"  nothing was fetched: see the reasons above, and {self.out_dir / 'logs'}")
        outputs = [self.out_dir / name for name in ("pages.jsonl", "warc") if (self.out_dir / name).exists()]
        self._say("  output: " + ", ".join(map(str, outputs)))

    def _say_still_queued(self, frontier: Frontier, queued: int) -> None:
        """Name the URLs left without a record (the first SUMMARY_QUEUED_URLS): they are
        not lost, `crawl --resume` fetches them, but nothing else would say which they are."""
        try:
            sample = queued_sample(frontier, SUMMARY_QUEUED_URLS)
        except redis.RedisError as exc:
            self._say(f"  still queued: cannot be listed: {exc}")
            return
        more = f" and {queued - len(sample)} more" if queued > len(sample) else ""
        if sample:
            self._say(f"  still queued, no record yet (`crawl --resume` fetches them): {', '.join(sample)}{more}")

    def _write_unfetched(self, frontier: Frontier, reason: str) -> None:
        """``OUT/unfetched.jsonl``: one line for each URL still queued at this stop (queues
        and spill files), with its outcome, so that no URL is silent; rewritten at each
        stop, removed when none is left. Its URLs have no record in pages.jsonl (``crawl
        --resume`` fetches them, and that fetch is their one record)."""
        path = self.out_dir / UNFETCHED_FILE
        tmp = path.with_suffix(".tmp")
        outcome = f"not fetched: the crawl stopped ({reason})"
        n = 0
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                chunks = [c for shard in range(frontier.shards) for c in queued_entries(frontier, shard)]
                spilled = map(entries_of, Spiller(self.settings, frontier).spilled_entries())
                for entries in (*chunks, *spilled):
                    for e in entries:
                        retry = f", in retry after {e.tries} failed tries" if e.tries else ""
                        f.write(json.dumps({"url": e.url, "depth": e.depth, "kind": str(e.kind), "tries": e.tries,
                                            "outcome": outcome + retry}) + "\n")
                        n += 1
            if n:
                os.replace(tmp, path)
                self._say(f"  every URL left unfetched, with its outcome: {path} ({n} URLs)")
            else:
                tmp.unlink()
                path.unlink(missing_ok=True)
        except (OSError, ValueError, redis.RedisError) as exc:
            tmp.unlink(missing_ok=True)
            self._say(f"  the URLs left unfetched could not be listed in {path}: {exc}")

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
        write_private(state, json.dumps(info))

    def _shutdown(self) -> None:
        """Every child at once: the crawl is no longer running, so wake schedules nothing
        and fetch sessions give their hosts back within a tick; workers finish (or hand
        back, unacknowledged) what they hold."""
        for child in self.children:
            child.terminate()
        deadline = time.monotonic() + 15.0
        if self.metrics_server is not None:  # its poll loop's wait overlaps the children's exit
            stop_metrics(self.metrics_server)
            self.metrics_server = None
        self._unblock_workers(deadline)
        for child in self.children:
            child.reap(deadline)
        self.children.clear()
        if self.forks is not None:  # last: it reports its children's exit codes
            self.forks.stop()
            self.forks = None
        if self.redis is not None:
            self.redis.stop()
            self.save_error = self.redis.save_error
            self.redis = None

    def _unblock_workers(self, deadline: float) -> None:
        """Workers stopping wait for their BRPOP to answer before they exit: end it for
        them until they are gone (a worker may pop again before it sees its SIGTERM).
        Only on the embedded Redis: every blocked client there is one of ours, while
        an operator's Redis may serve others' blocking pops."""
        if self.redis is None:
            return
        url = broker_url(self.settings)
        while any(child.alive() for child in self.children) and time.monotonic() < deadline:
            if unblock_consumers(url) < 0:
                return
            time.sleep(UNBLOCK_EVERY_S)


def summarize_waiting(progress: Progress, waiting: list[WaitingHost], reason: str) -> list[str]:
    """Why the URLs still queued were not fetched: unreachable hosts by name, the other
    waiting hosts by reason, and URLs that a limit left unfetched."""
    lines: list[str] = []
    unreachable = [h for h in waiting if h.reason == WaitReason.ROBOTS]
    if unreachable:
        named = ", ".join(describe(h) for h in unreachable[:MAX_HOSTS_NAMED])
        more = f", and {len(unreachable) - MAX_HOSTS_NAMED} more" if len(unreachable) > MAX_HOSTS_NAMED else ""
        lines.append(f"hosts unreachable: {len(unreachable)} ({named}{more})")
    if not progress.queued:
        return lines
    stopped = reason.startswith(("max ", "stopped"))
    if stopped:   # a host waiting out its delay when a limit stopped the crawl was not held back by it
        waiting = [h for h in waiting if h.reason != WaitReason.DELAY]
    by_reason: dict[WaitReason, list[WaitingHost]] = {}
    for host in waiting:
        by_reason.setdefault(host.reason, []).append(host)
    for why, hosts in by_reason.items():
        urls = sum(h.queued for h in hosts)
        soonest = min(h.wait_s for h in hosts)
        lines.append(f"not fetched: {urls} URL(s) of {len(hosts)} host(s) {why} (next in {soonest:.0f} s)")
    waiting_urls = sum(h.queued for h in waiting)
    rest = progress.queued - waiting_urls
    if rest > 0:
        cause = f"the crawl stopped first ({reason})" if stopped else "not reached yet"
        lines.append(f"not fetched: {rest} URL(s) {cause}")
    return lines
