"""HTTP/1.1 for every host of a web from one selector thread, and the request log.

Why one thread: the benchmark runs the crawler on the same small machine, so
serving must be cheap.  Responses are pre-rendered heads plus bodies, sent with
one ``sendmsg`` (no copy of a cached body); connections are kept alive and
pipelined requests answered in order; nothing is logged per request but the
:class:`RequestRecord` tests read.  A host with a delay answers late from a
timer, without stalling the others.

The server knows nothing about pages: a ``Respond`` callable maps
(host index, method, target, headers) to a pre-rendered response.  An optional
``Latency`` callable adds a time to first byte per request (the web's shape, see
:mod:`testweb.shape`); a timer holds it, so thousands of slow answers cost a heap
entry each.

Each listening socket (a :class:`Bind`) serves one host on its own address (the fast
path: no Host header is read unless hosts have names), or several hosts on one
address (virtual hosting: the Host header picks the host; over TLS the SNI name
picks the certificate and the Host must name the same host).  A Host that names no
host of the address gets 421 Misdirected Request, logged, so a crawler that sends
a name to the wrong address is seen.  TLS runs in the same loop: the handshake is
driven by readiness (``SSLWantReadError``/``SSLWantWriteError``), and answers go
out with ``send`` as one buffer (``sendmsg`` does not exist on an SSL socket);
plain connections keep ``sendmsg``.
"""

from __future__ import annotations

import errno
import heapq
import selectors
import socket
import ssl
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from testweb.responses import ConnRecord, RequestRecord, Resp, error_resp

# (host index, method, request target, request headers) -> the response to send
Respond = Callable[[int, str, str, dict[str, str]], Resp]
# (host index, request target) -> seconds before the answer starts, on top of the host's delay
Latency = Callable[[int, str], float]

_MAX_HEAD = 64 * 1024
_MAX_INBUF = 1024 * 1024
_KA = b"Connection: keep-alive\r\n\r\n"
_CLOSE = b"Connection: close\r\n\r\n"
_MISDIRECTED = error_resp(421)
_PORT_TRIES = 20  # attempts to find one port free on every shared address


@dataclass(frozen=True, slots=True)
class Bind:
    """A listening socket to open: its address, the hosts it serves, its TLS context if any.

    Binds with ``shared_port`` and the same scheme get one port number between them,
    so virtual hosts have one port per scheme, as the real web has 80 and 443.
    """

    ip: str
    hosts: tuple[int, ...]  # one host, or several told apart by Host (and SNI)
    tls: ssl.SSLContext | None = None
    shared_port: bool = False


class _Listener:
    """A bound listening socket and what a connection to it needs to know."""

    __slots__ = ("address", "host", "names", "sock", "tls")

    def __init__(self, sock: socket.socket, address: str, host: int, names: dict[str, int] | None,
                 tls: ssl.SSLContext | None) -> None:
        self.sock = sock
        self.address = address  # "ip:port"
        self.host = host  # the one host served here, or -1: the Host header (or SNI) says
        self.names = names  # host name -> index, for the hosts served here; None without names
        self.tls = tls


class _Conn:
    """Per-connection state for the selector loop."""

    __slots__ = (
        "busy", "close_after", "closed", "conn_id", "conn_record", "eof", "events", "handshaking",
        "host_idx", "inbuf", "names", "out", "record", "rx_time", "sni", "sock", "tls",
    )

    def __init__(self, sock: socket.socket, host_idx: int, conn_id: int, conn_record: ConnRecord,
                 names: dict[str, int] | None, tls: bool) -> None:
        self.sock = sock
        self.host_idx = host_idx  # the host of the connection (-1 until SNI or a Host names one)
        self.conn_id = conn_id
        self.conn_record = conn_record
        self.names = names  # as _Listener.names: when set, each request's Host is checked
        self.tls = tls
        self.handshaking = tls
        self.sni = ""  # the server name the TLS client asked for
        self.inbuf = bytearray()
        self.out: list[bytes | memoryview] | None = None  # pending buffers, in order
        self.busy = False  # a response is pending (delayed or being written)
        self.close_after = False
        self.eof = False
        self.closed = False
        self.events = 0  # selector events registered (0: not registered)
        self.record: RequestRecord | None = None
        self.rx_time = 0.0


