#!/usr/bin/env python3
"""The CPU floor of a page: the work a page cannot avoid, each piece timed alone.

The loopback target judges the crawl's CPU a page against this floor, not against a
fixed 5 ms: crawl-tree CPU a page at most 1.5 x the floor, and the rest accounted for.
The pieces are timed on the loopback bench's own pages (the test web of
bench/vs_scrapy.py's many-hosts scenario, served in-process), in the same run, each
alone over ``--sample`` pages; a figure is the median of ``--rounds`` rounds, the
pieces interleaved in each round so that others' load slows them alike. CPU is the
calling thread's (``time.thread_time``): the test web's serving thread is not counted.

- **exchange**: the crawler's ``Fetcher`` GET of the page on a kept-alive loopback
  connection (every host's connection was opened by a warm-up pass); for reference the
  standard library's ``http.client`` (one kept-alive connection a host) and urllib3 (a
  PoolManager, body preloaded) when it is installed (requirements.txt does not name it).
- **parse + links**: selectolax's ``LexborHTMLParser`` and every ``a[href]``'s value,
  no URL joining (the floor); the crawler's ``prepare_document`` + ``parse_html``
  (links resolved and normalized, robots signals, title) as ``analyse()`` calls it,
  for comparison.
- **main text**: the crawler's ``extract_text`` (main content, metadata, language) on
  the prepared document, as ``analyse()`` calls it in TEXT_MODE main; trafilatura
  (``extract(html, fast=True, include_comments=False)``, as bench/scrapy_spider.py
  calls it) for reference, run in bench/.venv-scrapy on the same bodies when that
  venv has it (bench/vs_scrapy.py makes it).
- **simhash**: ``page_simhash`` (word pairs) of the first SIMHASH_MAX_CHARS of the main
  text, whitespace collapsed beforehand (as ``analyse()`` hands it over; no anchors).
- **WARC**: ``WarcStore.write_exchange`` of the fetch's result (request and response
  records, their digests, ISA-L gzip at WARC_GZIP_LEVEL, the file's writes) into a
  temporary folder; warcio (``WARCWriter(gzip=True)``: zlib at level 9, fixed in its
  code) for reference.
- **frontier**: the crawl's least Redis work for a page, with the crawler's
  ``Frontier`` on a redis-server of this script's, one shard (the crawl bench's two
  split each group's admission into two calls): the page's links admitted
  (``put_discovered``, the links of PARSE_GROUP_PAGES pages a call, as the enqueue
  task sends them), its lease (``get_urls`` for as many hosts, called again while
  short) and its turn's finish (``finish``, one call a page). Client: this thread's
  CPU. Server: redis-server's own CPU from ``INFO cpu`` (getrusage, in microseconds;
  /proc's stat counts 10 ms ticks, coarse for the few ms a round costs there). The
  database is emptied and the Bloom filter allocated before each round (untimed), so
  every round admits links seen for the first time, the dearer case.

The floor is the sum of the exchange (Fetcher), the lexbor parse with links, main text,
simhash, WARC and the frontier (client and server); the sum with the crawler's own
``parse_html`` in place of the bare parse is printed beside it. ``analyse()`` whole (the
parse sandbox's work a page) is printed for reference.

``--crawl-cpu-ms X`` gives the ratio crawl/floor for a crawl's figure. ``--run-crawl``
runs bench/crawl_bench.py on the same web afterwards (the test web stopped first) and
prints each role's CPU a page beside the floor pieces that role does (fetch: exchange,
WARC, lease and finish; parse and its sandbox: parse, main text, simhash, admission;
redis: the server's share; control, beat, runner: none), so where the rest goes can be
read off. ``--smoke``: 5 hosts x 10 pages, 30 pages, 2 rounds (seconds).

    python bench/cpu_floor.py [--hosts 100] [--pages 50] [--mean-bytes 60000] [--sample 300] [--rounds 5]
                              [--crawl-cpu-ms X | --run-crawl [--crawl-max-pages 5000]] [--smoke]
"""
from __future__ import annotations

