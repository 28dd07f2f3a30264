#!/usr/bin/env python3
"""Fetches of a page already fetched under another spelling, on a web whose every host
links its pages under several spellings: the URL priors (``dedup.dust``) on and off.

Each host has ``--pages`` distinct pages (their own words) in sections. Every page links
the next pages of its section plain and with ``?ref=nav`` / ``?ref=sidebar`` (every
host), ``/print/`` and ``/amp/`` aliases (one host in two), ``index.html`` for section
homes, and a ``?session=<id>`` that changes on every page (one host in five: the
session-id trap). Two controls the priors must leave whole: on one host ``?ref=<branch>``
selects other content (a code host), and every host has a ``?page=N`` pager of distinct
pages. A spelling is counted as a waste when the page behind it had been fetched
before under another spelling; a distinct page never fetched is a loss.

    python bench/spellings.py [--hosts 60] [--pages 80] [--seconds 240] [--smoke]

``--smoke``: 4 hosts of 12 pages, one run with the priors (seconds).
"""
from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from testweb import HostSpec, TestWeb  # noqa: E402

HTML = {"Content-Type": "text/html; charset=utf-8"}
WORDS = [a + b + c for a in "bcdfghklmnprstvz" for b in "aeiou" for c in "klmnprst"]
SECTION = 8          # pages a section
BRANCHES = ("main", "dev", "stable")


def words(seed: str, n: int = 120) -> str:
    return " ".join(random.Random(seed).choices(WORDS, k=n))


def page(body: str, text: str) -> bytes:
    return f"<html><head><title>{text[:20]}</title></head><body>{body}<p>{text}</p></body></html>".encode()


@dataclass(frozen=True, slots=True)
class Host:
    index: int
    prefixes: bool     # /print/ and /amp/ aliases
    session: bool      # ?session=<id> on every link
    branches: bool     # ?ref=<branch> selects content (the control)


def plan(n_hosts: int) -> list[Host]:
    return [Host(h, prefixes=h % 2 == 0, session=h % 5 == 1, branches=h == 3 % n_hosts) for h in range(n_hosts)]


