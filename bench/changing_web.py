#!/usr/bin/env python3
"""Freshness of a real continuous crawl of a changing local web, beside simulated references.

This is issue 40's evaluation: freshness on webs the scheduler has not seen, measured on the
crawler as an operator runs it, against reference policies that cannot be run better.

The web: ``--hosts`` x ``--pages`` pages on 127.0.0.x (8 x 150), every page linked from its
host's index. Page i of the flat list is host i // pages, page i % pages; its change rate comes
from ``freshness_sim.draw_rates(--shape, n, --seed)`` and its change times from the same seeded
stream as the simulator's ``Page`` (``Random(f"{seed}-{i}")``, exponential gaps). So the
simulated policies below meet the very change events the crawl meets. A change is in the main
text (a new ``<article>``). The server answers ETag (a hash of the body) and Last-Modified, and
304 to a matching If-None-Match or If-Modified-Since.

``--offtext [PERIOD_S]`` (30 s): every page also carries an ad slot and a footer (a visitor
counter and a timestamp) outside its ``<article>``, redrawn on the page's own Poisson clock.
The body bytes change, so the ETag and Last-Modified follow them, as a real server's would, and
a conditional request gets a 200. These are not changes: the truth counts main-text versions
only. A crawler that trusts validators alone then revisits static pages as if they changed.

The web's clock starts at its first request (the crawl's start as the web sees it), and the
crawl runs the longest horizon plus ``--margin`` for its start-up. The truth comes from the
server's log: a copy is fresh from its fetch (a 200, or a 304 confirming the copy last served)
until the page's main text next changes. Freshness at horizon H is its mean over the last 70 %
of [0, H] (freshness_sim's ``WINDOW``), integrated exactly, so one run of 3,600 s gives the
1,200 s figure too.

The references are simulated (``freshness_sim.simulate``) on the same rates and change events,
with the crawl's revisit budget (default: RECRAWL_HOST_SHARE x hosts / delay, the crawler's own
default) and bounds, a first pass at hosts / delay pages a second: ``uniform``, ``nutch``,
``adaptive`` (our rule, simulated) and ``optimal`` (the scheduler given the true rates). The
simulated policies see main-text changes only, off-text ones never reach them. Also printed:
the gap closed, ``(ours - nutch) / (optimal - nutch)``; per window, fetches/s and freshness by
change class (``freshness_sim.CLASSES``; ours counts a page's answers after its first); the share
of revisits after the first 10 % of H spent on static pages; and the politeness audit (one
connection per host at a time, no gap under the delay).

    python bench/changing_web.py [--shape loguniform|bimodal|hot] [--horizons 1200,3600] [--offtext] [--smoke]

``--policies`` picks the real crawls (``RECRAWL_POLICY``; default ``adaptive``). ``--fastest``,
``--slowest``, ``--static`` replace the log-uniform shape's bounds (2 s, 2 h, 20 %).
``--smoke``: 2 hosts x 5 pages, off-text changes every 5 s, one horizon of 10 s (about 20 s).
"""
from __future__ import annotations

import argparse
import bisect
import hashlib
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
from bench.freshness_sim import CLASSES, POLICIES, WINDOW, Result, Setup, draw_rates, rate_class, simulate  # noqa: E402
from crawler_tasks.freshness.allocate import Bounds  # noqa: E402
from crawler_tasks.ops.child import die_with_parent  # noqa: E402
from crawler_tasks.settings import Settings  # noqa: E402

MARGIN_S = 15.0   # the crawl runs this much longer than the longest horizon: its start-up (default)
REPLAN_S = 5.0    # the simulated scheduler's replanning period

WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa "
         "quebec romeo sierra tango uniform victor whiskey xray yankee zulu").split()
ADS = ("Cheap flights to Lisbon this weekend only", "Try our new running shoes, free returns",
       "Learn Python in 30 days with our course", "Fresh coffee beans delivered to your door",
       "Compare car insurance quotes in minutes", "Noise-cancelling headphones at half price")


