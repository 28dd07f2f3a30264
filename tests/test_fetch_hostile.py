"""The fetcher against a hostile server: every misbehaviour comes back as a result with a
specific error_kind, within the exchange deadline, and the fetcher stays usable."""
from __future__ import annotations

import dataclasses
import socket
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest

from crawler_tasks.fetch import http
from crawler_tasks.fetch.http import ErrorKind, Fetcher
from crawler_tasks.settings import Settings
from tests.hostile import PAGE, HostileServer, start_hostile
from testweb.dns import Behaviour, DnsServer, Entry

DEADLINE_S = 3.0
BOUND_S = DEADLINE_S * 1.5 + 2  # correctness bound (no hang), generous so it never flakes
BODY_CAP = 256 * 1024
DECODED_CAP = 1024 * 1024


@pytest.fixture(scope="module")
def hostile() -> Iterator[HostileServer]:
    with start_hostile("127.0.0.2") as srv:
        yield srv


@pytest.fixture
def fetcher():
    f = Fetcher(dataclasses.replace(
        Settings(), ALLOW_PRIVATE=True, TOTAL_TIMEOUT_S=DEADLINE_S, CONNECT_TIMEOUT_S=2.0,
        READ_TIMEOUT_S=10.0, MAX_BODY_BYTES=BODY_CAP, MAX_DECODED_BYTES=DECODED_CAP))
    yield f
    f.close()


def timed(fetcher: Fetcher, url: str):
    t0 = time.monotonic()
    res = fetcher.fetch(url)
    elapsed = time.monotonic() - t0
    assert elapsed < BOUND_S, f"{url} took {elapsed:.1f} s"
    assert res.ended >= res.started
    return res, elapsed


# path -> (error_kind, truncated, status)
CASES = {
    "/page": (None, None, 200),
    "/chunked": (None, None, 200),
    "/close-delimited": (None, None, 200),
    "/early-hints": (None, None, 200),
    "/gzip-bomb": (ErrorKind.DECODED_TOO_LARGE, "decoded-length", 200),
    "/deflate-bomb": (ErrorKind.DECODED_TOO_LARGE, "decoded-length", 200),
    "/br-bomb": (ErrorKind.DECODED_TOO_LARGE, "decoded-length", 200),
    "/huge": (ErrorKind.BODY_TOO_LARGE, "length", 200),
    "/huge?chunked=1": (ErrorKind.BODY_TOO_LARGE, "length", 200),
    "/trickle-body": (ErrorKind.DEADLINE, "time", 200),
    "/trickle-headers": (ErrorKind.DEADLINE, None, None),
    "/trickle-status": (ErrorKind.DEADLINE, None, None),
    "/many-headers": (ErrorKind.TOO_MANY_HEADERS, None, None),
    "/big-header": (ErrorKind.HEADERS_TOO_LARGE, None, None),
    "/reset": (ErrorKind.PROTOCOL, None, None),
    "/reset-mid-body": (ErrorKind.PROTOCOL, "disconnect", 200),
    "/short-body": (ErrorKind.PROTOCOL, "disconnect", 200),
    "/black-hole": (ErrorKind.DEADLINE, None, None),
    "/redirect-loop": (None, None, 302),
    "/http09": (ErrorKind.HTTP09, None, None),
    "/not-http": (ErrorKind.HTTP09, None, None),
    "/garbage-status": (ErrorKind.BAD_STATUS_LINE, None, None),
}


# what a deadline error says it was doing
PHASES = {"/trickle-body": "reading the body", "/trickle-headers": "reading the header block",
          "/trickle-status": "reading the status line", "/black-hole": "waiting for the status line"}


@pytest.mark.parametrize("path", list(CASES))
def test_each_hostile_endpoint_gives_its_result(hostile, fetcher, path):
    kind, truncated, status = CASES[path]
    res, elapsed = timed(fetcher, hostile.base_url + path)
    assert (res.error_kind, res.truncated, res.status) == (kind, truncated, status), res.error
    assert (res.error is None) == (kind is None)
    if kind == ErrorKind.DEADLINE:  # the deadline, not a per-read timeout in disguise
        assert elapsed >= DEADLINE_S - 0.1
        assert f"deadline of {DEADLINE_S:g} s passed while {PHASES[path]}" in res.error
    assert len(res.body) <= BODY_CAP and len(res.content) <= DECODED_CAP
    if kind is None:
        assert res.content == PAGE or res.status == 302
    # the fetcher is still fine afterwards
    assert fetcher.fetch(hostile.base_url + "/page").content == PAGE