def build(web: TestWeb, host: Host, n_pages: int) -> set[str]:
    """The host's routes; returns its distinct pages (one canonical path each)."""
    h, canon = host.index, set()
    rnd = random.Random(h)

    def spell(path: str) -> list[str]:
        out = [path, f"{path}?ref=nav", f"{path}?ref=sidebar"]
        if host.prefixes:
            out += [f"/print{path}", f"/amp{path}"]
        if path.endswith("/"):
            out.append(f"{path}index.html")
        if host.session:
            out = [f"{p}{'&' if '?' in p else '?'}session={rnd.getrandbits(48):012x}" for p in out]
        return out

    sections = max(1, n_pages // SECTION)
    routes: dict[str, bytes] = {}
    home_links = "".join(f'<a href="{v}">s{j}</a>' for j in range(sections) for v in spell(f"/s{j}/"))
    home_links += '<a href="/list?page=1">list</a>'
    routes["/"] = page(home_links, words(f"{h}-home"))
    canon |= {"/", "/list?page=1"}
    for j in range(sections):
        first = f"/s{j}/0.html"
        routes[f"/s{j}/"] = page("".join(f'<a href="{v}">first</a>' for v in spell(first)), words(f"{h}-s{j}"))
        canon.add(f"/s{j}/")
        for i in range(SECTION):
            path = f"/s{j}/{i}.html"
            nxt = f"/s{j}/{i + 1}.html" if i + 1 < SECTION else f"/s{(j + 1) % sections}/"
            links = "".join(f'<a href="{v}">next</a>' for v in spell(nxt))
            if host.branches:
                links += "".join(f'<a href="{path}?ref={b}">{b}</a>' for b in BRANCHES)
                for b in BRANCHES:
                    routes[f"{path}?ref={b}"] = page("", words(f"{h}-{path}-{b}"))
                    canon.add(f"{path}?ref={b}")
            routes[path] = page(links, words(f"{h}-{path}"))
            canon.add(path)
    for n in range(1, 6):   # a pager: ?page changes content
        routes[f"/list?page={n}"] = page(f'<a href="/list?page={n + 1}">next</a>', words(f"{h}-list{n}"))
        canon.add(f"/list?page={n}")
    canon.discard("/list?page=6")
    for path, body in list(routes.items()):
        web.set_route(h, path, 200, HTML, body)
        if "?" not in path:
            for alias in (f"/print{path}", f"/amp{path}", f"{path}index.html" if path.endswith("/") else ""):
                if alias and host.prefixes or alias.endswith("index.html"):
                    web.set_route(h, alias, 200, HTML, body)
    return canon


def canonical(path: str, host: Host) -> str:
    """The distinct page a spelling names (the bench's own truth, not the crawler's rules)."""
    path, _, query = path.partition("?")
    kept = [p for p in query.split("&") if p and not p.startswith(("session=", "ref=nav", "ref=sidebar"))]
    if not host.branches:
        kept = [p for p in kept if not p.startswith("ref=")]
    for prefix in ("/print/", "/amp/"):
        if path.startswith(prefix):
            path = path[len(prefix) - 1:]
    if path.endswith("/index.html"):
        path = path[:-len("index.html")]
    return path + ("?" + "&".join(kept) if kept else "")


def run(args: argparse.Namespace, priors: bool) -> dict[str, float]:
    hosts = plan(args.hosts)
    spec = HostSpec(pages=0, link_extra_routes=False)
    with TestWeb(n_hosts=args.hosts, pages_per_host=1, host_specs={h.index: spec for h in hosts}) as web, \
            tempfile.TemporaryDirectory(prefix="spellings-") as out:
        truth = {web.hosts[h.index]: (h, build(web, h, args.pages)) for h in hosts}
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")},
               "CRAWLER_DUST_PRIORS": "1" if priors else "0", "CRAWLER_SOFT404_PROBE": "0",
               "CRAWLER_PROBE_SITEMAP_XML": "0", "CRAWLER_MAX_PAGES_PER_HOST": "5000",
               "CRAWLER_MAX_PAGES_PER_SEED_HOST": "5000"}
        cmd = [sys.executable, str(ROOT / "manage.py"), "crawl", *web.seeds(all_hosts=True), "--allow-private",
               "--min-delay", str(args.delay), "--max-seconds", str(args.seconds), "--out", out]
        started = time.monotonic()
        proc = subprocess.run(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=args.seconds + 180, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"manage.py crawl exited {proc.returncode}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        wall = time.monotonic() - started
        fetched: Counter[tuple[str, str]] = Counter()
        requests = waste = 0
        for r in web.requests:
            if r.host not in truth or r.path == "/robots.txt" or r.path.startswith("/sitemap"):
                continue
            host, _ = truth[r.host]
            requests += 1
            key = (r.host, canonical(r.path, host))
            waste += fetched[key] > 0
            fetched[key] += 1
        missing = sum(1 for name, (_, canon) in truth.items() for p in canon if not fetched[(name, p)])
        branch_host = next(name for name, (h, _) in truth.items() if h.branches)
        branches_missing = sum(1 for p in truth[branch_host][1] if "ref=" in p and not fetched[(branch_host, p)])
        pages = sum(len(canon) for _, canon in truth.values())
        return {"requests": requests, "waste": waste, "pages": pages, "missing": missing,
                "branches_missing": branches_missing, "wall": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=60)
    ap.add_argument("--pages", type=int, default=80)
    ap.add_argument("--delay", type=float, default=0.05, help="politeness delay per host, s")
    ap.add_argument("--seconds", type=float, default=240.0, help="crawl time limit, s")
    ap.add_argument("--smoke", action="store_true", help="4 hosts of 12 pages, priors on only")
    args = ap.parse_args()
    modes = [True, False]
    if args.smoke:
        args.hosts, args.pages, args.seconds, modes = 4, 12, 60.0, [True]
    print(f"{args.hosts} hosts x ~{args.pages} pages, delay {args.delay:g} s; load {os.getloadavg()[0]:.1f}")
    print(f"{'priors':8s}{'requests':>10s}{'distinct':>10s}{'missed':>8s}{'refetched':>11s}"
          f"{'per 5,000':>11s}{'branches missed':>17s}{'wall s':>8s}")
    for priors in modes:
        f = run(args, priors)
        print(f"{'on' if priors else 'off':8s}{f['requests']:>10,.0f}{f['pages']:>10,.0f}{f['missing']:>8,.0f}"
              f"{f['waste']:>11,.0f}{5000 * f['waste'] / max(1.0, f['pages']):>11.1f}"
              f"{f['branches_missing']:>17,.0f}{f['wall']:>8.1f}")


if __name__ == "__main__":
    main()