@dataclass(slots=True)
class Clock:
    """A Poisson stream of change times, drawn as freshness_sim's ``Page`` draws them."""
    rate: float
    rng: random.Random
    changes: list[float] = field(default_factory=list)   # seconds on the web's clock

    def version(self, t: float) -> int:
        """Changes up to t (drawn lazily; the same for every run of one seed)."""
        if self.rate > 0:
            while not self.changes or self.changes[-1] <= t:
                self.changes.append((self.changes[-1] if self.changes else 0.0) + self.rng.expovariate(self.rate))
        return bisect.bisect_right(self.changes, t)

    def changed_at(self, version: int) -> float:
        return self.changes[version - 1] if version else 0.0


@dataclass(slots=True)
class Page:
    main: Clock         # the article: what freshness counts
    off: Clock          # the ad slot and footer (rate 0 without --offtext)
    served: int = -1    # main version of the last 200 served: the copy a 304 confirms


@dataclass(frozen=True, slots=True)
class Answer:
    host: int
    page: int          # -1: the index, -2: robots.txt, -3: not found
    start: float       # epoch seconds
    end: float
    status: int
    version: int       # main-text version of the copy the answer leaves the crawler with


class ChangingWeb:
    def __init__(self, rates: list[float], pages: int, seed: int, offtext_s: float) -> None:
        self.per_host = pages
        self.flat = [Page(Clock(r, random.Random(f"{seed}-{i}")),
                          Clock(1 / offtext_s if offtext_s > 0 else 0.0, random.Random(f"offtext-{seed}-{i}")))
                     for i, r in enumerate(rates)]
        self.log: list[Answer] = []
        self.lock = threading.Lock()
        self.servers: list[ThreadingHTTPServer] = []
        self.t0 = 0.0   # epoch of the first request: the web's clock starts there

    def __enter__(self) -> ChangingWeb:
        web = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:   # noqa: N802 (http.server's name)
                start = time.time()
                with web.lock:
                    web.t0 = web.t0 or start
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

        for h in range(len(self.flat) // self.per_host):
            server = ThreadingHTTPServer((f"127.0.0.{h + 2}", 0), Handler)
            server.host_index = h   # type: ignore[attr-defined]
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, daemon=True).start()
            self.servers.append(server)
        return self

    def __exit__(self, *exc: object) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()

    def seeds(self) -> list[str]:
        return [f"http://127.0.0.{h + 2}:{s.server_port}/" for h, s in enumerate(self.servers)]

    def answer(self, host: int, path: str, headers: object, t: float) -> tuple[int, bytes, dict[str, str], int, int]:
        if path == "/robots.txt":
            return 200, b"User-agent: *\nAllow: /\n", {"Content-Type": "text/plain"}, -2, 0
        if path == "/":
            links = "".join(f'<li><a href="/p/{p}.html">page {p}</a></li>' for p in range(self.per_host))
            return 200, f"<html><body><h1>Host {host}</h1><ul>{links}</ul></body></html>".encode(), \
                {"Content-Type": "text/html"}, -1, 0
        try:
            p = int(path.removeprefix("/p/").removesuffix(".html"))
            if not 0 <= p < self.per_host:
                raise ValueError(p)
        except ValueError:
            return 404, b"not found", {"Content-Type": "text/plain"}, -3, 0
        i = host * self.per_host + p
        page = self.flat[i]
        with self.lock:
            version, off = page.main.version(t), page.off.version(t)
            main_at, off_at = page.main.changed_at(version), page.off.changed_at(off)
        body = self.body(host, p, version, off, self.t0 + off_at)
        modified = self.t0 + max(main_at, off_at)
        etag = f'"{hashlib.blake2b(body, digest_size=8).hexdigest()}"'
        inm = headers.get("If-None-Match")   # type: ignore[attr-defined]
        ims = headers.get("If-Modified-Since")   # type: ignore[attr-defined]
        common = {"ETag": etag, "Last-Modified": formatdate(modified, usegmt=True)}
        with self.lock:
            if (inm == etag) if inm else (bool(ims) and _epoch(ims) >= math.floor(modified)):
                return 304, b"", common, p, page.served   # validators that lag (1 s dates) leave a stale copy
            page.served = version
        return 200, body, {"Content-Type": "text/html; charset=utf-8", **common}, p, version

    def body(self, host: int, p: int, version: int, off: int, off_at: float) -> bytes:
        words = random.Random(host * 7919 + p * 104729 + version)
        text = " ".join(words.choice(WORDS) for _ in range(120))
        ad = random.Random(f"{host}-{p}-{off}").choice(ADS)
        return (f"<html><head><title>Page {host}/{p}</title></head><body><nav><a href=\"/\">home</a></nav>"
                f"<article><h1>Page {p} of host {host}</h1><p>This is version {version} of the page. {text}</p>"
                f"</article><aside class=\"ad\">Sponsored: {ad}</aside>"
                f"<footer><p>Visitors so far: {1000 + 37 * off}. Footer refreshed at "
                f"{time.strftime('%H:%M:%S', time.gmtime(off_at))} UTC.</p></footer></body></html>").encode()


