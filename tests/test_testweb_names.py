"""Tests for the test web's real-web addressing: host names, shared addresses, HTTPS, dead names.

Why: crawler tests and benches reach these hosts through a DNS server and TLS, and
judge politeness per host and per address from the server's logs; so names must be
in every link, the Host header (and SNI) must pick the host on a shared address,
the certificates must verify against the web's CA (or fail as asked), and the logs
must name host and address.  The client here is crawler-independent: raw HTTP sent
to the address a name has in the zone, with the name in Host (and in SNI).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urldefrag, urljoin, urlsplit
from urllib.robotparser import RobotFileParser

import pytest

from tests.test_testweb import HREF, RawClient
from testweb import TestWeb
from testweb.evidence import check_politeness

REPO = Path(__file__).resolve().parents[1]


def client(web: TestWeb, h: int, *, host: str | None = None, sni: str | None = None,
           session: ssl.SSLSession | None = None, ctx: ssl.SSLContext | None = None) -> RawClient:
    """A keep-alive client of host h: TCP to its address, its name in Host (and SNI over TLS)."""
    e = web.endpoints[h]
    c = RawClient(f"{e.address}:{e.port}")
    c.hostport = host or web.hosts[h]
    if e.scheme == "https":
        ctx = ctx or web.client_ssl_context()
        c.sock = ctx.wrap_socket(c.sock, server_hostname=sni or e.name, session=session)
    return c


def tls(c: RawClient) -> ssl.SSLSocket:
    assert isinstance(c.sock, ssl.SSLSocket)
    return c.sock


def sans(c: RawClient) -> object:
    cert = tls(c).getpeercert()
    assert cert is not None
    return cert["subjectAltName"]


def eventually(check: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Wait until the serving thread has caught up (a closed socket, a failed handshake)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "the server never got there"
        time.sleep(0.005)


def all_closed(web: TestWeb) -> bool:
    return all(c.closed for c in web.connections)


def title(body: bytes) -> str:
    m = re.search(rb"<title>([^<]*)</title>", body)
    assert m, body[:200]
    return m.group(1).decode().rsplit(" - ", 1)[1]


def crawl(web: TestWeb, seeds: list[str]) -> set[str]:
    """An independent robots-obeying BFS through the zone: the oracle for reachable().
    URLs of no live host (dead names) are skipped, as a crawler's DNS would."""
    index = {o: h for h, o in enumerate(web.origins)}
    clients: dict[int, RawClient] = {}
    robots: dict[int, RobotFileParser | bool] = {}
    seen = set(seeds)
    queue = deque(seeds)
    pages: set[str] = set()
    try:
        while queue:
            url = queue.popleft()
            parts = urlsplit(url)
            h = index.get(f"{parts.scheme}://{parts.netloc}")
            if h is None:
                continue
            if h not in clients:
                clients[h] = client(web, h)
            cl = clients[h]
            if h not in robots:
                status, _, body = cl.request("/robots.txt")
                if 200 <= status < 300:
                    rp = RobotFileParser()
                    rp.parse(body.decode().splitlines())
                    robots[h] = rp
                else:
                    robots[h] = status < 500
            rule = robots[h]
            if not (rule.can_fetch("*", url) if isinstance(rule, RobotFileParser) else rule):
                continue
            status, headers, body = cl.request(parts.path + (f"?{parts.query}" if parts.query else ""))
            links: list[str] = []
            if 300 <= status < 400:
                links = [urljoin(url, headers["location"])]
            elif status == 200 and headers.get("content-type", "").startswith("text/html"):
                pages.add(url)
                links = [urljoin(url, href.decode()) for href in HREF.findall(body)]
            for link in links:
                link = urldefrag(link)[0]
                if link not in seen:
                    seen.add(link)
                    queue.append(link)
    finally:
        for c in clients.values():
            c.close()
    return pages


# ---------------------------------------------------------------------------


