#!/usr/bin/env python3
"""Parse + link cost per page on real HTML, and the parse budget on hostile input.

Reads every ``*.html`` under ``--dir`` (default: Debian's python3-doc HTML,
``apt-get install -y python3-doc``) into memory, then times what the parse stage
does with a page: ``parse_html`` plus, with ``--renormalize``, one more
``normalize_url`` per link (the stage's second pass before links came out of
``parse_html`` normalized). Figures are CPU ms per page, best of ``--rounds``
passes over all pages (the machine is shared; the best pass is the least
disturbed one).

``--bombs`` also times each hostile document of tests/test_parse_budget.py once
and prints the cap that bit.

    python bench/parse_bench.py [--dir DIR] [--rounds 5] [--renormalize] [--bombs]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from crawler_tasks.parse.html import parse_html  # noqa: E402
from crawler_tasks.urls import normalize_url  # noqa: E402

CAPS: dict[str, int] = {}


def load(directory: Path, limit: int) -> list[tuple[str, bytes]]:
    files = sorted(directory.rglob("*.html"))[:limit]
    return [(f"https://docs.example.org/{p.relative_to(directory)}", p.read_bytes()) for p in files]


def one_pass(pages: list[tuple[str, bytes]], renormalize: bool) -> tuple[float, int]:
    n_links = 0
    start = time.process_time()
    for url, body in pages:
        parsed = parse_html(body, url, content_type="text/html", **CAPS)
        if renormalize:
            links = [u for u in (normalize_url(link.url) for link in parsed.links) if u]
        else:
            links = [link.url for link in parsed.links]
        n_links += len(links)
    return time.process_time() - start, n_links


def bombs() -> list[tuple[str, bytes]]:
    mib = 1 << 20
    return [
        ("comment trick, 1 MiB", b"<!--" + b"</" * (mib // 8) + b"-->" + b"<div>" * (mib // 8)),
        ("40k attributes", b"<div " + b" ".join(b"a%d=%d" % (i, i) for i in range(40_000)) + b">x</div>"),
        ("1 MiB nested divs", b"<div>" * (mib // 5) + b'<a href="/deep">deep</a>'),
        ("22 MB nested tags", b"<span><b><div>" * (22_000_000 // 14)),
        ("200k links", b"".join(b'<a href="/l%d">l</a>' % i for i in range(200_000))),
        ("8 MiB of <a><b>", b"<a><b>" * (8 * mib // 6)),
        ("8 MiB unclosed quotes", b'<a title="x>' * (8 * mib // 12)),
        ("8 MiB of text", b"word " * (8 * mib // 5)),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--dir", type=Path, default=Path("/usr/share/doc/python3.11/html"))
    ap.add_argument("--limit", type=int, default=600, help="at most this many pages")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--renormalize", action="store_true", help="normalize each link again, as the old stage did")
    ap.add_argument("--bombs", action="store_true", help="time the hostile documents too")
    ap.add_argument("--no-budget", action="store_true", help="parse without the parse budget (caps 0)")
    args = ap.parse_args()
    if args.no_budget:
        CAPS.update(max_elements=0, max_depth=0, max_attrs=0)
    pages = load(args.dir, args.limit)
    if not pages:
        sys.exit(f"no .html files under {args.dir} (apt-get install -y python3-doc)")
    size = sum(len(b) for _, b in pages)
    best = float("inf")
    n_links = 0
    for _ in range(args.rounds):
        cpu, n_links = one_pass(pages, args.renormalize)
        best = min(best, cpu)
    print(f"{len(pages)} pages, {size / len(pages) / 1024:.0f} KB and {n_links / len(pages):.0f} links "
          f"per page on average")
    print(f"parse + links: {best * 1000 / len(pages):.3f} ms/page "
          f"({len(pages) / best:.0f} pages/s, one core, best of {args.rounds})")
    if args.bombs:
        for name, body in bombs():
            start = time.process_time()
            parsed = parse_html(body, "https://bomb.example/")
            cpu = time.process_time() - start
            print(f"  {name:24s} {len(body) / (1 << 20):6.1f} MiB  {cpu * 1000:8.1f} ms  "
                  f"links={len(parsed.links):6d}  limited={getattr(parsed, 'limited', '?')}")


if __name__ == "__main__":
    main()