def _epoch(stamp: str) -> float:
    try:
        return parsedate_to_datetime(stamp).timestamp()
    except (TypeError, ValueError):
        return -1.0


@dataclass(slots=True)
class Truth:
    result: Result           # the figures the simulated policies have too
    requests: int
    not_modified: int
    violations: int
    first_pass_s: float      # when every page had been fetched once (web clock; inf: never)


def measure(web: ChangingWeb, horizons: list[float], delay: float) -> Truth:
    """Freshness, fetches/s and freshness by class, static share, from the server's log."""
    end = max(horizons)
    fetches: dict[int, list[tuple[float, int]]] = {}   # flat page -> (copy time, main version), in time order
    for a in sorted(web.log, key=lambda a: a.end):
        if a.page >= 0 and a.status in (200, 304) and a.end - web.t0 < end:
            fetches.setdefault(a.host * web.per_host + a.page, []).append((a.end - web.t0, a.version))
    windows = [((1 - WINDOW) * h, h) for h in horizons]
    fresh = [[0.0] * len(CLASSES) for _ in horizons]
    visits = [[0] * len(CLASSES) for _ in horizons]
    late = [[0, 0] for _ in horizons]   # revisits after the first 10 % of H: all, to static pages
    sizes = [0] * len(CLASSES)
    for i, page in enumerate(web.flat):
        c = rate_class(page.main.rate)
        sizes[c] += 1
        page.main.version(end)   # change times drawn past the end
        seen = fetches.get(i, [])
        for k, (at, version) in enumerate(seen):
            until = seen[k + 1][0] if k + 1 < len(seen) else end
            if version < 0:     # a 304 to a copy never served: none held
                stale = at
            elif version < len(page.main.changes):
                stale = max(at, page.main.changes[version])
            else:               # a static page
                stale = until
            for w, (lo, hi) in enumerate(windows):
                fresh[w][c] += max(0.0, min(hi, until, stale) - max(lo, at))
                if k and lo <= at < hi:
                    visits[w][c] += 1
                if k and 0.1 * hi <= at < hi:
                    late[w][0] += 1
                    late[w][1] += c == 0
    spans = [hi - lo for lo, hi in windows]
    result = Result([sum(row) / (len(web.flat) * s) for row, s in zip(fresh, spans, strict=True)],
                    [[v / s for v in row] for row, s in zip(visits, spans, strict=True)],
                    [st / al if al else 0.0 for al, st in late],
                    sum(len(seen) for seen in fetches.values()),
                    [[f / (max(n, 1) * s) for f, n in zip(row, sizes, strict=True)]
                     for row, s in zip(fresh, spans, strict=True)])
    first_pass = max(seen[0][0] for seen in fetches.values()) if len(fetches) == len(web.flat) else math.inf
    return Truth(result, len(web.log), sum(1 for a in web.log if a.status == 304), _violations(web, delay),
                 first_pass)


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


