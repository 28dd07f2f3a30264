"""A hostile HTTP server on 127.0.0.x for fetcher and end-to-end tests.

Raw sockets, not http.server, so it can misbehave on purpose: bombs, endless and
trickling bodies, trickling header blocks, 100k headers, resets, a black hole,
HTTP/0.9 and garbage status lines. Every endpoint stops promptly on ``stop()``
(waits use the stop event), big bodies are streamed (never held in memory), and
the normal pages keep the connection alive, so a test can count reuse.

    srv = start_hostile()            # srv.base_url == "http://127.0.0.2:PORT"
    fetcher.fetch(srv.base_url + "/gzip-bomb")
    srv.stop()

``start_hostile(certfile=...)`` serves the same endpoints over TLS (``https://``).
``srv.tls_trickle_url`` is a second listener that answers a TLS ClientHello with a
record header and then one byte every TRICKLE_S (a handshake that never ends).
"""
from __future__ import annotations

import gzip
import socket
import ssl
import struct
import threading
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from urllib.parse import parse_qs, urlsplit

import brotli  # type: ignore[import-untyped]

TRICKLE_S = 2.0
BOMB_DECODED_BYTES = 100 * 1024 * 1024
HUGE_BODY_BYTES = 200 * 1024 * 1024
MANY_HEADERS = 100_000
PAGE = (b"<!doctype html><html><head><title>normal</title></head><body>"
        + b"<p>hello hostile world</p>" * 200 + b"</body></html>")
_ZERO_MB = b"\0" * (1024 * 1024)


