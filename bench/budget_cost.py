#!/usr/bin/env python3
"""The parse budget's cost: on the pinned real-page corpus, and on the bombs, as the parse
stage meets them.

Real pages (``tests/realpages.py``; missing packages are left out): CPU ms per page of the
budget's pass forced on the page (best of 3), and of lexbor's parse of it as it is
(``parse_html`` with every cap off), worst and median per part. The crawl runs the pass on
no real page (each is parsed as it is under ``UNBUDGETED_PARSE_S`` first); the second column
says how far below that deadline the real pages are.

Bombs: wall ms in a real parse sandbox through the stage's ``_sandboxed`` (first try as it
is, retry with the budget when late), the same with the budget first (the design before:
the pass ran first on big, tag-dense or giant-tag pages), the pass alone, and lexbor alone
in the sandbox (stopped at ``--lexbor-deadline``).

``--smoke``: 3 pages of each part, two bombs (``SMOKE_BOMBS``: one parsed as it is, one
retried with the budget), lexbor stopped at 2 s (seconds).

    python bench/budget_cost.py [--lexbor-deadline 10] [--no-bombs] [--smoke]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pytest  # noqa: E402

from crawler_tasks.parse.budget import apply_budget  # noqa: E402
from crawler_tasks.parse.html import parse_html  # noqa: E402
from crawler_tasks.parse.sandbox import ParseFailed, ParseSandbox  # noqa: E402
from crawler_tasks.stages import parse as stage  # noqa: E402
from tests import realpages  # noqa: E402

MIB = 1 << 20
NO_CAPS = {"max_elements": 0, "max_depth": 0, "max_attrs": 0}
BOMBS = {
    "comment-lt-slash": b"<!--" + b"</" * (MIB // 8) + b"-->" + b"<div>" * 50_000 + b'<a href="/end">e</a>',
    "stray-end-tags": b"<div></zzz>" * 50_000 + b'<a href="/end">e</a>',
    "40k-attributes": b"<div " + b" ".join(b"a%d=%d" % (i, i) for i in range(40_000)) + b' href=x>x</div>',
    "1mib-divs": b"<div>" * (MIB // 5),
    "formatting-reconstruction": b"".join(b"<div><b id=%d></div>" % i for i in range(400)) + b"<p>x</p>" * 50_000,
    "end-tags-past-505-pending": b"<div>" + b"".join(b"<i id=%d>" % i for i in range(505)) + b"</div>"
                                 + b"</b>" * (MIB // 4),
    "16-multi-word-attributes": (b"<p " + b" ".join(b'a%d="x y z"' % i for i in range(16)) + b">x</p>") * 2000,
    "8-mib-of-links": b"".join(b'<a href="/l%d">l</a>' % i for i in range(8 * MIB // 24)),
}
SMOKE_BOMBS = ("16-multi-word-attributes", "stray-end-tags")


def cpu_ms(fn, reps: int = 3) -> float:
    best = float("inf")
    for _ in range(reps):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best * 1000


def real_pages(per_part: int = 0) -> None:
    """``per_part``: the first pages of each part only (0: all)."""
    print(f"{'part':18s} {'pages':>5s}  pass worst / median ms   lexbor as is worst / median ms   worst page")
    worst_all: tuple[float, str] = (0.0, "")
    for part in realpages.PARTS:
        try:
            pages = realpages.corpus(part)[:per_part or None]
        except pytest.skip.Exception as exc:
            print(f"{part:18s} skipped: {exc}")
            continue
        passes, parses = [], []
        worst: tuple[float, str] = (0.0, "")
        for path in pages:
            body = path.read_bytes()
            ms = cpu_ms(lambda body=body: apply_budget(body))
            passes.append(ms)
            parses.append(cpu_ms(lambda body=body: parse_html(body, "https://docs.example/", **NO_CAPS), reps=1))
            worst = max(worst, (ms, path.name))
        worst_all = max(worst_all, (worst[0], f"{part}/{worst[1]}"))
        print(f"{part:18s} {len(pages):5d}  {max(passes):10.1f} / {statistics.median(passes):6.2f}"
              f"        {max(parses):10.1f} / {statistics.median(parses):6.2f}          {worst[1]}")
    print(f"pass forced, worst page: {worst_all[0]:.1f} ms ({worst_all[1]}); in a crawl: 0 ms on every page "
          f"parsed within {stage.UNBUDGETED_PARSE_S:g} s as it is")


def bombs(lexbor_deadline: float, names: tuple[str, ...] = tuple(BOMBS)) -> None:
    print(f"\n{'bomb':28s} {'MiB':>5s}  stage ms (retry, caps)              budget first ms  pass alone ms"
          "   lexbor alone")
    box = ParseSandbox(timeout_s=20.0, memory_mb=2048)
    args = ({}, "main", 100_000, 0)
    try:
        for name in names:
            body = BOMBS[name]
            counted: dict[str, int] = {}
            start = time.monotonic()
            result = stage._sandboxed(box, body, "https://bomb.example/", args, counted.update)
            stage_ms = (time.monotonic() - start) * 1000
            start = time.monotonic()
            box.analyse(body, "https://bomb.example/", *args, budget=True)
            first_ms = (time.monotonic() - start) * 1000
            alone = cpu_ms(lambda body=body: apply_budget(body), reps=1)
            start = time.monotonic()
            try:
                box.analyse(body, "https://bomb.example/", *args, budget=False, timeout_s=lexbor_deadline)
                lexbor = f"{(time.monotonic() - start) * 1000:.0f} ms"
            except ParseFailed:
                lexbor = f"> {lexbor_deadline:g} s (stopped)"
            retry = "retry" if counted else "as is"
            print(f"{name:28s} {len(body) / MIB:5.1f}  {stage_ms:8.0f} ({retry}, {result.parsed.limited})"
                  f"{'':{max(0, 24 - len(str(result.parsed.limited)))}s}{first_ms:8.0f}        {alone:8.0f}        {lexbor}",
                  flush=True)
    finally:
        box.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lexbor-deadline", type=float, default=10.0)
    ap.add_argument("--no-bombs", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: a few seconds")
    opts = ap.parse_args()
    real_pages(3 if opts.smoke else 0)
    if not opts.no_bombs:
        bombs(2.0 if opts.smoke else opts.lexbor_deadline, SMOKE_BOMBS if opts.smoke else tuple(BOMBS))


if __name__ == "__main__":
    main()
