"""The robots.txt cache and decision (RFC 9309 2.3.1 status semantics) against a real
HTTP server on loopback, with the crawl's store (the frontier in Redis) and a memory store."""
from __future__ import annotations

import dataclasses
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from crawler_tasks.fetch.http import Fetcher
from crawler_tasks.frontier import Frontier
from crawler_tasks.robots.cache import ALLOW, RULES, UNREACHABLE, Check, MemoryRobotsStore, RobotsCache


class _Robots(BaseHTTPRequestHandler):
    routes: dict[str, tuple[int, dict[str, str], bytes]] = {}
    hits: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.hits.append(self.path)
        status, headers, body = self.routes.get(self.path, (404, {}, b"not found"))
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server():
    _Robots.routes, _Robots.hits = {}, []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Robots)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def fetcher(settings):
    return Fetcher(dataclasses.replace(settings, ALLOW_PRIVATE=True, TOTAL_TIMEOUT_S=3.0))


def test_rules_are_fetched_once_then_served_from_the_shared_store(settings, server, fetcher):
    _Robots.routes["/robots.txt"] = (200, {}, b"User-agent: *\nDisallow: /private\n")
    frontier = Frontier(settings)
    cache = RobotsCache(ttl_s=3600, error_ttl_s=60)
    first = cache.check(frontier, fetcher, f"http://{server}/private/x", "mybot")
    assert first.check is Check.FETCHED and first.entry.kind == RULES and first.exchange is not None
    # another worker process (a fresh cache) reads the copy in Redis: no second fetch
    other = RobotsCache(ttl_s=3600, error_ttl_s=60)
    assert other.check(frontier, fetcher, f"http://{server}/private/x", "mybot").check is Check.DISALLOWED
    assert other.check(frontier, fetcher, f"http://{server}/public", "mybot").check is Check.ALLOWED
    assert _Robots.hits == ["/robots.txt"]


def test_4xx_allows_all_and_5xx_disallows_all_until_the_error_ttl(server, fetcher):
    store = MemoryRobotsStore()
    cache = RobotsCache(ttl_s=3600, error_ttl_s=0.3)
    assert cache.check(store, fetcher, f"http://{server}/a", "bot").entry.kind == ALLOW  # 404
    assert cache.check(store, fetcher, f"http://{server}/a", "bot").check is Check.ALLOWED
    _Robots.routes["/robots.txt"] = (503, {}, b"busy")
    store, cache = MemoryRobotsStore(), RobotsCache(ttl_s=3600, error_ttl_s=0.3)
    answer = cache.check(store, fetcher, f"http://{server}/a", "bot")
    assert answer.check is Check.UNREACHABLE and answer.entry.kind == UNREACHABLE
    assert cache.check(store, fetcher, f"http://{server}/a", "bot").check is Check.UNREACHABLE
    assert _Robots.hits.count("/robots.txt") == 2   # the 404, then the 503 once
    time.sleep(0.35)
    _Robots.routes["/robots.txt"] = (200, {}, b"User-agent: *\nAllow: /\n")
    assert cache.check(store, fetcher, f"http://{server}/a", "bot").check is Check.FETCHED


def test_redirects_are_followed_up_to_five_hops(server, fetcher):
    _Robots.routes["/robots.txt"] = (301, {"Location": "/r1"}, b"")
    _Robots.routes["/r1"] = (302, {"Location": f"http://{server}/final.txt"}, b"")
    _Robots.routes["/final.txt"] = (200, {}, b"User-agent: *\nDisallow: /\n")
    answer = RobotsCache(3600, 60).check(MemoryRobotsStore(), fetcher, f"http://{server}/x", "bot", explain=True)
    assert answer.check is Check.DISALLOWED and answer.verdict is not None and not answer.verdict.allowed
    for i in range(7):   # a chain longer than five hops: treated as unavailable, allow all
        _Robots.routes["/robots.txt" if i == 0 else f"/c{i}"] = (302, {"Location": f"/c{i + 1}"}, b"")
    answer = RobotsCache(3600, 60).check(MemoryRobotsStore(), fetcher, f"http://{server}/x", "bot", explain=True)
    assert answer.entry.kind == ALLOW and answer.check is Check.ALLOWED
