#!/usr/bin/env python3
"""Freshness of a real continuous crawl of a changing local web, for each revisit rule.

The web: HOSTS hosts on 127.0.0.x, PAGES pages each, every page linked from its host's
index. Each page changes as a Poisson process at its own rate, drawn log-uniformly between
``--fastest`` and ``--slowest`` seconds (a share ``--static`` never changes); the changes
are in the main text (a new paragraph of words per version). The server answers ETag and
Last-Modified, and 304 to a matching If-None-Match or If-Modified-Since. The change times
are a fixed function of the seed, so every rule meets the same web.

The crawler runs as an operator would (``manage.py crawl --continuous``) with one fixed
revisit bandwidth (``RECRAWL_BUDGET_PER_S``, one shard) and each ``RECRAWL_POLICY`` in turn.
The server logs every answer; the truth is computed from that log: a page's copy is fresh
at time t when the version we last fetched (200, or confirmed by a 304) is the live one.
Freshness and age are averaged over H seconds from the end of the first pass (every page
fetched once: the same for every rule), for several horizons H, beside the optimum's
expected freshness for the true rates and the same budget. Politeness is audited from the
same log (one connection per host at a time, no gap under the delay).

    python bench/changing_web.py [--seconds 600] [--policies uniform,multiplicative,nutch,adaptive] [--smoke]

``--smoke``: 2 hosts x 5 pages, 10 revisits a second, the adaptive rule alone, horizons up
to 6 s, 10 s for the first pass (about 20 s).
"""
from __future__ import annotations

import argparse
import bisect
import math
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from email.utils import formatdate, parsedate_to_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from crawler_tasks.freshness.allocate import (  # noqa: E402
    Bounds,
    FreqOf,
    Objective,
    PageClass,
    expected_freshness,
    solve_mu,
)
from crawler_tasks.ops.child import die_with_parent  # noqa: E402

FIRST_CRAWL_S = 30.0   # the crawl runs this much longer than the longest horizon: its first pass (default)

WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa "
         "quebec romeo sierra tango uniform victor whiskey xray yankee zulu").split()


@dataclass
class Page:
    rate: float
    changes: list[float] = field(default_factory=list)   # change times, seconds after the web's start
    rng: random.Random = field(default_factory=random.Random)

    def version(self, t: float) -> int:
        """Changes up to t (generated lazily, the same for every run of one seed)."""
        if self.rate > 0:
            while not self.changes or self.changes[-1] <= t:
                self.changes.append((self.changes[-1] if self.changes else 0.0) + self.rng.expovariate(self.rate))
        return bisect.bisect_right(self.changes, t)

    def changed_at(self, version: int) -> float:
        return self.changes[version - 1] if version else 0.0


@dataclass(frozen=True)
class Answer:
    host: int
    page: int          # -1: the index, -2: robots.txt
    start: float
    end: float
    status: int
    version: int


class ChangingWeb:
    def __init__(self, hosts: int, pages: int, fastest: float, slowest: float, static: float, seed: int) -> None:
        rng = random.Random(seed)
        lo, hi = math.log(fastest), math.log(slowest)
        self.pages = [[Page(0.0 if rng.random() < static else 1 / math.exp(rng.uniform(lo, hi)),
                            rng=random.Random(seed * 1_000_003 + h * 1000 + p)) for p in range(pages)]
                      for h in range(hosts)]
        self.log: list[Answer] = []
        self.lock = threading.Lock()
        self.servers: list[ThreadingHTTPServer] = []
        self.t0 = 0.0

    def __enter__(self) -> ChangingWeb:
        web = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:   # noqa: N802 (http.server's name)
                start = time.time()
                host = self.server.host_index   # type: ignore[attr-defined]
                status, body, headers, page, version = web.answer(host, self.path, self.headers, start - web.t0)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                # the end is stamped before the writes (the header block is the last byte of a
                # 304): a thread descheduled after them would stamp it late and make a gap look
                # short (writing a page of a few kB takes microseconds)
                end = time.time()
                self.end_headers()
                self.wfile.write(body)
                with web.lock:
                    web.log.append(Answer(host, page, start, end, status, version))

        for h in range(len(self.pages)):
            server = ThreadingHTTPServer((f"127.0.0.{h + 2}", 0), Handler)
            server.host_index = h   # type: ignore[attr-defined]
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, daemon=True).start()
            self.servers.append(server)
        self.t0 = time.time()
        return self

    def __exit__(self, *exc: object) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()

    def seeds(self) -> list[str]:
        return [f"http://{s.server_address[0]}:{s.server_address[1]}/" for s in self.servers]

    def answer(self, host: int, path: str, headers: object, t: float) -> tuple[int, bytes, dict[str, str], int, int]:
        if path == "/robots.txt":
            return 200, b"User-agent: *\nAllow: /\n", {"Content-Type": "text/plain"}, -2, 0
        if path == "/":
            links = "".join(f'<li><a href="/p/{p}.html">page {p}</a></li>' for p in range(len(self.pages[host])))
            return 200, f"<html><body><h1>Host {host}</h1><ul>{links}</ul></body></html>".encode(), \
                {"Content-Type": "text/html"}, -1, 0
        try:
            p = int(path.removeprefix("/p/").removesuffix(".html"))
            page = self.pages[host][p]
        except (ValueError, IndexError):
            return 404, b"not found", {"Content-Type": "text/plain"}, -3, 0
        with self.lock:
            version = page.version(t)
            modified = self.t0 + page.changed_at(version)
        etag = f'"{host}-{p}-{version}"'
        last_modified = formatdate(modified, usegmt=True)
        inm = headers.get("If-None-Match")   # type: ignore[attr-defined]
        ims = headers.get("If-Modified-Since")   # type: ignore[attr-defined]
        fresh = inm == etag if inm else bool(ims) and _epoch(ims) >= math.floor(modified)
        common = {"ETag": etag, "Last-Modified": last_modified}
        if fresh:
            return 304, b"", common, p, version
        words = random.Random(host * 7919 + p * 104729 + version)
        text = " ".join(words.choice(WORDS) for _ in range(120))
        body = (f"<html><head><title>Page {host}/{p}</title></head><body><nav><a href=\"/\">home</a></nav>"
                f"<article><h1>Page {p} of host {host}</h1><p>This is version {version} of the page. {text}</p>"
                f"</article></body></html>").encode()
        return 200, body, {"Content-Type": "text/html; charset=utf-8", **common}, p, version