def test_trickled_body_keeps_what_came(hostile, fetcher):
    res, _ = timed(fetcher, hostile.base_url + "/trickle-body")
    assert res.body == b"x"  # one byte per 2 s within a 3 s deadline
    assert res.header("content-length") == "100000"


def test_tls_handshake_trickle_hits_the_deadline(hostile, fetcher):
    res, elapsed = timed(fetcher, hostile.tls_trickle_url)
    assert res.error_kind == ErrorKind.DEADLINE and "TLS" in res.error
    assert elapsed >= DEADLINE_S - 0.1


def test_redirect_loop_is_returned_not_followed(hostile, fetcher):
    first = fetcher.fetch(hostile.base_url + "/redirect-loop")
    second = fetcher.fetch(hostile.base_url + first.location)
    assert (first.status, first.location) == (302, "/redirect-loop?n=1")
    assert second.location == "/redirect-loop?n=0"


def test_keepalive_reuses_one_connection(fetcher):
    with start_hostile("127.0.0.3") as srv:
        for path in ("/page", "/chunked", "/gzip-page", "/br-page", "/page"):
            res = fetcher.fetch(srv.base_url + path)
            assert res.content == PAGE and res.error is None, (path, res.error)
        assert srv.connections == 1


def test_bytes_past_the_body_are_not_taken_for_the_next_answer(fetcher):
    with start_hostile("127.0.0.3") as srv:
        first = fetcher.fetch(srv.base_url + "/extra-bytes")
        again = fetcher.fetch(srv.base_url + "/page")
        assert (first.status, first.content) == (200, b"ok")
        assert again.content == PAGE and srv.connections == 2


def test_server_closing_an_idle_connection_costs_no_error(fetcher):
    with start_hostile("127.0.0.3") as srv:
        for _ in range(3):
            res = fetcher.fetch(srv.base_url + "/page-then-close")
            assert res.status == 200 and res.error is None
            time.sleep(0.05)  # the FIN arrives; the idle connection is seen dead
        assert srv.connections == 3


def test_stale_connection_is_retried_once(fetcher, monkeypatch):
    """A keep-alive connection the server drops right as we send: sent again on a new one."""
    monkeypatch.setattr(http._Conn, "alive", lambda self: True)  # the close races our check
    with start_hostile("127.0.0.3") as srv:
        assert fetcher.fetch(srv.base_url + "/page").status == 200
        with srv._lock:
            server_side = list(srv._open)
        for s in server_side:
            s.shutdown(socket.SHUT_RDWR)
        time.sleep(0.05)
        res = fetcher.fetch(srv.base_url + "/page")
        assert res.status == 200 and res.error is None
        assert srv.connections == 2


def test_request_sent_again_only_after_the_hosts_delay(fetcher):
    """A server that takes a second request on a kept-alive connection and resets it: it
    saw a request, so the same request on a new connection waits the host's delay."""
    gap = 0.4
    seen: list[tuple[int, float]] = []   # (connection number, time its request arrived)
    reset_at: list[float] = []
    listener = socket.create_server(("127.0.0.7", 0))
    port = listener.getsockname()[1]
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"

    def serve() -> None:
        for number in range(2):
            sock, _ = listener.accept()
            with sock:
                for i in range(2):
                    if not sock.recv(65536):
                        break
                    seen.append((number, time.time()))
                    if number == 0 and i == 1:   # the second request on the first connection
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
                        reset_at.append(time.time())
                        break                    # closed with linger 0: an RST
                    sock.sendall(answer)
                    if number == 1:
                        break

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        assert fetcher.fetch(f"http://127.0.0.7:{port}/a", gap_s=gap).status == 200
        res = fetcher.fetch(f"http://127.0.0.7:{port}/b", gap_s=gap)
        assert res.status == 200 and res.error is None, res.error
        thread.join(5)
    finally:
        listener.close()
    assert [n for n, _ in seen] == [0, 0, 1]
    assert seen[2][1] - reset_at[0] >= gap - 0.01


