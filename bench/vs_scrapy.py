#!/usr/bin/env python3
"""This crawler against Scrapy, one after the other on the same local synthetic web.

Two scenarios, each run ``--runs`` times per side, alternating ours/Scrapy, with a
fresh copy of the (deterministic) test web for every run; medians are quoted.

1. many hosts, CPU-bound: 100 hosts x 50 pages of ~60 kB, both capped at N pages,
   delay 0.05 s per host. Figures: wall time (process start to exit), pages/s over
   the whole run and in the steady state (responses between the 10% and 90% marks,
   from the response timestamps; and records written to the output file, sampled),
   start-up and shutdown times, CPU ms per page of the process tree (rusage at
   exit, so every reaped child counts), peak RSS of the tree (sampled).
2. few hosts, delay-bound: 3 hosts x 400 pages of ~20 kB, delay 0.1 s, crawled to
   exhaustion. The ideal time is the largest host's page count x delay; both wall
   time and the span from first to last response are compared to it.
3. real documentation sites (``--docs DIR ...``, e.g. the HTML manuals a system ships),
   each folder its own host served by nginx (or Python's http.server), delay-bound, to
   exhaustion: both crawl times, pages, and each against its ideal.
4. the web's shape (``--only web``): 1,000 hosts (``--web-hosts``) of 16 pages of
   ~30 kB, every answer late by a lognormal time to first byte (median 0.4 s, sigma
   0.9), a Crawl-delay of 1-5 s per host, a cap of 8,000 pages. Figures come from the
   server's request and connection logs: pages (200)/s, requests not for pages,
   exchanges and hosts in flight, politeness violations, last exchange to exit;
   beside CPU ms a page and peak RSS/PSS of the crawl's tree. bench/README.md says
   what each figure means.

``--scrapy-outputs`` runs the many-hosts scenario with three sides: ours, Scrapy bare,
and Scrapy producing our outputs (WARC through warcio, main text through trafilatura,
a 64-bit simhash, a JSONL record a page: bench/scrapy_spider.py ``-a outputs``), the
peer the loopback target is set against (ours at least 1.5 x its pages/s); runs
alternate ours, bare, outputs and the table gives ours/bare and ours/outputs.

Scrapy runs from its own venv (bench/.venv-scrapy, made on first use, with warcio and
trafilatura, pinned, for the outputs peer; never in requirements.txt) with
bench/scrapy_spider.py: one connection per host, robots.txt obeyed, no autothrottle,
no cache, its default scheduler and dupefilter. Only loopback traffic; every server
the script starts, it stops.

``--smoke`` (seconds; tests/test_bench_smoke.py runs it): many hosts only, 4 hosts x 10
pages of 10 kB, cap 40, one run, one fetch and one parse worker. It installs nothing:
Scrapy runs only where bench/.venv-scrapy was made before, ours alone otherwise.

    python bench/vs_scrapy.py [--pages 5000] [--runs 3] [--quick | --smoke] [--only many|few|docs|web] [--docs DIR ...]
                              [--scrapy-outputs]
                              [--web-hosts 1000 5000] [--web-cap 8000] [--web-delay 1-5] ...
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from crawler_tasks.ops.child import die_with_parent  # noqa: E402
from crawler_tasks.settings import Settings  # noqa: E402
from testweb.evidence import InFlight, Politeness, check_politeness, in_flight, read_log  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from crawl_bench import cpu_by_role, sample_tree  # noqa: E402

BENCH = ROOT / "bench"
SPIDER = BENCH / "scrapy_spider.py"
VENV = BENCH / ".venv-scrapy"
# What the outputs peer adds to Scrapy (scrapy_spider.py -a outputs), pinned so that its
# figures stay comparable; trafilatura's jusText needs lxml.html.clean, its own package
# since lxml 5.2.
SCRAPY_OUTPUT_PACKAGES = ["warcio==1.8.1", "trafilatura==2.3.1", "lxml_html_clean==0.4.7"]
USER_AGENT = "benchbot/1.0 (+http://127.0.0.1/bench)"
RSS_SAMPLE_S = 0.2
PSS_SAMPLE_EVERY = 5  # PSS reads smaps_rollup (~1.5 ms a process): once a second
IN_FLIGHT_STEP_S = 0.1  # the grid on which the server's logs are sampled


class BenchError(Exception):
    """A precondition or a run failed; the message says which and why."""


@dataclass
class Run:
    """One side's run: what it fetched and what it cost."""

    side: str
    start: float  # epoch seconds when the process was started
    wall_s: float
    cpu_s: float
    peak_rss: int
    times: list[float]  # response timestamps, sorted (epoch seconds)
    per_host: Counter[str] = field(default_factory=Counter)
    written: list[tuple[float, int]] = field(default_factory=list)  # (time, records in the output file)
    peak_pss: int = 0
    server: ServerView | None = None  # what the test web saw (web-shaped scenario)
    load: float = 0.0  # the machine's 1-minute load average at exit: others' work slows both sides
    cpu_by_role: dict[str, float] = field(default_factory=dict)  # CPU s per role (sampled; bench/crawl_bench.py)
    peak_rss_by_role: dict[str, int] = field(default_factory=dict)  # each role's peak RSS (summed over its processes)
    cpu_series: list[tuple[float, float]] = field(default_factory=list)  # (time, the tree's CPU s so far), sampled

    def cpu_between(self, t0: float, t1: float) -> float:
        """The tree's CPU seconds between two instants (from the samples around them)."""
        def at(t: float) -> float:
            before = [cpu for when, cpu in self.cpu_series if when <= t]
            return before[-1] if before else 0.0
        return at(t1) - at(t0)

    @property
    def pages(self) -> int:
        return len(self.times)

    @property
    def rate_whole(self) -> float:
        return self.pages / self.wall_s if self.wall_s else 0.0

    @property
    def rate_steady(self) -> float:
        """Pages/s between the 10% and 90% responses: start-up and the tail left out."""
        n = len(self.times)
        lo, hi = n // 10, n - 1 - n // 10
        if hi <= lo or self.times[hi] <= self.times[lo]:
            return 0.0
        return (hi - lo) / (self.times[hi] - self.times[lo])

    @property
    def rate_written(self) -> float:
        """Records/s into the output file between its 10% and 90% marks (sampled).

        Our fetched_at is the fetch's time; parsing and output may trail it, and
        this rate shows the whole pipeline's pace.
        """
        if not self.written or self.written[-1][1] < 10:
            return 0.0
        final = self.written[-1][1]
        t10, n10 = next((t, n) for t, n in self.written if n >= final * 0.1)
        t90, n90 = next((t, n) for t, n in self.written if n >= final * 0.9)
        return (n90 - n10) / (t90 - t10) if t90 > t10 else 0.0

    @property
    def span_s(self) -> float:
        return self.times[-1] - self.times[0] if self.times else 0.0

    @property
    def startup_s(self) -> float:
        """Process start to first page: interpreter, workers, Redis, robots.txt."""
        return self.times[0] - self.start if self.times else self.wall_s

    @property
    def shutdown_s(self) -> float:
        return self.start + self.wall_s - self.times[-1] if self.times else 0.0

    @property
    def idle_tail_s(self) -> float:
        """Last output record to exit (to the sampling step): stop detection and teardown."""
        if not self.written:
            return 0.0
        final = self.written[-1][1]
        done = next(t for t, n in self.written if n == final)
        return self.start + self.wall_s - done

    @property
    def cpu_ms_per_page(self) -> float:
        return self.cpu_s / max(self.pages, 1) * 1000