import argparse
import dataclasses
import http.client
import io
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from http import HTTPStatus
from pathlib import Path

import redis

try:
    import urllib3
except ImportError:   # requirements.txt does not name it: its reference row is left out
    urllib3 = None
from selectolax.lexbor import LexborHTMLParser

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from crawler_tasks.dedup.fingerprint import collapse_words_utf8  # noqa: E402
from crawler_tasks.dedup.simhash import page_simhash  # noqa: E402
from crawler_tasks.fetch.http import Fetcher, FetchResult  # noqa: E402
from crawler_tasks.frontier import Discovered, Frontier  # noqa: E402
from crawler_tasks.ops.embedded import EmbeddedRedis  # noqa: E402
from crawler_tasks.output.warc import WarcStore  # noqa: E402
from crawler_tasks.parse.html import Document, parse_html, prepare_document  # noqa: E402
from crawler_tasks.parse.page import analyse  # noqa: E402
from crawler_tasks.parse.text import extract_text  # noqa: E402
from crawler_tasks.records import Action  # noqa: E402
from crawler_tasks.settings import Settings  # noqa: E402
from crawler_tasks.urls import host_key  # noqa: E402
from testweb import TestWeb  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from parse_bench import analyse_args  # noqa: E402

SCRAPY_PYTHON = ROOT / "bench" / ".venv-scrapy" / "bin" / "python"
CRAWL_BENCH = ROOT / "bench" / "crawl_bench.py"
USER_AGENT = "benchbot/1.0 (+http://127.0.0.1/bench)"
# Run in bench/.venv-scrapy: trafilatura as the outputs peer calls it, on the bodies in a folder.
TRAFILATURA = """
import pathlib, statistics, sys, time
import trafilatura
pages = [p.read_bytes().decode("utf-8", "replace") for p in sorted(pathlib.Path(sys.argv[1]).iterdir())]
spent = []
for _ in range(int(sys.argv[2])):
    t0 = time.thread_time()
    for html in pages:
        trafilatura.extract(html, fast=True, include_comments=False)
    spent.append((time.thread_time() - t0) / len(pages))
print(statistics.median(spent))
"""
# Which floor pieces each role of the crawl does (bench/crawl_bench.py's roles).
ROLE_PIECES = {
    "fetch": "exchange, WARC, lease, finish",
    "parse, parse sandbox": "parse, main text, simhash, admission",
    "redis": "the frontier's server CPU",
    "others": "control, beat, runner: none",
}


@dataclasses.dataclass
class Page:
    """A sampled page and each piece's input, made untimed."""

    url: str
    result: FetchResult    # the warm-up fetch: the body and headers every other piece uses
    doc: Document          # prepare_document's
    flat: str              # the main text, collapsed
    links: list[Discovered]


def prepare(url: str, result: FetchResult, settings: Settings) -> Page:
    options = {**analyse_args()[0], "max_text_chars": 0}
    doc = prepare_document(result.content, "text/html", budget=False)
    text = extract_text(doc, url, main_content=True, max_chars=settings.MAX_TEXT_CHARS, content_type="text/html",
                        count_words=False)
    links = [Discovered(url=link.url, host=host_key(link.url), depth=1)
             for link in parse_html(doc, url, **options).links]
    return Page(url, result, doc, collapse_words_utf8(text.text)[0], links)


