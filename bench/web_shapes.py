#!/usr/bin/env python3
"""The web's shape as a family of webs: each crawl against its politeness bound, beside Scrapy.

Every cell is a web of DNS names (``python -m testweb --names``) answered by a DNS server the
web's process runs on 127.0.0.53:53 (lognormal answers, median 30 ms, TTL 300 s), a third of
its hosts on HTTPS from a CA the web makes, and dead names among the seeds and links: 10 %
NXDOMAIN, 3 % that never answer, 2 % SERVFAIL. Answers take a lognormal time (sigma 0.9);
every host asks for the cell's delay (Crawl-delay; ``--min-delay`` for us, DOWNLOAD_SLOTS
for Scrapy); the cap is about half the web's pages, so every host has pages left until the
end: the politeness bound holds the whole run.

A cell is limited by one of two things, and both are printed:
- the politeness bound: live hosts / (delay + mean answer time), every host fetched again
  the moment its delay has passed;
- the CPU bound: the machine's cores, less what the web's process used, over our crawl
  tree's CPU a page.
Our steady rate (200 pages between the 10 % and 90 % answers) is given as a share of the
lower of the two. Figures come from the web's and the DNS server's logs
(``testweb/evidence.py``), as in ``vs_scrapy.py --only web``.

We run with CRAWLER_DNS_SERVERS naming the bench's server and CRAWLER_CA_BUNDLE its CA.
Scrapy runs as its broad-crawl docs advise (``vs_scrapy.broad_crawl_settings``), its default
resolver (getaddrinfo on the reactor's threads) reading a resolv.conf that names the same
server: it runs in a mount namespace of its own (``unshare -m``) where that file is bound
over /etc/resolv.conf, which needs root; port 53 does too. It does not verify certificates
(its default), so it needs no CA.

    python bench/web_shapes.py                     # every cell, 3 runs a side (about an hour)
    python bench/web_shapes.py --cells A D --runs 1
    python bench/web_shapes.py --cells A --literals   # also the same web with IP literals (ours)
    python bench/web_shapes.py --smoke             # seconds: one tiny cell, ours only
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vs_scrapy import (  # noqa: E402
    BenchError,
    Run,
    ServerView,
    TestWebProcess,
    broad_crawl_settings,
    run_ours,
    run_scrapy,
    scrapy_python,
    served,
)

DNS_AT = ("127.0.0.53", 53)   # glibc reads resolv.conf's servers on port 53 only
DNS_MEDIAN_S = 0.03
SUFFIX = "web.test"


@dataclass(frozen=True)
class Cell:
    """One web of the family."""

    name: str
    hosts: int
    delay_s: float
    answer_median_s: float
    pages: int          # pages a host, besides its home
    cap: int            # pages either crawler stops at

    @property
    def mean_answer_s(self) -> float:
        return self.answer_median_s * math.exp(0.9 ** 2 / 2)

    @property
    def polite_bound(self) -> float:
        return self.hosts / (self.delay_s + self.mean_answer_s)

    def describe(self) -> str:
        return (f"{self.name}: {self.hosts} hosts x {self.pages} pages, delay {self.delay_s:g} s, answers median "
                f"{self.answer_median_s * 1000:.0f} ms (mean {self.mean_answer_s * 1000:.0f} ms), cap {self.cap}")


# hosts {1,000, 5,000} x delay {0.5, 2, 5 s} x answers {50 ms, 400 ms, 1 s} x pages {4, 16, 64}
CELLS = {c.name: c for c in (
    Cell("A", 1000, 2.0, 0.4, 16, 8000),     # the web: politeness-bound
    Cell("B", 1000, 0.5, 0.05, 16, 8000),    # fast answers, short delay: CPU-bound
    Cell("C", 1000, 5.0, 1.0, 16, 4000),     # slow everything: politeness-bound, few pages/s
    Cell("D", 1000, 2.0, 1.0, 64, 8000),     # deep sites, slow answers
    Cell("E", 5000, 2.0, 0.4, 4, 10000),     # many small sites: robots.txt and leasing
    Cell("F", 5000, 5.0, 1.0, 16, 10000),    # many slow sites: exchanges in flight
    Cell("G", 1000, 0.5, 0.4, 64, 8000),     # short delay, web answers
    Cell("H", 5000, 0.5, 1.0, 4, 10000),     # thousands of exchanges wanted
    Cell("I", 1000, 5.0, 0.05, 4, 2000),     # long delays, fast answers
)}
SMOKE = Cell("smoke", 30, 0.2, 0.02, 3, 60)


@dataclass
class Result:
    """One side's run of one cell, with what the DNS server and the web's process saw."""

    run: Run
    web_cpu_s: float
    lookups: Counter[str] = field(default_factory=Counter)    # A queries per live name
    dead_recorded: int = 0   # dead names with a record in pages.jsonl (ours)
    tls: tuple[int, int] = (0, 0)   # TLS connections, of which resumed


class ShapeWeb(TestWebProcess):
    """A cell's web in its own process: names, HTTPS, dead names, its DNS server."""

    def __init__(self, cell: Cell, tmp: Path, *, literals: bool, https_share: str, dns_at: tuple[str, int],
                 seed: int) -> None:
        self.manifest, self.log, self.dns_log = tmp / "web.json", tmp / "web-log.jsonl", tmp / "dns-log.jsonl"
        dead = 0 if literals else round(cell.hosts * 0.15)
        extra = ["--latency-median", str(cell.answer_median_s), "--latency-sigma", "0.9", "--latency-max", "10",
                 "--crawl-delay", str(cell.delay_s), "--seed", str(seed),
                 "--manifest", str(self.manifest), "--log", str(self.log)]
        if not literals:
            extra += ["--names", SUFFIX, "--https-share", https_share, "--dead-names", str(dead),
                      "--dead-silent", str(round(cell.hosts * 0.03)), "--dead-servfail", str(round(cell.hosts * 0.02)),
                      "--dead-link-share", "0.05", "--seed-dead-names",
                      "--dns", f"{dns_at[0]}:{dns_at[1]}", "--dns-latency-median", str(DNS_MEDIAN_S),
                      "--dns-log", str(self.dns_log)]
        super().__init__(cell.hosts + dead, cell.pages, 30_000, tuple(extra))
        self.cmd[self.cmd.index("--hosts") + 1] = str(cell.hosts)
        self.cpu_s = 0.0

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            try:
                times = psutil.Process(self.proc.pid).cpu_times()
                self.cpu_s = times.user + times.system
            except psutil.NoSuchProcess:
                pass
        super().__exit__(*exc)

    def info(self) -> dict:
        return json.loads(self.manifest.read_text())

    def delays(self) -> dict[str, float]:
        return {h["host"]: h["crawl_delay"] for h in self.info()["hosts"]}