def test_names_in_hosts_links_seeds_and_zone() -> None:
    with TestWeb(5, 12, names="Web.Test.", links_per_page=6, cross_host_ratio=0.5) as web:
        assert [hp.rsplit(":", 1)[0] for hp in web.hosts] == [f"h{i}.web.test" for i in range(5)]
        assert web.zone == {f"h{i}.web.test": f"127.0.0.{2 + i}" for i in range(5)}
        assert web.url(3, "/p/1.html") == f"http://{web.hosts[3]}/p/1.html"
        assert web.seeds() == [f"http://{web.hosts[0]}/"]
        assert web.dead_names == [] and web.ca_pem is None
        c = client(web, 0)
        hrefs = {h.decode() for p in ["/"] + [f"/p/{n}.html" for n in range(12)]
                 for h in HREF.findall(c.request(p)[2])}
        absolute = {h for h in hrefs if "//" in h}
        assert absolute and all(re.match(r"http://h\d\.web\.test:\d+/", h) for h in absolute)
        assert {urlsplit(h).netloc for h in absolute} > {web.hosts[0]}  # names of other hosts too
        assert not any("127.0." in h for h in hrefs)
        reach = web.reachable()
        assert reach == web.page_urls() == crawl(web, web.seeds())
        assert {r.host_index for r in web.requests} == set(range(5))
        assert all(r.host == web.hosts[r.host_index] for r in web.requests)


def test_two_names_on_one_address_are_told_apart_by_host() -> None:
    with TestWeb(8, 3, names="web.test", addresses=3) as web:
        ports = {e.port for e in web.endpoints}
        assert len(ports) == 1  # one port for the whole web
        assert [e.address for e in web.endpoints] == [f"127.0.0.{2 + i % 3}" for i in range(8)]
        assert web.zone["h4.web.test"] == web.zone["h1.web.test"] == "127.0.0.3"
        c = client(web, 1)
        assert title(c.request("/")[2]) == "home of site 1"
        c.hostport = web.hosts[4]  # same connection, the other name of the address
        assert title(c.request("/p/2.html")[2]) == "page 2 of site 4"
        c.hostport = "h7.web.test"  # Host without a port names the host too
        assert title(c.request("/")[2]) == "home of site 7"
        assert [(r.host, r.host_index) for r in web.requests] == [
            (web.hosts[1], 1), (web.hosts[4], 4), (web.hosts[7], 7)]
        (conn,) = web.connections
        assert conn.host == web.hosts[1]  # the first request's host
        assert conn.address == f"127.0.0.3:{ports.pop()}"
        assert web.reachable() == web.page_urls() == crawl(web, web.seeds())


