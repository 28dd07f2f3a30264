"""Trap rules on a real site nobody here wrote: Django's release notes (Debian's
python-django-doc, which .ci/run installs), numbered pages linking previous and next
(``/releases/3.1.9.html`` -> ``3.1.10``), 270 of them. The numeric-walk rule of old
declared their shape a trap after 25 and dropped the rest; every one must be fetched
and none dropped by a learned rule."""
from __future__ import annotations

import dataclasses
import functools
import re
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from .test_pipeline import crawl_inline

DJANGO = Path("/usr/share/doc/python-django-doc/html")
RELEASES = DJANGO / "releases"
LINK = re.compile(rb'href="([^"#?]+\.html)')


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def linked_releases() -> set[str]:
    """Release pages reachable from the index within /releases/, by the files' own links."""
    seen, todo = {"/releases/index.html"}, ["index.html"]
    while todo:
        for href in LINK.findall((RELEASES / todo.pop()).read_bytes()):
            name = href.decode()
            if "/" not in name and f"/releases/{name}" not in seen and (RELEASES / name).is_file():
                seen.add(f"/releases/{name}")
                todo.append(name)
    return seen


@pytest.mark.skipif(not (RELEASES / "index.html").is_file(), reason="python-django-doc is not installed")
def test_django_release_notes_are_crawled_whole(settings):
    pages = linked_releases()
    assert len(pages) > 250
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(DJANGO)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        s = dataclasses.replace(settings, MIN_DELAY_S=0.0, DELAY_FACTOR=0.0, INCLUDE_PATTERNS=(r"/releases/",),
                                SOFT404_PROBE=False, PROBE_SITEMAP_XML=False)
        recs = crawl_inline(s, [f"{base}/releases/index.html"], seconds=240)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    fetched = {r["url"].removeprefix(base) for r in recs if r.get("status") == 200}
    dropped = [r for r in recs if r.get("error_kind") == "filtered"]
    indexable = {r["url"].removeprefix(base) for r in recs if r.get("indexable")}
    near = {r["url"].removeprefix(base) for r in recs if r.get("near_duplicate_of") or r.get("duplicate_of")}
    print(f"\nDjango release notes: {len(pages)} linked, {len(pages & fetched)} fetched, {len(indexable)} in the "
          f"feed, {len(near)} (near-)duplicates, {len(dropped)} dropped by learned rules")
    assert not dropped, dropped[:3]
    assert pages <= fetched, sorted(pages - fetched)[:10]
    assert pages <= indexable | near, sorted(pages - indexable - near)[:10]
