#!/usr/bin/env python3
"""Frontier memory benchmark: what one queued URL costs in Redis.

Pushes N generated URLs spread over H hosts through ``Frontier.put_discovered`` in
batches of 5,000 into a fresh embedded redis-server (no persistence), with the
Bloom filter sized for N at 1 %, then prints Redis ``used_memory`` before/after,
bytes per queued URL (the Bloom bitmaps excluded) and Bloom bytes per seen URL,
and the insert rate. Every URL lands in a front queue (put_discovered never fills
back queues), which is where nearly all of a large frontier waits.

The front queues spill to disk as in a crawl: every MAINTENANCE_INTERVAL_S of the
insert loop the maintenance task's ``Spiller.run`` moves each queue's tail past
FRONT_SPILL_AT to gzip files (its time is part of the insert rate, though a crawl runs
it in another process). The bench then prints the files' bytes per spilled URL and reads
every file back into Redis, as the refill does, for the read-back rate. ``--no-spill``
keeps every URL in Redis: the cost of one entry there.

    python bench/frontier_memory.py [--urls 10000000] [--hosts 100000] [--shards 2] [--no-spill] [--snapshot]
    python bench/frontier_memory.py --smoke

``--snapshot`` also times ``crawler_tasks.ops.snapshot`` snapshot + restore of the result.
``--smoke``: 20,000 URLs over 2,000 hosts (seconds; tests/test_bench_smoke.py runs it).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from crawler_tasks.frontier import Discovered, Frontier, Verdict  # noqa: E402
from crawler_tasks.frontier.spill import Spiller  # noqa: E402
from crawler_tasks.keys import ShardKeys  # noqa: E402
from crawler_tasks.ops.embedded import EmbeddedRedis  # noqa: E402
from crawler_tasks.settings import Settings  # noqa: E402

BATCH = 5_000


def generate(start: int, stop: int, hosts: int, levels: int) -> list[Discovered]:
    """URLs shaped like a real crawl's (host, section, slug); URL i is on host i % hosts."""
    out = []
    for i in range(start, stop):
        h = i % hosts
        host = f"www.site{h}.example.com"
        url = f"https://{host}/section{i % 97}/article-{i // hosts}-{(i * 2654435761) % 1000003}.html"
        out.append(Discovered(url=url, host=host, depth=1 + i % 3, priority=i % levels))
    return out


def mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--urls", type=int, default=10_000_000)
    ap.add_argument("--hosts", type=int, default=100_000)
    ap.add_argument("--shards", type=int, default=Settings().SHARDS)
    ap.add_argument("--no-spill", action="store_true", help="FRONT_SPILL_AT 0: every URL stays in Redis")
    ap.add_argument("--exact", action="store_true", help="URL_SEEN=exact: fingerprints decide (their bytes per URL)")
    ap.add_argument("--snapshot", action="store_true", help="also time snapshot + restore of the frontier")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: a few seconds")
    args = ap.parse_args(argv)
    if args.smoke:
        args.urls, args.hosts = 20_000, 2_000
    n, hosts = args.urls, max(1, min(args.hosts, args.urls))

    with tempfile.TemporaryDirectory(prefix="frontier-mem-") as tmp:
        server = EmbeddedRedis(Path(tmp) / "redis", save="").start()
        try:
            settings = dataclasses.replace(Settings(), REDIS_URL=server.url, KEY_PREFIX="bench", SHARDS=args.shards,
                                           BLOOM_EXPECTED_URLS=n, BLOOM_ERROR_RATE=0.01, OUT_DIR=str(Path(tmp) / "out"))
            if args.smoke:
                settings = dataclasses.replace(settings, FRONT_SPILL_AT=2_000, FRONT_REFILL_AT=500)
            if args.no_spill:
                settings = dataclasses.replace(settings, FRONT_SPILL_AT=0)
            if args.exact:
                settings = dataclasses.replace(settings, URL_SEEN="exact")
            frontier = Frontier(settings)
            spiller = Spiller(settings, frontier)
            spill_s, spilled, last_spill = 0.0, 0, time.perf_counter()
            client = frontier.client(0)
            before = int(client.info("memory")["used_memory"])
            frontier.allocate_bloom()  # as manage.py crawl does: full-size segments up front
            spec = frontier.bloom
            print(f"{n:,} URLs over {hosts:,} hosts, {settings.SHARDS} shards, batches of {BATCH:,}; "
                  f"Bloom {spec.segments} segment(s)/shard, k={spec.hashes}, {mb(spec.bytes)}/shard")
            print(f"redis used_memory before: {mb(before)}")
            started = time.perf_counter()
            verdicts: Counter[Verdict] = Counter()
            url_chars = 0
            step = max(1, n // 10)
            next_report = step
            for start in range(0, n, BATCH):
                items = generate(start, min(n, start + BATCH), hosts, settings.PRIORITY_LEVELS)
                url_chars += sum(len(d.url) for d in items)
                verdicts.update(frontier.put_discovered(items))
                done = start + len(items)
                if time.perf_counter() - last_spill >= settings.MAINTENANCE_INTERVAL_S or done == n:
                    last_spill = time.perf_counter()
                    while moved := spiller.run()[0]:   # the last runs: maintenance would, a second later
                        spilled += moved
                        if done < n:
                            break
                    spill_s += time.perf_counter() - last_spill
                if done >= next_report or done == n:
                    elapsed = time.perf_counter() - started
                    used = int(client.info("memory")["used_memory"])
                    print(f"  {100 * done / n:5.1f} %  {done:>12,} URLs  {elapsed:7.1f} s  "
                          f"{done / elapsed:9,.0f} URLs/s  used_memory {mb(used)}", flush=True)
                    while next_report <= done:
                        next_report += step
            elapsed = time.perf_counter() - started
            enqueued = verdicts[Verdict.ENQUEUED]
            after = int(client.info("memory")["used_memory"])
            bloom_bytes = 0
            for shard in range(settings.SHARDS):
                c = frontier.client(shard)
                for seg in range(spec.segments):
                    bloom_bytes += int(c.memory_usage(ShardKeys(settings.KEY_PREFIX, shard).bloom(seg)) or 0)
            exact_bytes = 0
            if frontier.fingerprints is not None:
                for shard in range(settings.SHARDS):
                    pipe = frontier.client(shard).pipeline(transaction=False)
                    for bucket in range(frontier.fingerprints.buckets):
                        pipe.memory_usage(ShardKeys(settings.KEY_PREFIX, shard).fingerprints(bucket))
                    exact_bytes += sum(int(b or 0) for b in pipe.execute())
            queued = sum(frontier.sizes(s)["front"] + frontier.sizes(s)["back"] for s in range(settings.SHARDS))
            fill = frontier.bloom_fill()
            grown = after - before
            print(f"redis used_memory after:  {mb(after)} (+{mb(grown)})")
            print(f"enqueued {enqueued:,} of {n:,} (verdicts: "
                  f"{', '.join(f'{v.name.lower()} {c:,}' for v, c in sorted(verdicts.items()))}), "
                  f"queued now {queued:,}; mean URL {url_chars / n:.1f} chars")
            print(f"queue bytes per queued URL (Bloom and fingerprints excluded; includes the per-host budget hash): "
                  f"{(grown - bloom_bytes - exact_bytes) / max(queued, 1):.1f}")
            if frontier.fingerprints is not None:
                print(f"exact URL-seen: {mb(exact_bytes)} = {exact_bytes / n:.2f} bytes per seen URL in "
                      f"{frontier.fingerprints.buckets * settings.SHARDS:,} intset buckets")
            print(f"Bloom: {mb(bloom_bytes)} = {bloom_bytes / n:.2f} bytes per seen URL; "
                  f"fill {fill.bits_set / (spec.bits * settings.SHARDS):.3f}, est. false-positive rate {fill.fp_rate:.3%}")
            print(f"URL-seen ({settings.URL_SEEN}): {fill.describe()}; {verdicts[Verdict.SEEN]:,} taken for seen "
                  f"(every generated URL is new)")
            print(f"rate: {n / elapsed:,.0f} URLs/s ({elapsed:.1f} s for {n:,} URLs, {spill_s:.1f} s of it spilling)")
            if spilled:
                files = list((Path(settings.OUT_DIR) / "spill").rglob("*.gz"))
                disk = sum(f.stat().st_size for f in files)
                in_redis = queued - spiller.spilled()
                print(f"spilled {spilled:,} URLs to {len(files):,} files: {mb(disk)} = {disk / spilled:.1f} bytes per "
                      f"spilled URL on disk; {in_redis:,} URLs in Redis (FRONT_SPILL_AT {settings.FRONT_SPILL_AT:,} a "
                      f"queue x {settings.SHARDS * settings.PRIORITY_LEVELS} queues)")
                t0 = time.perf_counter()
                reader = Spiller(dataclasses.replace(settings, FRONT_SPILL_AT=2**62, FRONT_REFILL_AT=2**62 - 1),
                                 frontier)
                loaded = 0
                while moved := reader.run()[1]:
                    loaded += moved
                took = time.perf_counter() - t0
                print(f"read-back: {loaded:,} URLs from disk into Redis in {took:.1f} s "
                      f"({loaded / max(took, 1e-9):,.0f} URLs/s); used_memory now "
                      f"{mb(int(client.info('memory')['used_memory']))}")
            if args.snapshot:
                from crawler_tasks.ops.restore import restore
                from crawler_tasks.ops.snapshot import snapshot

                path = Path(tmp) / "snapshot.jsonl.gz"
                info = snapshot(settings, path)
                print(f"snapshot: {info.keys:,} keys, {info.elements:,} elements, {mb(info.file_bytes)} file, "
                      f"{info.seconds:.1f} s ({info.elements / max(info.seconds, 1e-9):,.0f} elements/s)")
                back = restore(settings, path, replace=True)
                now = int(client.info("memory")["used_memory"])
                print(f"restore (verify + delete + load): {back.seconds:.1f} s; used_memory after restore {mb(now)}")
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