def run(policy: str, a: argparse.Namespace, rates: list[float], horizons: list[float]) -> Truth:
    web = ChangingWeb(rates, a.pages, a.seed, a.offtext)
    with web, tempfile.TemporaryDirectory(prefix="changing-") as out:
        env = {**os.environ, "CRAWLER_SHARDS": "1", "CRAWLER_RECRAWL_POLICY": policy,
               "CRAWLER_RECRAWL_BUDGET_PER_S": str(a.budget), "CRAWLER_RECRAWL_CHECK_S": "1",
               "CRAWLER_RECRAWL_MIN_S": str(a.min_s), "CRAWLER_RECRAWL_MAX_S": str(a.max_s),
               "CRAWLER_RECRAWL_INITIAL_S": str(a.initial_s),
               "CRAWLER_SOFT404_PROBE": "0", "CRAWLER_PROBE_SITEMAP_XML": "0", "CRAWLER_DELAY_FACTOR": "0"}
        cmd = [sys.executable, "manage.py", "crawl", *web.seeds(), "--continuous", "--allow-private",
               "--min-delay", str(a.delay), "--max-seconds", str(max(horizons) + a.margin), "--out", out]
        log = Path(out) / "bench.log"
        launched = time.time()
        with open(log, "w") as f:
            rc = subprocess.run(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                                preexec_fn=die_with_parent, timeout=max(horizons) + a.margin + 120,
                                check=False).returncode
        tail = "\n".join(log.read_text(errors="replace").strip().splitlines()[-15:])
        if rc != 0:   # its figures would be zeros that look measured
            raise SystemExit(f"manage.py crawl ({policy}) exited {rc}:\n{tail}")
        ran = time.time() - web.t0 if web.t0 else 0.0
        if ran < max(horizons):   # the last part of the window would count every copy stale
            raise SystemExit(f"the crawl ({policy}) ran {ran:.1f} s from its first request, under the horizon "
                             f"{max(horizons):g} s: raise --margin (now {a.margin:g} s)\n{tail}")
        print(f"  crawl {policy}: first request {web.t0 - launched:.1f} s after launch, ran {ran:.1f} s from it",
              flush=True)
        return measure(web, horizons, a.delay)


def web_rates(a: argparse.Namespace) -> list[float]:
    """The shape's rates; the log-uniform web with other bounds when any of them is given."""
    n = a.hosts * a.pages
    if (a.fastest, a.slowest, a.static) == (None, None, None):
        return draw_rates(a.shape, n, a.seed, host_pages=a.pages)
    if a.shape != "loguniform":
        raise SystemExit("--fastest, --slowest and --static shape the log-uniform web only")
    rng = random.Random(f"loguniform-{a.seed}")
    lo, hi = math.log(a.fastest or 2.0), math.log(a.slowest or 7200.0)
    static = 0.2 if a.static is None else a.static
    return [0.0 if rng.random() < static else 1.0 / math.exp(rng.uniform(lo, hi)) for _ in range(n)]


