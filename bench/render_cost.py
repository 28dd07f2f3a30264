"""Cost of one rendered page: wall time of Renderer.render and CPU summed over this
process, the Playwright driver and Chromium (browser, renderers), against the app-shell
and fetch()/XHR pages of tests/test_render.py served on loopback. Also: app-shell
detection cost per page on the installed Debian HTML docs.

    python bench/render_cost.py [--pages 20] [--smoke]

``--smoke``: 2 renders per page kind, detection on 50 pages (seconds). Without Chromium
only the detection runs (it says so)."""
from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from crawler_tasks.fetch.http import Fetcher  # noqa: E402
from crawler_tasks.render import chromium_path, needs_render  # noqa: E402
from crawler_tasks.settings import Settings  # noqa: E402
from tests.test_render import FETCH_UA, Recorder, _Server  # noqa: E402


def tree_cpu_s() -> float:
    total = 0.0
    for proc in [psutil.Process(), *psutil.Process().children(recursive=True)]:
        try:
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.NoSuchProcess:
            continue
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", type=int, default=20, help="renders per page kind")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: a few seconds")
    args = ap.parse_args()
    detect_pages = 50 if args.smoke else 2000
    if args.smoke:
        args.pages = 2
    files = [f for f in glob.glob("/usr/share/doc/**/*.html", recursive=True) if os.path.isfile(f)][:detect_pages]
    if files:
        blobs = [Path(f).read_bytes() for f in files]
        t = time.perf_counter()
        flagged = sum(needs_render(b) is not None for b in blobs)
        print(f"detect: {len(blobs)} static pages, {flagged} flagged, "
              f"{(time.perf_counter() - t) / len(blobs) * 1000:.2f} ms/page")
    path = chromium_path()
    if path is None:
        print("no chromium: render cost not measured")
        return
    from crawler_tasks.render.browser import Renderer

    server = _Server("127.0.0.9")
    fetcher = Fetcher(Settings(ALLOW_PRIVATE=True, USER_AGENT=FETCH_UA))
    renderer = Renderer(path)
    t = time.perf_counter()
    renderer.render(server.base + "/shell.html", Recorder(fetcher))
    print(f"first render (browser launch included): {(time.perf_counter() - t) * 1000:.0f} ms")
    for page in ("/shell.html", "/xhr.html"):
        walls = []
        cpu0 = tree_cpu_s()
        for _ in range(args.pages):
            document = fetcher.fetch(server.base + page)
            t = time.perf_counter()
            out = renderer.render(server.base + page, Recorder(fetcher), document=document)
            walls.append(time.perf_counter() - t)
            assert out.error is None, out.error
        cpu = (tree_cpu_s() - cpu0) / args.pages
        walls.sort()
        print(f"{page}: wall median {statistics.median(walls) * 1000:.0f} ms, "
              f"p90 {walls[int(len(walls) * 0.9) - 1] * 1000:.0f} ms, CPU {cpu * 1000:.0f} ms/page (all processes)")
    renderer.close()
    fetcher.close()
    server.srv.shutdown()


if __name__ == "__main__":
    main()