def _pct(values: list[int], q: float) -> float:
    """The q-quantile of ``values`` (nearest rank), 0 when empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(q * len(ordered)))])


@dataclass
class ServerView:
    """One run as the test web saw it: requests by kind, in-flight samples, politeness."""

    pages: int  # 200 answers, robots.txt aside
    requests: int
    robots: int  # /robots.txt requests
    sitemaps: int  # requests for /sitemap* paths (not linked by the web: guessed)
    other: int  # the rest that are not 200 pages: soft-404 probes, 404s of the crawler's making
    page_ends: list[float]  # end of each 200 page answer, sorted
    last_end: float  # end of the last answer (the last exchange)
    samples: list[InFlight]
    politeness: Politeness

    @classmethod
    def from_log(cls, log: Path, delays: dict[str, float]) -> ServerView:
        requests, conns = read_log(log)
        robots = sum(r.path == "/robots.txt" for r in requests)
        pages = [r for r in requests if r.status == 200 and r.path != "/robots.txt"]
        sitemaps = sum(r.path.startswith("/sitemap") for r in requests)
        return cls(
            pages=len(pages), requests=len(requests), robots=robots, sitemaps=sitemaps,
            other=len(requests) - len(pages) - robots - sitemaps,
            page_ends=sorted(r.end for r in pages),
            last_end=max((r.end or r.start for r in requests), default=0.0),
            samples=in_flight(requests, conns, IN_FLIGHT_STEP_S, delays),
            politeness=check_politeness(requests, conns, delays),
        )

    @property
    def not_pages(self) -> int:
        return self.requests - self.pages

    @property
    def rate_steady(self) -> float:
        """200 pages/s between the 10% and 90% answers."""
        t0, t1, pages = self.steady_window
        return pages / (t1 - t0) if pages and t1 > t0 else 0.0

    @property
    def steady_window(self) -> tuple[float, float, int]:
        """(time of the 10% answer, of the 90% answer, 200 pages between them)."""
        n = len(self.page_ends)
        lo, hi = n // 10, n - 1 - n // 10
        if hi <= lo:
            return 0.0, 0.0, 0
        return self.page_ends[lo], self.page_ends[hi], hi - lo

    def in_flight(self, what: str, q: float) -> float:
        """A quantile over the run of one InFlight field (exchanges, hosts_connected, ...)."""
        return _pct([getattr(x, what) for x in self.samples], q)


def served(run: Run) -> ServerView:
    assert run.server is not None, "a web-shaped run carries the server's view"
    return run.server


# -- Scrapy's venv ---------------------------------------------------------------

def scrapy_python() -> Path:
    """The venv's python with Scrapy, warcio and trafilatura importable; creates the venv
    and installs them on first use (and the two later into a venv made before them)."""
    return bench_python(VENV, ["scrapy", *SCRAPY_OUTPUT_PACKAGES], "scrapy, warcio, trafilatura")


def ready_python(venv: Path, module: str) -> Path | None:
    """The python of ``venv`` if ``module`` imports there, else None (nothing is installed:
    the smoke modes run a competitor only where an earlier run made its venv)."""
    python = venv / "bin" / "python"
    if python.exists() and subprocess.run([str(python), "-c", f"import {module}"], capture_output=True).returncode == 0:
        return python
    return None


def bench_python(venv: Path, packages: list[str], module: str) -> Path:
    """The python of ``venv`` with ``module`` importable: the venv is made and ``packages``
    installed on first use (a competitor runs apart from the crawler's own venv)."""
    ready = ready_python(venv, module)
    if ready is not None:
        return ready
    python = venv / "bin" / "python"
    check = [str(python), "-c", f"import {module}"]
    print(f"installing {', '.join(packages)} into {venv} (first use) ...", file=sys.stderr)
    steps = [[sys.executable, "-m", "venv", str(venv)],
             [str(python), "-m", "pip", "install", "--quiet", *packages]]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True)
        if done.returncode != 0:
            tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-8:])
            raise BenchError(f"cannot install {module}: `{' '.join(step)}` exited {done.returncode}\n{tail}\n"
                             "(the next run tries again; PyPI must be reachable)")
    done = subprocess.run(check, capture_output=True, text=True)
    if done.returncode != 0:
        raise BenchError(f"{module} was installed into {venv} but does not import:\n{done.stderr.strip()}")
    return python


def scrapy_version(python: Path) -> str:
    return subprocess.run([str(python), "-c", "import scrapy; print(scrapy.__version__)"],
                          capture_output=True, text=True).stdout.strip()


# -- processes -------------------------------------------------------------------

class TestWebProcess:
    """`python -m testweb` in its own process (its CPU is not counted); stopped on exit."""

    def __init__(self, hosts: int, pages: int, mean_bytes: int, extra: tuple[str, ...] = ()) -> None:
        self.hosts = hosts
        self.cmd = [sys.executable, "-m", "testweb", "--hosts", str(hosts), "--pages", str(pages),
                    "--mean-bytes", str(mean_bytes), *extra]
        self.proc: subprocess.Popen[str] | None = None
        self.seeds: list[str] = []

    def __enter__(self) -> TestWebProcess:
        self.proc = subprocess.Popen(self.cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True,
                                     preexec_fn=die_with_parent)
        assert self.proc.stdout is not None
        self.seeds = [self.proc.stdout.readline().strip() for _ in range(self.hosts)]
        if not all(self.seeds):
            self.__exit__()
            raise BenchError(f"the test web did not start: {' '.join(self.cmd)}")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(60)  # --log writes the request log on its way out
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Web(Protocol):
    """A local web for one run: its seed URLs, stopped on exit."""

    seeds: list[str]

    def __enter__(self) -> Web: ...

    def __exit__(self, *exc: object) -> None: ...