def _row(label: str, cells: list[float], fmt: str = "10.3f") -> str:
    return f"{label:26s}" + "".join(format(c, fmt) for c in cells)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="loguniform", choices=("loguniform", "bimodal", "hot", "byhost"))
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--pages", type=int, default=150, help="pages a host")
    ap.add_argument("--fastest", type=float, help="log-uniform web: shortest change period, s (2)")
    ap.add_argument("--slowest", type=float, help="log-uniform web: longest change period, s (7200)")
    ap.add_argument("--static", type=float, help="log-uniform web: share of pages that never change (0.2)")
    ap.add_argument("--offtext", type=float, nargs="?", const=30.0, default=0.0, metavar="PERIOD_S",
                    help="off-text changes (ad slot, footer) every PERIOD_S a page on average (30)")
    ap.add_argument("--budget", type=float, default=0.0,
                    help="revisits per second (one shard); 0: the crawler's default, RECRAWL_HOST_SHARE x hosts / delay")
    ap.add_argument("--delay", type=float, default=0.2, help="politeness delay per host, s")
    ap.add_argument("--min-s", type=float, default=1.0)
    ap.add_argument("--initial-s", type=float, default=24.0)
    ap.add_argument("--max-s", type=float, default=720.0)
    ap.add_argument("--seconds", type=float, default=3600.0, help="the longest horizon (horizons: a third of it, it)")
    ap.add_argument("--horizons", default="", help="comma-separated, s (one crawl of the longest gives them all)")
    ap.add_argument("--policies", default="adaptive", help="real crawls, by RECRAWL_POLICY")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--margin", "--first-pass", type=float, default=MARGIN_S,
                    help="s the crawl runs beyond the longest horizon: its start-up")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: about 20 s")
    a = ap.parse_args()
    if a.smoke:
        a.hosts, a.pages, a.horizons, a.policies, a.margin = 2, 5, "10", "adaptive", 6.0
        a.offtext = a.offtext or 5.0
    horizons = sorted(float(h) for h in a.horizons.split(",")) if a.horizons else [a.seconds / 3, a.seconds]
    rates = web_rates(a)
    n = len(rates)
    budget = a.budget or Settings().RECRAWL_HOST_SHARE * a.hosts / a.delay
    setup = Setup(budget, Bounds(1 / a.max_s, 1 / a.min_s), a.initial_s, a.hosts / a.delay, REPLAN_S, 0.0, a.seed,
                  host_pages=a.pages)
    counts = [0] * len(CLASSES)
    for rate in rates:
        counts[rate_class(rate)] += 1
    print(f"{a.shape} web: {n} pages on {a.hosts} hosts ("
          + ", ".join(f"{lab} {c}" for (lab, _, _), c in zip(CLASSES, counts, strict=True)) + "), "
          + (f"off-text changes every ~{a.offtext:g} s a page; " if a.offtext else "no off-text changes; ")
          + f"revisit budget {budget:g}/s{'' if a.budget else ' (the default share)'}, delay {a.delay:g} s, "
          f"bounds {a.min_s:g}-{a.max_s:g} s, initial {a.initial_s:g} s, seed {a.seed}; load {os.getloadavg()[0]:.1f}",
          flush=True)
    started = time.perf_counter()
    rows: dict[str, Result] = {f"{label} (sim)": simulate(policy, rates, horizons, setup) for label, policy in POLICIES}
    print(f"  simulated references: {time.perf_counter() - started:.1f} s", flush=True)
    real: dict[str, Truth] = {}
    for policy in a.policies.split(","):
        real[policy] = run(policy, a, rates, horizons)
    rows = {**{policy: truth.result for policy, truth in real.items()}, **rows}

    print(f"\n{'freshness, last 70 % of H':26s}" + "".join(f"{'H=' + format(h, 'g') + 's':>10}" for h in horizons))
    for label, r in rows.items():
        print(_row(label, r.freshness))
    nutch, best = rows["nutch (sim)"].freshness, rows["optimal (sim)"].freshness
    for policy in real:
        print(_row(f"gap closed, {policy}", [(x - m) / (g - m) if g > m else math.nan
                                             for x, m, g in zip(rows[policy].freshness, nutch, best, strict=True)],
                   "10.2f"))
    for policy, truth in real.items():
        print(f"{policy}: {truth.requests} requests, {truth.not_modified} 304s, every page fetched once by "
              f"{truth.first_pass_s:.1f} s, politeness violations {truth.violations}")
    head = "".join(f"{lab:>16s}" for lab, _, _ in CLASSES)
    for w, h in enumerate(horizons):
        lo = (1 - WINDOW) * h
        print(f"\nwindow [{lo:g}, {h:g}] s of H={h:g}s: fetches/s by change class (pages: "
              + " ".join(str(c) for c in counts) + ")")
        print(f"{'policy':26s}{'freshness':>10s}{head}{'all':>8s}   static share after {0.1 * h:g} s")
        for label, r in rows.items():
            print(_row(label, [r.freshness[w]]) + "".join(f"{v:16.2f}" for v in r.per_s[w])
                  + f"{sum(r.per_s[w]):8.2f}   {r.static_share[w]:.1%}")
        print(f"{'freshness by class':26s}{'':10s}{head}")
        for label, r in rows.items():
            print(f"{label:26s}{'':10s}" + "".join(f"{v:16.3f}" for v in r.fresh_by[w]))


if __name__ == "__main__":
    main()