@cache
def bomb(coding: str) -> bytes:
    """BOMB_DECODED_BYTES of zeros in one content coding (built once, in pieces)."""
    if coding == "br":
        comp = brotli.Compressor(quality=1)
        parts = [comp.process(_ZERO_MB) for _ in range(BOMB_DECODED_BYTES // len(_ZERO_MB))]
        return b"".join(parts) + comp.finish()
    z = zlib.compressobj(9, zlib.DEFLATED, 31 if coding == "gzip" else 15)
    parts = [z.compress(_ZERO_MB) for _ in range(BOMB_DECODED_BYTES // len(_ZERO_MB))]
    return b"".join(parts) + z.flush()


def page_of(size: int) -> bytes:
    """An HTML page of about ``size`` bytes (the bench's 140 KB page)."""
    unit = b"<p>a paragraph of ordinary text with <a href='/x'>a link</a> in it.</p>\n"
    return b"<html><body>" + unit * max(1, size // len(unit)) + b"</body></html>"


@dataclass
class HostileServer:
    host: str
    sock: socket.socket
    tls_sock: socket.socket
    tls: ssl.SSLContext | None = None   # server side, when the endpoints speak https
    stopping: threading.Event = field(default_factory=threading.Event)
    connections: int = 0          # connections accepted on the HTTP listener
    tls_resumed: int = 0          # of which TLS handshakes that resumed a session
    _threads: list[threading.Thread] = field(default_factory=list)
    _open: set[socket.socket] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def base_url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{self.host}:{self.sock.getsockname()[1]}"

    @property
    def tls_trickle_url(self) -> str:
        return f"https://{self.host}:{self.tls_sock.getsockname()[1]}/"

    def stop(self) -> None:
        """Close the listeners and end every handler (each waits on ``stopping``)."""
        self.stopping.set()
        with self._lock:
            sockets = [self.sock, self.tls_sock, *self._open]
            threads = list(self._threads)
        for s in sockets:  # shutdown wakes a thread blocked in accept() or recv()
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        for t in threads:
            t.join(timeout=5)

    def __enter__(self) -> HostileServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- plumbing ---------------------------------------------------------------------

    def _accept_loop(self, listener: socket.socket, handler: Callable[[socket.socket], None],
                     count: bool) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            t = threading.Thread(target=self._guard, args=(handler, conn), daemon=True)
            with self._lock:
                self.connections += count
                self._open.add(conn)
                self._threads = [x for x in self._threads if x.is_alive()] + [t]
            t.start()

    def _guard(self, handler: Callable[[socket.socket], None], conn: socket.socket) -> None:
        conn.settimeout(30)
        try:
            if self.tls is not None and handler == self._serve:
                conn = self.tls.wrap_socket(conn, server_side=True)
                with self._lock:
                    self.tls_resumed += conn.session_reused
            handler(conn)
        except OSError:
            pass  # the client hung up: expected for every hostile endpoint
        finally:
            with self._lock:
                self._open.discard(conn)
            conn.close()

    def _serve(self, conn: socket.socket) -> None:
        """Requests on one connection, one after another, while the endpoint keeps it."""
        buf = b""
        while not self.stopping.is_set():
            while b"\r\n\r\n" not in buf:
                data = conn.recv(65536)
                if not data:
                    return
                buf += data
            head, buf = buf.split(b"\r\n\r\n", 1)
            target = head.split(b"\r\n", 1)[0].split(b" ")[1].decode("latin-1")
            parts = urlsplit(target)
            endpoint = ENDPOINTS.get(parts.path, _not_found)
            if not endpoint(self, conn, parse_qs(parts.query)):
                return

    def _tls_trickle(self, conn: socket.socket) -> None:
        conn.recv(65536)  # the ClientHello
        conn.sendall(b"\x16\x03\x03\x40\x00")  # a handshake record of 16 KB announced ...
        while not self.stopping.wait(TRICKLE_S):
            conn.sendall(b"\x02")  # ... and delivered one byte at a time

    def wait(self, seconds: float) -> bool:
        """Sleep unless stopping; True when the server is stopping."""
        return self.stopping.wait(seconds)


def _head(status: str, headers: Sequence[tuple[str, str]]) -> bytes:
    lines = [f"HTTP/1.1 {status}"] + [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _send(conn: socket.socket, status: str, body: bytes, headers: Sequence[tuple[str, str]] = ()) -> bool:
    conn.sendall(_head(status, [*headers, ("Content-Length", str(len(body)))]) + body)
    return True


Endpoint = Callable[[HostileServer, socket.socket, dict[str, list[str]]], bool]


def _page(srv: HostileServer, conn: socket.socket, q: dict[str, list[str]]) -> bool:
    """A normal page, kept alive (``?size=N`` for a page of about N bytes)."""
    body = page_of(int(q["size"][0])) if "size" in q else PAGE
    return _send(conn, "200 OK", body, [("Content-Type", "text/html; charset=utf-8")])


def _page_then_close(srv: HostileServer, conn: socket.socket, q: dict[str, list[str]]) -> bool:
    """Promises keep-alive, then closes: the client's next request needs a new connection."""
    _send(conn, "200 OK", PAGE, [("Content-Type", "text/html")])
    return False


def _chunked(srv: HostileServer, conn: socket.socket, q: dict[str, list[str]]) -> bool:
    conn.sendall(_head("200 OK", [("Content-Type", "text/html"), ("Transfer-Encoding", "chunked")]))
    for i in range(0, len(PAGE), 1000):
        piece = PAGE[i:i + 1000]
        conn.sendall(b"%x;ext=1\r\n%s\r\n" % (len(piece), piece))
    conn.sendall(b"0\r\nX-Trailer: yes\r\n\r\n")
    return True


def _close_delimited(srv: HostileServer, conn: socket.socket, q: dict[str, list[str]]) -> bool:
    conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/html\r\n\r\n" + PAGE)
    return False


def _bomb_endpoint(coding: str) -> Endpoint:
    def handler(srv: HostileServer, conn: socket.socket, q: dict[str, list[str]]) -> bool:
        return _send(conn, "200 OK", bomb(coding), [("Content-Type", "text/html"), ("Content-Encoding", coding)])
    handler.__doc__ = f"{BOMB_DECODED_BYTES} bytes of zeros, {coding}-coded"
    return handler


def _huge(srv: HostileServer, conn: socket.socket, q: dict[str, list[str]]) -> bool:
    """HUGE_BODY_BYTES announced and streamed until the client hangs up."""
    chunked = "chunked" in q
    framing = ("Transfer-Encoding", "chunked") if chunked else ("Content-Length", str(HUGE_BODY_BYTES))
    conn.sendall(_head("200 OK", [("Content-Type", "text/html"), framing]))
    piece = b"<p>" + b"x" * (64 * 1024 - 7) + b"</p>"
    frame = b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece
    for _ in range(HUGE_BODY_BYTES // len(piece)):
        if srv.stopping.is_set():
            break
        conn.sendall(frame)
    return False


def _trickle_body(srv: HostileServer, conn: socket.socket, q: dict[str, list[str]]) -> bool:
    conn.sendall(_head("200 OK", [("Content-Type", "text/html"), ("Content-Length", "100000")]))
    while not srv.wait(TRICKLE_S):
        conn.sendall(b"x")
    return False


def _trickle_headers(srv: HostileServer, conn: socket.socket, q: dict[str, list[str]]) -> bool:
    conn.sendall(b"HTTP/1.1 200 OK\r\n")
    while not srv.wait(TRICKLE_S):
        conn.sendall(b"X")  # one endless header name, a byte at a time
    return False


def _trickle_status(srv: HostileServer, conn: socket.socket, q: dict[str, list[str]]) -> bool:
    for byte in b"HTTP/1.1 200 OK\r\n":
        if srv.wait(TRICKLE_S):
            break
        conn.sendall(bytes([byte]))
    return False


def _many_headers(srv: HostileServer, conn: socket.socket, q: dict[str, list[str]]) -> bool:
    """MANY_HEADERS short header lines (streamed), then a body that never comes."""
    conn.sendall(b"HTTP/1.1 200 OK\r\n")
    line = b"X-A: b\r\n"
    for _ in range(MANY_HEADERS // 1000):
        conn.sendall(line * 1000)
    conn.sendall(b"Content-Length: 2\r\n\r\nok")
    return False


def _big_header(srv: HostileServer, conn: socket.socket, q: dict[str, list[str]]) -> bool:
    """One 1 MB header line."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nX-Big: " + b"y" * (1024 * 1024) + b"\r\nContent-Length: 0\r\n\r\n")
    return False


def _reset(conn: socket.socket) -> None:
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


def _reset_before(srv: HostileServer, conn: socket.socket, q: dict[str, list[str]]) -> bool:
    """The request is read, then the connection is reset (RST, not FIN)."""
    _reset(conn)
    return False


def _reset_mid_body(srv: HostileServer, conn: socket.socket, q: dict[str, list[str]]) -> bool:
    conn.sendall(_head("200 OK", [("Content-Type", "text/html"), ("Content-Length", "100000")]) + b"x" * 5000)
    srv.wait(0.2)
    _reset(conn)
    return False


def _short_body(srv: HostileServer, conn: socket.socket, q: dict[str, list[str]]) -> bool:
    """Content-Length promises more than is sent before a clean close."""
    conn.sendall(_head("200 OK", [("Content-Type", "text/html"), ("Content-Length", "100000")]) + b"x" * 5000)
    return False


def _black_hole(srv: HostileServer, conn: socket.socket, q: dict[str, list[str]]) -> bool:
    """Reads the request and never answers."""
    srv.wait(3600)
    return False


def _redirect_loop(srv: HostileServer, conn: socket.socket, q: dict[str, list[str]]) -> bool:
    n = int(q.get("n", ["0"])[0])
    return _send(conn, "302 Found", b"", [("Location", f"/redirect-loop?n={(n + 1) % 2}")])


def _http09(srv: HostileServer, conn: socket.socket, q: dict[str, list[str]]) -> bool:
    """An HTTP/0.9 answer: the body straight away, no status line, no headers."""
    conn.sendall(b"<html><body>HTTP/0.9 lives</body></html>\n")
    return False


def _garbage_status(srv: HostileServer, conn: socket.socket, q: dict[str, list[str]]) -> bool:
    conn.sendall(b"HTTP/1.1 2OO OKAY-ISH\r\nContent-Length: 2\r\n\r\nok")
    return False


def _extra_bytes(srv: HostileServer, conn: socket.socket, q: dict[str, list[str]]) -> bool:
    """More bytes than Content-Length says, on a kept-alive connection."""
    conn.sendall(_head("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
                 + b"okHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nforged")
    return True


def _not_http(srv: HostileServer, conn: socket.socket, q: dict[str, list[str]]) -> bool:
    """Another protocol's banner on the HTTP port."""
    conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
    srv.wait(1)
    return False


def _gzip_page(srv: HostileServer, conn: socket.socket, q: dict[str, list[str]]) -> bool:
    return _send(conn, "200 OK", gzip.compress(PAGE), [("Content-Type", "text/html"), ("Content-Encoding", "gzip")])


def _br_page(srv: HostileServer, conn: socket.socket, q: dict[str, list[str]]) -> bool:
    return _send(conn, "200 OK", brotli.compress(PAGE), [("Content-Type", "text/html"), ("Content-Encoding", "br")])


def _early_hints(srv: HostileServer, conn: socket.socket, q: dict[str, list[str]]) -> bool:
    """A 103 informational response before the real one."""
    conn.sendall(b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n")
    return _send(conn, "200 OK", PAGE, [("Content-Type", "text/html")])


def _not_found(srv: HostileServer, conn: socket.socket, q: dict[str, list[str]]) -> bool:
    return _send(conn, "404 Not Found", b"nope", [("Content-Type", "text/plain")])


ENDPOINTS: dict[str, Endpoint] = {
    "/page": _page,
    "/page-then-close": _page_then_close,
    "/chunked": _chunked,
    "/close-delimited": _close_delimited,
    "/gzip-page": _gzip_page,
    "/br-page": _br_page,
    "/early-hints": _early_hints,
    "/gzip-bomb": _bomb_endpoint("gzip"),
    "/deflate-bomb": _bomb_endpoint("deflate"),
    "/br-bomb": _bomb_endpoint("br"),
    "/huge": _huge,
    "/trickle-body": _trickle_body,
    "/trickle-headers": _trickle_headers,
    "/trickle-status": _trickle_status,
    "/many-headers": _many_headers,
    "/big-header": _big_header,
    "/reset": _reset_before,
    "/reset-mid-body": _reset_mid_body,
    "/short-body": _short_body,
    "/black-hole": _black_hole,
    "/redirect-loop": _redirect_loop,
    "/http09": _http09,
    "/garbage-status": _garbage_status,
    "/not-http": _not_http,
    "/extra-bytes": _extra_bytes,
}


def start_hostile(host: str = "127.0.0.2", certfile: str | None = None) -> HostileServer:
    """Start the server on ``host`` (any 127.0.0.x), free ports; returns it running.
    With ``certfile`` (cert and key in one PEM) the endpoints are served over TLS."""
    listeners = []
    for _ in range(2):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, 0))
        s.listen(128)
        listeners.append(s)
    srv = HostileServer(host, listeners[0], listeners[1])
    if certfile:
        srv.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        srv.tls.load_cert_chain(certfile)
    for listener, handler, count in ((srv.sock, srv._serve, True), (srv.tls_sock, srv._tls_trickle, False)):
        t = threading.Thread(target=srv._accept_loop, args=(listener, handler, count), daemon=True)
        srv._threads.append(t)
        t.start()
    return srv