def test_a_host_not_of_the_address_gets_421_logged() -> None:
    with TestWeb(4, 2, names="web.test", addresses=2) as web:
        c = client(web, 0)
        for host in (web.hosts[1], "nowhere.example:80", "127.0.0.2"):
            c.hostport = host
            status, headers, _ = c.request("/")
            assert status == 421 and headers["connection"] == "keep-alive"
        c.send(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")  # no Host at all
        assert c.read_response()[0] == 421
        c.hostport = web.hosts[2]
        assert c.request("/")[0] == 200  # the connection still serves
        log = web.requests
        assert [(r.host, r.host_index, r.status) for r in log] == [
            (web.hosts[1], -1, 421), ("nowhere.example:80", -1, 421), ("127.0.0.2", -1, 421),
            ("", -1, 421), (web.hosts[2], 2, 200)]
        assert web.connections[0].host == web.hosts[2]  # the first host it served
        report = check_politeness(log, web.connections, {})
        assert report.misdirected == 4 and report.hosts == 1 and report.requests == 1
    with TestWeb(2, 2, names="web.test") as web:  # one address per host: Host is checked too
        c = client(web, 0, host=web.hosts[1])
        assert c.request("/")[0] == 421


def test_https_host_verifies_with_the_web_ca_and_resumes() -> None:
    with TestWeb(6, 4, names="web.test", addresses=2, https_hosts={1, 3}) as web:
        assert [e.scheme for e in web.endpoints] == ["http", "https", "http", "https", "http", "http"]
        assert web.origins[3] == f"https://{web.hosts[3]}" and web.url(1, "/").startswith("https://h1.")
        assert {e.port for e in web.endpoints if e.scheme == "https"} != {web.endpoints[0].port}
        assert web.ca_pem is not None and b"BEGIN CERTIFICATE" in web.ca_pem.read_bytes()
        ctx = ssl.create_default_context(cafile=str(web.ca_pem))  # as a crawler told the file
        a = client(web, 1, ctx=ctx)
        assert sans(a) == (("DNS", "*.web.test"),)
        assert title(a.request("/")[2]) == "home of site 1"
        home0 = client(web, 0).request("/")[2]
        assert f'href="https://{web.hosts[1]}/"'.encode() in home0  # links carry the scheme
        session = tls(a).session
        assert session is not None
        a.close()
        b = client(web, 3, ctx=ctx, session=session)  # h3 shares h1's address and certificate
        assert tls(b).session_reused
        assert title(b.request("/p/0.html")[2]) == "page 0 of site 3"
        b.hostport = web.hosts[1]  # Host must name the host of the handshake
        assert b.request("/")[0] == 421
        secure = [c for c in web.connections if c.tls]
        assert [(c.host, c.tls, c.resumed) for c in secure] == [
            (web.hosts[1], "TLSv1.3", False), (web.hosts[3], "TLSv1.3", True)]
        assert secure[0].address == secure[1].address == f"{web.endpoints[1].address}:{web.endpoints[1].port}"
        plain = RawClient(f"{web.endpoints[1].address}:{web.endpoints[1].port}")
        plain.send(plain.request_bytes("/"))  # plain HTTP to the TLS port: refused, and logged
        assert plain.closed_by_peer()
        eventually(lambda: web.connections[-1].tls_error == "HTTP_REQUEST")
        assert web.reachable() == web.page_urls() == crawl(web, web.seeds())


def test_https_big_pipelined_bodies_match_the_model() -> None:
    with TestWeb(2, 6, names="web.test", https_hosts={1}, mean_page_bytes=150_000, max_page_bytes=400_000) as web:
        c = client(web, 1)
        paths = ["/", *(f"/p/{n}.html" for n in range(6))]
        c.send(b"".join(c.request_bytes(p) for p in paths))
        for p in paths:
            status, headers, body = c.read_response()
            answer = web._answer(web.url(1, p))
            assert answer is not None
            assert status == 200 and body == answer[2] and len(body) == int(headers["content-length"])
        assert sum(len(a[2]) for p in paths if (a := web._answer(web.url(1, p)))) > 500_000


def test_https_with_ip_literals() -> None:
    with TestWeb(3, 2, https_share=1 / 3) as web:
        assert web.origins[2].startswith("https://127.0.0.4:") and web.origins[0].startswith("http://")
        c = client(web, 2)
        assert c.request("/")[0] == 200
        assert ("IP Address", "127.0.0.4") in sans(c)  # type: ignore[operator]


@pytest.mark.parametrize(("kind", "message"), [
    ("expired", "certificate has expired"),
    ("wrong-name", "Hostname mismatch"),
    ("unknown-ca", "unable to get local issuer certificate"),
])
def test_bad_certificate_is_refused_by_a_verifying_client(kind: str, message: str) -> None:
    with TestWeb(3, 2, names="web.test", addresses=1, bad_tls={1: kind}, https_hosts={2}) as web:
        assert web.endpoints[1].scheme == "https"
        with pytest.raises(ssl.SSLCertVerificationError, match=message):
            client(web, 1)
        assert client(web, 2).request("/")[0] == 200  # its neighbour on the address is fine
        unverified = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        unverified.check_hostname = False
        unverified.verify_mode = ssl.CERT_NONE
        assert client(web, 1, ctx=unverified).request("/")[0] == 200  # it does serve
        eventually(lambda: bool(web.connections[0].closed))
        refused = web.connections[0]
        assert refused.host == web.hosts[1] and refused.tls == "" and refused.tls_error
        reach = web.reachable(web.seeds(all_hosts=True))
        assert reach == web.page_urls() - {web.url(1, p) for p in ("/", "/p/0.html", "/p/1.html")}


def test_evidence_counts_connections_per_address_apart_from_per_host() -> None:
    with TestWeb(4, 2, names="web.test", addresses=2) as web:
        a, b = client(web, 0), client(web, 2)  # two hosts of one address, open at once
        assert a.request("/robots.txt")[0] == b.request("/robots.txt")[0] == 200
        idle = client(web, 1)  # names no host: not a host's connection
        for c in (a, b, idle):
            c.close()
        eventually(lambda: all_closed(web))
        report = check_politeness(web.requests, web.connections, {})
        assert (report.multi_conn_hosts, report.multi_conn_addresses, report.violations) == (0, 1, 0)
        strict = check_politeness(web.requests, web.connections, {}, per_address=True)
        assert strict.violations == 1 and "127.0.0.2" in strict.examples[0]
        web.clear_log()
        a, b = client(web, 1), client(web, 1)  # one host, two connections
        assert a.request("/robots.txt")[0] == b.request("/robots.txt")[0] == 200
        a.close()
        b.close()
        eventually(lambda: all_closed(web))
        report = check_politeness(web.requests, web.connections, {})
        assert (report.multi_conn_hosts, report.multi_conn_addresses, report.violations) == (1, 1, 1)


def test_dead_names_are_linked_and_seeded_but_not_reached() -> None:
    kw = dict(names="web.test", links_per_page=8, cross_host_ratio=0.5, seed=3)
    with TestWeb(4, 10, dead_names=3, dead_link_share=0.4, **kw) as web:  # type: ignore[arg-type]
        assert web.dead_names == ["h4.web.test", "h5.web.test", "h6.web.test"]
        assert not set(web.dead_names) & set(web.zone)
        assert web.seeds(all_hosts=True, dead=True)[4:] == [f"http://h{i}.web.test/" for i in (4, 5, 6)]
        cross = dead = 0
        for h in range(4):
            c = client(web, h)
            for p in ["/"] + [f"/p/{n}.html" for n in range(10)]:
                for href in HREF.findall(c.request(p)[2]):
                    netloc = urlsplit(href.decode()).netloc
                    if netloc and netloc != web.hosts[h]:
                        cross += 1
                        dead += netloc in web.dead_names
        print(f"\ndead links: {dead} of {cross} cross-host links (share asked 0.4)")
        assert 0.25 < dead / cross < 0.55
        reach = web.reachable(web.seeds(dead=True))
        assert reach == web.page_urls() == crawl(web, web.seeds(dead=True))
        model = web.model()
    with TestWeb(4, 10, dead_names=3, **kw) as same:  # type: ignore[arg-type]
        assert not any(th >= 4 for host in same.model().links for node in host for th, _, _ in node)
    with TestWeb(4, 10, **kw) as plain:  # type: ignore[arg-type]
        assert same.model().links == plain.model().links  # no share: the graph of a web without them
        assert model.links != plain.model().links
    with TestWeb(1, 5, names="web.test", dead_names=["gone.example", "never.example"],
                 dead_link_share=0.5, cross_host_ratio=0.5) as one:
        assert one.dead_names == ["gone.example", "never.example"]
        c = client(one, 0)
        hrefs = [h for p in ["/"] + [f"/p/{n}.html" for n in range(5)] for h in HREF.findall(c.request(p)[2])]
        assert {urlsplit(h.decode()).netloc for h in hrefs} - {"", one.hosts[0]} == {"gone.example", "never.example"}
        assert one.reachable() == one.page_urls()


def test_invalid_combinations_are_refused() -> None:
    for kw in (dict(addresses=2), dict(dead_names=2), dict(names="test", https_share=0.5),
               dict(names="web.test", dead_names=["h0.web.test"]), dict(names="bad name"),
               dict(names="web.test", dead_link_share=0.5), dict(bad_tls={0: "sloppy"}),
               dict(https_hosts={9})):
        with pytest.raises(ValueError):
            TestWeb(3, 2, **kw)


def test_thousand_hosts_on_four_addresses_a_third_https_start_up() -> None:
    t0 = time.perf_counter()
    web = TestWeb(1000, 4, names="web.test", addresses=4, https_share=1 / 3, mean_page_bytes=2000).start()
    try:
        took = time.perf_counter() - t0
        listening = {(e.address, e.port, e.scheme) for e in web.endpoints}
        print(f"\n1,000 hosts on 4 addresses, a third HTTPS: started in {took:.2f} s, "
              f"{len(listening)} listening sockets")
        assert len(listening) == 8 and len({(e.scheme, e.port) for e in web.endpoints}) == 2
        assert sum(e.scheme == "https" for e in web.endpoints) == 333
        for h in (0, 2, 997, 998, 999):
            assert title(client(web, h).request("/p/3.html")[2]) == f"page 3 of site {h}"
    finally:
        web.stop()


def test_cli_names_addresses_https_and_manifest(tmp_path: Path) -> None:
    manifest, ca = tmp_path / "web.json", tmp_path / "ca.pem"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [sys.executable, "-m", "testweb", "--hosts", "6", "--pages", "3", "--names", "web.test",
         "--addresses", "2", "--https-share", "1/3", "--bad-tls", "0=wrong-name", "--ca-out", str(ca),
         "--dead-names", "2", "--dead-link-share", "0.5", "--crawl-delay", "2", "--manifest", str(manifest)],
        stdout=subprocess.PIPE, text=True, env=env,
    )
    try:
        assert proc.stdout is not None
        urls = [proc.stdout.readline().strip() for _ in range(6)]
        m = json.loads(manifest.read_text())
        assert [h["home"] for h in m["hosts"]] == urls
        assert [h["scheme"] for h in m["hosts"]] == ["https", "http", "https", "http", "http", "https"]
        assert m["zone"] == {f"h{i}.web.test": f"127.0.0.{2 + i % 2}" for i in range(6)}
        assert m["dead_names"] == ["h6.web.test", "h7.web.test"] and m["ca_pem"] == str(ca)
        h2 = m["hosts"][2]
        assert (h2["name"], h2["address"], h2["crawl_delay"]) == ("h2.web.test", "127.0.0.2", 2.0)
        assert urls[2] == f"https://h2.web.test:{h2['port']}/" and h2["host"] == f"h2.web.test:{h2['port']}"
        ctx = ssl.create_default_context(cafile=str(ca))
        with socket.create_connection((h2["address"], h2["port"]), timeout=5) as raw, \
                ctx.wrap_socket(raw, server_hostname=h2["name"]) as tls:
            tls.sendall(f"GET /p/1.html HTTP/1.1\r\nHost: {h2['host']}\r\nConnection: close\r\n\r\n".encode())
            body = b""
            while chunk := tls.recv(65536):
                body += chunk
        assert body.startswith(b"HTTP/1.1 200 ") and b"page 1 of site 2" in body
        with pytest.raises(ssl.SSLCertVerificationError), \
                socket.create_connection((m["hosts"][0]["address"], m["hosts"][0]["port"]), timeout=5) as raw:
            ctx.wrap_socket(raw, server_hostname="h0.web.test")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    bad = subprocess.run([sys.executable, "-m", "testweb", "--addresses", "2"], env=env,
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "needs" in bad.stderr


def test_tls_serving_figure() -> None:
    """Prints what TLS costs the serving thread next to plain HTTP; informative, not a gate."""
    n = 300
    with TestWeb(2, n, names="web.test", https_hosts={1}, mean_page_bytes=20_000) as web:
        for h in (0, 1):
            c = client(web, h)
            paths = [f"/p/{i}.html" for i in range(n)]
            for p in paths:  # rendered once, then served from the cache
                c.request(p)
            cpu0, t0 = web.server_cpu_seconds(), time.perf_counter()
            for p in paths:
                assert c.request(p)[0] == 200
            wall, cpu = time.perf_counter() - t0, web.server_cpu_seconds() - cpu0
            print(f"\n{web.endpoints[h].scheme}: {n / wall:.0f} req/s on one connection, ~20 KB pages, "
                  f"server CPU {cpu / n * 1e6:.0f} us/request")
            c.close()
        ctx = web.client_ssl_context()
        session: ssl.SSLSession | None = None
        for label in ("full", "resumed"):
            cpu0, t0 = web.server_cpu_seconds(), time.perf_counter()
            for _ in range(40):
                c = client(web, 1, ctx=ctx, session=None if label == "full" else session)
                assert c.request("/robots.txt")[0] == 200
                session = tls(c).session
                c.close()
            wall, cpu = time.perf_counter() - t0, web.server_cpu_seconds() - cpu0
            print(f"{label} handshakes: {40 / wall:.0f} connections/s, server CPU {cpu / 40 * 1e3:.2f} ms each")
        eventually(lambda: all_closed(web))
        assert sum(c.resumed for c in web.connections) == 40
