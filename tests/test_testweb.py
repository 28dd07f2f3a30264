"""Tests for the synthetic loopback web that the crawler's tests and benchmark use.

Why: every crawler test trusts TestWeb's answers (reachable(), the request log),
so its model must match what the server really serves, and it must stay cheap.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from urllib.parse import urldefrag, urljoin, urlsplit
from urllib.robotparser import RobotFileParser

import pytest

from testweb import HostSpec, TestWeb

REPO = Path(__file__).resolve().parents[1]
HREF = re.compile(rb"""href="([^"]*)\"""")


class RawClient:
    """Minimal keep-alive HTTP/1.1 client: cheap, and shows exactly what is on the wire."""

    def __init__(self, hostport: str, timeout: float = 5.0) -> None:
        ip, port = hostport.rsplit(":", 1)
        self.hostport = hostport
        self.sock = socket.create_connection((ip, int(port)), timeout=timeout)
        self.buf = b""

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def request_bytes(self, path: str, method: str = "GET", extra: str = "") -> bytes:
        return (
            f"{method} {path} HTTP/1.1\r\nHost: {self.hostport}\r\n"
            f"User-Agent: testbot/1.0\r\n{extra}\r\n"
        ).encode()

    def _fill(self) -> None:
        data = self.sock.recv(1 << 20)
        if not data:
            raise EOFError("server closed the connection")
        self.buf += data

    def read_response(self, head_only: bool = False) -> tuple[int, dict[str, str], bytes]:
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if head_only or status in (204, 304):
            return status, headers, b""
        length = int(headers["content-length"])
        while len(self.buf) < length:
            self._fill()
        body, self.buf = self.buf[:length], self.buf[length:]
        return status, headers, body

    def request(self, path: str, method: str = "GET", extra: str = "") -> tuple[int, dict[str, str], bytes]:
        self.send(self.request_bytes(path, method, extra))
        return self.read_response(head_only=method == "HEAD")

    def closed_by_peer(self, timeout: float = 2.0) -> bool:
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True


def crawl(web: TestWeb, seeds: list[str]) -> set[str]:
    """An independent robots-obeying BFS over HTTP: the oracle for reachable()."""
    clients: dict[str, RawClient] = {}
    robots: dict[str, RobotFileParser | bool] = {}
    seen = set(seeds)
    queue = deque(seeds)
    pages: set[str] = set()
    try:
        while queue:
            url = queue.popleft()
            hp = urlsplit(url).netloc
            if hp not in web.hosts:
                continue
            if hp not in clients:
                clients[hp] = RawClient(hp)
            cl = clients[hp]
            if hp not in robots:
                status, _, body = cl.request("/robots.txt")
                if 200 <= status < 300:
                    rp = RobotFileParser()
                    rp.parse(body.decode().splitlines())
                    robots[hp] = rp
                else:
                    robots[hp] = status < 500
            rule = robots[hp]
            if not (rule.can_fetch("*", url) if isinstance(rule, RobotFileParser) else rule):
                continue
            parts = urlsplit(url)
            status, headers, body = cl.request(parts.path + (f"?{parts.query}" if parts.query else ""))
            links: list[str] = []
            if 300 <= status < 400:
                links = [urljoin(url, headers["location"])]
            elif status == 200 and headers.get("content-type", "").startswith("text/html"):
                pages.add(url)
                links = [urljoin(url, h.decode()) for h in HREF.findall(body)]
            for link in links:
                link = urldefrag(link)[0]
                if link not in seen:
                    seen.add(link)
                    queue.append(link)
    finally:
        for c in clients.values():
            c.close()
    return pages


def normalized(web: TestWeb, body: bytes) -> bytes:
    """Replace the run-specific host:port strings so bodies compare across runs."""
    for i, hp in enumerate(web.hosts):
        body = body.replace(hp.encode(), f"HOST{i}".encode())
    return body


# ---------------------------------------------------------------------------


def test_start_stop_leaves_no_listening_socket() -> None:
    web = TestWeb(3, 5).start()
    hosts = list(web.hosts)
    assert [h.rsplit(":", 1)[0] for h in hosts] == ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
    c = RawClient(hosts[2])
    assert c.request("/")[0] == 200
    web.stop()
    assert c.closed_by_peer()
    c.close()
    web.stop()  # idempotent
    for hp in hosts:
        ip, port = hp.rsplit(":", 1)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((ip, int(port)), timeout=1).close()
    assert web._server.thread is not None and not web._server.thread.is_alive()


def test_context_manager_and_many_hosts() -> None:
    with TestWeb(120, 2, mean_page_bytes=500) as web:
        assert len(set(web.hosts)) == 120
        assert web.hosts[-1].startswith("127.0.0.121:")
        c = RawClient(web.hosts[-1])
        status, headers, body = c.request("/p/1.html")
        assert status == 200 and headers["content-type"] == "text/html; charset=utf-8"
        c.close()
        assert len(web.reachable()) == 120 * 3


def test_ip_allocation_skips_broadcast_like_octets() -> None:
    with TestWeb(6, 1, first_ip=252, mean_page_bytes=500) as web:
        ips = [h.rsplit(":", 1)[0] for h in web.hosts]
        assert ips == ["127.0.0.252", "127.0.0.253", "127.0.0.254",
                       "127.0.1.1", "127.0.1.2", "127.0.1.3"]
        assert RawClient(web.hosts[4]).request("/")[0] == 200


def test_reachable_covers_all_pages_and_matches_a_real_crawl() -> None:
    with TestWeb(4, 25, mean_page_bytes=3000, links_per_page=4) as web:
        reach = web.reachable()
        assert reach == web.page_urls()  # private pages are disallowed by default
        assert len(reach) == 4 * 26
        assert crawl(web, web.seeds()) == reach
        # the links use every spelling a crawler has to resolve
        c = RawClient(web.hosts[0])
        hrefs = {h.decode() for p in ["/"] + [f"/p/{n}.html" for n in range(25)]
                 for h in HREF.findall(c.request(p)[2])}
        for pattern in (r"http://.*", r"/p/\d+\.html", r"/p/\d+\.html#s\d", r"\.\./p/\d+\.html",
                        r"\d+\.html", r"/private/x\.html"):
            assert any(re.fullmatch(pattern, h) for h in hrefs), pattern


def test_crawler_ignoring_robots_shows_in_the_log() -> None:
    with TestWeb(1, 3) as web:
        c = RawClient(web.hosts[0])
        status, _, body = c.request("/private/x.html")
        assert status == 200 and b"Private" in body
        assert [r.path for r in web.requests] == ["/private/x.html"]


def test_same_seed_same_bodies_and_pages_differ() -> None:
    paths = ["/", "/p/0.html", "/p/7.html", "/robots.txt"]

    def bodies(seed: int) -> list[bytes]:
        with TestWeb(2, 10, seed=seed, mean_page_bytes=20_000) as web:
            c = RawClient(web.hosts[1])
            return [normalized(web, c.request(p)[2]) for p in paths]

    a, b, other = bodies(1), bodies(1), bodies(2)
    assert a == b
    assert a[:3] != other[:3]

    def shingles(body: bytes) -> set[tuple[bytes, ...]]:
        words = re.sub(rb"<[^>]+>", b" ", body).split()
        return {tuple(words[i : i + 5]) for i in range(len(words) - 4)}

    s1, s2 = shingles(a[1]), shingles(a[2])
    jaccard = len(s1 & s2) / len(s1 | s2)
    print(f"\n5-shingle Jaccard between two pages: {jaccard:.3f}")
    assert jaccard < 0.2
    assert re.search(rb"<title>[^<]+</title>", a[1])


def test_size_distribution() -> None:
    mean, sigma = 8_000, 0.6
    with TestWeb(1, 600, mean_page_bytes=mean, size_sigma=sigma, max_page_bytes=30_000) as web:
        c = RawClient(web.hosts[0])
        sizes = []
        for n in range(600):
            status, headers, body = c.request(f"/p/{n}.html", "HEAD")
            assert status == 200 and body == b""
            sizes.append(int(headers["content-length"]))
        status, headers, body = c.request("/p/5.html")
        assert len(body) == int(headers["content-length"]) == sizes[5]
        body.decode("utf-8")
    got_mean, got_median = statistics.mean(sizes), statistics.median(sizes)
    print(f"\nsizes: mean {got_mean:.0f} (asked {mean}), median {got_median:.0f}, max {max(sizes)}")
    assert abs(got_mean - mean) < 0.12 * mean
    assert abs(got_median - mean * 2.718 ** (-sigma * sigma / 2)) < 0.15 * mean
    assert max(sizes) == 30_000  # the cap is hit, never exceeded


def test_keep_alive_connection_is_logged_with_one_conn_id() -> None:
    with TestWeb(2, 10) as web:
        a, b = RawClient(web.hosts[0]), RawClient(web.hosts[0])
        for n in range(5):
            assert a.request(f"/p/{n}.html")[0] == 200
        assert b.request("/")[0] == 200
        log = web.requests
        assert len(log) == 6
        first = [r for r in log if r.path.startswith("/p/")]
        assert len({r.conn_id for r in first}) == 1
        assert log[-1].conn_id != first[0].conn_id
        for prev, nxt in zip(first, first[1:]):
            assert prev.start <= prev.end <= nxt.start <= nxt.end
        r = first[0]
        assert r.host == web.hosts[0] and r.method == "GET" and r.status == 200
        assert r.user_agent == "testbot/1.0" and r.headers["host"] == web.hosts[0]
        web.clear_log()
        assert web.requests == []


def test_connection_close_and_http10() -> None:
    with TestWeb(1, 3) as web:
        c = RawClient(web.hosts[0])
        status, headers, _ = c.request("/", extra="Connection: close\r\n")
        assert status == 200 and headers["connection"] == "close"
        assert c.closed_by_peer()
        c = RawClient(web.hosts[0])
        c.send(b"GET /p/1.html HTTP/1.0\r\n\r\n")
        assert c.read_response()[0] == 200 and c.closed_by_peer()
        c = RawClient(web.hosts[0])
        c.send(b"GET /p/1.html HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        assert c.read_response()[1]["connection"] == "keep-alive"
        assert c.request("/p/2.html")[0] == 200


def test_pipelined_requests_are_answered_in_order() -> None:
    with TestWeb(1, 5) as web:
        c = RawClient(web.hosts[0])
        c.send(b"".join(c.request_bytes(f"/p/{n}.html") for n in (3, 1, 4)) + c.request_bytes("/x"))
        titles = [re.search(rb"<title>([^<]*)", c.read_response()[2]) for _ in range(3)]
        assert [t.group(1).split(b" - ")[1] for t in titles if t] == [
            b"page 3 of site 0", b"page 1 of site 0", b"page 4 of site 0"]
        assert c.read_response()[0] == 404
        assert len({r.conn_id for r in web.requests}) == 1


def test_robots_variants() -> None:
    specs = {
        1: HostSpec(robots_txt=None),
        2: HostSpec(robots_status=503),
        3: HostSpec(robots_txt="User-agent: *\nDisallow: /p/\n"),
    }
    with TestWeb(4, 6, host_specs=specs) as web:
        status, headers, body = RawClient(web.hosts[0]).request("/robots.txt")
        assert status == 200 and body == b"User-agent: *\nDisallow: /private/\n"
        assert headers["content-type"].startswith("text/plain")
        assert RawClient(web.hosts[1]).request("/robots.txt")[0] == 404
        assert RawClient(web.hosts[2]).request("/robots.txt")[0] == 503

        reach = web.reachable(web.seeds(all_hosts=True))
        assert web.url(1, "/private/x.html") in reach  # no robots.txt: all allowed
        assert not any(u.startswith(f"http://{web.hosts[2]}/") for u in reach)  # 5xx: none
        assert {u for u in reach if web.hosts[3] in u} == {web.url(3, "/"), web.url(3, "/private/x.html")}
        assert reach == crawl(web, web.seeds(all_hosts=True))
        assert web.reachable() == crawl(web, web.seeds())  # host 2 breaks the chain of homes


def test_robots_rules_follow_rfc9309_longest_match() -> None:
    robots = "User-agent: *\nDisallow: /p/\nAllow: /p/1.html$\n\nUser-agent: picky\nDisallow: /\n"
    with TestWeb(1, 8, host_specs={0: HostSpec(robots_txt=robots)}) as web:
        assert web.reachable() == {web.url(0, "/"), web.url(0, "/p/1.html"), web.url(0, "/private/x.html")}
        assert web.reachable(user_agent="Picky/2.0") == set()


def test_robots_matching_normalises_percent_encoding_like_the_crawler() -> None:
    # %30 is "0": RFC 9309 compares paths after decoding unreserved characters
    robots = "User-agent: *\nDisallow: /p/%30.html\n"
    with TestWeb(1, 8, host_specs={0: HostSpec(robots_txt=robots)}) as web:
        reach = web.reachable()
        assert web.url(0, "/p/0.html") not in reach
        assert web.url(0, "/private/x.html") in reach


def test_set_route_leaves_a_shared_spec_alone() -> None:
    spec = HostSpec(pages=1)
    with TestWeb(2, 1, host_specs={0: spec, 1: spec}) as web:
        web.set_route(0, "/new.html", 200, {"Content-Type": "text/html"}, b"<p>new</p>")
        assert spec.extra_routes == {}
        assert RawClient(web.hosts[0]).request("/new.html")[0] == 200
        c = RawClient(web.hosts[1])
        assert c.request("/new.html")[0] == 404
        assert b"/new.html" not in c.request("/")[2]
        assert web.url(0, "/new.html") in web.reachable()
        assert web.url(1, "/new.html") not in web.reachable()


def test_extra_routes_served_verbatim_and_modelled() -> None:
    spec = HostSpec(extra_routes={
        "/old": (301, {"Location": "/p/2.html"}, b""),
        "/busy": (429, {"Retry-After": "3", "Content-Type": "text/html"}, b"<p>slow down</p>"),
        "/doc.pdf": (200, {"Content-Type": "application/pdf"}, b"%PDF-1.4 fake"),
        "/extra.html": (200, {"Content-Type": "text/html"}, b'<a href="/p/4.html#x">x</a>'),
        "/p/1.html": (500, {}, b"boom"),
    })
    with TestWeb(2, 5, host_specs={1: spec}) as web:
        c = RawClient(web.hosts[1])
        assert c.request("/old")[:2] == (301, {"server": "testweb", "location": "/p/2.html",
                                                "content-length": "0", "connection": "keep-alive"})
        status, headers, body = c.request("/busy")
        assert (status, headers["retry-after"], body) == (429, "3", b"<p>slow down</p>")
        assert c.request("/doc.pdf")[1]["content-type"] == "application/pdf"
        assert c.request("/p/1.html")[:3:2] == (500, b"boom")
        home = c.request("/")[2]
        assert all(f'href="{p}"'.encode() in home for p in ("/old", "/busy", "/doc.pdf", "/extra.html"))
        reach = web.reachable()
        assert web.url(1, "/extra.html") in reach and web.url(1, "/p/2.html") in reach
        for path in ("/old", "/busy", "/doc.pdf", "/p/1.html"):
            assert web.url(1, path) not in reach
        assert reach == crawl(web, web.seeds())


def test_not_found_method_and_bad_requests() -> None:
    with TestWeb(1, 3) as web:
        c = RawClient(web.hosts[0])
        for path in ("/nope", "/p/3.html", "/p/01.html", "/p/x.html"):
            status, headers, body = c.request(path)
            assert status == 404 and headers["content-type"].startswith("text/html")
            assert b"Not Found" in body and len(body) < 512
        c.send(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
        assert c.read_response()[0] == 405
        assert c.request("/")[0] == 200  # the request body was consumed, framing intact
        c.send(b"garbage\r\n\r\n")
        assert c.read_response()[0] == 400 and c.closed_by_peer()
        assert [r.status for r in web.requests][-3:] == [405, 200, 400]


def test_head_etag_and_query() -> None:
    with TestWeb(1, 3) as web:
        c = RawClient(web.hosts[0])
        _, got, body = c.request("/p/0.html")
        status, head, nobody = c.request("/p/0.html", "HEAD")
        assert status == 200 and nobody == b"" and head == got
        status, _, body304 = c.request("/p/0.html", extra=f"If-None-Match: {got['etag']}\r\n")
        assert (status, body304) == (304, b"")
        assert c.request("/p/0.html?utm=1")[2] == body
        assert web.requests[-2].headers["if-none-match"] == got["etag"]
        assert web.requests[-1].path == "/p/0.html?utm=1"


def test_slow_host_delay() -> None:
    with TestWeb(2, 3, host_specs={1: HostSpec(delay_s=0.4)}) as web:
        fast, slow = RawClient(web.hosts[0]), RawClient(web.hosts[1])
        t0 = time.monotonic()
        slow.send(slow.request_bytes("/"))
        while not (pending := [r for r in web.requests if r.host == web.hosts[1]]):
            assert time.monotonic() - t0 < 0.3
            time.sleep(0.002)
        assert pending[0].end == 0.0  # logged on arrival, answered later
        assert fast.request("/")[0] == 200  # one slow host does not stall the others
        assert time.monotonic() - t0 < 0.3
        assert slow.read_response()[0] == 200
        assert time.monotonic() - t0 >= 0.4
        rec = [r for r in web.requests if r.host == web.hosts[1]][0]
        assert rec.end - rec.start >= 0.39


def test_cli_serves_until_sigterm() -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [sys.executable, "-m", "testweb", "--hosts", "3", "--pages", "4", "--seed", "7"],
        stdout=subprocess.PIPE, text=True, env=env,
    )
    try:
        assert proc.stdout is not None
        urls = [proc.stdout.readline().strip() for _ in range(3)]
        assert all(re.fullmatch(r"http://127\.0\.0\.\d+:\d+/", u) for u in urls)
        status, _, body = RawClient(urlsplit(urls[2]).netloc).request("/p/3.html")
        assert status == 200 and b"site 2" in body
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_serving_speed_figure() -> None:
    """Prints requests/s for one keep-alive client; the figure is informative, not a gate."""
    n = 2000
    with TestWeb(1, n, mean_page_bytes=60_000) as web:
        c = RawClient(web.hosts[0])
        for label, paths in (
            ("fresh pages (rendered)", [f"/p/{i}.html" for i in range(n)]),
            ("cached pages", [f"/p/{i % 200}.html" for i in range(n // 2)]),
        ):
            cpu0, t0, total = web.server_cpu_seconds(), time.perf_counter(), 0
            for p in paths:
                total += len(c.request(p)[2])
            wall = time.perf_counter() - t0
            cpu = web.server_cpu_seconds() - cpu0
            k = len(paths)
            print(f"\n{label}: {k} requests, {k / wall:.0f} req/s, {total / k / 1000:.1f} KB avg, "
                  f"{total / wall / 1e6:.0f} MB/s, server CPU {cpu / k * 1e6:.0f} us/request")
        assert len(web.requests) == n + n // 2