def scrapy_in_namespace(python: Path, tmp: Path, dns_at: tuple[str, int]) -> Path:
    """A python for Scrapy that runs in a mount namespace where /etc/resolv.conf names the
    bench's DNS server (glibc's resolver, as Scrapy uses it; its default options)."""
    resolv = tmp / "resolv.conf"
    resolv.write_text(f"nameserver {dns_at[0]}\n")
    wrapper = tmp / "python"
    wrapper.write_text("#!/bin/sh\n"
                       f"exec unshare -m sh -c 'mount --bind {resolv} /etc/resolv.conf && exec {python} \"$@\"' "
                       "sh \"$@\"\n")
    wrapper.chmod(0o755)
    return wrapper


def run_cell(args: argparse.Namespace, cell: Cell, side: str, run_no: int, python: Path | None) -> Result:
    tmp = Path(tempfile.mkdtemp(prefix=f"web-shapes-{cell.name}-{side}-"))
    literals = side == "ours-literals"
    dns_at = DNS_AT if args.dns_port53 else ("127.0.0.1", 0)
    try:
        web = ShapeWeb(cell, tmp, literals=literals, https_share=args.https_share, dns_at=dns_at, seed=args.seed)
        with web:
            info = web.info()
            delays = web.delays()
            if side == "scrapy":
                assert python is not None
                slots = tmp / "slots.json"
                slots.write_text(json.dumps({h.rsplit(":", 1)[0]: {"concurrency": 1, "delay": d, "jitter": 0.0}
                                             for h, d in delays.items()}))
                wrapped = scrapy_in_namespace(python, tmp, dns_at)
                run = run_scrapy(args, wrapped, web.seeds, cell.cap, cell.delay_s, tmp,
                                 broad_crawl_settings(args, slots))
            else:
                env = {"DELAY_FACTOR": "0"} if args.no_factor else {}
                if info.get("dns"):
                    env["DNS_SERVERS"] = info["dns"]
                if info.get("ca_pem"):
                    env["CA_BUNDLE"] = info["ca_pem"]
                run = run_ours(args, web.seeds, cell.cap, cell.delay_s, tmp, env)
        run.server = ServerView.from_log(web.log, delays)
        run.load = os.getloadavg()[0]
        result = Result(run, web.cpu_s)
        if web.dns_log.exists():
            live = set(info["zone"])
            for line in web.dns_log.read_text().splitlines():
                q = json.loads(line)
                if q["qtype"] == "A" and q["name"] in live:
                    result.lookups[q["name"]] += 1
        if side.startswith("ours") and info.get("dead_names"):
            dead = set(info["dead_names"])
            recorded = set()
            with open(tmp / "ours" / "pages.jsonl") as f:
                for line in f:
                    rec = json.loads(line)
                    host = rec["url"].split("/")[2]
                    if host in dead and rec.get("error_kind") == "dns":
                        recorded.add(host)
            result.dead_recorded = len(recorded)
        conns = [json.loads(line) for line in web.log.read_text().splitlines()]
        tls = [c for c in conns if c.get("tls")]
        result.tls = (len(tls), sum(1 for c in tls if c.get("resumed")))
        return result
    finally:
        if args.keep:
            print(f"  (kept {tmp})", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def steady_cpu_ms(r: Result) -> float:
    """Our crawl tree's CPU a 200 page in the steady window (10 % to 90 % of the answers):
    start-up (interpreters, every host's robots.txt first) and the tail left out."""
    t0, t1, pages = served(r.run).steady_window
    return r.run.cpu_between(t0, t1) / pages * 1000 if pages else float("nan")


def cpu_bound(r: Result) -> float:
    """Pages/s the machine allows at the steady CPU a page: its cores, less the web's share."""
    cpu_ms = steady_cpu_ms(r)
    if not cpu_ms > 0:
        return float("inf")
    cores = (psutil.cpu_count() or 1) - r.web_cpu_s / r.run.wall_s
    return cores / (cpu_ms / 1000)


def summary_line(cell: Cell, ours: list[Result], theirs: list[Result], live_names: int) -> str:
    def med(rs: list[Result], f) -> float:
        return statistics.median(f(r) for r in rs) if rs else float("nan")

    steady = med(ours, lambda r: served(r.run).rate_steady)
    whole = med(ours, lambda r: served(r.run).pages / r.run.wall_s)
    cpu = med(ours, cpu_bound)
    bound = min(cell.polite_bound, cpu)
    s_steady = med(theirs, lambda r: served(r.run).rate_steady)
    s_whole = med(theirs, lambda r: served(r.run).pages / r.run.wall_s)
    reached = med(ours, lambda r: served(r.run).politeness.hosts)
    lookups = med(ours, lambda r: max(r.lookups.values(), default=0))
    return (f"{cell.name:5s} {cell.polite_bound:7.0f} {cpu:6.0f} {steady:7.1f} {steady / bound:6.2f} "
            f"{whole:7.1f} {s_steady:7.1f} {s_whole:7.1f} {steady / s_steady if s_steady else float('nan'):6.2f} "
            f"{med(ours, lambda r: served(r.run).in_flight('exchanges', 0.5)):6.0f} "
            f"{med(ours, lambda r: served(r.run).in_flight('hosts_in_flight', 0.5)):6.0f} "
            f"{reached:5.0f}/{live_names:<5d} {lookups:4.0f} "
            f"{med(ours, lambda r: r.dead_recorded):5.0f} "
            f"{med(ours, steady_cpu_ms):6.2f} "
            f"{sum(served(r.run).politeness.violations for r in ours):4d}")


def report_cell(cell: Cell, results: dict[str, list[Result]]) -> None:
    print(f"\n{cell.describe()}")
    print(f"  politeness bound {cell.polite_bound:.0f} pages/s; {len(results.get('ours', []))} run(s) a side; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for side, rs in results.items():
        for i, r in enumerate(rs):
            sv = served(r.run)
            tls, resumed = r.tls
            print(f"  {side:14s} run {i + 1}: {sv.pages} pages (200), whole {sv.pages / r.run.wall_s:6.1f}/s, steady "
                  f"{sv.rate_steady:6.1f}/s, wall {r.run.wall_s:5.1f} s, exchanges in flight median "
                  f"{sv.in_flight('exchanges', 0.5):.0f} p95 {sv.in_flight('exchanges', 0.95):.0f}, hosts in flight "
                  f"{sv.in_flight('hosts_in_flight', 0.5):.0f}, hosts reached {sv.politeness.hosts}, CPU "
                  f"{r.run.cpu_s / max(sv.pages, 1) * 1000:.2f} ms/page whole run, {steady_cpu_ms(r):.2f} steady "
                  f"(web {r.web_cpu_s:.1f} s), peak PSS "
                  f"{r.run.peak_pss / 2**20:.0f} MiB, TLS connections {tls} ({resumed} resumed), "
                  f"politeness violations {sv.politeness.violations}, last exchange to exit "
                  f"{r.run.start + r.run.wall_s - sv.last_end:.1f} s, load {r.run.load:.1f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cells", nargs="+", default=sorted(CELLS), choices=sorted(CELLS), metavar="CELL",
                    help=f"cells to run ({', '.join(sorted(CELLS))})")
    ap.add_argument("--runs", type=int, default=3, help="runs a side, alternating (medians quoted)")
    ap.add_argument("--smoke", action="store_true", help="one tiny cell, ours only, a DNS server on a free port")
    ap.add_argument("--no-scrapy", action="store_true", help="ours only")
    ap.add_argument("--literals", action="store_true",
                    help="also run ours on the same web with IP literals (no names, no DNS, no HTTPS, no dead names)")
    ap.add_argument("--hosts", type=int, help="each chosen cell with this many hosts, its cap scaled alike "
                                              "(memory at 10,000 hosts: --cells A --hosts 10000 --no-scrapy)")
    ap.add_argument("--cap", type=int, help="each chosen cell with this page cap (a longer crawl of the same web)")
    ap.add_argument("--https-share", default="1/3", help="share of the hosts on HTTPS (0: none)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--with-factor", dest="no_factor", action="store_false",
                    help="keep our DELAY_FACTOR default instead of 0 (it is 0 by default now anyway)")
    ap.add_argument("--workers", type=int, help="our fetch worker processes (default: manage.py's)")
    ap.add_argument("--parsers", type=int, default=2)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="one of our settings")
    ap.add_argument("--scrapy-set", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--scrapy-concurrency", type=int, default=256)
    ap.add_argument("--keep", action="store_true", help="keep each run's folder")
    ap.add_argument("--run-timeout", type=float, default=900.0)
    args = ap.parse_args()
    cells = [SMOKE] if args.smoke else [CELLS[name] for name in args.cells]
    if args.hosts:
        cells = [replace(c, name=f"{c.name}{args.hosts}", hosts=args.hosts, cap=c.cap * args.hosts // c.hosts)
                 for c in cells]
    if args.cap:
        cells = [replace(c, name=f"{c.name}c{args.cap}", cap=args.cap) for c in cells]
    args.dns_port53 = not args.smoke and os.geteuid() == 0
    scrapy = not (args.smoke or args.no_scrapy)
    if scrapy and not (args.dns_port53 and shutil.which("unshare")):
        raise BenchError("Scrapy resolves through glibc, which asks port 53: run as root with unshare "
                         "(util-linux), or pass --no-scrapy")
    python = scrapy_python() if scrapy else None
    sides = ["ours"] + (["ours-literals"] if args.literals else []) + (["scrapy"] if scrapy else [])
    lines = []
    for cell in cells:
        print(f"\n== {cell.describe()}", file=sys.stderr)
        results: dict[str, list[Result]] = {side: [] for side in sides}
        for i in range(1 if args.smoke else args.runs):
            for side in sides:
                r = run_cell(args, cell, side, i, python)
                results[side].append(r)
                sv = served(r.run)
                print(f"  run {i + 1} {side:14s}: {sv.pages} pages (200), steady {sv.rate_steady:.1f}/s, whole "
                      f"{sv.pages / r.run.wall_s:.1f}/s, violations {sv.politeness.violations}, "
                      f"load {r.run.load:.1f}", file=sys.stderr, flush=True)
        report_cell(cell, results)
        lines.append(summary_line(cell, results["ours"], results.get("scrapy", []), cell.hosts))
        if args.literals:
            lit = results["ours-literals"]
            names = statistics.median(served(r.run).rate_steady for r in results["ours"])
            plain = statistics.median(served(r.run).rate_steady for r in lit)
            print(f"  names vs IP literals (ours, steady): {names:.1f} vs {plain:.1f} pages/s ({names / plain:.3f})")
    print("\ncell  bound:  polite    CPU  ours/s  share  whole/s  scrapy/s whole/s  ratio  exch  hosts  reached"
          "       lookups dead  CPU ms viol")
    print("\n".join(lines))
    print("(ours/s and scrapy/s: 200 pages/s between the 10 % and 90 % answers; share: ours over the lower bound; "
          "lookups: most A queries for one live name; dead: dead names recorded in pages.jsonl; CPU ms: a page, "
          "steady)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as exc:
        print(f"web_shapes: {exc}", file=sys.stderr)
        sys.exit(1)
