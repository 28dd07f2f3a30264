#!/usr/bin/env python3
"""Near-duplicate detection cost per page, next to parsing the same page.

Pages are ~60 KB of Zipf-distributed words (~9,000 words, like the crawl bench's
pages) in <p> paragraphs with 50 links. For each stage the CPU time per page is the
best of several rounds over all pages (rounds interleave the stages, so a busy
machine slows them alike; compare the ratios).

- ``parse_html``: the parser on the HTML (what the parse stage does anyway);
- ``tokenize floor``: ``set(text.lower().encode().split())``, the least any
  word-feature scheme in Python must do;
- ``simhash64``: the simhash of the whole text; ``page_simhash`` and ``page_print``: the
  fingerprint and the ``NearPrint`` of its first 12,000 characters and its 50 links, as
  the parse stage makes them;
- ``minhash sketch``: 200-value OPH sketch of 4-word shingles (offline report);
- ``nearindex``: ``NearDupIndex.check_and_add`` per page, batches of 50, against a
  private redis-server already holding ``--indexed`` fingerprints (Lua time
  included; skip with ``--no-redis``): pages checked with a ``NearPrint`` (its check
  and FRAGILE_BITS flipped probes) and with a bare simhash (four probes).

Precision and recall (issue 38), each printed as figures:

- ``--scale N``: N synthetic pages (100,000 by default) through ``NearDupIndex``
  in crawl order, fingerprinted as the parse stage does (``simhash.page_print``;
  ``--simhash-only``: the bare simhash, ``page_simhash``, as a crawl whose parse stage
  does not hand the index its pages' ``NearPrint``).
  Half come from a small-vocabulary web (1,000 hosts at 10^5 pages, one 4,000-word
  Zipf vocabulary, short pages that open with their host's template line; 1 in 10
  a page of links), half from a 50,000-word vocabulary. One base page in 10 has 1-3
  near-duplicates, each what main-text extraction leaves of a copy: a mirror (an
  attribution line more), a print version or a repost (a line more at the top), a
  counter change, a word in 200 edited; a link page's copies are mirrors with a link
  more. Titles carry no digits (``title_mark`` would tell the pages apart for free);
  they differ between groups, which a NearPrint's check sees (with one title for all
  pages its second simhash alone still turned away every unrelated candidate).
  Printed: bits apart of unrelated pages per web, pages left out of the feed and how
  many are true near-duplicates (same group), groups flagged whole, the pairs the
  index's rule finds (``near_pairs``) against true pairs, Redis bytes a page, the
  index's probes and candidates a page.
- ``--real [NAME ...]``: the pinned real corpus (``tests/realpages.py``: Debian's documentation
  packages and the vendored pages) through ``analyse``: every pair of pages the index's
  rule finds whose exact fingerprints differ, how many index, table-of-contents and
  archive pages (pages of links, or named so) there were, and how many copies of a
  sample of them (mirror, print, repost, dated) are found.

    python bench/dedup_bench.py [--pages 40] [--words 9000] [--rounds 5] [--indexed 100000]
    python bench/dedup_bench.py --scale 100000 --real [--simhash-only]
    python bench/dedup_bench.py --smoke

``--smoke``: 10 pages, 2 rounds, 2,000 fingerprints indexed, ``--scale 2000`` and
``--real vendored`` (seconds).
"""
from __future__ import annotations

import argparse
import itertools
import random
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from crawler_tasks.dedup.fingerprint import collapse_words_utf8, fingerprint_collapsed
from crawler_tasks.dedup.minhash import sketch
from crawler_tasks.dedup.nearindex import BLOCK_BITS, BLOCKS, CHECK_BITS, WIDE_DISTANCE
from crawler_tasks.dedup.simhash import (
    FRAGILE_BITS,
    LINK_PAGE_SHARE,
    NearPrint,
    hamming,
    page_print,
    page_simhash,
    simhash64,
)
from crawler_tasks.parse.html import parse_html
from crawler_tasks.settings import Settings as _Settings

NEAR_BITS = _Settings().NEAR_DUP_BITS   # the crawl's near-duplicate threshold

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


