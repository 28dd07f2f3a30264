#!/usr/bin/env python3
"""Fetch engines side by side: the client's CPU a page, threads against an event loop.

The fetch worker runs each host turn on a thread of its exchange pool
(``fetch/pool.py``): a thread hands the GIL over at each blocking call, and at 10,000
hosts half the fetch worker's CPU was the kernel switching tasks. An event-loop engine
would run the same exchanges on one thread. This bench measures what that would save
before anything is rewritten. Both engines fetch the same URLs of the loopback test web
(its own process; its CPU is not counted): each host's pages one after the other on one
connection, ``--concurrency`` hosts at once, no politeness delay, each answer waiting a
lognormal time when ``--latency-median`` is set. Each engine runs in a fresh process;
the figures are that process's CPU (user + system, all its threads) and context
switches a page, medians of ``--runs`` interleaved runs.

- ``threads``: the crawler's own ``Fetcher`` (every limit the hostile tests check: one
  deadline, header block caps, address checks) on ``--concurrency`` threads, one host a
  thread at a time. The crawler's pool also hands each host between its session's loop
  and a pool thread, so its cost is at least this.
- ``aiohttp``: aiohttp 3 on one asyncio loop, one connection per host
  (``limit_per_host=1``), the same request headers, bodies decoded. Installed into
  ``bench/.venv-engines`` on first use, apart from the crawler's venv (with redis-py
  for ``--turn``).

``--turn`` adds what a host turn of the fetch worker does around its exchange, the same
in both engines: one Redis round trip (a script with a few writes, like the frontier's
finish, on a redis-server of its own: redis-py on the threads, ``redis.asyncio`` on the
loop) and the WARC record's CPU work (two SHA-1 digests and ISA-L's gzip of the body). The
exchange alone (without it) is a tenth of the fetch worker's CPU a page; the turn says
what an event loop for the whole turn would save.

    python bench/engine_cpu.py [--hosts 100] [--pages 50] [--mean-bytes 60000]
                               [--concurrency 64] [--latency-median 0] [--turn] [--runs 3] [--smoke]

Loopback only; at most hosts x pages requests a run. ``--smoke``: 4 hosts x 5 pages of
10 kB, 4 at once, one run (seconds); it installs nothing, so aiohttp runs only where
``bench/.venv-engines`` was made before (threads alone otherwise, and it says so).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import queue
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / "bench" / ".venv-engines"
ENGINES = ("threads", "aiohttp")
RUN_TIMEOUT_S = 600
REDIS_CONNECTIONS = 64   # --turn: each engine's pool, as the fetch worker's (waits for a free one)
# --turn: the finish's round trip (a count, the lease zset, its size back) and the archive's CPU
FINISH_LUA = ("redis.call('HINCRBY', KEYS[1], 'pages', 1) redis.call('ZADD', KEYS[2], ARGV[1], ARGV[2]) "
              "return redis.call('ZCARD', KEYS[2])")


def archive(body: bytes) -> int:
    """The WARC record's CPU work on a body: its payload and block digests and its gzip
    member (ISA-L level 1, as ``output.warc`` writes it)."""
    from isal import isal_zlib

    return len(hashlib.sha1(body).digest()) + len(hashlib.sha1(body).digest()) + len(isal_zlib.compress(body, 1, 31))


# -- the engines, each in its own process ---------------------------------------------

def threads_engine(hosts: list[list[str]], concurrency: int, redis_url: str | None) -> tuple[int, int]:
    """(pages with status 200, decoded bytes) fetched with the crawler's Fetcher; with
    ``redis_url``, each page's turn also finishes there and archives its body."""
    import dataclasses

    import redis

    sys.path.insert(0, str(ROOT))
    from crawler_tasks.fetch.http import Fetcher
    from crawler_tasks.settings import Settings

    fetcher = Fetcher(dataclasses.replace(Settings(), ALLOW_PRIVATE=True))
    pool = redis.BlockingConnectionPool.from_url(redis_url, max_connections=REDIS_CONNECTIONS) if redis_url else None
    finish = redis.Redis(connection_pool=pool).register_script(FINISH_LUA) if pool is not None else None
    todo: queue.SimpleQueue[list[str]] = queue.SimpleQueue()
    for urls in hosts:
        todo.put(urls)
    done = [0, 0]
    lock = threading.Lock()

    def work() -> None:
        while True:
            try:
                urls = todo.get_nowait()
            except queue.Empty:
                return
            for url in urls:
                result = fetcher.fetch(url)
                if finish is not None:
                    finish(keys=[f"h:{url.split('/')[2]}", "lease"], args=[time.time(), url])
                    archive(result.content)
                with lock:
                    done[0] += result.status == 200
                    done[1] += len(result.content)

    pool = [threading.Thread(target=work) for _ in range(concurrency)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return done[0], done[1]


def aiohttp_engine(hosts: list[list[str]], concurrency: int, headers: dict[str, str],
                   redis_url: str | None) -> tuple[int, int]:
    """(pages with status 200, decoded bytes) fetched with aiohttp on one event loop; with
    ``redis_url``, each page's turn also finishes there and archives its body."""
    import asyncio

    import aiohttp
    import redis.asyncio

    async def crawl() -> tuple[int, int]:
        done = [0, 0]
        todo = iter(hosts)
        pool = (redis.asyncio.BlockingConnectionPool.from_url(redis_url, max_connections=REDIS_CONNECTIONS)
                if redis_url else None)
        finish = redis.asyncio.Redis(connection_pool=pool).register_script(FINISH_LUA) if pool is not None else None
        connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=1)
        timeout = aiohttp.ClientTimeout(total=30, sock_read=10)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout, headers=headers) as session:
            async def work() -> None:
                for urls in todo:
                    for url in urls:
                        try:
                            async with session.get(url, allow_redirects=False) as response:
                                body = await response.read()
                        except (TimeoutError, aiohttp.ClientError):
                            continue
                        if finish is not None:
                            await finish(keys=[f"h:{url.split('/')[2]}", "lease"], args=[time.time(), url])
                            archive(body)
                        done[0] += response.status == 200
                        done[1] += len(body)
            await asyncio.gather(*(work() for _ in range(concurrency)))
        return done[0], done[1]

    return asyncio.run(crawl())


