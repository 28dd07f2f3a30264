#!/usr/bin/env python3
"""Near-duplicate detection cost per page, next to parsing the same page.

Pages are ~60 KB of Zipf-distributed words (~9,000 words, like the crawl bench's
pages) in <p> paragraphs with 50 links. For each stage the CPU time per page is the
best of several rounds over all pages (rounds interleave the stages, so a busy
machine slows them alike; compare the ratios).

- ``parse_html``: the parser on the HTML (what the parse stage does anyway);
- ``tokenize floor``: ``set(text.lower().encode().split())``, the least any
  word-feature scheme in Python must do;
- ``simhash64``: the per-page near-duplicate fingerprint;
- ``minhash sketch``: 200-value OPH sketch of 4-word shingles (offline report);
- ``nearindex``: ``NearDupIndex.check_and_add`` per page, batches of 50, against a
  private redis-server already holding ``--indexed`` fingerprints (Lua time
  included; skip with ``--no-redis``).

    python bench/dedup_bench.py [--pages 40] [--words 9000] [--rounds 5] [--indexed 100000] [--smoke]

``--smoke``: 10 pages, 2 rounds, 2,000 fingerprints indexed (seconds).
"""
from __future__ import annotations

import argparse
import itertools
import random
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from crawler_tasks.dedup.fingerprint import fingerprint_collapsed
from crawler_tasks.dedup.minhash import sketch
from crawler_tasks.dedup.simhash import simhash64
from crawler_tasks.parse.html import parse_html

_SYLLABLES = ["ka", "to", "ri", "men", "sa", "lo", "ver", "ing", "pa", "de", "un", "tion",
              "al", "er", "qu", "es", "mor", "bi", "ne", "st", "th", "ou", "ly", "ch"]


def make_pages(n: int, n_words: int, seed: int = 1) -> list[bytes]:
    rng = random.Random(seed)
    vocab = ["the", "of", "and", "to", "a", "in", "is", "it", "for", "on"]
    seen = set(vocab)
    while len(vocab) < 50_000:
        w = "".join(rng.choices(_SYLLABLES, k=rng.randint(1, 4)))
        if w not in seen:
            seen.add(w)
            vocab.append(w)
    cum = list(itertools.accumulate(1 / (r + 1) for r in range(len(vocab))))
    pages = []
    for p in range(n):
        words = rng.choices(vocab, cum_weights=cum, k=n_words)
        paras = [" ".join(words[i:i + 60]) for i in range(0, n_words, 60)]
        links = "".join(f'<li><a href="/p/{rng.randint(1, 10**6)}.html">{vocab[i]}</a></li>'
                        for i in range(50))
        body = "\n".join(f"<p>{para}</p>" for para in paras)
        pages.append(f"<html><head><title>page {p}</title></head><body><ul>{links}</ul>{body}"
                     f"</body></html>".encode())
    return pages


def per_item_us(fn: Callable[[object], object], items: Sequence[object]) -> float:
    t0 = time.process_time()
    for item in items:
        fn(item)
    return (time.process_time() - t0) / len(items) * 1e6


def bench_index(n_pages: int, indexed: int, rounds: int) -> float:
    import redis

    from crawler_tasks.dedup.nearindex import NearDupIndex
    from crawler_tasks.ops.embedded import EmbeddedRedis

    rng = random.Random(2)
    with tempfile.TemporaryDirectory() as tmp, EmbeddedRedis(Path(tmp), save="") as server:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        index = NearDupIndex(client, "bench")
        for start in range(0, indexed, 1000):
            index.check_and_add([(f"http://h/{i}", rng.getrandbits(64))
                                 for i in range(start, min(start + 1000, indexed))])
        best = float("inf")
        for r in range(rounds):
            batches = [[(f"http://q/{r}/{b}/{i}", rng.getrandbits(64)) for i in range(50)]
                       for b in range(max(1, n_pages // 50))]
            t0 = time.perf_counter()  # wall: includes the Lua time in redis-server
            for batch in batches:
                index.check_and_add(batch)
            best = min(best, (time.perf_counter() - t0) / (50 * len(batches)) * 1e6)
        stats = index.stats()
        print(f"  index: {stats['entries']} entries, {stats['compared'] / max(stats['pages'], 1):.2f} "
              f"candidates compared per page")
        return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", type=int, default=40)
    ap.add_argument("--words", type=int, default=9000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--indexed", type=int, default=100_000)
    ap.add_argument("--no-redis", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: a few seconds")
    args = ap.parse_args(argv)
    if args.smoke:
        args.pages, args.rounds, args.indexed = 10, 2, 2_000

    pages = make_pages(args.pages, args.words)
    texts = [parse_html(p, "http://bench.test/").text for p in pages]
    print(f"{len(pages)} pages, mean {sum(map(len, pages)) / len(pages) / 1024:.1f} KiB HTML, "
          f"{sum(map(len, texts)) / len(texts) / 1024:.1f} KiB text, "
          f"{sum(len(t.split()) for t in texts) / len(texts):.0f} words")
    stages: list[tuple[str, Callable[[object], object], Sequence[object]]] = [
        ("parse_html", lambda p: parse_html(p, "http://bench.test/"), pages),  # type: ignore[arg-type]
        ("exact fingerprint", fingerprint_collapsed, texts),  # type: ignore[list-item]
        ("tokenize floor", lambda t: set(t.lower().encode().split()), texts),  # type: ignore[attr-defined]
        ("simhash64", simhash64, texts),  # type: ignore[list-item]
        ("minhash sketch", sketch, texts),  # type: ignore[list-item]
    ]
    best = {name: float("inf") for name, _, _ in stages}
    for _ in range(args.rounds):
        for name, fn, items in stages:
            best[name] = min(best[name], per_item_us(fn, items))
    parse = best["parse_html"]
    print(f"CPU per page (best of {args.rounds} rounds):")
    for name, us in best.items():
        print(f"  {name:18s} {us:8.0f} us/page   {us / parse:5.2f} x parse_html")
    if not args.no_redis:
        us = bench_index(args.pages * 5, args.indexed, args.rounds)
        print(f"  {'nearindex':18s} {us:8.0f} us/page   (wall, batches of 50, "
              f"{args.indexed} pages indexed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
