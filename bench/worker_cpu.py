#!/usr/bin/env python3
"""The parse worker's own CPU per page: the ``crawler.parse`` and ``crawler.enqueue`` task
bodies, run in this process on page groups that real fetch sessions took from a local web.

A crawl runs inline (as tests/test_pipeline.py does): each fetch session's page groups are
kept, then each group's parse task runs, then its enqueue task with the message parse sent
(parse's ``apply_async`` really publishes to the broker, which is this run's Redis). Only
the two task calls are timed (``time.process_time``: this process's CPU, not the parse
sandbox's child). Around each call the Redis server's ``INFO`` gives the commands it ran
(its ``commandstats``) and the CPU it spent, and the client's round trips are counted.
Figures are per fetched page (status 200 or not). ``--profile N`` prints the N costliest
functions of the two tasks (cProfile, own time).

    python bench/worker_cpu.py [--hosts 100] [--pages 50] [--mean-bytes 60000] [--max-pages 3000] [--smoke]

``--smoke``: 4 hosts x 10 pages of 10 kB, at most 40 pages (seconds).
"""
from __future__ import annotations

import argparse
import cProfile
import dataclasses
import os
import pstats
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from crawler_tasks.ops.embedded import EmbeddedRedis  # noqa: E402


def redis_info(client: Any) -> tuple[Counter[str], float]:
    """Commands run so far by name (INFO's own excluded), and the server's CPU seconds."""
    stats = client.info("commandstats")
    calls = Counter({name.removeprefix("cmdstat_"): v["calls"] for name, v in stats.items()
                     if name != "cmdstat_info"})
    cpu = client.info("cpu")
    return calls, cpu["used_cpu_user"] + cpu["used_cpu_sys"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--hosts", type=int, default=100)
    ap.add_argument("--pages", type=int, default=50, help="pages per host")
    ap.add_argument("--mean-bytes", type=int, default=60_000)
    ap.add_argument("--max-pages", type=int, default=3000)
    ap.add_argument("--profile", type=int, default=0, metavar="N", help="print the N costliest functions")
    ap.add_argument("--profile-out", metavar="FILE", help="with --profile: also save the profile (pstats)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: a few seconds")
    args = ap.parse_args()
    if args.smoke:
        args.hosts, args.pages, args.mean_bytes, args.max_pages = 4, 10, 10_000, 40

    tmp = Path(tempfile.mkdtemp(prefix="worker-cpu-"))
    server = EmbeddedRedis(tmp / "redis", save="")
    server.start()
    os.environ.update(CRAWLER_REDIS_URL=server.url, CRAWLER_OUT_DIR=str(tmp / "out"), CRAWLER_ALLOW_PRIVATE="1",
                      CRAWLER_MIN_DELAY_S="0", CRAWLER_MAX_PAGES=str(args.max_pages))
    import redis
    from redis.connection import Connection

    from crawler_tasks import tasks
    from crawler_tasks.ops.seeds import seed_urls
    from crawler_tasks.output.spool import keep_message
    from crawler_tasks.records import to_message
    from crawler_tasks.runtime.control import CrawlState
    from crawler_tasks.runtime.maintenance import run_maintenance
    from crawler_tasks.settings import get_settings
    from crawler_tasks.stages.fetch import fetch_stage
    from crawler_tasks.stages.wake import plan_wake
    from testweb import TestWeb

    trips = [0]
    send = Connection.send_packed_command

    def counted(self: Connection, command: Any, check_health: bool = True) -> None:
        trips[0] += 1
        send(self, command, check_health)

    Connection.send_packed_command = counted  # type: ignore[method-assign]
    sent: list[tuple[Any, ...]] = []
    publish = tasks.enqueue.apply_async

    def keep_args(args: tuple[Any, ...], **kwargs: Any) -> Any:
        sent.append(args)
        return publish(args, **kwargs)

    tasks.enqueue.apply_async = keep_args  # type: ignore[method-assign]
    info = redis.Redis.from_url(server.url)
    profiler = cProfile.Profile(time.process_time) if args.profile else None
    spent: dict[str, float] = Counter()
    commands: dict[str, Counter[str]] = {"parse": Counter(), "enqueue": Counter()}
    round_trips: Counter[str] = Counter()
    redis_cpu: dict[str, float] = Counter()
    pages = 0

    def timed(role: str, call: Any) -> Any:
        calls0, cpu0 = redis_info(info)
        trips0 = trips[0]
        if profiler:
            profiler.enable()
        t0 = time.process_time()
        out = call()
        spent[role] += time.process_time() - t0
        if profiler:
            profiler.disable()
        round_trips[role] += trips[0] - trips0
        calls1, cpu1 = redis_info(info)
        commands[role] += calls1 - calls0
        redis_cpu[role] += cpu1 - cpu0
        return out

    try:
        with TestWeb(n_hosts=args.hosts, pages_per_host=args.pages, mean_page_bytes=args.mean_bytes) as web:
            settings = get_settings()
            settings = dataclasses.replace(settings, SESSION_MAX_S=2.0)
            from crawler_tasks.settings import reset_settings
            reset_settings(settings)
            seed_urls(settings, web.seeds())
            w = tasks.get_worker()
            groups: list[tuple[list[Any], str]] = []

            def emit(captures: list[Any], group_id: str) -> None:
                message = [to_message(c) for c in captures]
                keep_message(settings, group_id, "parse", message)
                groups.append((message, group_id))

            deadline = time.time() + 600
            while time.time() < deadline:
                starts = plan_wake(settings, w.frontier)
                for start in starts:
                    fetch_stage(w, start.shard, start.leases, start.session_id, emit)
                for message, group_id in groups:
                    pages += len(message)
                    sent.clear()
                    timed("parse", lambda m=message, g=group_id: tasks.parse(m, g))
                    for enqueue_args in sent:
                        timed("enqueue", lambda a=enqueue_args: tasks.enqueue(*a))
                groups.clear()
                if not starts:
                    if run_maintenance(settings, w.frontier).state == CrawlState.FINISHED:
                        break
                    time.sleep(0.02)
            # the parse sandbox's CPU (its code is not the worker's): a yardstick for the machine's load
            sandbox_cpu = sum(sum(p.cpu_times()[:2]) for p in psutil.Process().children(recursive=True)
                              if p.name() != "redis-server")
            if w.sandbox is not None:
                w.sandbox.close()
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    n = max(pages, 1)
    print(f"web: {args.hosts} hosts x {args.pages} pages, mean {args.mean_bytes} B; {pages} pages in groups")
    for role in ("parse", "enqueue"):
        top = ", ".join(f"{name} {c / n:.2f}" for name, c in commands[role].most_common(8))
        print(f"{role:8} CPU {spent[role] / n * 1000:.3f} ms/page; redis CPU {redis_cpu[role] / n * 1000:.3f} ms/page; "
              f"round trips {round_trips[role] / n:.2f}/page; commands {sum(commands[role].values()) / n:.2f}/page "
              f"({top})")
    print(f"both     CPU {sum(spent.values()) / n * 1000:.3f} ms/page; redis CPU "
          f"{sum(redis_cpu.values()) / n * 1000:.3f} ms/page; parse sandbox CPU {sandbox_cpu / n * 1000:.3f} ms/page")
    if profiler:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(args.profile)
        if args.profile_out:
            profiler.dump_stats(args.profile_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