def _vocabulary(rng: random.Random, size: int) -> tuple[list[str], list[float]]:
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < size:
        w = "".join(rng.choices(_SYLLABLES, k=rng.randint(1, 4)))
        if w not in seen:
            seen.add(w)
            words.append(w)
    return words, list(itertools.accumulate(1 / (r + 1) for r in range(size)))


@dataclass(slots=True)
class SynthPage:
    group: int            # pages of one group are near-duplicates; a lone page has its own
    web: str              # "small" or "large" vocabulary
    title: str
    text: str
    anchors: list[str]


def make_web(n: int, seed: int = 5) -> list[SynthPage]:
    """``n`` pages (see ``--scale`` in the module doc), shuffled into crawl order."""
    rng = random.Random(seed)
    small, small_cum = _vocabulary(rng, 4_000)
    large, large_cum = _vocabulary(rng, 50_000)
    hosts = max(2, n // 100)
    chrome = [" ".join(rng.choices(small, cum_weights=small_cum, k=20)) for _ in range(hosts)]
    pages: list[SynthPage] = []
    group = 0
    while len(pages) < n:
        group += 1
        web = "small" if group % 2 else "large"
        vocab, cum = (small, small_cum) if web == "small" else (large, large_cum)
        host = rng.randrange(hosts)
        title = " ".join(rng.choices(vocab, cum_weights=cum, k=4))
        anchors: list[str] = []
        if web == "small" and rng.random() < 0.1:     # a page of links: an index, an archive
            body = rng.choices(vocab, cum_weights=cum, k=30)
            anchors = [" ".join(rng.choices(vocab, cum_weights=cum, k=rng.randint(2, 5)))
                       for _ in range(rng.randint(50, 300))]
        else:
            body = rng.choices(vocab, cum_weights=cum, k=rng.randint(60, 400) if web == "small"
                               else rng.randint(200, 1500))
        base = SynthPage(group, web, title, " ".join([chrome[host], *body]), anchors)
        pages.append(base)
        if rng.random() < 0.1:
            for _ in range(rng.randint(1, 3)):
                pages.append(_near_copy(rng, base, vocab))
    rng.shuffle(pages)
    return pages[:n]


def _near_copy(rng: random.Random, base: SynthPage, vocab: list[str]) -> SynthPage:
    if base.anchors:   # a mirror of a page of links, with a link more
        more = [" ".join(rng.choices(vocab, k=3)) for _ in range(rng.randint(0, 1))]
        return SynthPage(base.group, base.web, base.title, base.text, base.anchors + more)
    # what main-text extraction leaves of a copy: the text, and a line or a few words more
    kind = rng.choice(("mirror", "print", "repost", "counter", "edit"))
    words = base.text.split()
    if kind == "mirror":
        words += ["mirrored", "from"] + rng.choices(vocab, k=3)
    elif kind == "print":
        words = ["printed", "from"] + rng.choices(vocab, k=2) + words
    elif kind == "repost":
        words = ["reposted", "by"] + rng.choices(vocab, k=4) + words
    elif kind == "counter":
        words.insert(rng.randrange(len(words)), f"{rng.randint(2, 999)} views updated {rng.randint(1, 12)}:"
                                                f"{rng.randint(10, 59)}")
    else:
        for _ in range(max(1, len(words) // 200)):
            words[rng.randrange(len(words))] = rng.choice(vocab)
    return SynthPage(base.group, base.web, base.title, " ".join(words), base.anchors)


def bench_scale(n: int, max_chars: int = 12_000, min_words: int = 50, simhash_only: bool = False) -> None:
    """Pages left out of the feed as near-duplicates at scale, and how many truly are."""
    import redis

    from crawler_tasks.dedup.nearindex import NearDupIndex
    from crawler_tasks.ops.embedded import EmbeddedRedis

    t0 = time.perf_counter()
    pages = make_web(n)
    prints = [page_print(p.text, p.anchors, p.title, max_chars) for p in pages]
    sample = pages[:5000]
    best = {"page_simhash": float("inf"), "page_print": float("inf")}
    for _ in range(3):   # interleaved rounds: a busy machine slows both alike
        for name, fn in (("page_simhash", page_simhash), ("page_print", page_print)):
            t1 = time.process_time()
            for p in sample:
                fn(p.text, p.anchors, p.title, max_chars)
            best[name] = min(best[name], (time.process_time() - t1) / len(sample) * 1e3)
    print(f"scale: {n} pages ({sum(p.web == 'small' for p in pages)} of a 4,000-word vocabulary, "
          f"{sum(bool(p.anchors) for p in pages)} pages of links), CPU a page: "
          + ", ".join(f"{name} {ms:.3f} ms" for name, ms in best.items())
          + (" (indexed: the bare simhashes)" if simhash_only else ""))
    rng = random.Random(9)
    for web in ("small", "large"):
        idx = [i for i, p in enumerate(pages) if p.web == web]
        dists = sorted(hamming(prints[a].simhash, prints[b].simhash) for a, b in
                       (rng.sample(idx, 2) for _ in range(50_000)) if pages[a].group != pages[b].group)
        print(f"  unrelated pages, {web} vocabulary: mean {sum(dists) / len(dists):.1f} bits apart, "
              f"0.1 % quantile {dists[len(dists) // 1000]}, min {dists[0]}")
    kept = [i for i, p in enumerate(prints) if p.features >= min_words]
    queries: list[int | NearPrint] = [p.simhash if simhash_only else p for p in prints]
    with tempfile.TemporaryDirectory() as tmp, EmbeddedRedis(Path(tmp), save="") as server:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        before = int(client.info("memory")["used_memory"])
        index = NearDupIndex(client, "bench", max_distance=NEAR_BITS)
        flagged: list[tuple[int, int]] = []
        for start in range(0, len(kept), 50):
            batch = kept[start:start + 50]
            items = [(f"http://h/{i}", queries[i]) for i in batch]
            for i, match in zip(batch, index.check_and_add(items), strict=True):
                if match:
                    flagged.append((i, int(match.rsplit("/", 1)[1])))
        per_page = (int(client.info("memory")["used_memory"]) - before) / len(kept)
        stats = index.stats()
    true = sum(pages[i].group == pages[j].group for i, j in flagged)
    seen: set[int] = set()
    dups = 0    # pages with a member of their group before them: what a perfect crawl leaves out
    for i in kept:
        dups += pages[i].group in seen
        seen.add(pages[i].group)
    print(f"  left out of the feed as near-duplicates: {len(flagged)}, true near-duplicates {true} "
          f"(precision {true / max(len(flagged), 1):.4f}); recall {true / max(dups, 1):.4f} of {dups} "
          f"(pages with fewer than {min_words} features are not indexed: {n - len(kept)})")
    flagged_pages = {i for i, _ in flagged}
    members: dict[int, list[int]] = {}
    for i in kept:
        members.setdefault(pages[i].group, []).append(i)
    multi = [g for g in members.values() if len(g) > 1]
    whole = sum(all(i in flagged_pages for i in g[1:]) for g in multi)
    print(f"  near-duplicate groups flagged whole (every copy after the first): {whole} of {len(multi)} "
          f"({whole / max(len(multi), 1):.3f})")
    by_web = {web: [pages[i].group == pages[j].group for i, j in flagged if pages[i].web == web]
              for web in ("small", "large")}
    for web, marks in by_web.items():
        print(f"    {web} vocabulary: {len(marks)} left out, {sum(marks)} true")
    pairs = near_pairs([(i, queries[i]) for i in kept])
    true_pairs = sum(pages[i].group == pages[j].group for i, j in pairs)
    groups: dict[int, int] = {}
    for i in kept:
        groups[pages[i].group] = groups.get(pages[i].group, 0) + 1
    all_true = sum(k * (k - 1) // 2 for k in groups.values())
    print(f"  pairs the index finds ({rule(simhash_only)}): {len(pairs)}, true {true_pairs} (precision {true_pairs / max(len(pairs), 1):.4f}); "
          f"recall {true_pairs / max(all_true, 1):.4f} of {all_true} true pairs")
    print(f"  redis: {per_page:.0f} bytes a page indexed ({stats['full']} adds to full buckets); "
          f"{stats['probes'] / stats['pages']:.1f} buckets read and {stats['compared'] / stats['pages']:.2f} candidates "
          f"compared a page, {stats['confirmed']} matches beyond {NEAR_BITS} bits on their checks; "
          f"{time.perf_counter() - t0:.0f} s")


def rule(simhash_only: bool) -> str:
    """The index's rule in words, for bare simhashes or NearPrints."""
    if simhash_only:
        return f"within {NEAR_BITS} bits, own blocks probed"
    return (f"within {NEAR_BITS} bits, or {WIDE_DISTANCE} with checks within {CHECK_BITS}; "
            f"own blocks and {FRAGILE_BITS} fragile bits flipped probed")


def near_pairs(items: list[tuple[int, int | NearPrint]]) -> set[tuple[int, int]]:
    """Every pair (a < b) of (key, fingerprint) items, in crawl order, that ``NearDupIndex``
    would match when checking the later one: it shares a block with the earlier one,
    exactly or with one of its fragile bits flipped, and is within NEAR_BITS, or within
    WIDE_DISTANCE with checks within CHECK_BITS when both are NearPrints."""
    tables: list[dict[int, list[tuple[int, int | NearPrint]]]] = [{} for _ in range(BLOCKS)]
    pairs: set[tuple[int, int]] = set()
    for key, item in items:
        h, fragile = (item.simhash, item.fragile) if isinstance(item, NearPrint) else (item, 0)
        for b in range(BLOCKS):
            shift = BLOCK_BITS * (BLOCKS - 1 - b)
            value = h >> shift & 0xFFFF
            for v in [value] + [value ^ 1 << j for j in range(BLOCK_BITS) if fragile >> shift + j & 1]:
                for other, earlier in tables[b].get(v, ()):
                    if other != key and _matches(item, earlier):
                        pairs.add((min(key, other), max(key, other)))
        for b in range(BLOCKS):
            tables[b].setdefault(h >> BLOCK_BITS * (BLOCKS - 1 - b) & 0xFFFF, []).append((key, item))
    return pairs


def _matches(a: int | NearPrint, b: int | NearPrint) -> bool:
    if isinstance(a, NearPrint) and isinstance(b, NearPrint):
        d = hamming(a.simhash, b.simhash)
        return d <= NEAR_BITS or d <= WIDE_DISTANCE and hamming(a.check, b.check) <= CHECK_BITS
    return hamming(a.simhash if isinstance(a, NearPrint) else a, b.simhash if isinstance(b, NearPrint) else b) <= NEAR_BITS


def analysed_print(a: Any, max_chars: int, simhash_only: bool) -> int | NearPrint:
    """The fingerprint the index gets for an analysed page (``parse.page.Analysis``), as
    the parse stage makes it: its collapsed text, its links' anchor text, its title."""
    if simhash_only:
        return int(a.simhash)
    text = collapse_words_utf8(a.text.text)[0]
    return page_print(text, [link.text for link in a.parsed.links], a.text.title or a.parsed.title, max_chars)


def bench_real(names: list[str], max_chars: int = 12_000, min_words: int = 50, simhash_only: bool = False) -> None:
    """Pairs of the real corpus the index matches whose texts differ (no exact duplicate)."""
    from crawler_tasks.parse.page import analyse
    from crawler_tasks.settings import Settings
    from tests import realpages

    s = Settings()
    items: list[tuple[int, int | NearPrint]] = []
    urls: list[str] = []
    prints: list[str] = []
    link_pages = named = 0
    t0 = time.process_time()
    for name in names:
        for path in realpages.corpus(name):
            url = f"http://{name}.test/{path.name}"
            a = analyse(path.read_bytes(), url, {"content_type": "text/html"}, s.TEXT_MODE, s.MAX_TEXT_CHARS,
                        max_chars, sketch=True)
            anchors = sum(len(link.text) for link in a.parsed.links)
            is_links = bool(a.text.text) and anchors >= LINK_PAGE_SHARE * len(a.text.text)
            link_pages += is_links
            named += not is_links and any(k in path.name for k in ("index", "contents", "toc", "archive"))
            if a.simhash_words >= min_words:
                items.append((len(urls), analysed_print(a, max_chars, simhash_only)))
                urls.append(url)
                prints.append(a.fingerprint)
    pairs = sorted(near_pairs(items))
    simhashes = [item.simhash if isinstance(item, NearPrint) else item for _, item in items]
    distinct = [(i, j) for i, j in pairs if prints[i] != prints[j]]
    print(f"real corpus ({', '.join(names)}): {len(urls)} pages with a simhash "
          f"({(time.process_time() - t0) / max(len(urls), 1) * 1e3:.1f} ms a page to analyse), "
          f"{link_pages} pages of links (index, TOC, archive: anchor text >= {LINK_PAGE_SHARE:g} x the main text) and "
          f"{named} more named index/contents/toc/archive; pairs found ({rule(simhash_only)}): {len(pairs)}, "
          f"{len(pairs) - len(distinct)} of them exact copies (duplicate_of), {len(distinct)} of distinct texts")
    for i, j in distinct:
        print(f"  {hamming(simhashes[i], simhashes[j])} bits: {urls[i]} {urls[j]}")
    copies_of_real_pages(names, s, max_chars, min_words, simhash_only)


_BODY = re.compile(rb"<body[^>]*>(.*)</body>", re.S | re.I)
_TITLE = re.compile(rb"<title[^>]*>(.*?)</title>", re.S | re.I)


def _copies(html: bytes) -> Iterator[tuple[str, bytes]]:
    """A real page's near-duplicates as the web makes them: a mirror in another template,
    a print version (no chrome, "(print)" title), a repost (a line before, a comment count
    after), a copy with a "last updated" line."""
    found = _BODY.search(html)
    body = found.group(1) if found else html
    title = (found.group(1) if (found := _TITLE.search(html)) else b"")
    nav = b"<nav><ul>" + b"".join(b'<li><a href="/s%d">Section %d</a></li>' % (i, i) for i in range(12)) + b"</ul></nav>"
    foot = b"<footer><p>Copyright 2026 Example Mirror Inc. All rights reserved. Contact us.</p></footer>"
    head = b"<html><head><title>" + title
    yield "mirror", head + b" - Mirror</title></head><body>" + nav + b"<main>" + body + b"</main>" + foot + b"</body></html>"
    yield "print", head + b" (print)</title></head><body>" + body + b"</body></html>"
    yield "repost", (head + b"</title></head><body><p>Reposted from the original site with permission of the "
                     b"authors, thanks.</p>" + body + b"<p>3 comments so far. Leave a reply below.</p></body></html>")
    yield "dated", head + b"</title></head><body><p>Last updated on 2026-12-07 at 10:42.</p>" + body + b"</body></html>"


def copies_of_real_pages(names: list[str], s: Any, max_chars: int, min_words: int, simhash_only: bool,
                         per_part: int = 12) -> None:
    """Recall on near-duplicates of real pages: how many copies (``_copies``) of a sample
    of the corpus's pages the index matches with their page."""
    from crawler_tasks.parse.page import analyse
    from tests import realpages

    rng, found, total = random.Random(5), Counter[str](), Counter[str]()
    options = {"content_type": "text/html"}
    for name in names:
        paths = realpages.corpus(name)
        for path in rng.sample(paths, min(per_part, len(paths))):
            html = path.read_bytes()
            page = analyse(html, "http://a.test/p", options, s.TEXT_MODE, s.MAX_TEXT_CHARS, max_chars)
            if page.simhash_words < min_words:
                continue
            for kind, copy in _copies(html):
                other = analyse(copy, "http://b.test/p", options, s.TEXT_MODE, s.MAX_TEXT_CHARS, max_chars)
                total[kind] += 1
                found[kind] += other.simhash_words >= min_words and bool(near_pairs(
                    [(0, analysed_print(page, max_chars, simhash_only)), (1, analysed_print(other, max_chars, simhash_only))]))
    print("copies of real pages the index finds: " + ", ".join(f"{k} {found[k]}/{total[k]}" for k in total)
          + f"; all {sum(found.values())}/{sum(total.values())}")


def per_item_us(fn: Callable[[object], object], items: Sequence[object]) -> float:
    t0 = time.process_time()
    for item in items:
        fn(item)
    return (time.process_time() - t0) / len(items) * 1e6


def bench_index(n_pages: int, indexed: int, rounds: int, bare: bool) -> float:
    """Wall time a page of ``check_and_add`` (Lua included) against ``indexed`` pages, with
    random NearPrints (FRAGILE_BITS flipped probes; ``bare``: random simhashes)."""
    import redis

    from crawler_tasks.dedup.nearindex import NearDupIndex
    from crawler_tasks.ops.embedded import EmbeddedRedis

    rng = random.Random(2)
    with tempfile.TemporaryDirectory() as tmp, EmbeddedRedis(Path(tmp), save="") as server:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        index = NearDupIndex(client, "bench")

        def item() -> int | NearPrint:
            if bare:
                return rng.getrandbits(64)
            fragile = sum(1 << j for j in rng.sample(range(64), FRAGILE_BITS))
            return NearPrint(rng.getrandbits(64), 100, rng.getrandbits(64), fragile)

        for start in range(0, indexed, 1000):
            index.check_and_add([(f"http://h/{i}", item()) for i in range(start, min(start + 1000, indexed))])
        best = float("inf")
        for r in range(rounds):
            batches = [[(f"http://q/{r}/{b}/{i}", item()) for i in range(50)]
                       for b in range(max(1, n_pages // 50))]
            t0 = time.perf_counter()  # wall: includes the Lua time in redis-server
            for batch in batches:
                index.check_and_add(batch)
            best = min(best, (time.perf_counter() - t0) / (50 * len(batches)) * 1e6)
        stats = index.stats()
        print(f"  index ({'bare simhashes' if bare else 'NearPrints'}): {stats['entries']} entries, "
              f"{stats['probes'] / max(stats['pages'], 1):.1f} buckets read and "
              f"{stats['compared'] / max(stats['pages'], 1):.2f} candidates compared per page")
        return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", type=int, default=40)
    ap.add_argument("--words", type=int, default=9000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--indexed", type=int, default=100_000)
    ap.add_argument("--no-redis", action="store_true")
    ap.add_argument("--scale", type=int, default=0, help="pages of the precision/recall run (0: none)")
    ap.add_argument("--real", nargs="*", help="real corpus parts (tests/realpages.py; none named: all)")
    ap.add_argument("--simhash-only", action="store_true",
                    help="index bare simhashes (a parse stage that does not hand on NearPrints)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: a few seconds")
    args = ap.parse_args(argv)
    if args.smoke:
        args.pages, args.rounds, args.indexed, args.scale, args.real = 10, 2, 2_000, 2_000, ["vendored"]
    if args.scale:
        bench_scale(args.scale, simhash_only=args.simhash_only)
    if args.real is not None:
        from tests import realpages
        bench_real(args.real or [*realpages.PACKAGE_NAMES, "vendored"], simhash_only=args.simhash_only)

    pages = make_pages(args.pages, args.words)
    parsed = [parse_html(p, "http://bench.test/") for p in pages]
    texts = [page.text for page in parsed]
    heads = [(page.text, [link.text for link in page.links], page.title) for page in parsed]
    print(f"{len(pages)} pages, mean {sum(map(len, pages)) / len(pages) / 1024:.1f} KiB HTML, "
          f"{sum(map(len, texts)) / len(texts) / 1024:.1f} KiB text, "
          f"{sum(len(t.split()) for t in texts) / len(texts):.0f} words")
    stages: list[tuple[str, Callable[[object], object], Sequence[object]]] = [
        ("parse_html", lambda p: parse_html(p, "http://bench.test/"), pages),  # type: ignore[arg-type]
        ("exact fingerprint", fingerprint_collapsed, texts),  # type: ignore[list-item]
        ("tokenize floor", lambda t: set(t.lower().encode().split()), texts),  # type: ignore[attr-defined]
        ("simhash64", simhash64, texts),  # type: ignore[list-item]
        ("page_simhash", lambda h: page_simhash(h[0], h[1], h[2], 12_000), heads),  # type: ignore[index]
        ("page_print", lambda h: page_print(h[0], h[1], h[2], 12_000), heads),  # type: ignore[index]
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
        for bare in (False, True):
            us = bench_index(args.pages * 5, args.indexed, args.rounds, bare)
            print(f"  {'nearindex':18s} {us:8.0f} us/page   (wall, batches of 50, "
                  f"{args.indexed} pages indexed, {'bare simhashes' if bare else 'NearPrints'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