class Pieces:
    """Each piece as a pass over the pages that returns this thread's CPU seconds a page."""

    def __init__(self, pages: list[Page], fetcher: Fetcher, tmp: Path, redis_url: str, group: int) -> None:
        self.pages, self.fetcher, self.tmp, self.group = pages, fetcher, tmp, group
        self.settings = settings = fetcher.settings
        self.connections: dict[str, http.client.HTTPConnection] = {}
        hosts = len({page.url.split("/", 3)[2] for page in pages})
        self.pool = urllib3.PoolManager(num_pools=hosts + 10, maxsize=1, retries=False) if urllib3 else None
        self.warc = WarcStore(tmp / "ours", settings.WARC_MAX_BYTES, gzip_level=settings.WARC_GZIP_LEVEL)
        self.options, *_ = analyse_args()
        self.frontier = Frontier(dataclasses.replace(settings, REDIS_URL=redis_url, SHARDS=1, KEY_PREFIX="floor"))
        self.info = redis.Redis.from_url(redis_url)
        self.frontier_parts: dict[str, list[float]] = {"admission": [], "lease": [], "finish": [], "server": []}
        self.leases_per_call: list[float] = []

    def close(self) -> None:
        self.fetcher.close()
        for conn in self.connections.values():
            conn.close()
        self.warc.close()

    def _pass(self, work: Callable[[Page], object]) -> float:
        t0 = time.thread_time()
        for page in self.pages:
            work(page)
        return (time.thread_time() - t0) / len(self.pages)

    def exchange(self) -> float:
        fetch = self.fetcher.fetch
        return self._pass(lambda p: fetch(p.url))

    def http_client(self) -> float:
        headers = {"User-Agent": USER_AGENT}

        def get(page: Page) -> bytes:
            authority, path = page.url.split("/", 3)[2:]
            conn = self.connections.get(authority)
            if conn is None:
                conn = self.connections[authority] = http.client.HTTPConnection(authority)
            conn.request("GET", "/" + path, headers=headers)
            return conn.getresponse().read()
        return self._pass(get)

    def urllib3_get(self) -> float | None:
        """None when urllib3 is not installed."""
        if self.pool is None:
            return None
        request, headers = self.pool.request, {"User-Agent": USER_AGENT}
        return self._pass(lambda p: request("GET", p.url, headers=headers, preload_content=True))

    def lexbor(self) -> float:
        def parse(page: Page) -> list[str | None]:
            return [a.attributes.get("href") for a in LexborHTMLParser(page.result.content).css("a[href]")]
        return self._pass(parse)

    def parse_html(self) -> float:
        options = {**self.options, "max_text_chars": 0}
        caps = {name: options[name] for name in ("max_elements", "max_depth", "max_attrs")}

        def parse(page: Page) -> object:
            doc = prepare_document(page.result.content, "text/html", **caps, budget=False)
            return parse_html(doc, page.url, **options)
        return self._pass(parse)

    def main_text(self) -> float:
        s, options = self.settings, self.options
        return self._pass(lambda p: extract_text(p.doc, p.url, main_content=True, full_text=False,
                                                 max_chars=s.MAX_TEXT_CHARS, content_type="text/html",
                                                 headers=options["headers"], count_words=False))

    def simhash(self) -> float:
        limit = self.settings.SIMHASH_MAX_CHARS
        return self._pass(lambda p: page_simhash(p.flat, (), "", limit))

    def warc_ours(self) -> float:
        write = self.warc.write_exchange
        return self._pass(lambda p: write(p.result))

    def warcio(self) -> float:
        from warcio.statusandheaders import StatusAndHeaders
        from warcio.warcwriter import WARCWriter

        with open(self.tmp / "warcio.warc.gz", "ab") as f:
            writer = WARCWriter(f, gzip=True)

            def write(page: Page) -> None:
                res = page.result
                target = "/" + page.url.split("/", 3)[3]
                response = writer.create_warc_record(
                    page.url, "response", payload=io.BytesIO(res.body),
                    http_headers=StatusAndHeaders(f"{res.status} {HTTPStatus(res.status).phrase}", res.headers,
                                                  protocol="HTTP/1.1"))
                request = writer.create_warc_record(
                    page.url, "request", payload=io.BytesIO(b""),
                    http_headers=StatusAndHeaders(f"GET {target} HTTP/1.1", res.request_headers, is_http_request=True))
                writer.write_request_response_pair(request, response)
            return self._pass(write)

    def analyse_whole(self) -> float:
        args = analyse_args()
        return self._pass(lambda p: analyse(p.result.content, p.url, *args))

    def frontier_pass(self) -> float:
        """Admission, lease and finish for every page (client CPU a page); the parts and the
        server's CPU go to ``frontier_parts``."""
        self.info.flushdb()
        self.frontier.allocate_bloom()
        spent = dict.fromkeys(("admission", "lease", "finish"), 0.0)
        leased = calls = 0
        cpu0 = _server_cpu(self.info)
        for start in range(0, len(self.pages), self.group):
            group = self.pages[start:start + self.group]
            t0 = time.thread_time()
            self.frontier.put_discovered([link for page in group for link in page.links])
            t1 = time.thread_time()
            spent["admission"] += t1 - t0
            need = len(group)
            while need > 0:
                t0 = time.thread_time()
                leases = self.frontier.get_urls(0, need)
                t1 = time.thread_time()
                calls += 1
                for lease in leases:
                    self.frontier.finish(lease, time.time(), Action.DONE)
                spent["lease"] += t1 - t0
                spent["finish"] += time.thread_time() - t1
                if not leases:
                    break
                need -= len(leases)
                leased += len(leases)
        server = _server_cpu(self.info) - cpu0
        n = len(self.pages)
        for part, secs in spent.items():
            self.frontier_parts[part].append(secs / n)
        self.frontier_parts["server"].append(server / n)
        self.leases_per_call.append(leased / max(calls, 1))
        if leased < n:
            raise SystemExit(f"cpu_floor: only {leased} of {n} pages got a lease: the frontier piece is short")
        return sum(spent.values()) / n