def _epoch(stamp: str) -> float:
    try:
        return parsedate_to_datetime(stamp).timestamp()
    except (TypeError, ValueError):
        return -1.0


@dataclass
class Truth:
    freshness: list[float]   # mean over [0, H] per horizon
    age: list[float]
    requests: int
    not_modified: int
    violations: int
    first_crawl_s: float     # when every page had been fetched once: the clock starts there


def measure(web: ChangingWeb, horizons: list[float], delay: float, step: float = 0.5) -> Truth:
    """Freshness and age of the crawl's copies over time, from the server's log."""
    fetches: dict[tuple[int, int], list[tuple[float, int]]] = {}
    for a in sorted(web.log, key=lambda a: a.end):
        if a.page >= 0 and a.status in (200, 304):
            fetches.setdefault((a.host, a.page), []).append((a.end - web.t0, a.version))
    total = sum(len(ps) for ps in web.pages)
    # the clock of the comparison starts once every page has been fetched (the first crawl
    # is the same for every rule; the simulation and the optimum start there too)
    known = max(seen[0][0] for seen in fetches.values()) if len(fetches) == total else 0.0
    fresh_at, age_at = [], []
    t = known
    while t < known + max(horizons):
        fresh = 0
        age = 0.0
        for (h, p), seen in fetches.items():
            i = bisect.bisect_right(seen, (t, math.inf)) - 1
            page = web.pages[h][p]
            live = page.version(t)
            if i >= 0 and seen[i][1] == live:
                fresh += 1
            elif i >= 0:
                age += t - page.changed_at(seen[i][1] + 1)
        # a page not fetched yet counts as stale (its copy does not exist)
        fresh_at.append(fresh / total)
        age_at.append(age / total)
        t += step
    out_f, out_a = [], []
    for h in horizons:
        n = max(1, int(h / step))
        out_f.append(sum(fresh_at[:n]) / n)
        out_a.append(sum(age_at[:n]) / n)
    return Truth(out_f, out_a, len(web.log), sum(1 for a in web.log if a.status == 304), _violations(web, delay),
                 known)


def _violations(web: ChangingWeb, delay: float) -> int:
    """Requests to a host that overlapped the previous one or came sooner than the delay after it."""
    bad = 0
    by_host: dict[int, list[Answer]] = {}
    for a in web.log:
        by_host.setdefault(a.host, []).append(a)
    for answers in by_host.values():
        answers.sort(key=lambda a: a.start)
        for prev, cur in zip(answers, answers[1:], strict=False):
            if cur.start < prev.end or cur.start - prev.end < delay - 0.002:
                bad += 1
    return bad


def optimum(web: ChangingWeb, budget: float, bounds: Bounds) -> float:
    classes = [PageClass(p.rate, 1.0, 1) for ps in web.pages for p in ps]
    return expected_freshness(classes, FreqOf(solve_mu(classes, budget, Objective.FRESHNESS, bounds),
                                              Objective.FRESHNESS, bounds))