def child(args: argparse.Namespace) -> None:
    """Run one engine over the URL file; print its figures as JSON."""
    job = json.loads(Path(args.child_job).read_text())
    start = time.perf_counter()
    if args.child == "threads":
        pages, nbytes = threads_engine(job["hosts"], job["concurrency"], job["redis_url"])
    else:
        pages, nbytes = aiohttp_engine(job["hosts"], job["concurrency"], job["headers"], job["redis_url"])
    wall = time.perf_counter() - start
    use = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"pages": pages, "bytes": nbytes, "wall_s": wall, "cpu_s": use.ru_utime + use.ru_stime,
                      "switches": use.ru_nvcsw + use.ru_nivcsw}))


# -- the parent ------------------------------------------------------------------------

def run_engine(engine: str, python: Path, job: Path) -> dict[str, Any]:
    done = subprocess.run([str(python), __file__, "--child", engine, "--child-job", str(job)],
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"{engine} failed ({done.returncode}):\n{done.stderr.strip()[-2000:]}")
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=100)
    ap.add_argument("--pages", type=int, default=50, help="pages per host (the home page and /p/<k>.html)")
    ap.add_argument("--mean-bytes", type=int, default=60_000)
    ap.add_argument("--concurrency", type=int, default=64, help="hosts fetched at once")
    ap.add_argument("--latency-median", type=float, default=0.0, help="median answer time, s (0: none)")
    ap.add_argument("--turn", action="store_true", help="each page also finishes in Redis and is archived")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, nothing installed: a few seconds")
    ap.add_argument("--child", choices=ENGINES, help=argparse.SUPPRESS)
    ap.add_argument("--child-job", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return

    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "bench"))
    from vs_scrapy import USER_AGENT, bench_python, ready_python

    from crawler_tasks.fetch.http import ACCEPT, ACCEPT_ENCODING
    from crawler_tasks.ops.child import die_with_parent
    from crawler_tasks.ops.embedded import EmbeddedRedis
    from testweb.pages import node_path

    # redis-py, hiredis and ISA-L as the crawler pins them, for --turn on the loop
    pins = [f"{name}=={version(name)}" for name in ("redis", "hiredis", "isal")]
    engines = ENGINES
    if args.smoke:
        args.hosts, args.pages, args.mean_bytes, args.concurrency, args.runs = 4, 5, 10_000, 4, 1
        if ready_python(VENV, "aiohttp, redis, isal") is None:
            engines = ("threads",)
            print(f"aiohttp: not in {VENV} (a run without --smoke makes it): threads only")
    pythons = {"threads": Path(sys.executable)}
    if "aiohttp" in engines:
        pythons["aiohttp"] = bench_python(VENV, ["aiohttp", *pins], "aiohttp, redis, isal")
    web = subprocess.Popen([sys.executable, "-m", "testweb", "--hosts", str(args.hosts), "--pages", str(args.pages),
                            "--mean-bytes", str(args.mean_bytes), "--latency-median", str(args.latency_median)],
                           cwd=ROOT, stdout=subprocess.PIPE, text=True, preexec_fn=die_with_parent)
    assert web.stdout is not None
    homes = [web.stdout.readline().strip() for _ in range(args.hosts)]
    hosts = [[home.rstrip("/") + node_path(k) for k in range(args.pages)] for home in homes]
    headers = {"User-Agent": USER_AGENT, "Accept": ACCEPT, "Accept-Encoding": ACCEPT_ENCODING}
    results: dict[str, list[dict[str, Any]]] = {engine: [] for engine in engines}
    store: EmbeddedRedis | None = None
    try:
        with tempfile.TemporaryDirectory(prefix="engine-cpu-") as tmp:
            if args.turn:
                store = EmbeddedRedis(Path(tmp) / "redis", save="").start()
            job = Path(tmp) / "job.json"
            job.write_text(json.dumps({"hosts": hosts, "concurrency": args.concurrency, "headers": headers,
                                       "redis_url": store.url if store is not None else None}))
            for run in range(args.runs):
                for engine in engines if run % 2 == 0 else engines[::-1]:
                    r = run_engine(engine, pythons[engine], job)
                    results[engine].append(r)
                    print(f"  run {run + 1}/{args.runs} {engine:8}: {r['pages']} pages, "
                          f"{1000 * r['cpu_s'] / max(r['pages'], 1):.3f} ms CPU a page, "
                          f"{r['switches'] / max(r['pages'], 1):.1f} context switches a page, "
                          f"{r['pages'] / r['wall_s']:.0f} pages/s", flush=True)
    finally:
        if store is not None:
            store.stop()
        web.terminate()
        web.wait(10)

    print(f"\n{args.hosts} hosts x {args.pages} pages of ~{args.mean_bytes} B, {args.concurrency} hosts at once, "
          f"latency median {args.latency_median:g} s{'; whole turns (finish + archive)' if args.turn else ''}; "
          f"medians of {args.runs}")
    print(f"  {'':28}" + "".join(f"{engine:>10}" for engine in engines) + (f"{'ratio':>8}" if len(engines) == 2 else ""))
    rows = [("client CPU ms a page", lambda r: 1000 * r["cpu_s"] / max(r["pages"], 1)),
            ("context switches a page", lambda r: r["switches"] / max(r["pages"], 1)),
            ("pages/s", lambda r: r["pages"] / r["wall_s"]),
            ("pages (200)", lambda r: r["pages"])]
    for name, figure in rows:
        medians = [statistics.median(map(figure, results[e])) for e in engines]
        ratio = f"{medians[0] / medians[1] if medians[1] else 0:8.2f}" if len(medians) == 2 else ""
        print(f"  {name:28}" + "".join(f"{m:10.3f}" for m in medians) + ratio)
    print(f"  ({os.cpu_count()} CPUs; threads = the crawler's Fetcher on threads, aiohttp = one event loop)")


if __name__ == "__main__":
    main()