def test_no_second_try_past_the_deadline(fetcher, hostile):
    """A delay longer than what is left of the exchange: the hang-up is the answer."""
    monkey = http._Conn.alive
    try:
        http._Conn.alive = lambda self: True  # type: ignore[method-assign]
        assert fetcher.fetch(hostile.base_url + "/page").status == 200
        t0 = time.monotonic()
        res = fetcher.fetch(hostile.base_url + "/reset", gap_s=DEADLINE_S + 1)
        assert res.error_kind == ErrorKind.PROTOCOL and time.monotonic() - t0 < 1.0
    finally:
        http._Conn.alive = monkey  # type: ignore[method-assign]


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_cancel_ends_exchanges_in_flight_and_refuses_new_ones(fetcher, hostile, cert, scheme):
    """A stopping crawl does not wait for tricklers: the exchange ends at once, aborted."""
    fetcher._tls.load_verify_locations(cert)
    with start_hostile("127.0.0.6", certfile=cert) if scheme == "https" else hostile_nullcontext(hostile) as srv:
        cancel = http.Cancel()
        results: dict[str, object] = {}

        def run(path: str) -> None:
            results[path] = fetcher.fetch(srv.base_url + path, cancel=cancel)

        threads = [threading.Thread(target=run, args=(p,)) for p in ("/trickle-body", "/trickle-headers")]
        for t in threads:
            t.start()
        time.sleep(0.5)
        t0 = time.monotonic()
        cancel.set()
        for t in threads:
            t.join(DEADLINE_S)
        assert time.monotonic() - t0 < 0.5
        for path, res in results.items():
            assert res.error_kind == ErrorKind.ABORTED, (path, res.error)  # type: ignore[attr-defined]
        before = srv.connections
        late = fetcher.fetch(srv.base_url + "/page", cancel=cancel)
        assert late.error_kind == ErrorKind.ABORTED and late.status is None
        assert srv.connections == before   # nothing was sent
        assert fetcher.fetch(srv.base_url + "/page").content == PAGE   # others go on


class hostile_nullcontext:  # noqa: N801 - a context manager like start_hostile's, for a running server
    def __init__(self, srv: HostileServer) -> None:
        self.srv = srv

    def __enter__(self) -> HostileServer:
        return self.srv

    def __exit__(self, *exc: object) -> None:
        pass


def test_not_before_holds_the_request_until_then(fetcher):
    """Prepared early, sent on time: the host sees nothing before ``not_before``."""
    with start_hostile("127.0.0.3") as srv:
        at = time.time() + 0.3
        res = fetcher.fetch(srv.base_url + "/page", not_before=at)
        assert res.status == 200 and srv.connections == 1
        assert res.started >= at and res.ended >= res.started
        cancel = http.Cancel()
        threading.Timer(0.1, cancel.set).start()
        t0 = time.monotonic()
        late = fetcher.fetch(srv.base_url + "/page", not_before=time.time() + 5, cancel=cancel)
        assert late.error_kind == ErrorKind.ABORTED and time.monotonic() - t0 < 1
        assert srv.connections == 1


def test_release_closes_the_hosts_idle_connection(fetcher):
    """A host given back: its idle keep-alive connection is closed, so the next worker's
    connection is the only one the server sees."""
    with start_hostile("127.0.0.3") as srv:
        assert fetcher.fetch(srv.base_url + "/page").status == 200
        fetcher.release("127.0.0.9:1")   # another host: nothing happens
        assert len(fetcher._idle) == 1
        fetcher.release(srv.base_url.split("//", 1)[1])
        assert not fetcher._idle
        assert fetcher.fetch(srv.base_url + "/page").status == 200
        assert srv.connections == 2


def test_connection_refused(fetcher):
    s = socket.socket()
    s.bind(("127.0.0.4", 0))
    port = s.getsockname()[1]
    s.close()
    refused, _ = timed(fetcher, f"http://127.0.0.4:{port}/")
    assert refused.error_kind == ErrorKind.CONNECT


def test_slow_dns_is_bounded_by_the_deadline():
    """A name whose server never answers, asked with a lookup of 20 s: the exchange waits
    CONNECT_TIMEOUT_S for it, not the lookup's time."""
    with DnsServer({"slow.test": Entry(behaviour=Behaviour.SILENT)}) as dns:
        ip, port = dns.address
        f = Fetcher(dataclasses.replace(Settings(), ALLOW_PRIVATE=True, TOTAL_TIMEOUT_S=DEADLINE_S,
                                        CONNECT_TIMEOUT_S=1.0, DNS_SERVERS=(f"{ip}:{port}",), DNS_TIMEOUT_S=20.0))
        try:
            res, elapsed = timed(f, "http://slow.test/")
        finally:
            f.close()
    assert res.error_kind == ErrorKind.DNS and "no answer within 1.0 s" in res.error
    assert 0.9 < elapsed < DEADLINE_S