def _server_cpu(client: redis.Redis) -> float:
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def trafilatura_ref(pages: list[Page], rounds: int, tmp: Path) -> float | None:
    """Trafilatura's CPU a page in bench/.venv-scrapy (None when that venv lacks it)."""
    if not SCRAPY_PYTHON.exists():
        return None
    folder = tmp / "bodies"
    folder.mkdir()
    for i, page in enumerate(pages):
        (folder / f"{i:05d}.html").write_bytes(page.result.content)
    done = subprocess.run([str(SCRAPY_PYTHON), "-c", TRAFILATURA, str(folder), str(rounds)],
                          capture_output=True, text=True)
    return float(done.stdout) if done.returncode == 0 else None


def sample_urls(web: TestWeb, hosts: int, pages: int, sample: int) -> list[str]:
    """``sample`` pages spread evenly over the web (host-major, a stride), then ordered page
    by page across hosts, so that a group of consecutive pages spans many hosts (as a crawl's
    page group does)."""
    nodes = [(h, k) for h in range(hosts) for k in range(pages + 1)]
    chosen = nodes[::max(1, len(nodes) // sample)][:sample]
    return [web.url(h, "/" if k == 0 else f"/p/{k - 1}.html") for h, k in sorted(chosen, key=lambda hk: (hk[1], hk[0]))]


def run_crawl(args: argparse.Namespace) -> tuple[float, dict[str, float], str]:
    """bench/crawl_bench.py on the same web: (crawl-tree CPU ms a page, CPU ms a page by role, its output)."""
    cmd = [sys.executable, str(CRAWL_BENCH), "--hosts", str(args.hosts), "--pages", str(args.pages),
           "--mean-bytes", str(args.mean_bytes), "--max-pages", str(args.crawl_max_pages)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"cpu_floor: {' '.join(cmd)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    total = re.search(r"^CPU s per page\s+([\d.]+) ms", done.stdout, re.M)
    roles = re.search(r"^CPU ms per page by role[^:]*: (.*)$", done.stdout, re.M)
    if total is None or roles is None:
        raise SystemExit(f"cpu_floor: crawl_bench's output has no CPU figures:\n{done.stdout}")
    by_role = {name: float(ms) for name, ms in re.findall(r"([a-z][a-z ]*?) ([\d.]+)(?:, |$)", roles.group(1))}
    return float(total.group(1)), by_role, done.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=100)
    ap.add_argument("--pages", type=int, default=50, help="pages per host (besides the home page)")
    ap.add_argument("--mean-bytes", type=int, default=60_000)
    ap.add_argument("--sample", type=int, default=300, help="pages each piece is timed on")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of every piece (medians)")
    ap.add_argument("--group", type=int, default=Settings().PARSE_GROUP_PAGES,
                    help="pages whose links one put_discovered call admits (and hosts one get_urls call asks for)")
    ap.add_argument("--crawl-cpu-ms", type=float, help="a crawl's CPU ms a page, to divide by the floor")
    ap.add_argument("--run-crawl", action="store_true", help="run bench/crawl_bench.py on the same web afterwards")
    ap.add_argument("--crawl-max-pages", type=int, default=5000, help="its page cap (vs_scrapy's many-hosts N)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: a few seconds")
    args = ap.parse_args()
    if args.smoke:
        args.hosts, args.pages, args.sample, args.rounds = 5, 10, 30, 2
        args.crawl_max_pages = min(args.crawl_max_pages, 60)
    settings = dataclasses.replace(Settings(), ALLOW_PRIVATE=True, USER_AGENT=USER_AGENT)
    tmp = Path(tempfile.mkdtemp(prefix="cpu-floor-"))
    server = EmbeddedRedis(tmp / "redis", save="").start()
    web = TestWeb(n_hosts=args.hosts, pages_per_host=args.pages, mean_page_bytes=args.mean_bytes).start()
    times: dict[str, list[float]] = {}
    try:
        fetcher = Fetcher(settings)
        warm = {url: fetcher.fetch(url) for url in sample_urls(web, args.hosts, args.pages, args.sample)}
        bad = [url for url, res in warm.items() if res.status != 200]
        if bad:
            fetcher.close()
            raise SystemExit(f"cpu_floor: {len(bad)} pages did not answer 200, e.g. {bad[0]}")
        pages = [prepare(url, res, settings) for url, res in warm.items()]
        pieces = Pieces(pages, fetcher, tmp, server.url, args.group)
        try:
            pieces.http_client()   # their warm-up: every connection opened, as the Fetcher's were
            pieces.urllib3_get()
            steps: list[tuple[str, Callable[[], float | None]]] = [
                ("exchange", pieces.exchange), ("http.client", pieces.http_client), ("urllib3", pieces.urllib3_get),
                ("lexbor", pieces.lexbor),
                ("parse_html", pieces.parse_html), ("main text", pieces.main_text), ("simhash", pieces.simhash),
                ("WARC", pieces.warc_ours), ("warcio", pieces.warcio), ("analyse", pieces.analyse_whole),
                ("frontier client", pieces.frontier_pass)]
            for _ in range(args.rounds):
                for name, step in steps:
                    spent = step()
                    if spent is not None:
                        times.setdefault(name, []).append(spent)
            traf = trafilatura_ref(pages, args.rounds, tmp)
        finally:
            pieces.close()
    finally:
        web.stop()
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    ms = {name: statistics.median(values) * 1000 for name, values in times.items()}
    parts = {part: statistics.median(values) * 1000 for part, values in pieces.frontier_parts.items()}
    ms["frontier: redis-server"] = parts["server"]
    n_links = sum(len(p.links) for p in pages) / len(pages)
    size = sum(len(p.result.content) for p in pages) / len(pages)
    print(f"cpu floor: {len(pages)} pages of a {args.hosts}-host x {args.pages}-page test web (mean {size / 1000:.1f} kB, "
          f"{n_links:.1f} links a page), {args.rounds} rounds, medians; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    floor_names = ("exchange", "lexbor", "main text", "simhash", "WARC", "frontier client", "frontier: redis-server")
    rows = [
        ("exchange: Fetcher GET, kept-alive", "exchange", True),
        ("  http.client GET (reference)", "http.client", False),
        ("  urllib3 GET (reference)", "urllib3", False),
        ("parse + links: lexbor, a[href]", "lexbor", True),
        ("  parse_html (the crawler's)", "parse_html", False),
        ("main text: extract_text", "main text", True),
        ("  trafilatura fast (reference)", "trafilatura", False),
        ("simhash: simhash64 of main text", "simhash", True),
        ("WARC: WarcStore.write_exchange", "WARC", True),
        ("  warcio, gzip level 9 (reference)", "warcio", False),
        ("frontier: client", "frontier client", True),
        ("frontier: redis-server", "frontier: redis-server", True),
        ("analyse() whole (reference)", "analyse", False),
    ]
    if traf is not None:
        ms["trafilatura"] = traf * 1000
    print(f"  {'piece':38s} {'CPU ms/page':>12s}  floor")
    for label, name, in_floor in rows:
        figure = f"{ms[name]:12.3f}" if name in ms else f"{'n/a':>12s}"
        print(f"  {label:38s} {figure}  {'*' if in_floor else ''}".rstrip())
    floor = sum(ms[name] for name in floor_names)
    with_parse_html = floor - ms["lexbor"] + ms["parse_html"]
    print(f"  {'floor (the * pieces)':38s} {floor:12.3f}")
    print(f"  {'floor with parse_html for lexbor':38s} {with_parse_html:12.3f}")
    print(f"  frontier client by part, ms/page: admission {parts['admission']:.3f} (put_discovered of {args.group} "
          f"pages' links a call), lease {parts['lease']:.3f} ({statistics.median(pieces.leases_per_call):.1f} leases "
          f"a get_urls call), finish {parts['finish']:.3f}")
    if traf is None:
        print("  (trafilatura: not in bench/.venv-scrapy; bench/vs_scrapy.py installs it)")

    if args.crawl_cpu_ms:
        print(f"crawl {args.crawl_cpu_ms:.2f} ms/page / floor {floor:.2f} = {args.crawl_cpu_ms / floor:.2f}")
    if args.run_crawl:
        print(f"\nbench/crawl_bench.py, same web, --max-pages {args.crawl_max_pages} ...", flush=True)
        total, by_role, output = run_crawl(args)
        print("".join(f"  | {line}\n" for line in output.strip().splitlines()), end="")
        share = {
            "fetch": ms["exchange"] + ms["WARC"] + parts["lease"] + parts["finish"],
            "parse, parse sandbox": ms["lexbor"] + ms["main text"] + ms["simhash"] + parts["admission"],
            "redis": ms["frontier: redis-server"],
            "others": 0.0,
        }
        crawl = {
            "fetch": by_role.get("fetch", 0.0),
            "parse, parse sandbox": by_role.get("parse", 0.0) + by_role.get("parse sandbox", 0.0),
            "redis": by_role.get("redis", 0.0),
        }
        crawl["others"] = sum(by_role.values()) - sum(crawl.values())
        print(f"\n  {'role (its floor pieces)':60s} {'crawl':>7s} {'floor':>7s} {'rest':>7s}  ms/page")
        for role, names in ROLE_PIECES.items():
            label = f"{role} ({names})"
            print(f"  {label:60s} {crawl[role]:7.2f} {share[role]:7.2f} {crawl[role] - share[role]:7.2f}")
        print(f"  {'roles summed (sampled every 0.5 s)':60s} {sum(crawl.values()):7.2f} {floor:7.2f} "
              f"{sum(crawl.values()) - floor:7.2f}")
        print(f"crawl tree {total:.2f} ms/page (rusage) / floor {floor:.2f} = {total / floor:.2f} (target <= 1.5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