class DocsWeb:
    """Real documentation folders, each served as its own host (127.0.0.20, .21, ...) by
    nginx when it is installed (``apt-get install nginx``), else by Python's
    http.server; seeds are the hosts' roots. Stopped on exit."""

    FIRST_IP = 20

    def __init__(self, dirs: list[Path]) -> None:
        self.dirs = dirs
        self.procs: list[subprocess.Popen[bytes]] = []
        self.tmp: Path | None = None
        self.seeds: list[str] = []

    def __enter__(self) -> DocsWeb:
        addrs = [(f"127.0.0.{self.FIRST_IP + i}", free_port(f"127.0.0.{self.FIRST_IP + i}"))
                 for i in range(len(self.dirs))]
        nginx = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.path.exists(p)), None)
        try:
            if nginx:
                self.tmp = Path(tempfile.mkdtemp(prefix="vs-scrapy-nginx-"))
                servers = "".join(f"  server {{ listen {ip}:{port}; root {d}; }}\n"
                                  for (ip, port), d in zip(addrs, self.dirs, strict=True))
                mime = "include /etc/nginx/mime.types;" if os.path.exists("/etc/nginx/mime.types") else ""
                conf = self.tmp / "nginx.conf"
                # as root, its workers would run as nobody, who may not read the folders
                user = "user root;\n" if os.geteuid() == 0 else ""
                conf.write_text(f"{user}daemon off; worker_processes 1; pid {self.tmp}/nginx.pid;\n"
                                f"error_log {self.tmp}/error.log;\nevents {{}}\n"
                                f"http {{ {mime} access_log off; keepalive_requests 100000;\n{servers}}}\n")
                self.procs.append(subprocess.Popen([nginx, "-c", str(conf), "-p", str(self.tmp)],
                                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                                   preexec_fn=die_with_parent))
            else:
                for (ip, port), d in zip(addrs, self.dirs, strict=True):
                    self.procs.append(subprocess.Popen(
                        [sys.executable, "-m", "http.server", str(port), "--bind", ip, "--directory", str(d)],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=die_with_parent))
            for ip, port in addrs:
                wait_listening(ip, port, self.procs)
        except BaseException:
            self.__exit__()
            raise
        self.seeds = [f"http://{ip}:{port}/" for ip, port in addrs]
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None


def free_port(ip: str) -> int:
    with socket.socket() as sock:
        sock.bind((ip, 0))
        return int(sock.getsockname()[1])


