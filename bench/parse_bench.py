#!/usr/bin/env python3
"""Parse + link cost per page on real HTML, and the parse budget on hostile input.

Reads every ``*.html`` under ``--dir`` (default: Debian's python3-doc HTML,
``apt-get install -y python3-doc``) into memory, then times what the parse stage
does with a page: ``parse_html`` plus, with ``--renormalize``, one more
``normalize_url`` per link (the stage's second pass before links came out of
``parse_html`` normalized). Figures are CPU ms per page, best of ``--rounds``
passes over all pages (the machine is shared; the best pass is the least
disturbed one).

``--analyse`` times the whole of what the parse sandbox runs per page instead
(``parse.page.analyse`` with the default settings: links, main text, language,
fingerprint, simhash), and prints the share of its main steps. ``--testweb``
reads the pages of the loopback bench's synthetic web (testweb, 60 kB on average,
rendered without a server) instead of ``--dir``.

``--bombs`` also times each hostile document of tests/test_parse_budget.py once
and prints the cap that bit.

``--smoke``: 20 of the synthetic pages (``--testweb``), 2 rounds (seconds).

    python bench/parse_bench.py [--dir DIR | --testweb] [--rounds 5] [--analyse] [--renormalize] [--bombs] [--smoke]
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import crawler_tasks.parse.page as page  # noqa: E402
import crawler_tasks.parse.text as text  # noqa: E402
from crawler_tasks.parse.html import parse_html  # noqa: E402
from crawler_tasks.settings import Settings  # noqa: E402
from crawler_tasks.urls import normalize_url  # noqa: E402
from testweb.pages import Pages  # noqa: E402

CAPS: dict[str, int] = {}


def load(directory: Path, limit: int) -> list[tuple[str, bytes]]:
    files = sorted(directory.rglob("*.html"))[:limit]
    return [(f"https://docs.example.org/{p.relative_to(directory)}", p.read_bytes()) for p in files]


def testweb_pages(limit: int) -> list[tuple[str, bytes]]:
    """The pages of bench/vs_scrapy.py's loopback web (4 x 50 of them here), as its server renders them."""
    web = Pages(0, [50] * 4, mean_bytes=60_000, sigma=0.6, max_bytes=400_000, links_per_page=8,
                cross_host_ratio=0.2)
    hosts = [f"127.0.0.{2 + h}:8000" for h in range(4)]
    return [(f"http://{hosts[h]}/p/{k}", web.render(h, k, hosts, [])) for h in range(4) for k in range(50)][:limit]


def analyse_args() -> tuple[Any, ...]:
    """analyse()'s arguments after the body and URL, as the parse stage passes them by default
    on its first try (no parse budget: a page past the short deadline is redone with it)."""
    s = Settings()
    options = {"content_type": "text/html", "headers": {"content-type": "text/html"}, "agent": "bench",
               "max_text_chars": s.MAX_TEXT_CHARS, "drop_params": None, "max_elements": s.PARSE_MAX_ELEMENTS,
               "max_depth": s.PARSE_MAX_DEPTH, "max_attrs": s.PARSE_MAX_ATTRS}
    return options, s.TEXT_MODE, s.MAX_TEXT_CHARS, s.SIMHASH_MAX_CHARS, bool(s.TRAP_SHAPE_MIN_PAGES), False


def analyse_pass(pages: list[tuple[str, bytes]]) -> float:
    args = analyse_args()
    start = time.process_time()
    for url, body in pages:
        page.analyse(body, url, *args)
    return time.process_time() - start


STEPS = ((page, "parse_html"), (text, "_parse"), (text, "_main_text"), (text, "_drop_furniture"),
         (text, "trim_boilerplate"),
         (text, "_drop_link_dense"), (text, "_link_texts"), (page, "collapse_words_utf8"),
         (page, "fingerprint_collapsed"), (page, "page_print"))


def analyse_steps(pages: list[tuple[str, bytes]]) -> Counter[str]:
    """CPU seconds in each of ``STEPS`` over one pass (wrapped for the pass, then restored)."""
    spent: Counter[str] = Counter()

    def timed(name: str, f: Callable[..., Any]) -> Callable[..., Any]:
        def run(*a: Any, **k: Any) -> Any:
            start = time.process_time()
            try:
                return f(*a, **k)
            finally:
                spent[name] += time.process_time() - start
        return run

    saved = [(module, name, getattr(module, name)) for module, name in STEPS]
    try:
        for module, name, f in saved:
            setattr(module, name, timed(name, f))
        analyse_pass(pages)
    finally:
        for module, name, f in saved:
            setattr(module, name, f)
    return spent


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
    ap.add_argument("--analyse", action="store_true", help="time parse.page.analyse (the parse sandbox's work)")
    ap.add_argument("--testweb", action="store_true", help="the loopback bench's synthetic pages, not --dir")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, --testweb: a few seconds")
    args = ap.parse_args()
    if args.smoke:
        args.testweb, args.limit, args.rounds = True, 20, 2
    if args.no_budget:
        CAPS.update(max_elements=0, max_depth=0, max_attrs=0)
    pages = testweb_pages(args.limit) if args.testweb else load(args.dir, args.limit)
    if not pages:
        sys.exit(f"no .html files under {args.dir} (apt-get install -y python3-doc)")
    size = sum(len(b) for _, b in pages)
    if args.analyse:
        best = min(analyse_pass(pages) for _ in range(args.rounds))
        print(f"{len(pages)} pages, {size / len(pages) / 1024:.0f} KB per page on average")
        print(f"analyse: {best * 1000 / len(pages):.3f} ms/page ({len(pages) / best:.0f} pages/s, one core, "
              f"best of {args.rounds})")
        for name, cpu in analyse_steps(pages).most_common():
            print(f"  {name:24s} {cpu * 1000 / len(pages):.3f} ms/page")
        return
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