def run(policy: str, a: argparse.Namespace, horizons: list[float]) -> Truth:
    web = ChangingWeb(a.hosts, a.pages, a.fastest, a.slowest, a.static, a.seed)
    with web, tempfile.TemporaryDirectory(prefix="changing-") as out:
        env = {**os.environ, "CRAWLER_SHARDS": "1", "CRAWLER_RECRAWL_POLICY": policy,
               "CRAWLER_RECRAWL_BUDGET_PER_S": str(a.budget), "CRAWLER_RECRAWL_CHECK_S": "0.25",
               "CRAWLER_RECRAWL_MIN_S": str(a.min_s), "CRAWLER_RECRAWL_MAX_S": str(a.max_s),
               "CRAWLER_RECRAWL_INITIAL_S": str(a.hosts * a.pages / a.budget),
               "CRAWLER_SOFT404_PROBE": "0", "CRAWLER_PROBE_SITEMAP_XML": "0", "CRAWLER_DELAY_FACTOR": "0"}
        cmd = [sys.executable, "manage.py", "crawl", *web.seeds(), "--continuous", "--allow-private",
               "--min-delay", str(a.delay), "--max-seconds", str(max(horizons) + a.first_pass), "--out", out]
        log = Path(out) / "bench.log"
        with open(log, "w") as f:
            rc = subprocess.run(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                                preexec_fn=die_with_parent, timeout=max(horizons) + 120, check=False).returncode
        if rc != 0:   # its figures would be zeros that look measured
            tail = "\n".join(log.read_text(errors="replace").strip().splitlines()[-15:])
            raise SystemExit(f"manage.py crawl ({policy}) exited {rc}:\n{tail}")
        return measure(web, horizons, a.delay)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=10)
    ap.add_argument("--pages", type=int, default=40)
    ap.add_argument("--fastest", type=float, default=0.2, help="shortest change period, s")
    ap.add_argument("--slowest", type=float, default=2000.0, help="longest change period, s")
    ap.add_argument("--static", type=float, default=0.1)
    ap.add_argument("--budget", type=float, default=40.0, help="revisits per second (one shard)")
    ap.add_argument("--delay", type=float, default=0.1, help="politeness delay per host, s")
    ap.add_argument("--min-s", type=float, default=0.5)
    ap.add_argument("--max-s", type=float, default=3000.0)
    ap.add_argument("--seconds", type=float, default=600.0)
    ap.add_argument("--horizons", default="")
    ap.add_argument("--policies", default="uniform,multiplicative,nutch,adaptive")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--first-pass", type=float, default=FIRST_CRAWL_S,
                    help="s the crawl runs beyond the longest horizon: its start and first pass")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: about 20 s")
    a = ap.parse_args()
    if a.smoke:
        a.hosts, a.pages, a.budget, a.seconds, a.horizons, a.policies = 2, 5, 10.0, 6.0, "", "adaptive"
        a.first_pass = 10.0
    horizons = [float(h) for h in a.horizons.split(",")] if a.horizons else [a.seconds / 4, a.seconds / 2, a.seconds]
    n = a.hosts * a.pages
    bounds = Bounds(1 / a.max_s, 1 / a.min_s)
    best = optimum(ChangingWeb(a.hosts, a.pages, a.fastest, a.slowest, a.static, a.seed), a.budget, bounds)
    print(f"{n} pages on {a.hosts} hosts, periods {a.fastest:g}-{a.slowest:g} s ({a.static:.0%} static), "
          f"revisit budget {a.budget:g}/s (uniform interval {n / a.budget:.0f} s), delay {a.delay:g} s; "
          f"load {os.getloadavg()[0]:.1f}")
    print(f"optimum for the true rates (expected, steady state): freshness {best:.3f}")
    head = "".join(f"{'H=' + format(h, 'g') + 's':>10}" for h in horizons)
    print(f"{'mean freshness over H':18s}{head}   mean age at H   requests  304s  politeness violations  first pass")
    rows = {}
    for policy in a.policies.split(","):
        truth = run(policy, a, horizons)
        rows[policy] = truth.freshness
        print(f"{policy:18s}" + "".join(f"{f:10.3f}" for f in truth.freshness)
              + f"   {truth.age[-1]:10.1f} s {truth.requests:10d} {truth.not_modified:5d}  {truth.violations:10d}"
              f"  {truth.first_crawl_s:6.1f} s",
              flush=True)
    if "nutch" in rows and "adaptive" in rows:
        print(f"{'optimum / nutch':18s}" + "".join(f"{best / x:10.3f}" for x in rows["nutch"]))
        print(f"{'gap closed':18s}" + "".join(f"{(e - x) / (best - x) if best > x else math.nan:10.2f}"
                                              for e, x in zip(rows["adaptive"], rows["nutch"], strict=True)))


if __name__ == "__main__":
    main()