class Server:
    """Listening sockets for every host, all served by one thread; started once, stopped once.

    ``names`` (per host) turns the Host check on and spells ``hosts``; ``contexts``
    (per host, None for plain HTTP) is what SNI switches a shared address's handshake to.
    """

    def __init__(self, respond: Respond, delays_s: list[float], latency: Latency | None = None,
                 names: Sequence[str] | None = None,
                 contexts: Sequence[ssl.SSLContext | None] | None = None) -> None:
        self._respond = respond
        self._delays_s = delays_s  # per host: seconds before each response is sent
        self._latency = latency
        self._names = names
        self._contexts = contexts
        self.hosts: list[str] = []  # "ip:port" (or "name:port") per host, once started
        self.addresses: list[str] = []  # "ip:port" of each host's listening socket, once started
        self._handshaking: _Conn | None = None  # the connection whose handshake is running
        self.thread: threading.Thread | None = None
        self._log: list[RequestRecord] = []
        self._conn_log: list[ConnRecord] = []
        self._log_lock = threading.Lock()
        self._listeners: list[_Listener] = []
        self._sel: selectors.BaseSelector | None = None
        self._conns: set[_Conn] = set()
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._timer_seq = 0
        self._next_conn_id = 1
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._stopped = False
        self._cpu_final: float | None = None

    # -- lifecycle -------------------------------------------------------------

    def start(self, binds: Sequence[Bind]) -> list[str]:
        """Bind every listening socket (ports chosen by the OS), start serving; returns ``hosts``."""
        if self.thread is not None or self._stopped:
            raise RuntimeError("TestWeb can be started only once")
        for attempt in range(_PORT_TRIES):
            try:
                self._bind(binds)
                break
            except OSError as exc:
                self._close_listeners()
                if exc.errno != errno.EADDRINUSE or attempt == _PORT_TRIES - 1:
                    raise
        sel = selectors.DefaultSelector()
        try:
            for lst in self._listeners:
                sel.register(lst.sock, selectors.EVENT_READ, lst)
            self._wake_r, self._wake_w = socket.socketpair()
            self._wake_r.setblocking(False)
            self._wake_w.setblocking(False)
            sel.register(self._wake_r, selectors.EVENT_READ, None)
        except BaseException:
            self._close_listeners()
            sel.close()
            raise
        for ctx in {*(self._contexts or ()), *(lst.tls for lst in self._listeners)}:
            if ctx is not None:
                ctx.sni_callback = self._on_sni
        self._sel = sel
        self.thread = threading.Thread(target=self._loop, name="testweb", daemon=True)
        self.thread.start()
        return self.hosts

    def _bind(self, binds: Sequence[Bind]) -> None:
        """Open the listening sockets; a shared port taken on a later address raises EADDRINUSE."""
        n_hosts = 1 + max(h for b in binds for h in b.hosts)
        self.hosts = [""] * n_hosts
        self.addresses = [""] * n_hosts
        shared: dict[bool, int] = {}  # TLS or not -> the port its shared binds use, once known
        names = self._names
        for b in binds:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind((b.ip, shared.get(b.tls is not None, 0) if b.shared_port else 0))
                s.listen(1024)
                s.setblocking(False)
            except BaseException:
                s.close()
                raise
            port = s.getsockname()[1]
            if b.shared_port:
                shared[b.tls is not None] = port
            address = f"{b.ip}:{port}"
            for h in b.hosts:
                self.hosts[h] = f"{names[h]}:{port}" if names is not None else address
                self.addresses[h] = address
            self._listeners.append(_Listener(
                s, address, b.hosts[0] if len(b.hosts) == 1 else -1,
                None if names is None else {names[h]: h for h in b.hosts}, b.tls,
            ))

    def _close_listeners(self) -> None:
        for lst in self._listeners:
            lst.sock.close()
        self._listeners.clear()
        self.hosts = []
        self.addresses = []

    def stop(self) -> None:
        """Close every socket and join the serving thread; safe to call twice."""
        if self._stopped:
            return
        self._stopped = True
        if self.thread is not None:
            assert self._wake_w is not None
            try:
                self._wake_w.send(b"x")
            except OSError:
                pass
            self.thread.join()

    def requests(self) -> list[RequestRecord]:
        """Copies of the log records, in the order requests were read."""
        with self._log_lock:
            log = list(self._log)
        return [replace(r) for r in log]

    def connections(self) -> list[ConnRecord]:
        """Copies of the connection records, in the order connections were accepted."""
        with self._log_lock:
            log = list(self._conn_log)
        return [replace(r) for r in log]

    def clear_log(self) -> None:
        with self._log_lock:
            self._log.clear()
            self._conn_log = [r for r in self._conn_log if not r.closed]

    def cpu_seconds(self) -> float:
        """CPU time used by the serving thread so far."""
        if self._cpu_final is not None:
            return self._cpu_final
        t = self.thread
        if t is None or t.ident is None:
            return 0.0
        try:
            return time.clock_gettime(time.pthread_getcpuclockid(t.ident))
        except (AttributeError, OSError):
            return float("nan")

    # -- serving loop ----------------------------------------------------------

    def _loop(self) -> None:
        sel = self._sel
        assert sel is not None
        timers = self._timers
        try:
            while not self._stopped:
                timeout = max(0.0, timers[0][0] - time.monotonic()) if timers else None
                for key, mask in sel.select(timeout):
                    data = key.data
                    try:
                        if data.__class__ is _Conn:
                            if mask & selectors.EVENT_READ and not data.closed:
                                self._on_readable(data)
                            if mask & selectors.EVENT_WRITE and not data.closed:
                                self._on_writable(data)
                        elif data is None:
                            self._drain_wake()
                        else:
                            self._accept(data)
                    except Exception:  # noqa: BLE001 - a bug must not take the whole web down
                        traceback.print_exc()
                        if data.__class__ is _Conn:
                            self._close(data)
                now = time.monotonic()
                while timers and timers[0][0] <= now:
                    fn = heapq.heappop(timers)[2]
                    try:
                        fn()
                    except Exception:  # noqa: BLE001 - as above
                        traceback.print_exc()
        finally:
            self._cpu_final = time.thread_time()
            self._shutdown_sockets()

    def _shutdown_sockets(self) -> None:
        for conn in list(self._conns):
            self._close(conn)
        for lst in self._listeners:
            lst.sock.close()
        self._listeners.clear()
        for w in (self._wake_r, self._wake_w):
            if w is not None:
                w.close()
        if self._sel is not None:
            self._sel.close()
            self._sel = None

    def _drain_wake(self) -> None:
        assert self._wake_r is not None
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:
            pass

    def _accept(self, lst: _Listener) -> None:
        assert self._sel is not None
        h = lst.host
        while True:
            try:
                sock, _ = lst.sock.accept()
            except OSError:  # nothing left to accept, or out of file descriptors: the client retries
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if lst.tls is not None:
                try:
                    sock = lst.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
                except OSError:  # the peer is already gone
                    sock.close()
                    continue
            record = ConnRecord(self.hosts[h] if h >= 0 else "", self._next_conn_id, time.time(), 0.0,
                                lst.address)
            with self._log_lock:
                self._conn_log.append(record)
            conn = _Conn(sock, h, self._next_conn_id, record, lst.names, lst.tls is not None)
            self._next_conn_id += 1
            self._conns.add(conn)
            self._sel.register(sock, selectors.EVENT_READ, conn)
            conn.events = selectors.EVENT_READ

    def _update(self, conn: _Conn) -> None:
        """Register interest: read unless EOF/backlogged, write while output pends."""
        if conn.closed:
            return
        ev = 0
        if not conn.eof and len(conn.inbuf) < _MAX_INBUF:
            ev |= selectors.EVENT_READ
        if conn.out is not None:
            ev |= selectors.EVENT_WRITE
        if ev == conn.events:
            return
        assert self._sel is not None
        if conn.events == 0:
            self._sel.register(conn.sock, ev, conn)
        elif ev == 0:
            self._sel.unregister(conn.sock)
        else:
            self._sel.modify(conn.sock, ev, conn)
        conn.events = ev

    def _want(self, conn: _Conn, ev: int) -> None:
        """Register exactly ``ev`` (during a TLS handshake, which wants what OpenSSL says)."""
        if ev != conn.events:
            assert self._sel is not None
            self._sel.modify(conn.sock, ev, conn)
            conn.events = ev

    def _handshake(self, conn: _Conn) -> None:
        sock = conn.sock
        assert isinstance(sock, ssl.SSLSocket)
        self._handshaking = conn
        try:
            sock.do_handshake()
        except ssl.SSLWantReadError:
            self._want(conn, selectors.EVENT_READ)
            return
        except ssl.SSLWantWriteError:
            self._want(conn, selectors.EVENT_WRITE)
            return
        except OSError as exc:  # the client refused our certificate, spoke plain HTTP, or left
            conn.conn_record.tls_error = getattr(exc, "reason", None) or type(exc).__name__
            self._close(conn)
            return
        finally:
            self._handshaking = None
        conn.handshaking = False
        conn.conn_record.tls = sock.version() or ""
        conn.conn_record.resumed = bool(sock.session_reused)
        self._update(conn)
        self._on_readable(conn)  # the request may have come with the client's Finished

    def _on_sni(self, sock: ssl.SSLSocket | ssl.SSLObject, name: str, ctx: ssl.SSLContext) -> None:
        """SNI names the host: its certificate, and the host the connection serves."""
        conn = self._handshaking
        if conn is None or not name:  # None when the client sent no name
            return
        conn.sni = name = name.lower()
        h = conn.names.get(name, -1) if conn.names is not None else -1
        if h < 0:  # not a host of this address: the default certificate, and 421 to come
            return
        if conn.host_idx < 0:
            conn.host_idx = h
            conn.conn_record.host = self.hosts[h]
        want = self._contexts[h] if self._contexts is not None else None
        if want is not None and want is not ctx:
            sock.context = want

    def _on_readable(self, conn: _Conn) -> None:
        if conn.handshaking:
            self._handshake(conn)
            return
        sock = conn.sock
        try:
            data = sock.recv(262144)
            if conn.tls and data:
                assert isinstance(sock, ssl.SSLSocket)
                while pending := sock.pending():  # decrypted bytes select() cannot see
                    data += sock.recv(pending)
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return
        except OSError:
            self._close(conn)
            return
        if data:
            conn.rx_time = time.time()
            conn.inbuf += data
        else:
            conn.eof = True
        if conn.busy:
            self._update(conn)
        else:
            self._process(conn)

    def _on_writable(self, conn: _Conn) -> None:
        if conn.handshaking:
            self._handshake(conn)
            return
        self._flush(conn)
        if not conn.busy and not conn.closed:
            self._process(conn)

    def _process(self, conn: _Conn) -> None:
        """Handle complete requests in the input buffer, one at a time, in order."""
        buf = conn.inbuf
        while not conn.busy and not conn.closed:
            while buf[:2] == b"\r\n":  # tolerated stray CRLF between requests
                del buf[:2]
            idx = buf.find(b"\r\n\r\n")
            if idx < 0:
                if len(buf) > _MAX_HEAD:
                    self._reject(conn, 431)
                elif conn.eof:
                    self._close(conn)
                else:
                    self._update(conn)
                return
            lines = bytes(buf[:idx]).decode("latin-1").split("\r\n")
            parts = lines[0].split(" ")
            headers: dict[str, str] = {}
            bad = len(parts) != 3 or not parts[2].startswith("HTTP/")
            for line in lines[1:]:
                name, sep, value = line.partition(":")
                if not sep or not name or name[-1] in " \t":
                    bad = True
                    break
                key = name.lower()
                value = value.strip()
                headers[key] = f"{headers[key]}, {value}" if key in headers else value
            if bad:
                del buf[: idx + 4]
                self._reject(conn, 400, lines[0])
                return
            if "transfer-encoding" in headers:
                del buf[: idx + 4]
                self._reject(conn, 501, lines[0], headers)
                return
            try:
                clen = int(headers.get("content-length", "0"))
                if clen < 0:
                    raise ValueError
            except ValueError:
                del buf[: idx + 4]
                self._reject(conn, 400, lines[0], headers)
                return
            if idx + 4 + clen > _MAX_INBUF:  # would never fit the input buffer
                del buf[: idx + 4]
                self._reject(conn, 413, lines[0], headers)
                return
            if len(buf) < idx + 4 + clen:
                if conn.eof:
                    self._close(conn)
                else:
                    self._update(conn)
                return
            del buf[: idx + 4 + clen]
            method, target, version = parts
            tokens = {t.strip().lower() for t in headers.get("connection", "").split(",")}
            keep_alive = "close" not in tokens and (version != "HTTP/1.0" or "keep-alive" in tokens)
            self._dispatch(conn, method, target, headers, keep_alive)

    def _dispatch(self, conn: _Conn, method: str, target: str, headers: dict[str, str],
                  keep_alive: bool) -> None:
        h = conn.host_idx
        if conn.names is not None:
            h = self._route(conn, headers)
            if h < 0:
                self._begin(conn, RequestRecord(
                    host=headers.get("host", ""), path=target, method=method, status=421,
                    start=conn.rx_time, end=0.0, conn_id=conn.conn_id,
                    user_agent=headers.get("user-agent", ""), headers=headers,
                ))
                self._send(conn, _MISDIRECTED, method == "HEAD", keep_alive)
                return
        resp = self._respond(h, method, target, headers)
        self._begin(conn, RequestRecord(
            host=self.hosts[h], path=target, method=method, status=resp[0],
            start=conn.rx_time, end=0.0, conn_id=conn.conn_id,
            user_agent=headers.get("user-agent", ""), headers=headers, host_index=h,
        ))
        delay = self._delays_s[h]
        if self._latency is not None:
            delay += self._latency(h, target)
        if delay <= 0:
            self._send(conn, resp, method == "HEAD", keep_alive)
            return

        def fire() -> None:
            if not conn.closed:
                self._send(conn, resp, method == "HEAD", keep_alive)
                if not conn.busy and not conn.closed:
                    self._process(conn)

        self._timer_seq += 1
        heapq.heappush(self._timers, (time.monotonic() + delay, self._timer_seq, fire))

    def _route(self, conn: _Conn, headers: dict[str, str]) -> int:
        """The host a request's Host names among this address's hosts (over TLS it must be
        the SNI name; without Host, SNI decides); -1 when none."""
        assert conn.names is not None
        raw = headers.get("host")
        if raw is None:
            name = conn.sni
        else:
            name, sep, port = raw.lower().rpartition(":")
            if not (sep and port.isdigit()):
                name = raw.lower()
            name = name.removesuffix(".")
            if conn.sni and name != conn.sni:
                return -1
        h = conn.names.get(name, -1)
        if h >= 0 and conn.host_idx < 0:
            conn.host_idx = h
            conn.conn_record.host = self.hosts[h]
        return h

    def _reject(self, conn: _Conn, status: int, line: str = "",
                headers: dict[str, str] | None = None) -> None:
        """Answer a malformed request and close: its framing can't be trusted."""
        parts = line.split(" ")
        headers = headers or {}
        self._begin(conn, RequestRecord(
            host=conn.conn_record.host, path=parts[1] if len(parts) > 1 else "",
            method=parts[0], status=status, start=conn.rx_time, end=0.0,
            conn_id=conn.conn_id, user_agent=headers.get("user-agent", ""), headers=headers,
            host_index=conn.host_idx,
        ))
        self._send(conn, error_resp(status), False, False)

    def _begin(self, conn: _Conn, rec: RequestRecord) -> None:
        """Log the request before answering, so a client never outruns the log."""
        with self._log_lock:
            self._log.append(rec)
        conn.record = rec
        conn.busy = True

    def _send(self, conn: _Conn, resp: Resp, head_only: bool, keep_alive: bool) -> None:
        _, head, body, forced = resp
        if forced is not None:
            keep_alive = keep_alive and "close" not in forced.lower()
            conn_line = f"Connection: {forced}\r\n\r\n".encode("latin-1")
        else:
            conn_line = _KA if keep_alive else _CLOSE
        conn.close_after = not keep_alive
        if head_only or not body:
            conn.out = [head + conn_line]
        elif conn.tls:  # one SSL write: fewer records, and SSLSocket has no sendmsg
            conn.out = [b"".join((head, conn_line, body))]
        else:
            conn.out = [head + conn_line, body]
        self._flush(conn)

    def _flush(self, conn: _Conn) -> None:
        if conn.tls:
            self._flush_tls(conn)
            return
        out = conn.out
        assert out is not None
        sendmsg = conn.sock.sendmsg
        rec = conn.record
        try:
            while out:
                if rec is not None:
                    # Stamped before each write: once the last one returns the
                    # client may already have read the response and the log.
                    rec.end = time.time()
                n = sendmsg(out)
                while n:
                    first = out[0]
                    if n >= len(first):
                        n -= len(first)
                        del out[0]
                    else:
                        out[0] = memoryview(first)[n:]
                        n = 0
        except (BlockingIOError, InterruptedError):
            self._update(conn)
            return
        except OSError:
            conn.out = None
            self._close(conn)
            return
        conn.out = None
        self._finish(conn)

    def _flush_tls(self, conn: _Conn) -> None:
        """As _flush, with ``send``; after a want-write the same buffer is offered again,
        as OpenSSL requires."""
        out = conn.out
        assert out is not None
        send = conn.sock.send
        rec = conn.record
        try:
            while out:
                if rec is not None:
                    rec.end = time.time()
                first = out[0]
                n = send(first)
                if n >= len(first):
                    del out[0]
                else:
                    out[0] = memoryview(first)[n:]
        except (BlockingIOError, InterruptedError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
            self._update(conn)
            return
        except OSError:
            conn.out = None
            self._close(conn)
            return
        conn.out = None
        self._finish(conn)

    def _finish(self, conn: _Conn) -> None:
        """The response is fully written: close, or await the next request."""
        conn.record = None
        conn.busy = False
        if conn.close_after:
            self._close(conn)
        else:
            self._update(conn)

    def _close(self, conn: _Conn) -> None:
        if conn.closed:
            return
        conn.closed = True
        if conn.record is not None:  # peer left (or we stopped) before the response was done
            conn.record.end = time.time()
            conn.record = None
        if conn.events and self._sel is not None:
            try:
                self._sel.unregister(conn.sock)
            except (KeyError, ValueError):
                pass
        conn.events = 0
        if not conn.handshaking:  # reading there would drive the handshake on
            try:
                for _ in range(16):  # unread input would make close() send a RST
                    if not conn.sock.recv(65536):
                        break
            except OSError:
                pass
            if isinstance(conn.sock, ssl.SSLSocket):
                try:
                    conn.sock.unwrap()  # close_notify, best effort
                except (OSError, ValueError):
                    pass
        try:
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        conn.sock.close()
        conn.conn_record.closed = time.time()
        self._conns.discard(conn)