def test_url_limits_and_bad_urls(fetcher):
    s = fetcher.settings
    long_url = "http://127.0.0.2/" + "a" * s.MAX_URL_LENGTH
    assert fetcher.fetch(long_url).error_kind == ErrorKind.URL_TOO_LONG
    for bad in ("ftp://127.0.0.2/", "http:///nohost", "http://[::1/", "http://127.0.0.2:99999/"):
        assert fetcher.fetch(bad).error_kind == ErrorKind.BAD_URL, bad


def test_injected_header_values_are_not_sent(hostile, fetcher):
    res = fetcher.fetch(hostile.base_url + "/page", extra_headers={
        "If-None-Match": '"v1"\r\nX-Evil: 1', "If-Modified-Since": "Mon, 01 Jan 2024 00:00:00 GMT"})
    names = [k for k, _ in res.request_headers]
    assert "If-None-Match" not in names and "If-Modified-Since" in names
    assert res.status == 200


def test_many_hostile_fetches_at_once_all_end(hostile, fetcher):
    """The crawl-stall case: threads fetching tricklers and black holes all come back."""
    paths = ["/trickle-headers", "/trickle-body", "/black-hole", "/trickle-status"] * 3
    results: list = [None] * len(paths)

    def run(i: int) -> None:
        results[i] = fetcher.fetch(hostile.base_url + paths[i])

    t0 = time.monotonic()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(paths))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(BOUND_S)
    assert time.monotonic() - t0 < BOUND_S
    assert all(r is not None and r.error_kind == ErrorKind.DEADLINE for r in results)


@pytest.fixture(scope="module")
def cert(tmp_path_factory) -> str:
    """A self-signed certificate for 127.0.0.6 (cert and key in one PEM file)."""
    pem = tmp_path_factory.mktemp("tls") / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-days", "2", "-subj", "/CN=127.0.0.6", "-addext", "subjectAltName=IP:127.0.0.6",
                    "-keyout", str(pem), "-out", str(pem)], check=True, capture_output=True)
    return str(pem)


def test_https_unknown_issuer_is_a_tls_error(fetcher, cert):
    with start_hostile("127.0.0.6", certfile=cert) as srv:
        res, _ = timed(fetcher, srv.base_url + "/page")
    assert res.error_kind == ErrorKind.TLS and "certificate" in res.error


def test_https_new_connection_resumes_the_tls_session(fetcher, cert):
    """A host's keep-alive connection closed between two requests (the server hung up, or
    a session gave the host back): the next connection resumes the TLS session."""
    fetcher._tls.load_verify_locations(cert)
    with start_hostile("127.0.0.6", certfile=cert) as srv:
        first = fetcher.fetch(srv.base_url + "/page")
        fetcher.release(f"{srv.host}:{srv.sock.getsockname()[1]}")   # closes the idle connection
        second = fetcher.fetch(srv.base_url + "/page")
        assert first.content == second.content == PAGE and second.error is None
        assert (srv.connections, srv.tls_resumed) == (2, 1)
        other = Fetcher(fetcher.settings)   # a fetcher without the session: a full handshake
        other._tls.load_verify_locations(cert)
        try:
            assert other.fetch(srv.base_url + "/page").content == PAGE
        finally:
            other.close()
        assert (srv.connections, srv.tls_resumed) == (3, 1)


def test_https_pages_hostile_endpoints_and_keepalive(fetcher, cert):
    fetcher._tls.load_verify_locations(cert)  # trust the test certificate
    with start_hostile("127.0.0.6", certfile=cert) as srv:
        for path in ("/page", "/chunked", "/br-page", "/page"):
            res = fetcher.fetch(srv.base_url + path)
            assert res.content == PAGE and res.error is None, (path, res.error)
        assert srv.connections == 1
        for path in ("/trickle-headers", "/huge", "/gzip-bomb", "/reset", "/http09"):
            kind = CASES[path][0]
            res, _ = timed(fetcher, srv.base_url + path)
            assert res.error_kind == kind, (path, res.error)