def wait_listening(ip: str, port: int, procs: list[subprocess.Popen[bytes]], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs):
            raise BenchError(f"the docs server exited with {[p.returncode for p in procs]}")
        try:
            socket.create_connection((ip, port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise BenchError(f"the docs server did not listen on {ip}:{port} within {timeout_s:g} s")


class LineCounter:
    """Lines in a growing file, read incrementally."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.lines = path, 0, 0

    def count(self) -> int:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except FileNotFoundError:
            return self.lines
        self.offset += len(chunk)
        self.lines += chunk.count(b"\n")
        return self.lines


@dataclass
class Measure:
    rc: int
    start: float
    wall_s: float
    cpu_s: float  # the process and its reaped children (rusage)
    peak_rss: int  # of the process tree, sampled
    written: list[tuple[float, int]]  # (time, lines in the watched file), sampled
    peak_pss: int = 0  # of the process tree, sampled every PSS_SAMPLE_EVERY RSS samples
    cpu_by_role: dict[str, float] = field(default_factory=dict)
    peak_rss_by_role: dict[str, int] = field(default_factory=dict)
    cpu_series: list[tuple[float, float]] = field(default_factory=list)


def tree_pss(pid: int) -> int:
    """PSS summed over the process tree (shared pages split between their users), 0 if unreadable."""
    try:
        root = psutil.Process(pid)
        procs = [root] + root.children(recursive=True)
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for p in procs:
        try:
            total += getattr(p.memory_full_info(), "pss", 0)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total


def stop_tree(pid: int, sig: signal.Signals) -> None:
    """Send sig to a process and its descendants, children first."""
    try:
        root = psutil.Process(pid)
        procs = root.children(recursive=True)[::-1] + [root]
    except psutil.NoSuchProcess:
        return
    for p in procs:
        try:
            p.send_signal(sig)
        except psutil.NoSuchProcess:
            pass


def measured(cmd: list[str], env: dict[str, str], log: Path, watch: Path, timeout_s: float = 0.0) -> Measure:
    """Run cmd to exit, sampling its tree's RSS and the line count of ``watch``.

    Past ``timeout_s`` (0: never) the process gets SIGTERM, and its tree SIGKILL
    30 s later; the Measure then has rc -1.
    """
    with open(log, "w") as logf:
        t0 = time.time()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=logf,
                                stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
        peak = peak_pss = 0
        stop = threading.Event()
        counter = LineCounter(watch)
        written: list[tuple[float, int]] = []
        cpu_by_pid: dict[int, tuple[str, float]] = {}
        peak_by_role: dict[str, int] = {}
        cpu_series: list[tuple[float, float]] = []

        timed_out = False

        def sample() -> None:
            nonlocal peak, peak_pss, timed_out
            n = 0
            while not stop.wait(RSS_SAMPLE_S):
                late = time.time() - t0 - timeout_s if timeout_s else -1.0
                if late >= 0 and not timed_out:
                    timed_out = True
                    proc.send_signal(signal.SIGTERM)
                elif late >= 30:
                    stop_tree(proc.pid, signal.SIGKILL)
                now: dict[str, int] = {}
                peak = max(peak, sample_tree(proc.pid, cpu_by_pid, now))
                for role, rss in now.items():
                    peak_by_role[role] = max(peak_by_role.get(role, 0), rss)
                written.append((time.time(), counter.count()))
                cpu_series.append((time.time(), sum(cpu for _, cpu in cpu_by_pid.values())))
                n += 1
                if n % PSS_SAMPLE_EVERY == 0:
                    peak_pss = max(peak_pss, tree_pss(proc.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        wall = time.time() - t0
        proc.returncode = -1 if timed_out else os.waitstatus_to_exitcode(status)
        stop.set()
        sampler.join()
        written.append((t0 + wall, counter.count()))
    return Measure(proc.returncode, t0, wall, usage.ru_utime + usage.ru_stime, peak, written, peak_pss,
                   cpu_by_role(cpu_by_pid), peak_by_role, cpu_series)


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")}


def fail(side: str, rc: int, log: Path) -> BenchError:
    tail = "\n".join(log.read_text(errors="replace").strip().splitlines()[-15:])
    what = "ran past --run-timeout and was stopped" if rc == -1 else f"exited {rc}"
    return BenchError(f"{side} {what}; last lines of its log ({log}):\n{tail}")


def run_ours(args: argparse.Namespace, seeds: list[str], cap: int, delay: float, tmp: Path,
             defaults: dict[str, str] | None = None) -> Run:
    """``defaults``: settings for this scenario, which ``--set`` overrides."""
    out = tmp / "ours"
    seeds_file = tmp / "seeds.txt"
    seeds_file.write_text("".join(s + "\n" for s in seeds))
    cmd = [sys.executable, str(ROOT / "manage.py"), "crawl", "--seeds-file", str(seeds_file), "--allow-private",
           "--min-delay", str(delay), "--max-pages", str(cap), "--out", str(out), "--user-agent", USER_AGENT,
           *(["--workers", str(args.workers)] if args.workers else []), "--parsers", str(args.parsers), "--shards", str(args.shards)]
    env = clean_env()
    env.update({"CRAWLER_" + k: v for k, v in (defaults or {}).items()})
    env.update({"CRAWLER_" + k: v for k, v in (item.split("=", 1) for item in args.set)})
    log = tmp / "ours.log"
    m = measured(cmd, env, log, out / "pages.jsonl", args.run_timeout)
    if m.rc != 0:
        raise fail("manage.py crawl", m.rc, log)
    times, hosts = [], Counter[str]()
    with open(out / "pages.jsonl") as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("status") is None:
                continue
            fetched = datetime.strptime(rec["fetched_at"], "%Y-%m-%dT%H:%M:%S.%fZ")
            times.append(fetched.replace(tzinfo=UTC).timestamp())
            hosts[urlsplit(rec["url"]).netloc] += 1
    return Run("ours", m.start, m.wall_s, m.cpu_s, m.peak_rss, sorted(times), hosts, m.written, m.peak_pss,
               cpu_by_role=m.cpu_by_role, peak_rss_by_role=m.peak_rss_by_role, cpu_series=m.cpu_series)


def run_scrapy(args: argparse.Namespace, python: Path, seeds: list[str], cap: int, delay: float,
               tmp: Path, defaults: dict[str, str] | None = None, outputs: bool = False) -> Run:
    """``defaults``: Scrapy settings for this scenario, which ``--scrapy-set`` overrides;
    ``outputs``: the spider writes our outputs too (WARC, main text, simhash, JSONL)."""
    seeds_file, out = tmp / "seeds.txt", tmp / "scrapy.jsonl"
    seeds_file.write_text("".join(s + "\n" for s in seeds))
    cmd = [str(python), "-m", "scrapy", "runspider", str(SPIDER), "-a", f"seeds={seeds_file}", "-a", f"out={out}",
           "-s", f"DOWNLOAD_DELAY={delay}", "-s", f"CLOSESPIDER_PAGECOUNT={cap}"]
    if outputs:
        cmd += ["-a", f"outputs={tmp / 'scrapy-outputs'}"]
    for name, value in (defaults or {}).items():
        cmd += ["-s", f"{name}={value}"]
    for item in args.scrapy_set:
        cmd += ["-s", item]
    log = tmp / "scrapy.log"
    m = measured(cmd, clean_env(), log, out, args.run_timeout)
    if m.rc != 0 or not out.exists():
        raise fail("scrapy runspider", m.rc, log)
    times, hosts = [], Counter[str]()
    with open(out) as f:
        for line in f:
            rec = json.loads(line)
            times.append(rec["t"])
            hosts[urlsplit(rec["url"]).netloc] += 1
    if outputs:
        check_outputs(tmp / "scrapy-outputs", len(times), log)
    return Run("scrapy+outputs" if outputs else "scrapy", m.start, m.wall_s, m.cpu_s, m.peak_rss, sorted(times),
               hosts, m.written, m.peak_pss, cpu_by_role=m.cpu_by_role, peak_rss_by_role=m.peak_rss_by_role,
               cpu_series=m.cpu_series)


def check_outputs(folder: Path, pages: int, log: Path) -> None:
    """The outputs peer wrote what it is credited with: a record a page, text for some, a
    WARC file (a peer that fails quietly would look fast)."""
    pages_file, warc = folder / "pages.jsonl", folder / "scrapy.warc.gz"
    recs = [json.loads(line) for line in pages_file.read_text().splitlines()] if pages_file.exists() else []
    if len(recs) != pages or not any(r["text_chars"] for r in recs) or not warc.exists() or not warc.stat().st_size:
        raise BenchError(f"Scrapy's outputs are incomplete: {len(recs)} records in {pages_file} for {pages} "
                         f"pages, {sum(bool(r['text_chars']) for r in recs)} with text, WARC "
                         f"{warc.stat().st_size if warc.exists() else 'missing'} (log: {log})")


def alternate(args: argparse.Namespace, python: Path | None, make_web: Callable[[], Web], cap: int,
              delay: float) -> tuple[list[Run], list[Run]]:
    """R runs per side, ours then Scrapy then ours ..., each on a fresh web (ours alone
    without Scrapy's ``python``)."""
    ours: list[Run] = []
    theirs: list[Run] = []
    for i in range(args.runs):
        for side in ("ours", "scrapy") if python is not None else ("ours",):
            tmp = Path(tempfile.mkdtemp(prefix=f"vs-scrapy-{side}-"))
            try:
                with make_web() as tw:
                    if side == "ours":
                        run = run_ours(args, tw.seeds, cap, delay, tmp)
                        ours.append(run)
                    else:
                        assert python is not None
                        run = run_scrapy(args, python, tw.seeds, cap, delay, tmp)
                        theirs.append(run)
            finally:
                if args.keep:
                    print(f"  (kept {tmp})", file=sys.stderr)
                else:
                    shutil.rmtree(tmp, ignore_errors=True)
            print_run(f"{i + 1}/{args.runs}", side, run)
    return ours, theirs


def print_run(which: str, side: str, run: Run) -> None:
    """One run's line (stderr): the medians are printed once all runs are done."""
    print(f"  run {which} {side:6s}: {run.pages} pages, wall {run.wall_s:.1f} s, "
          f"{run.rate_whole:.1f} pages/s whole, {run.rate_steady:.1f} steady, {run.rate_written:.1f} written, "
          f"CPU {run.cpu_ms_per_page:.2f} ms/page, peak RSS {run.peak_rss / 2**20:.0f} MiB, "
          f"span {run.span_s:.1f} s, start-up {run.startup_s:.1f} s", file=sys.stderr, flush=True)


# -- reporting -------------------------------------------------------------------

def med(runs: list[Run], value: Callable[[Run], float]) -> float:
    return statistics.median(value(r) for r in runs)


def table(rows: list[tuple[str, str, Callable[[Run], float], bool]], ours: list[Run], theirs: list[Run]) -> None:
    """Each row's medians, ours beside Scrapy's (ours alone when Scrapy did not run)."""
    print(f"  {'':28s} {'ours':>10s}" + (f" {'scrapy':>10s} {'ours/scrapy':>12s}" if theirs else ""))
    for label, fmt, value, ratio in rows:
        a = med(ours, value)
        if not theirs:
            print(f"  {label:28s} {a:>10{fmt}}")
            continue
        b = med(theirs, value)
        r = f"{a / b:.2f}" if ratio and b else ""
        print(f"  {label:28s} {a:>10{fmt}} {b:>10{fmt}} {r:>12s}")


# the many-hosts tables' rows: (label, format, figure of a run, whether a ratio is shown)
MANY_ROWS: list[tuple[str, str, Callable[[Run], float], bool]] = [
    ("pages", ".0f", lambda r: r.pages, False),
    ("wall s", ".1f", lambda r: r.wall_s, True),
    ("pages/s whole run", ".1f", lambda r: r.rate_whole, True),
    ("pages/s steady (10-90%)", ".1f", lambda r: r.rate_steady, True),
    ("records/s written (10-90%)", ".1f", lambda r: r.rate_written, True),
    ("start-up s (to 1st page)", ".1f", lambda r: r.startup_s, True),
    ("shutdown s (last page-exit)", ".1f", lambda r: r.shutdown_s, True),
    ("last record written-exit s", ".1f", lambda r: r.idle_tail_s, True),
    ("CPU ms/page", ".2f", lambda r: r.cpu_ms_per_page, True),
    ("CPU % of one core", ".0f", lambda r: r.cpu_s / r.wall_s * 100, True),
    ("peak RSS MiB", ".0f", lambda r: r.peak_rss / 2**20, True),
    ("peak PSS MiB (tree)", ".0f", lambda r: r.peak_pss / 2**20, True),
    ("load average at exit", ".1f", lambda r: r.load, False),
]


def many_hosts(args: argparse.Namespace, python: Path | None) -> None:
    web = (args.hosts, args.host_pages, args.mean_bytes)
    print(f"\n== many hosts: {args.hosts} hosts x {args.host_pages} pages, mean {args.mean_bytes} B; "
          f"cap {args.pages} pages, delay {args.delay} s", file=sys.stderr)
    ours, theirs = alternate(args, python, lambda: TestWebProcess(*web), args.pages, args.delay)
    print(f"\nmany hosts (CPU-bound): {args.hosts} hosts x {args.host_pages} pages, mean {args.mean_bytes} B, "
          f"cap {args.pages}, delay {args.delay} s; median of {args.runs} run(s) each")
    table(MANY_ROWS, ours, theirs)
    by_role(ours, theirs)


def many_hosts_outputs(args: argparse.Namespace, python: Path) -> None:
    """Many hosts, three sides: ours, Scrapy bare and Scrapy writing our outputs, runs
    alternating in that order on a fresh web each."""
    web = (args.hosts, args.host_pages, args.mean_bytes)
    print(f"\n== many hosts, with Scrapy's outputs peer: {args.hosts} hosts x {args.host_pages} pages, mean "
          f"{args.mean_bytes} B; cap {args.pages} pages, delay {args.delay} s", file=sys.stderr)
    sides: dict[str, list[Run]] = {"ours": [], "scrapy": [], "scrapy+outputs": []}
    for i in range(args.runs):
        for side, runs in sides.items():
            tmp = Path(tempfile.mkdtemp(prefix=f"vs-scrapy-{side}-"))
            try:
                with TestWebProcess(*web) as tw:
                    if side == "ours":
                        run = run_ours(args, tw.seeds, args.pages, args.delay, tmp)
                    else:
                        run = run_scrapy(args, python, tw.seeds, args.pages, args.delay, tmp,
                                         outputs=side == "scrapy+outputs")
            finally:
                if args.keep:
                    print(f"  (kept {tmp})", file=sys.stderr)
                else:
                    shutil.rmtree(tmp, ignore_errors=True)
            run.load = os.getloadavg()[0]
            runs.append(run)
            print_run(f"{i + 1}/{args.runs}", side, run)
    print(f"\nmany hosts (CPU-bound), Scrapy bare and with our outputs: {args.hosts} hosts x {args.host_pages} "
          f"pages, mean {args.mean_bytes} B, cap {args.pages}, delay {args.delay} s; median of {args.runs} run(s) "
          f"each, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    names = list(sides)
    print(f"  {'':28s} " + " ".join(f"{name:>14s}" for name in names)
          + "".join(f" {'ours/' + name:>20s}" for name in names[1:]))
    for label, fmt, value, ratio in MANY_ROWS:
        figures = [med(runs, value) for runs in sides.values()]
        ratios = "".join(f" {figures[0] / b:>20.2f}" if ratio and b else f" {'':>20s}" for b in figures[1:])
        print(f"  {label:28s} " + " ".join(f"{x:>14{fmt}}" for x in figures) + ratios)
    for side, runs in sides.items():
        print_roles(side, runs)


def by_role(ours: list[Run], theirs: list[Run], pages: Callable[[Run], int] = lambda r: r.pages) -> None:
    """CPU ms a page and peak RSS of each role (medians over runs; CPU sampled every
    RSS_SAMPLE_S, so a process's last fraction of a second may be missing)."""
    for side, runs in (("ours", ours), ("scrapy", theirs)):
        if runs:
            print_roles(side, runs, pages)


def print_roles(side: str, runs: list[Run], pages: Callable[[Run], int] = lambda r: r.pages) -> None:
    roles = sorted({role for r in runs for role in r.cpu_by_role})
    cpu = ", ".join(f"{role} {med(runs, lambda r, x=role: r.cpu_by_role.get(x, 0.0) / max(pages(r), 1) * 1000):.2f}"
                    for role in roles)
    rss = ", ".join(f"{role} {med(runs, lambda r, x=role: r.peak_rss_by_role.get(x, 0) / 2**20):.0f}"
                    for role in roles)
    print(f"  {side} CPU ms/page by role: {cpu}")
    print(f"  {side} peak RSS MiB by role: {rss}")


def few_hosts(args: argparse.Namespace, python: Path) -> None:
    web = (args.few_hosts, args.few_pages, args.few_mean_bytes)
    size = args.few_hosts * (args.few_pages + 1)  # every host: its home page and /p/1..N
    cap = 10 * size  # above the web's size: both crawl to exhaustion
    ideal = (args.few_pages + 1) * args.few_delay
    print(f"\n== few hosts: {args.few_hosts} hosts x {args.few_pages} pages, mean {args.few_mean_bytes} B; "
          f"to exhaustion, delay {args.few_delay} s", file=sys.stderr)
    ours, theirs = alternate(args, python, lambda: TestWebProcess(*web), cap, args.few_delay)
    print(f"\nfew hosts (delay-bound): {args.few_hosts} hosts x {args.few_pages} pages (+ home), mean "
          f"{args.few_mean_bytes} B, delay {args.few_delay} s, to exhaustion; median of {args.runs} run(s) each")
    print(f"  ideal time: {args.few_pages + 1} pages on the largest host x {args.few_delay} s = {ideal:.1f} s")
    table([
        ("pages", ".0f", lambda r: r.pages, False),
        ("pages on largest host", ".0f", lambda r: max(r.per_host.values(), default=0), False),
        ("wall s (start to exit)", ".1f", lambda r: r.wall_s, True),
        ("span s (first-last page)", ".1f", lambda r: r.span_s, True),
        ("wall / ideal", ".2f", lambda r: r.wall_s / ideal, False),
        ("span / ideal", ".2f", lambda r: r.span_s / ideal, False),
        ("start-up s (to 1st page)", ".1f", lambda r: r.startup_s, True),
        ("shutdown s (last page-exit)", ".1f", lambda r: r.shutdown_s, True),
        ("last record written-exit s", ".1f", lambda r: r.idle_tail_s, True),
        ("CPU ms/page", ".2f", lambda r: r.cpu_ms_per_page, True),
    ], ours, theirs)


def docs_sites(args: argparse.Namespace, python: Path) -> None:
    dirs = [Path(d).resolve() for d in args.docs]
    missing = [str(d) for d in dirs if not (d / "index.html").is_file()]
    if missing:
        raise BenchError(f"--docs: no index.html in {', '.join(missing)}")
    delay = args.few_delay
    print(f"\n== real documentation sites: {', '.join(d.name for d in dirs)}; to exhaustion, delay {delay} s",
          file=sys.stderr)
    ours, theirs = alternate(args, python, lambda: DocsWeb(dirs), 100_000, delay)
    print(f"\nreal documentation sites (delay-bound): {len(dirs)} hosts ({', '.join(str(d) for d in dirs)}), "
          f"delay {delay} s, to exhaustion; median of {args.runs} run(s) each")
    print("  ideal time: each side's largest host's responses x the delay")
    table([
        ("pages (responses)", ".0f", lambda r: r.pages, False),
        ("pages on largest host", ".0f", lambda r: max(r.per_host.values(), default=0), False),
        ("wall s (start to exit)", ".1f", lambda r: r.wall_s, True),
        ("span s (first-last page)", ".1f", lambda r: r.span_s, True),
        ("wall / ideal", ".2f", lambda r: r.wall_s / max(1e-9, max(r.per_host.values(), default=0) * delay), False),
        ("start-up s (to 1st page)", ".1f", lambda r: r.startup_s, True),
        ("shutdown s (last page-exit)", ".1f", lambda r: r.shutdown_s, True),
        ("CPU ms/page", ".2f", lambda r: r.cpu_ms_per_page, True),
    ], ours, theirs)


# -- the web's shape ---------------------------------------------------------------

class ShapedWeb(TestWebProcess):
    """The test web with answer times and a Crawl-delay per host; it logs every request
    and connection (read once it has stopped) and names each host's delay."""

    def __init__(self, args: argparse.Namespace, hosts: int, tmp: Path) -> None:
        self.manifest, self.log = tmp / "web.json", tmp / "web-log.jsonl"
        super().__init__(hosts, args.web_pages, args.web_bytes, (
            "--latency-median", str(args.latency_median), "--latency-sigma", str(args.latency_sigma),
            "--latency-max", str(args.latency_max), "--crawl-delay", args.web_delay,
            "--links", str(args.web_links), "--manifest", str(self.manifest), "--log", str(self.log)))

    def delays(self) -> dict[str, float]:
        """host:port -> its Crawl-delay, s."""
        return {h["host"]: h["crawl_delay"] for h in json.loads(self.manifest.read_text())["hosts"]}


def broad_crawl_settings(args: argparse.Namespace, slots: Path) -> dict[str, str]:
    """Scrapy as its docs advise for broad crawls, with our limits where the two differ."""
    ours = Settings()
    return {
        "CONCURRENT_REQUESTS": str(args.scrapy_concurrency),
        "CONCURRENT_REQUESTS_PER_DOMAIN": "1",
        "REACTOR_THREADPOOL_MAXSIZE": "20",
        "LOG_LEVEL": "INFO",
        "COOKIES_ENABLED": "False",
        "RETRY_ENABLED": "False",
        "REDIRECT_ENABLED": "True",  # we follow redirects too, this many hops
        "REDIRECT_MAX_TIMES": str(ours.MAX_REDIRECTS),
        "DOWNLOAD_TIMEOUT": f"{ours.TOTAL_TIMEOUT_S:g}",  # our deadline for one exchange
        "AUTOTHROTTLE_ENABLED": "False",
        "ROBOTSTXT_OBEY": "True",
        "BENCH_SLOTS_FILE": str(slots),  # each host's delay: Scrapy does not read Crawl-delay
    }


def politeness_bounds(delays: dict[str, float], mean_answer_s: float) -> tuple[float, float]:
    """Most pages/s the hosts allow with every host busy: resting the delay after each
    answer (our rule), and starting one request per delay (Scrapy's DOWNLOAD_DELAY)."""
    rest = sum(1 / (d + mean_answer_s) for d in delays.values())
    starts = sum(1 / max(d, mean_answer_s) for d in delays.values())
    return rest, starts


def web_shape(args: argparse.Namespace, python: Path) -> None:
    low = float(args.web_delay.partition("-")[0])
    mean_answer = args.latency_median * math.exp(args.latency_sigma ** 2 / 2)
    for n_hosts in args.web_hosts:
        size = n_hosts * (args.web_pages + 1)  # every host: its home page and /p/1..N
        cap = args.web_cap or 10 * size
        shape = (f"{n_hosts} hosts x {args.web_pages} pages (+ home) of ~{args.web_bytes} B, answers lognormal "
                 f"median {args.latency_median:g} s sigma {args.latency_sigma:g} (mean {mean_answer:.2f} s), "
                 f"Crawl-delay {args.web_delay} s per host, cap {args.web_cap or 'none'}")
        print(f"\n== web-shaped: {shape}", file=sys.stderr)
        ours: list[Run] = []
        theirs: list[Run] = []
        bounds = (0.0, 0.0)
        for i in range(args.runs):
            for side in ("ours", "scrapy"):
                tmp = Path(tempfile.mkdtemp(prefix=f"vs-scrapy-web-{side}-"))
                try:
                    web = ShapedWeb(args, n_hosts, tmp)
                    with web:
                        delays = web.delays()
                        if side == "ours":
                            run = run_ours(args, web.seeds, cap, low, tmp, {"DELAY_FACTOR": "0"})
                        else:
                            slots = tmp / "slots.json"
                            slots.write_text(json.dumps({
                                host.rsplit(":", 1)[0]: {"concurrency": 1, "delay": d, "jitter": 0.0}
                                for host, d in delays.items()}))
                            run = run_scrapy(args, python, web.seeds, cap, low, tmp,
                                             broad_crawl_settings(args, slots))
                    run.server = ServerView.from_log(web.log, delays)
                    run.load = os.getloadavg()[0]
                    bounds = politeness_bounds(delays, mean_answer)
                finally:
                    if args.keep:
                        print(f"  (kept {tmp})", file=sys.stderr)
                    else:
                        shutil.rmtree(tmp, ignore_errors=True)
                (ours if side == "ours" else theirs).append(run)
                sv = served(run)
                print(f"  run {i + 1}/{args.runs} {side:6s}: {sv.pages} pages (200), wall {run.wall_s:.1f} s, "
                      f"{sv.pages / run.wall_s:.1f} pages/s, {sv.requests} requests ({sv.not_pages} not pages), "
                      f"exchanges in flight median {sv.in_flight('exchanges', 0.5):.0f}, hosts in flight "
                      f"{sv.in_flight('hosts_in_flight', 0.5):.0f}, CPU {run.cpu_s / max(sv.pages, 1) * 1000:.2f} "
                      f"ms/page, peak RSS {run.peak_rss / 2**20:.0f} MiB, last exchange to exit "
                      f"{run.start + run.wall_s - sv.last_end:.1f} s, politeness violations "
                      f"{sv.politeness.violations}, load average {run.load:.1f}", file=sys.stderr, flush=True)
        print(f"\nweb-shaped: {shape}; median of {args.runs} run(s) each, "
              f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"  politeness bound with every host busy: {bounds[0]:.0f} pages/s resting the delay after each "
              f"answer (our rule), {bounds[1]:.0f} starting one request per delay (Scrapy's)")
        table([
            ("pages (200)", ".0f", lambda r: served(r).pages, False),
            ("pages (200)/s whole run", ".1f", lambda r: served(r).pages / r.wall_s, True),
            ("pages (200)/s steady 10-90%", ".1f", lambda r: served(r).rate_steady, True),
            ("wall s", ".1f", lambda r: r.wall_s, True),
            ("hosts reached", ".0f", lambda r: served(r).politeness.hosts, False),
            ("requests", ".0f", lambda r: served(r).requests, True),
            ("  not pages", ".0f", lambda r: served(r).not_pages, True),
            ("  robots.txt", ".0f", lambda r: served(r).robots, False),
            ("  /sitemap*", ".0f", lambda r: served(r).sitemaps, False),
            ("  other (probes, 404s)", ".0f", lambda r: served(r).other, False),
            ("exchanges in flight median", ".0f", lambda r: served(r).in_flight("exchanges", 0.5), True),
            ("exchanges in flight p95", ".0f", lambda r: served(r).in_flight("exchanges", 0.95), True),
            ("hosts in flight median", ".0f", lambda r: served(r).in_flight("hosts_in_flight", 0.5), True),
            ("hosts in flight p95", ".0f", lambda r: served(r).in_flight("hosts_in_flight", 0.95), True),
            ("connections open median", ".0f", lambda r: served(r).in_flight("connections", 0.5), True),
            ("hosts connected median", ".0f", lambda r: served(r).in_flight("hosts_connected", 0.5), True),
            ("hosts connected p95", ".0f", lambda r: served(r).in_flight("hosts_connected", 0.95), True),
            ("hosts active median", ".0f", lambda r: served(r).in_flight("hosts_active", 0.5), True),
            ("CPU ms/page (200)", ".2f", lambda r: r.cpu_s / max(served(r).pages, 1) * 1000, True),
            ("CPU % of one core", ".0f", lambda r: r.cpu_s / r.wall_s * 100, True),
            ("peak RSS MiB (tree)", ".0f", lambda r: r.peak_rss / 2**20, True),
            ("peak PSS MiB (tree)", ".0f", lambda r: r.peak_pss / 2**20, True),
            ("start-up s (to 1st page)", ".1f", lambda r: r.startup_s, True),
            ("last exchange to exit s", ".1f", lambda r: r.start + r.wall_s - served(r).last_end, True),
            ("load average at exit", ".1f", lambda r: r.load, False),
        ], ours, theirs)
        by_role(ours, theirs, lambda r: served(r).pages)
        for side, runs in (("ours", ours), ("scrapy", theirs)):
            p = [served(r).politeness for r in runs]
            print(f"  politeness, {side} (sum over runs): {sum(x.violations for x in p)} violations: "
                  f"{sum(x.robots_late for x in p)} hosts asked before robots.txt was answered, "
                  f"{sum(x.overlapping for x in p)} overlapping requests, {sum(x.multi_conn_hosts for x in p)} "
                  f"hosts with two connections, {sum(x.short_gaps for x in p)} gaps below the delay; also "
                  f"{sum(x.short_gaps_after_robots for x in p)} short gaps right after robots.txt, "
                  f"{sum(x.short_starts for x in p)} request starts closer than the delay (and "
                  f"{sum(x.short_starts_after_robots for x in p)} right after robots.txt); smallest gap "
                  f"{min(x.min_gap_ratio for x in p):.2f} x the delay")
            for example in next((x.examples for x in p if x.examples), [])[:3]:
                print(f"    e.g. {example}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pages", type=int, default=5000, help="page cap N for both sides (many hosts)")
    ap.add_argument("--runs", type=int, default=3, help="runs per side, alternating (medians quoted)")
    ap.add_argument("--quick", action="store_true", help="smoke check: 600 pages, 100 pages per few-host, 1 run")
    ap.add_argument("--smoke", action="store_true",
                    help="seconds: many hosts, 4 x 10 pages, cap 40; Scrapy only if its venv is there")
    ap.add_argument("--only", choices=("many", "few", "docs", "web"), help="run one scenario")
    ap.add_argument("--docs", nargs="+", default=[], metavar="DIR",
                    help="documentation folders (each with an index.html) to serve as hosts: a few-host "
                         "scenario on real sites (run by default when given)")
    ap.add_argument("--hosts", type=int, default=100)
    ap.add_argument("--host-pages", type=int, default=50, help="pages per host (many hosts)")
    ap.add_argument("--mean-bytes", type=int, default=60_000)
    ap.add_argument("--delay", type=float, default=0.05, help="per-host delay s (many hosts)")
    ap.add_argument("--few-hosts", type=int, default=3)
    ap.add_argument("--few-pages", type=int, default=400, help="pages per host (few hosts)")
    ap.add_argument("--few-mean-bytes", type=int, default=20_000)
    ap.add_argument("--few-delay", type=float, default=0.1)
    ap.add_argument("--web-hosts", type=int, nargs="+", default=[1000], metavar="N",
                    help="hosts of the web-shaped scenario (one run set per value)")
    ap.add_argument("--web-pages", type=int, default=16, help="pages per host (web-shaped), besides the home")
    ap.add_argument("--web-bytes", type=int, default=30_000, help="mean page size (web-shaped)")
    ap.add_argument("--web-links", type=int, default=8, help="links per page (web-shaped)")
    ap.add_argument("--web-delay", default="1-5", metavar="S|LOW-HIGH",
                    help="Crawl-delay per host, uniform in LOW-HIGH s (web-shaped)")
    ap.add_argument("--web-cap", type=int, default=8000, help="page cap (web-shaped; 0 = crawl to exhaustion)")
    ap.add_argument("--latency-median", type=float, default=0.4, help="median answer time, s (web-shaped)")
    ap.add_argument("--latency-sigma", type=float, default=0.9, help="lognormal sigma of answer times")
    ap.add_argument("--latency-max", type=float, default=10.0, help="cap of one answer's time, s")
    ap.add_argument("--scrapy-concurrency", type=int, default=256,
                    help="Scrapy's CONCURRENT_REQUESTS in the web-shaped scenario")
    ap.add_argument("--workers", type=int, help="our fetch worker processes (default: manage.py's)")
    ap.add_argument("--parsers", type=int, default=2, help="our parse worker processes")
    ap.add_argument("--shards", type=int, default=2, help="our frontier shards")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="one of our settings for every run, e.g. --set FETCH_BATCH=32")
    ap.add_argument("--scrapy-set", action="append", default=[], metavar="NAME=VALUE",
                    help="a Scrapy setting for every run, e.g. --scrapy-set "
                         "SCHEDULER_PRIORITY_QUEUE=scrapy.pqueues.DownloaderAwarePriorityQueue")
    ap.add_argument("--scrapy-outputs", action="store_true",
                    help="many hosts with three sides: ours, Scrapy bare, Scrapy writing our outputs "
                         "(WARC, main text, simhash, JSONL)")
    ap.add_argument("--keep", action="store_true", help="keep each run's output folder and logs")
    ap.add_argument("--run-timeout", type=float, default=1800.0,
                    help="stop a run that takes longer than this, s (the benchmark then fails; 0 = never)")
    args = ap.parse_args()
    if args.quick:
        args.pages, args.runs, args.few_pages = min(args.pages, 600), 1, min(args.few_pages, 100)
        args.web_hosts, args.web_cap = [min(n, 200) for n in args.web_hosts], min(args.web_cap or 1500, 1500)
    if args.smoke:
        args.only, args.runs, args.pages, args.hosts, args.host_pages = "many", 1, 40, 4, 10
        args.mean_bytes, args.workers, args.parsers, args.scrapy_outputs = 10_000, 1, 1, False
    try:
        python = ready_python(VENV, "scrapy") if args.smoke else scrapy_python()
        scrapy = (f"Scrapy {scrapy_version(python)} ({python})" if python is not None
                  else f"Scrapy not in {VENV} (a run without --smoke makes it): ours only")
        print(f"{scrapy}; ours: manage.py crawl --workers {args.workers or '(default)'} "
              f"--parsers {args.parsers} --shards {args.shards} {' '.join('--set ' + s for s in args.set)}".rstrip())
        print(f"machine: {psutil.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        if args.only in (None, "many"):
            (many_hosts_outputs if args.scrapy_outputs else many_hosts)(args, python)
        if args.only in (None, "few"):
            few_hosts(args, python)
        if args.only == "docs" and not args.docs:
            raise BenchError("--only docs needs --docs DIR [DIR ...]")
        if args.only in (None, "docs") and args.docs:
            docs_sites(args, python)
        if args.only in (None, "web"):
            web_shape(args, python)
    except BenchError as exc:
        print(f"vs_scrapy: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
