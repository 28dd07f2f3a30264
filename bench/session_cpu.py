#!/usr/bin/env python3
"""CPU of the fetch path per page: fetch sessions of this process against a local web.

The synthetic web runs in its own process (``python -m testweb``) and its URLs are
queued up front, so no parse stage runs: page groups are taken as handed on at once.
A redis-server of this script's holds the frontier; its CPU and the commands it
served are counted apart. Prints this process's CPU per page (the sessions' loops,
the exchange pool's turns, WARC writing: what a fetch worker spends, less Celery's
task messages) and Redis's, and, with ``--detail``, the thread CPU of each part of a
turn and of the session loop (wrappers that time them: a few us each on top).

    python bench/session_cpu.py [--hosts 50] [--pages 60] [--sessions 2] [--detail] [--smoke]

``--smoke``: 4 hosts x 10 pages of 10 kB, one session (seconds).
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psutil
import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from crawler_tasks.frontier import Discovered  # noqa: E402
from crawler_tasks.ops.child import die_with_parent  # noqa: E402
from crawler_tasks.ops.embedded import EmbeddedRedis  # noqa: E402
from crawler_tasks.records import Capture  # noqa: E402
from crawler_tasks.settings import Settings, reset_settings  # noqa: E402
from crawler_tasks.stages.fetch import session as session_mod  # noqa: E402
from crawler_tasks.stages.worker import Worker  # noqa: E402
from crawler_tasks.urls import host_key  # noqa: E402

_times: dict[str, list[float]] = {}
_lock = threading.Lock()


def timed(owner: object, name: str) -> None:
    """Replace ``owner.name`` by a wrapper that adds its thread CPU to ``_times``."""
    fn: Callable[..., object] = getattr(owner, name)
    label = f"{getattr(owner, '__name__', owner)}.{name}"

    @functools.wraps(fn)
    def wrapper(*args: object, **kwargs: object) -> object:
        t0 = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            spent = time.thread_time() - t0
            with _lock:
                entry = _times.setdefault(label, [0, 0.0])
                entry[0] += 1
                entry[1] += spent
    setattr(owner, name, wrapper)


def instrument() -> None:
    from crawler_tasks.fetch.http import Fetcher
    from crawler_tasks.output.warc import WarcStore
    from crawler_tasks.stages.fetch import turn

    for name in ("_turn", "_loop", "_check_control", "_lease_more", "_dispatch", "_arrived", "_flush", "_renew"):
        timed(session_mod.FetchSession, name)
    for name in ("take_turn", "finish_turn", "archive_turn", "flush_group"):
        timed(session_mod, name)
    for name in ("_request_step", "robots_step", "page_of", "maybe_render", "warc_digest", "after_exchange"):
        timed(turn, name)
    timed(Fetcher, "fetch")
    timed(WarcStore, "write_exchange")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=50)
    ap.add_argument("--pages", type=int, default=60, help="pages per host")
    ap.add_argument("--mean-bytes", type=int, default=60_000)
    ap.add_argument("--sessions", type=int, default=2, help="fetch sessions (one shard each)")
    ap.add_argument("--detail", action="store_true", help="thread CPU of each part")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: a few seconds")
    args = ap.parse_args()
    if args.smoke:
        args.hosts, args.pages, args.mean_bytes, args.sessions = 4, 10, 10_000, 1
    if args.detail:
        instrument()
    web = subprocess.Popen([sys.executable, "-m", "testweb", "--hosts", str(args.hosts), "--pages", str(args.pages),
                            "--mean-bytes", str(args.mean_bytes)], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                           preexec_fn=die_with_parent)
    homes = [web.stdout.readline().strip() for _ in range(args.hosts)]   # type: ignore[union-attr]
    tmp = Path(tempfile.mkdtemp(prefix="session-cpu-"))
    server = EmbeddedRedis(tmp / "redis", save="").start()
    try:
        s = dataclasses.replace(Settings(), REDIS_URL=server.url, OUT_DIR=str(tmp / "out"), ALLOW_PRIVATE=True,
                                MIN_DELAY_S=0.05, SHARDS=args.sessions, KEY_PREFIX="bench",
                                USER_AGENT="benchbot/1.0 (+http://127.0.0.1/bench)")
        reset_settings(s)
        w = Worker.create(s)
        w.control.start()
        urls = [home.rstrip("/") + f"/p/{k}.html" for home in homes for k in range(args.pages)]
        w.frontier.put_discovered([Discovered(url=u, host=host_key(u)) for u in homes + urls])
        handed: list[int] = []

        def emit(pages: list[Capture], group_id: str) -> None:
            w.control.end_batch(group_id)   # as if parsed at once: no back-pressure
            handed.append(len(pages))

        def run(shard: int) -> None:
            leases = w.frontier.get_urls(shard, s.FETCH_BATCH)
            session_mod.fetch_stage(w, shard, leases, uuid.uuid4().hex, emit)

        me = psutil.Process()
        rs = psutil.Process(server.proc.pid)   # type: ignore[union-attr]
        c0, r0, t0 = me.cpu_times(), rs.cpu_times(), time.monotonic()
        calls0 = _calls(server)
        threads = [threading.Thread(target=run, args=(i,)) for i in range(args.sessions)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - t0
        c1, r1 = me.cpu_times(), rs.cpu_times()
        calls = _calls(server) - calls0
        pages = sum(handed)
        cpu = (c1.user + c1.system) - (c0.user + c0.system)
        rcpu = (r1.user + r1.system) - (r0.user + r0.system)
        print(f"{pages} pages in {wall:.1f} s ({pages / wall:.0f}/s), {args.sessions} sessions, "
              f"load {os.getloadavg()[0]:.1f}")
        print(f"fetch path CPU {cpu / pages * 1000:.3f} ms/page; redis CPU {rcpu / pages * 1000:.3f} ms/page, "
              f"{calls / pages:.2f} commands/page (scripts' own commands included)")
        if args.detail:
            for label, (n, secs) in sorted(_times.items(), key=lambda kv: -kv[1][1]):
                print(f"  {label:48s} {n / pages:6.3f} calls/page {secs / pages * 1000:7.3f} ms/page")
        w.fetcher.close()
        w.warc.close()
        return 0
    finally:
        server.stop()
        web.terminate()
        web.wait(10)


def _calls(server: EmbeddedRedis) -> int:
    stats = redis.Redis.from_url(server.url).info("commandstats")
    return sum(int(v["calls"]) for v in stats.values())


if __name__ == "__main__":
    sys.exit(main())
