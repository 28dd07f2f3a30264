#!/usr/bin/env python3
"""Real documentation sites crawled to exhaustion: does any defence cost a real page?

Each folder (e.g. the HTML manuals Debian ships: python-django-doc, git-doc,
postgresql-doc-15, python3-doc, sphinx-doc) is served as its own 127.0.0.x host by
nginx (``vs_scrapy.DocsWeb``) and crawled with ``manage.py crawl`` at a small delay
until the frontier drains. The reachable pages are counted independently of the
crawler: a breadth-first walk over the files from ``index.html``, links read with the
standard library's HTML parser, kept when they name an HTML file of the folder. Per
site it prints the reachable pages, those fetched (200), those in the feed, those
left out of the feed as duplicates (exact or near: "duplicates aside"), those a
learned rule dropped (trap shape or URL rule: records with ``error_kind`` filtered),
and lists every reachable page missing from the feed with what its record says.

    python bench/real_sites.py [--delay 0.02] [--keep] DIR [DIR ...]
    python bench/real_sites.py --smoke

``--smoke`` crawls one tiny site instead: the vendored real pages of tests/realpages.py
(in the repository, so no package is needed) behind an index page (seconds).
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from collections import Counter, deque
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from vs_scrapy import USER_AGENT, DocsWeb, clean_env  # noqa: E402

from tests import realpages  # noqa: E402

HTML_SUFFIXES = (".html", ".htm")


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.hrefs: list[str] = []
        self.base: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "base" and a.get("href") and self.base is None:
            self.base = a["href"]
        if tag in ("a", "area") and a.get("href") and "nofollow" not in (a.get("rel") or "").lower().split():
            self.hrefs.append(a["href"] or "")


def reachable(folder: Path) -> set[str]:
    """Paths (``/a/b.html``) of the HTML files reachable from ``/index.html``; a
    directory link counts as its index.html, as nginx serves it."""
    root = folder.resolve()
    seen = {"/index.html"}
    todo = deque(["/index.html"])
    while todo:
        path = todo.popleft()
        parser = _Links()
        try:
            parser.feed((root / path.lstrip("/")).read_bytes().decode("utf-8", "replace"))
        except (OSError, AssertionError):
            continue
        base = urljoin("http://h" + path, parser.base) if parser.base else "http://h" + path
        for href in parser.hrefs:
            parts = urlsplit(urljoin(base, href.strip()))
            if parts.scheme != "http" or parts.netloc != "h":
                continue
            target = unquote(parts.path) or "/"
            if target.endswith("/"):
                target += "index.html"
            if not target.endswith(HTML_SUFFIXES) or target in seen:
                continue
            if (root / target.lstrip("/")).is_file():
                seen.add(target)
                todo.append(target)
    return seen


def smoke_site(folder: Path) -> Path:
    """A folder of the vendored real pages and an index.html that links each one."""
    folder.mkdir(parents=True)
    links = []
    for page in realpages.vendored_pages():
        shutil.copyfile(page, folder / page.name)
        links.append(f'<li><a href="{page.name}">{page.stem}</a></li>')
    (folder / "index.html").write_text(f"<html><head><title>Vendored pages</title></head><body><h1>Vendored "
                                       f"real pages</h1><ul>{''.join(links)}</ul></body></html>")
    return folder


def crawl(seeds: list[str], out: Path, delay: float, extra: list[str]) -> None:
    cmd = [sys.executable, str(ROOT / "manage.py"), "crawl", *seeds, "--allow-private", "--min-delay", str(delay),
           "--max-pages", "100000", "--out", str(out), "--user-agent", USER_AGENT, "--workers", "1",
           "--parsers", "1", "--shards", "2"]
    env = clean_env()
    # only the sites' own hosts: their links to the web are not followed (no lookups)
    env["CRAWLER_ALLOWED_DOMAINS"] = ",".join(urlsplit(seed).hostname or "" for seed in seeds)
    env.update({"CRAWLER_" + k: v for k, v in (item.split("=", 1) for item in extra)})
    with open(out.parent / "crawl.log", "wb") as log:
        rc = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT).returncode
    if rc != 0:
        raise SystemExit(f"manage.py crawl exited {rc}: see {out.parent / 'crawl.log'}")


def _path(url: str) -> str:
    path = unquote(urlsplit(url).path) or "/"
    return path + "index.html" if path.endswith("/") else path


def report(dirs: list[Path], seeds: list[str], out: Path) -> int:
    records: dict[str, list[dict[str, Any]]] = {}
    with open(out / "pages.jsonl") as f:
        for line in f:
            rec = json.loads(line)
            records.setdefault(rec["url"], []).append(rec)
    feed: set[str] = set()
    with open(out / "feed.jsonl") as f:
        for line in f:
            feed.add(json.loads(line)["url"])
    lost_total = 0
    for folder, seed in zip(dirs, seeds, strict=True):
        host = urlsplit(seed).netloc
        pages = reachable(folder)
        mine = {u: recs for u, recs in records.items() if urlsplit(u).netloc == host}
        by_path: dict[str, list[dict[str, Any]]] = {}
        for url, recs in mine.items():
            by_path.setdefault(_path(url), []).extend(recs)
        fetched = {p for p in pages if any(r.get("status") == 200 for r in by_path.get(p, []))}
        in_feed = {p for p in pages if any(_path(u) == p for u in feed if urlsplit(u).netloc == host)}
        dups = {p for p in pages - in_feed
                if any(r.get("duplicate_of") or r.get("near_duplicate_of") for r in by_path.get(p, []))}
        dropped = [r for recs in mine.values() for r in recs if r.get("error_kind") == "filtered"]
        dropped_real = {p for p in pages if any(r.get("error_kind") == "filtered" for r in by_path.get(p, []))}
        why: Counter[str] = Counter()
        missing = sorted(pages - in_feed - dups)
        for p in missing:
            recs = by_path.get(p, [])
            why[("no record" if not recs else
                 recs[-1].get("error_kind") or f"status {recs[-1].get('status')}"
                 + (", noindex" if recs[-1].get("noindex") else "")
                 + (", soft 404" if recs[-1].get("soft_404") else ""))] += 1
        lost_total += len(missing)
        n = max(1, len(pages))
        print(f"{folder}: reachable {len(pages)}, fetched {len(fetched)} ({len(fetched) / n:.4f}), "
              f"in feed {len(in_feed)} ({len(in_feed) / n:.4f}), duplicates aside {len(dups)}, "
              f"in feed or duplicates {(len(in_feed) + len(dups)) / n:.4f}; "
              f"dropped by learned rules: {len(dropped)} URLs, {len(dropped_real)} of them reachable pages")
        for r in dropped[:5]:
            print(f"    dropped {r['url']}: {r.get('error')}")
        if missing:
            print(f"    not in the feed: {dict(why)}")
            for p in missing[:15]:
                last = by_path.get(p, [{}])[-1]
                print(f"      {p}: {json.dumps({k: last.get(k) for k in ('status', 'error_kind', 'error', 'indexable', 'noindex', 'text_chars') if last.get(k) is not None})}")
    return lost_total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="*", type=Path)
    ap.add_argument("--delay", type=float, default=0.02, help="per-host delay, s")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a CRAWLER_ setting")
    ap.add_argument("--keep", action="store_true", help="keep the crawl's output folder")
    ap.add_argument("--smoke", action="store_true", help="one tiny site of the vendored real pages: seconds")
    args = ap.parse_args()
    if not args.dirs and not args.smoke:
        ap.error("name DIR ... or --smoke")
    tmp = Path(tempfile.mkdtemp(prefix="real-sites-"))
    try:
        dirs = [smoke_site(tmp / "site")] if args.smoke else [d.resolve() for d in args.dirs]
        with DocsWeb(dirs) as web:
            crawl(web.seeds, tmp / "out", args.delay, args.set)
            lost = report(dirs, web.seeds, tmp / "out")
    finally:
        if args.keep:
            print(f"output kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0 if lost == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
