#!/usr/bin/env python3
"""Client CPU per fetch of a 140 KB page over loopback keep-alive, with the Fetcher.

The page comes from the hostile test server's ``/page?size=N`` (threads of this
process), so the figure is the fetching thread's own CPU (``time.thread_time``),
not the server's. Reports the median of several rounds, per fetch, and the wall
time per fetch for reference.

    python bench/fetch_cpu.py [--fetches 500] [--rounds 5] [--size 140000]
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from crawler_tasks.fetch.http import Fetcher  # noqa: E402
from crawler_tasks.settings import Settings  # noqa: E402
from tests.hostile import start_hostile  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fetches", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--size", type=int, default=140_000)
    args = ap.parse_args()
    srv = start_hostile()
    fetcher = Fetcher(dataclasses.replace(Settings(), ALLOW_PRIVATE=True))
    url = f"{srv.base_url}/page?size={args.size}"
    try:
        first = fetcher.fetch(url)
        assert first.status == 200 and not first.error, (first.status, first.error)
        cpu, wall = [], []
        for _ in range(args.rounds):
            c0, w0 = time.thread_time(), time.perf_counter()
            for _ in range(args.fetches):
                fetcher.fetch(url)
            cpu.append((time.thread_time() - c0) / args.fetches)
            wall.append((time.perf_counter() - w0) / args.fetches)
    finally:
        fetcher.close()
        srv.stop()
    print(f"page {len(first.content)} bytes, {args.fetches} fetches x {args.rounds} rounds, "
          f"{srv.connections} connection(s)")
    print(f"client CPU per fetch: median {statistics.median(cpu) * 1000:.3f} ms "
          f"(min {min(cpu) * 1000:.3f}, max {max(cpu) * 1000:.3f})")
    print(f"wall per fetch:       median {statistics.median(wall) * 1000:.3f} ms")


if __name__ == "__main__":
    main()
