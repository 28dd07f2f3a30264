"""HTTP/1.1 fetching under one deadline per exchange, over plain sockets, one connection per host.

Policy: a fetch never raises and never hangs for anything the server or the
network does; the result carries ``error_kind`` (an ``ErrorKind``) and a human
``error`` instead. What we connect to is the address we resolved and checked
(the process's resolver, ``fetch/dns.py``, + private-address refusal); the host name goes in ``Host`` and TLS
SNI only, so nothing does a second lookup. Redirects are not followed here; the
3xx and its ``Location`` are returned, and the caller enqueues the target like a
link. robots.txt and sitemaps come through ``fetch`` too.

Why our own client: a peer that trickles its header block one byte every 2 s
never trips a per-read timeout, and urllib3/http.client read the status line and
headers with no overall bound. Here every blocking step gets what is left of
TOTAL_TIMEOUT_S: DNS (a lookup waited for, not run, on the thread), connect, the TLS handshake and
every recv (CPython bounds one SSL call by its socket timeout as a whole), each
capped also by CONNECT_TIMEOUT_S / READ_TIMEOUT_S of silence. When the budget is
gone the socket is shut down and closed. So an exchange costs at most
TOTAL_TIMEOUT_S plus the decoding of a capped body.

Limits, each a specific result: header count (MAX_HEADERS) and header block
size (MAX_HEADER_BYTES), a status-line check (HTTP/0.9 answers and garbage are
errors, not silent drops), the raw body cap (``truncated="length"``), the
decoded-size cap for gzip/deflate/br bombs (``truncated="decoded-length"``) and
the URL length. A cut body keeps its status and what was read; the connection is
then closed rather than reused.

TLS sessions are resumed: the session (a TLS 1.3 ticket, or a TLS 1.2 session id) of
each origin's last connection is kept, so that the next connection to it, after the
server or a session that gave the host back closed the last one, resumes instead of
doing a full handshake: no certificate chain to parse and verify, no signature. A
session that resumes is offered again as it is (CPython copies a session it hands out,
~0.4 ms). On loopback a 60 kB page on a new connection took 1.6 ms of client CPU
resumed against 2.4 ms with a full handshake (P-256 certificate; ``bench/fetch_cpu.py
--tls``). The session is the origin's own (host and port, the name sent as SNI), so it
is never offered to another server.

Whom TLS trusts (certifi's roots plus the operator's CAs) and how a failed handshake
reads in a record ("certificate expired", "certificate for another name") is
``fetch/tls.py``'s: a certificate error is a TLS record, not retried.

Through an HTTP proxy (``proxy_for``, fetch/proxy.py: PROXY_URL, the environment's
variables, NO_PROXY; None when no proxy is set, and then no proxy work a request): an
http:// URL goes to the proxy in absolute form, an https:// one through a CONNECT tunnel
with TLS end to end to the target (its certificate checked as ever). The proxy leg keeps
the limits: connect, the CONNECT answer (header caps) and the exchange share the one
deadline. A proxied connection is kept under its target's origin like any other and
reused only for the same proxy, never for another host, so one connection per host holds.
Credentials go as Proxy-Authorization to the proxy only (not in ``request_headers``).
A non-2xx answer to CONNECT, a 407 to a GET, a proxy unreachable or silent are CONNECT,
TIMEOUT or DEADLINE records naming the proxy by its label; its other answers to a GET
(502, 504, tinyproxy's 401 for bad credentials) cannot be told from the site's and are
recorded as the site's.

The address gate through a proxy: the proxy resolves the name it is sent, so the crawler
cannot see the address finally reached. The crawler still resolves every target itself
and refuses private, loopback, link-local and metadata targets, names and literals alike,
exactly as without a proxy (ALLOW_PRIVATE, ALLOW_METADATA_ADDRESSES), before a byte goes
to the proxy: a proxy is no way in to internal addresses. A name the crawler cannot
resolve is a DNS record, even if the proxy could. The proxy is sent the name, not the
vetted address (proxies filter by name; TLS needs it), so a name that resolves otherwise
at the proxy (split horizon, DNS rebinding) reaches what the proxy resolves: that last
check is the proxy's own policy. The proxy's address is the operator's and is not gated;
``FetchResult.ip`` is the target's vetted address.
"""
from __future__ import annotations

import re
import select
import socket
import ssl
import threading
import time
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import NamedTuple
from urllib.parse import quote, urlsplit

import brotli
import idna

from crawler_tasks.fetch.dns import AnswerKind, Resolver
from crawler_tasks.fetch.netsafety import (
    AddressRefused,
    ResolveError,
    check_address,
    hosts_file,
    literal_address,
    parse_resolve_overrides,
)
from crawler_tasks.fetch.proxy import Proxy, ProxyChoice, ProxyRules
from crawler_tasks.fetch.tls import client_context, tls_reason
from crawler_tasks.records import ErrorKind
from crawler_tasks.settings import Settings

ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,text/plain;q=0.8,*/*;q=0.5"
ACCEPT_ENCODING = "gzip, deflate, br"
# One read at most, into the reading thread's own buffer (recv_into): a fresh 256 KiB object a
# read, shrunk to what came, left the fetch process's heap 295 of 350 MiB free but held
# (hundreds of threads reading at once, two malloc arenas)
RECV_BYTES = 64 * 1024
MAX_POOLS = 2048            # idle keep-alive connections kept per Fetcher (LRU)
MAX_INTERIM = 8             # 1xx responses skipped before the real one
MAX_VERDICTS = 65_536       # address verdicts kept per Fetcher
MAX_TLS_SESSIONS = 4096     # TLS sessions kept for resumption per Fetcher (LRU)


@dataclass(slots=True)
class FetchResult:
    url: str
    started: float                       # epoch seconds
    ended: float = 0.0
    status: int | None = None
    reason: str = ""
    headers: list[tuple[str, str]] = field(default_factory=list)   # as received
    request_headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""                    # raw payload as transferred (content-coded), capped
    content: bytes = b""                 # decoded payload (gzip/deflate/br removed), capped
    truncated: str | None = None         # "length" | "time" | "disconnect" | "decoded-length"
    ip: str | None = None
    error: str | None = None
    error_kind: ErrorKind | None = None
    # lower-case name -> first value, indexed from ``headers`` (that list) on the first lookup
    _names: dict[str, str] | None = field(default=None, init=False, repr=False, compare=False)
    _names_of: list[tuple[str, str]] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def duration_s(self) -> float:
        return max(0.0, self.ended - self.started)

    def header(self, name: str) -> str | None:
        """The first value of a header (a dozen lookups a turn: the names are indexed once)."""
        names = self._names
        if names is None or self._names_of is not self.headers:
            names = self._names = {}
            for key, value in self.headers:
                names.setdefault(key.lower(), value)
            self._names_of = self.headers
        return names.get(name.lower())

    @property
    def content_type(self) -> str:
        return (self.header("content-type") or "").strip()

    @property
    def location(self) -> str | None:
        return self.header("location") if self.status and 300 <= self.status < 400 else None


class _Fail(Exception):
    """One exchange ended with ``kind``. ``unanswered``: the peer hung up before a byte of
    an answer, which on a reused keep-alive connection means the server had closed it
    (the request is then sent once more on a new connection)."""

    def __init__(self, kind: ErrorKind, message: str, unanswered: bool = False) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.unanswered = unanswered


class Cancel:
    """Ends the exchanges started with it: ``set`` shuts their sockets down (whatever the
    peer trickles) and none starts after it. A stopping crawl uses it, so that no server
    holds the shutdown for an exchange's whole deadline; an aborted exchange comes back
    as ``ErrorKind.ABORTED``, which its caller must not record (its URL stays queued)."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._conns: set[_Conn] = set()

    def set(self) -> None:
        with self._lock:
            self._event.set()
            conns = list(self._conns)
        for conn in conns:
            conn.abort()

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout_s: float) -> bool:
        return self._event.wait(timeout_s)

    def enter(self, conn: _Conn) -> None:
        with self._lock:
            if self._event.is_set():
                raise _aborted()
            self._conns.add(conn)

    def leave(self, conn: _Conn) -> None:
        with self._lock:
            self._conns.discard(conn)


def _aborted() -> _Fail:
    return _Fail(ErrorKind.ABORTED, "the crawl stopped during the exchange")


def _pause(seconds: float, cancel: Cancel | None) -> None:
    """Wait before contacting the host; _Fail(ABORTED) if ``cancel`` is set meanwhile."""
    if cancel is None:
        time.sleep(seconds)
    elif cancel.wait(seconds):
        raise _aborted()


_STATUS_LINE = re.compile(rb"HTTP/1\.([0-9]) +([1-9][0-9][0-9])(?: ([^\r\n]*))?\r?", re.IGNORECASE)
_HEAD_END = re.compile(rb"\r?\n\r?\n")
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_BAD_VALUE = re.compile(r"[\r\n\0]")
_UNSAFE_TARGET = re.compile(r"[^\x21-\x7e]")
_TARGET_SAFE = "/?#[]@!$&'()*+,;=:%~-._"


class _Conn:
    """One socket and its read buffer, with the deadline of the exchange it serves."""

    __slots__ = ("sock", "ip", "via", "buf", "deadline", "read_timeout_s", "budget_s", "phase", "got_bytes",
                 "aborted", "tls_kept")

    def __init__(self, sock: socket.socket, ip: str, via: Proxy | None = None) -> None:
        self.sock = sock
        self.tls_kept = False   # its TLS session is kept for the next connection to the origin
        self.ip = ip            # the target's vetted address (also when the socket is to ``via``)
        self.via = via
        self.buf = bytearray()
        self.deadline = 0.0
        self.read_timeout_s = 0.0
        self.budget_s = 0.0
        self.phase = ""
        self.got_bytes = False
        self.aborted = False

    def start(self, deadline: float, read_timeout_s: float, budget_s: float) -> None:
        self.deadline, self.read_timeout_s, self.budget_s = deadline, read_timeout_s, budget_s
        self.got_bytes = False

    def arm(self) -> None:
        """Socket timeout = min(silence allowed, what is left of the deadline)."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise self.deadline_passed()
        timeout = min(self.read_timeout_s, left)
        if timeout != self.sock.gettimeout():   # setting it lets go of the GIL (see output/warc.py)
            self.sock.settimeout(timeout)

    def deadline_passed(self) -> _Fail:
        return _Fail(ErrorKind.DEADLINE, f"exchange deadline of {self.budget_s:g} s passed while {self.phase}")

    def timed_out(self) -> _Fail:
        if time.monotonic() >= self.deadline - 0.005:
            return self.deadline_passed()
        return _Fail(ErrorKind.TIMEOUT, f"no data for {self.read_timeout_s:g} s while {self.phase}")

    def read_into(self, sink: bytearray, n: int) -> int:
        """Up to n bytes appended to ``sink``; 0 at EOF. Raises _Fail on timeout, deadline or reset."""
        self.arm()
        view = _scratch()
        try:
            got = self.sock.recv_into(view, min(n, RECV_BYTES))
        except TimeoutError:
            raise self.timed_out() from None
        except ssl.SSLError as exc:
            raise _Fail(ErrorKind.TLS, f"TLS error while {self.phase}: {tls_reason(exc)}") from None
        except OSError as exc:
            raise _Fail(ErrorKind.PROTOCOL, f"{_os_reason(exc)} while {self.phase}",
                        unanswered=not self.got_bytes) from None
        if got:
            self.got_bytes = True
            sink += view[:got]
        return got

    def fill(self) -> bool:
        """Read more into the buffer; False at EOF."""
        return bool(self.read_into(self.buf, RECV_BYTES))

    def readline(self, limit: int) -> bytes | None:
        """One line (without its end) from the buffer, reading more as needed; None at EOF."""
        start = 0
        while True:
            end = self.buf.find(b"\n", start)
            if end >= 0:
                line = bytes(self.buf[:end]).rstrip(b"\r")
                del self.buf[:end + 1]
                return line
            if len(self.buf) > limit:
                raise _Fail(ErrorKind.PROTOCOL, f"line over {limit} bytes while {self.phase}")
            start = len(self.buf)
            if not self.fill():
                return None

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def abort(self) -> None:
        """From another thread: the exchange's blocked read returns at once. The plain
        socket's shutdown, not SSLSocket's, which drops the TLS object under the reader."""
        self.aborted = True
        try:
            socket.socket.shutdown(self.sock, socket.SHUT_RDWR)
        except OSError:
            pass

    def alive(self) -> bool:
        """An idle connection is usable when nothing (EOF, stray bytes) is waiting on it."""
        try:
            poller = select.poll()
            poller.register(self.sock, select.POLLIN | select.POLLERR | select.POLLHUP)
            return not poller.poll(0)
        except (OSError, ValueError):
            return False


_reading = threading.local()


def _scratch() -> memoryview:
    """The calling thread's read buffer (a connection is read by one thread at a time)."""
    view: memoryview | None = getattr(_reading, "view", None)
    if view is None:
        view = _reading.view = memoryview(bytearray(RECV_BYTES))
    return view


def _os_reason(exc: OSError) -> str:
    if isinstance(exc, ConnectionResetError):
        return "connection reset by peer"
    if isinstance(exc, BrokenPipeError):
        return "connection closed by peer (broken pipe)"
    return f"{type(exc).__name__}: {exc}"


class Origin(NamedTuple):
    """Where a connection goes, and the key of the idle connection kept for it."""

    scheme: str
    host: str   # ASCII (IDNA) host name
    port: int


@dataclass(slots=True)
class _Request:
    """One GET on its way, as the private steps of an exchange share it."""

    origin: Origin
    ip: str                  # the vetted address: a kept connection to another one is not reused
    request: bytes           # the request head, as sent
    deadline: float          # monotonic s: the one deadline of the exchange
    result: FetchResult      # filled as the answer comes
    cap: int                 # body bytes kept
    decoded_cap: int         # bytes after content decoding
    cancel: Cancel | None    # the crawl stops: end the exchange
    gap_s: float             # the host's delay, before a request again on a new connection
    proxy: Proxy | None      # the HTTP proxy it goes through, if any


class Fetcher:
    """One per worker process; thread-safe (a connection serves one exchange at a time)."""

    def __init__(self, settings: Settings, resolver: Resolver | None = None,
                 proxy_for: ProxyChoice | None = None) -> None:
        self.settings = settings
        # the one choice of a target's proxy (fetch/proxy.py): PROXY_URL, NO_PROXY and the
        # environment's variables, read once here, unless a caller (a job's per-site rules)
        # gives its own; None: no proxy anywhere, and no proxy work a request
        if proxy_for is None:
            rules = ProxyRules.from_settings(settings)
            proxy_for = rules.proxy_for if rules is not None else None
        self.proxy_for = proxy_for
        s = settings
        # the process's own asynchronous resolver (fetch/dns.py); names pinned by RESOLVE,
        # then /etc/hosts (as nsswitch's "files dns"), are never asked
        self.resolver = resolver or Resolver(s.dns_servers(), timeout_s=s.DNS_TIMEOUT_S, tries=s.DNS_TRIES,
                                             min_ttl_s=s.DNS_MIN_TTL_S, max_ttl_s=s.DNS_MAX_TTL_S)
        self._pins = {**hosts_file(), **parse_resolve_overrides(s.RESOLVE)}
        self._dns_counted: dict[str, int] = {}   # the resolver's counters as last handed on
        # one idle keep-alive connection per origin (scheme, ASCII host, port)
        self._idle: OrderedDict[Origin, _Conn] = OrderedDict()
        self._lock = threading.Lock()
        # the verdict on each address, which depends on nothing but the settings
        # (parsing an address with ipaddress costs ~0.1 ms a turn otherwise)
        self._verdicts: dict[str, tuple[str, str | None] | None] = {}
        self._tls = client_context(settings)   # certifi's roots + CA_BUNDLE, SSL_CERT_FILE/DIR (fetch/tls.py)
        self._tls.set_alpn_protocols(["http/1.1"])
        self._tls_sessions: OrderedDict[Origin, ssl.SSLSession] = OrderedDict()   # for resumption

    def close(self) -> None:
        with self._lock:
            conns = list(self._idle.values())
            self._idle.clear()
        for conn in conns:
            conn.close()
        self.resolver.close()

    def dns_counts(self) -> dict[str, int]:
        """The resolver's counters since the last call (``dns/<name>`` in the crawl's stats);
        gauges left out."""
        with self._lock:
            now = {k: v for k, v in self.resolver.stats.items() if k not in ("in_flight", "cached")}
            delta = {k: v - self._dns_counted.get(k, 0) for k, v in now.items() if v != self._dns_counted.get(k, 0)}
            self._dns_counted = now
        return delta

    def pinned(self, host: str) -> str | None:
        """The address a host needs no lookup for: an IP literal, or a name RESOLVE or
        /etc/hosts pins."""
        return literal_address(host) or self._pins.get(host.strip().lower().rstrip("."))

    def check_host(self, host: str, wait_s: float | None = None) -> str:
        """Resolve and vet a host before anything is sent to it; returns the address.
        A name the resolver holds no answer for is looked up, waiting at most ``wait_s``
        (CONNECT_TIMEOUT_S): a fetch session looks its hosts up before their turns, so
        this wait is for the odd redirect hop to a new host.
        Raises AddressRefused (private target) or ResolveError (DNS)."""
        ip = self.pinned(host)
        if ip is None:
            name = host.strip().lower().rstrip(".")
            answer = self.resolver.cached(name) or self.resolver.resolve(
                name, self.settings.CONNECT_TIMEOUT_S if wait_s is None else wait_s)
            if answer.kind != AnswerKind.OK:
                raise ResolveError(answer.reason, host=host, temporary=answer.kind == AnswerKind.TEMPORARY)
            ip = answer.addresses[0]
        try:
            verdict = self._verdicts[ip]
        except KeyError:
            try:
                check_address(ip, self.settings.ALLOW_PRIVATE, self.settings.ALLOW_METADATA_ADDRESSES)
                verdict = None
            except AddressRefused as exc:
                verdict = (exc.reason, exc.category)
            if len(self._verdicts) >= MAX_VERDICTS:
                self._verdicts.clear()
            self._verdicts[ip] = verdict
        if verdict is not None:
            raise AddressRefused(verdict[0], ip=ip, category=verdict[1])
        return ip

    def fetch(self, url: str, extra_headers: dict[str, str] | None = None,
              max_body_bytes: int | None = None, max_decoded_bytes: int | None = None, *,
              cancel: Cancel | None = None, gap_s: float | None = None,
              not_before: float = 0.0) -> FetchResult:
        """GET one URL under every limit and one deadline; never raises, never hangs.
        ``gap_s``: the host's politeness delay (default MIN_DELAY_S), waited before the
        request goes again on a new connection when a reused one was hung up on.
        ``not_before`` (epoch s): nothing reaches the host before then; what needs no
        contact (the URL, the DNS cache, the address check) is done first, so a caller
        that wakes a little early sends at its host's ``te`` exactly."""
        s = self.settings
        result = FetchResult(url=url, started=time.time())
        deadline = time.monotonic() + s.TOTAL_TIMEOUT_S
        proxy: Proxy | None = None
        try:
            if len(url) > s.MAX_URL_LENGTH:
                raise _Fail(ErrorKind.URL_TOO_LONG, f"URL of {len(url)} characters (limit {s.MAX_URL_LENGTH})")
            scheme, host, port, target, host_header = _split(url)
            result.ip = ip = self.check_host(host, min(s.CONNECT_TIMEOUT_S, deadline - time.monotonic()))
            headers = {"Host": host_header, "User-Agent": s.USER_AGENT, "Accept": ACCEPT,
                       "Accept-Encoding": ACCEPT_ENCODING, "Connection": "keep-alive"}
            for name, value in (extra_headers or {}).items():
                if _TOKEN.fullmatch(name) and not _BAD_VALUE.search(value) and value.isascii():
                    headers[name] = value  # a validator echoed from a server may be junk: not sent
            result.request_headers = list(headers.items())   # as the target sees them: no proxy credentials
            lines = [f"GET {target} HTTP/1.1\r\n", *(f"{k}: {v}\r\n" for k, v in result.request_headers)]
            proxy = None if self.proxy_for is None else self.proxy_for(scheme, host, port)
            if proxy is not None and scheme == "http":   # absolute form; https goes through a CONNECT tunnel
                lines[0] = f"GET http://{host_header}{target} HTTP/1.1\r\n"
                if proxy.authorization:
                    lines.append(f"Proxy-Authorization: {proxy.authorization}\r\n")
            request = "".join([*lines, "\r\n"]).encode("latin-1", "replace")
            early = not_before - time.time()
            if early > 0:
                _pause(early, cancel)
                result.started, deadline = time.time(), time.monotonic() + s.TOTAL_TIMEOUT_S
            self._exchange(_Request(Origin(scheme, host, port), ip, request, deadline, result,
                                    max_body_bytes or s.MAX_BODY_BYTES, max_decoded_bytes or s.MAX_DECODED_BYTES,
                                    cancel, s.MIN_DELAY_S if gap_s is None else gap_s, proxy))
        except _Fail as exc:
            result.error_kind, result.error = exc.kind, exc.message
            if proxy is not None and proxy.label not in exc.message:
                result.error = f"{exc.message} (through proxy {proxy.label})"
        except AddressRefused as exc:
            result.error_kind, result.error = ErrorKind.REFUSED, exc.reason
        except ResolveError as exc:
            result.error_kind, result.error = ErrorKind.DNS, exc.reason
        except OSError as exc:  # a socket call outside the mapped ones: still a result
            result.error_kind, result.error = ErrorKind.PROTOCOL, _os_reason(exc)
        result.ended = result.ended or time.time()
        return result

    def _exchange(self, r: _Request) -> None:
        if r.cancel is not None and r.cancel.is_set():   # not even a connection
            raise _aborted()
        conn = self._take(r.origin, r.ip, r.proxy)
        if conn is not None:
            try:
                self._guarded(conn, r)
                return
            except _Fail as exc:
                conn.close()
                if not exc.unanswered:
                    raise
                # hung up on before any answer: the server had closed the idle connection
                # (or it refuses the request). Once more on a new one, but the server saw a
                # request: the host's delay first, as before any request to it
                if time.monotonic() + r.gap_s >= r.deadline:
                    raise
                _pause(r.gap_s, r.cancel)
        conn = self._connect(r.origin, r.ip, r.deadline, r.proxy)
        try:
            self._guarded(conn, r)
        except _Fail:
            conn.close()
            raise

    def _guarded(self, conn: _Conn, r: _Request) -> None:
        """One round trip that ``cancel`` can end; whatever it read is void then."""
        cancel = r.cancel
        if cancel is None:
            self._round_trip(conn, r)
            return
        cancel.enter(conn)
        try:
            self._round_trip(conn, r)
        except _Fail:
            if conn.aborted:
                raise _aborted() from None
            raise
        finally:
            cancel.leave(conn)
        if conn.aborted:
            raise _aborted()

    def release(self, authority: str) -> None:
        """Close the idle connections to a host (``host[:port]``, as ``host_key`` spells it)
        that its fetcher gives back: the next worker to take the host opens its own, and
        the server never sees two connections from the crawl."""
        origins = []
        for scheme in ("http", "https"):
            try:
                origins.append(Origin(*_split(f"{scheme}://{authority}/")[:3]))
            except _Fail:
                return
        with self._lock:
            conns = [conn for conn in (self._idle.pop(origin, None) for origin in origins) if conn is not None]
        for conn in conns:
            conn.close()

    def _take(self, origin: Origin, ip: str, proxy: Proxy | None) -> _Conn | None:
        """The origin's idle connection, if it still goes where this exchange goes: a
        proxied one belongs to its (target origin, proxy) pair, never to another host."""
        with self._lock:
            conn = self._idle.pop(origin, None)
        if conn is not None and (conn.ip != ip or conn.via != proxy or not conn.alive()):
            # the name moved, the proxy changed, or the peer hung up
            conn.close()
            return None
        return conn

    def _keep_session(self, origin: Origin, conn: _Conn) -> None:
        """Keep the connection's TLS session for the origin's next connection, once an
        answer came on it (a TLS 1.3 server sends its ticket after the handshake), unless
        the connection resumed the session kept: that one is offered again until a
        server no longer takes it."""
        conn.tls_kept = True
        if conn.sock.session_reused:   # type: ignore[attr-defined]  # an SSLSocket here
            return   # the kept session still resumes: reading it again costs ~0.4 ms (CPython copies it)
        session = conn.sock.session   # type: ignore[attr-defined]
        if session is None or not (session.has_ticket or session.id):
            return
        with self._lock:
            self._tls_sessions.pop(origin, None)
            self._tls_sessions[origin] = session
            while len(self._tls_sessions) > MAX_TLS_SESSIONS:
                self._tls_sessions.popitem(last=False)

    def _give_back(self, origin: Origin, conn: _Conn) -> None:
        with self._lock:
            old = self._idle.pop(origin, None)
            self._idle[origin] = conn
            evicted = [self._idle.popitem(last=False)[1] for _ in range(len(self._idle) - MAX_POOLS)]
        for c in ([old] if old else []) + evicted:
            c.close()

    def _connect(self, origin: Origin, ip: str, deadline: float, proxy: Proxy | None = None) -> _Conn:
        s = self.settings
        scheme, host, port = origin
        left = deadline - time.monotonic()
        if left <= 0:
            raise _Fail(ErrorKind.DEADLINE, f"exchange deadline of {s.TOTAL_TIMEOUT_S:g} s passed during DNS")
        if proxy is None:
            address, where = (ip, port), f"{ip}:{port}"
        else:
            address, where = (self._proxy_address(proxy, deadline), proxy.port), f"proxy {proxy.label}"
            left = max(0.001, deadline - time.monotonic())   # a lookup that used it up: a deadline record
        timeout = min(s.CONNECT_TIMEOUT_S, left)
        try:
            sock = socket.create_connection(address, timeout=timeout)
        except TimeoutError:
            if timeout < s.CONNECT_TIMEOUT_S:
                raise _Fail(ErrorKind.DEADLINE, f"exchange deadline of {s.TOTAL_TIMEOUT_S:g} s passed "
                                                f"while connecting to {where}") from None
            raise _Fail(ErrorKind.TIMEOUT, f"connect to {where} took over {timeout:g} s") from None
        except OSError as exc:
            raise _Fail(ErrorKind.CONNECT, f"cannot connect to {where}: {exc.strerror or exc}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _Conn(sock, ip, proxy)
        if proxy is not None and scheme == "https":
            try:
                self._tunnel(conn, origin, proxy, deadline)
            except _Fail:
                conn.close()
                raise
        if scheme == "https":
            conn.start(deadline, s.READ_TIMEOUT_S, s.TOTAL_TIMEOUT_S)
            conn.phase = "in the TLS handshake"
            with self._lock:
                session = self._tls_sessions.get(origin)
            try:
                tls = self._tls.wrap_socket(sock, server_hostname=host, do_handshake_on_connect=False,
                                            session=session)
                conn.sock = tls
                conn.arm()  # the whole handshake is bounded by one socket timeout
                tls.do_handshake()
            except _Fail:
                conn.close()
                raise
            except TimeoutError:
                conn.close()
                raise conn.timed_out() from None
            except ssl.SSLError as exc:   # a certificate that fails too (SSLCertVerificationError)
                conn.close()
                raise _Fail(ErrorKind.TLS, f"TLS with {host}: {tls_reason(exc)}") from None
            except OSError as exc:
                conn.close()
                raise _Fail(ErrorKind.PROTOCOL, f"{_os_reason(exc)} in the TLS handshake") from None
        return conn

    def _proxy_address(self, proxy: Proxy, deadline: float) -> str:
        """The proxy's address: the operator named it, so it is not vetted as a target is
        (a proxy is often on a private network); a name is looked up as a target's is."""
        address = self.pinned(proxy.host)
        if address is not None:
            return address
        name = proxy.host.lower().rstrip(".")
        wait = min(self.settings.CONNECT_TIMEOUT_S, deadline - time.monotonic())
        answer = self.resolver.cached(name) or self.resolver.resolve(name, max(0.0, wait))
        if answer.kind != AnswerKind.OK:
            raise _Fail(ErrorKind.CONNECT, f"cannot resolve proxy {proxy.label}: {answer.reason}")
        return answer.addresses[0]

    def _tunnel(self, conn: _Conn, origin: Origin, proxy: Proxy, deadline: float) -> None:
        """CONNECT through the proxy to the origin, under the exchange's deadline and the
        header caps; anything but a 2xx answer is a CONNECT error naming the proxy."""
        s = self.settings
        _scheme, host, port = origin
        authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        head = [f"CONNECT {authority} HTTP/1.1", f"Host: {authority}", f"User-Agent: {s.USER_AGENT}"]
        if proxy.authorization:
            head.append(f"Proxy-Authorization: {proxy.authorization}")
        conn.start(deadline, s.READ_TIMEOUT_S, s.TOTAL_TIMEOUT_S)
        conn.phase = f"asking proxy {proxy.label} for a tunnel to {authority}"
        conn.arm()
        try:
            conn.sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1", "replace"))
        except TimeoutError:
            raise conn.timed_out() from None
        except OSError as exc:
            raise _Fail(ErrorKind.CONNECT, f"proxy {proxy.label}: {_os_reason(exc)} while asking for a tunnel "
                                           f"to {authority}") from None
        try:
            answer = self._head_block(conn, s.MAX_HEADER_BYTES, s.MAX_HEADERS)
        except _Fail as exc:
            if exc.kind in (ErrorKind.TIMEOUT, ErrorKind.DEADLINE):
                raise   # the phase names the proxy
            raise _Fail(exc.kind, f"proxy {proxy.label} (tunnel to {authority}): {exc.message}") from None
        line = answer.split(b"\n", 1)[0]
        match = _STATUS_LINE.fullmatch(line)
        if match is None:
            raise _Fail(ErrorKind.PROTOCOL, f"proxy {proxy.label} answered CONNECT with {bytes(line[:80])!r}")
        status, reason = int(match.group(2)), (match.group(3) or b"").decode("latin-1").strip()
        if not 200 <= status < 300:
            raise _Fail(ErrorKind.CONNECT, _refusal(proxy, f"CONNECT to {authority}", status, reason))
        if conn.buf:   # the server speaks only after our TLS hello
            raise _Fail(ErrorKind.PROTOCOL, f"proxy {proxy.label} sent bytes after opening the tunnel")

    def _round_trip(self, conn: _Conn, r: _Request) -> None:
        s = self.settings
        result, decoded_cap = r.result, r.decoded_cap
        conn.start(r.deadline, s.READ_TIMEOUT_S, s.TOTAL_TIMEOUT_S)
        conn.phase = "sending the request"
        conn.arm()
        try:
            conn.sock.sendall(r.request)
        except TimeoutError:
            raise conn.timed_out() from None
        except OSError as exc:
            raise _Fail(ErrorKind.PROTOCOL, f"{_os_reason(exc)} while sending the request",
                        unanswered=True) from None
        version, keep_alive = self._read_head(conn, result)
        if r.proxy is not None and result.status == 407 and r.origin.scheme == "http":   # the proxy's own answer
            status, reason = result.status, result.reason
            result.status, result.reason, result.headers = None, "", []
            raise _Fail(ErrorKind.CONNECT, _refusal(r.proxy, "the request", status, reason))
        reusable = self._read_body(conn, result, r.cap, version, keep_alive)
        result.ended = time.time()   # the answer's end, which the host's delay runs from (not the decoding's)
        if not conn.tls_kept and isinstance(conn.sock, ssl.SSLSocket):
            self._keep_session(r.origin, conn)
        if reusable and not conn.buf:  # bytes past the body would pose as the next answer
            conn.buf = bytearray()   # an emptied bytearray keeps its room: an idle connection holds none
            self._give_back(r.origin, conn)
        else:
            conn.close()
        result.content, cut = decode_body(result.body, result.header("content-encoding"), decoded_cap)
        if cut and not result.truncated:
            result.truncated = "decoded-length"
            result.error_kind = ErrorKind.DECODED_TOO_LARGE
            result.error = (f"{result.header('content-encoding')}-coded body decodes to more than "
                            f"{decoded_cap} bytes (cut there)")

    def _read_head(self, conn: _Conn, result: FetchResult) -> tuple[int, bool]:
        """Status line and headers into ``result``; returns (minor version, keep-alive)."""
        s = self.settings
        for _ in range(MAX_INTERIM + 1):
            conn.phase = "waiting for the status line"
            head = self._head_block(conn, s.MAX_HEADER_BYTES, s.MAX_HEADERS)
            lines = head.split(b"\n")
            match = _STATUS_LINE.fullmatch(lines[0])
            if match is None:
                raise _Fail(ErrorKind.BAD_STATUS_LINE, f"bad status line {bytes(lines[0][:80])!r}")
            status = int(match.group(2))
            if 100 <= status < 200 and status != 101:
                continue  # 100 Continue, 103 Early Hints: the real answer follows
            result.status = status
            result.reason = (match.group(3) or b"").decode("latin-1").strip()
            result.headers = _parse_headers(lines[1:])
            minor = int(match.group(1))
            connection = (result.header("connection") or "").lower()
            keep_alive = ("close" not in connection) if minor >= 1 else ("keep-alive" in connection)
            return minor, keep_alive
        raise _Fail(ErrorKind.PROTOCOL, f"more than {MAX_INTERIM} interim (1xx) responses")

    @staticmethod
    def _head_block(conn: _Conn, max_bytes: int, max_headers: int) -> bytes:
        """Bytes up to the blank line ending the header block, under both caps."""
        buf = conn.buf
        scanned = lines = 0
        while True:
            while buf.startswith((b"\r", b"\n")):  # stray line ends before a status line
                del buf[:1]
            if buf and not b"HTTP/".startswith(bytes(buf[:5]).upper()):
                raise _Fail(ErrorKind.HTTP09, f"no status line: the answer starts {bytes(buf[:40])!r} "
                                              "(HTTP/0.9 or another protocol)")
            end = _HEAD_END.search(buf, max(0, scanned - 3))
            stop = end.start() if end else len(buf)
            lines += buf.count(b"\n", scanned, stop)
            if lines > max_headers:
                raise _Fail(ErrorKind.TOO_MANY_HEADERS, f"more than {max_headers} header lines")
            if stop > max_bytes:
                raise _Fail(ErrorKind.HEADERS_TOO_LARGE, f"header block over {max_bytes} bytes")
            if end:
                head = bytes(buf[:end.start()])
                del buf[:end.end()]
                return head
            scanned = len(buf)
            if buf:
                conn.phase = "reading the header block" if lines else "reading the status line"
            if not conn.fill():
                if not buf:
                    raise _Fail(ErrorKind.PROTOCOL, "connection closed before any answer", unanswered=True)
                raise _Fail(ErrorKind.PROTOCOL, f"connection closed inside the header block after {len(buf)} bytes")

    def _read_body(self, conn: _Conn, result: FetchResult, cap: int, minor: int, keep_alive: bool) -> bool:
        """Read the body into ``result`` under ``cap``; True if the connection can be reused.
        A cut or failed read keeps what came, marks ``truncated`` and sets the error."""
        status = result.status or 0
        conn.phase = "reading the body"
        sink = bytearray()
        try:
            if status in (101, 204, 304):
                return keep_alive and status != 101
            coding = (result.header("transfer-encoding") or "").lower()
            if coding:
                if coding.rsplit(",", 1)[-1].strip() != "chunked":
                    return self._until_close(conn, sink, cap, result)
                return self._chunked(conn, sink, cap, result) and keep_alive
            lengths = {v.strip() for k, v in result.headers if k.lower() == "content-length"}
            if not lengths:
                return self._until_close(conn, sink, cap, result)
            text = lengths.pop()
            if lengths or not (text.isascii() and text.isdigit()):
                raise _Fail(ErrorKind.PROTOCOL, f"bad Content-Length {sorted(lengths | {text})!r}")
            length = int(text)
            want = min(length, cap)
            while len(sink) < want:
                if conn.buf:
                    take = min(len(conn.buf), want - len(sink))
                    sink += conn.buf[:take]
                    del conn.buf[:take]
                    continue
                if not conn.read_into(sink, want - len(sink)):
                    raise _Fail(ErrorKind.PROTOCOL, f"connection closed after {len(sink)} of {length} body bytes")
            if length > cap:
                self._cut(result, cap)
                return False
            return keep_alive
        except _Fail as exc:
            if exc.kind in (ErrorKind.DEADLINE, ErrorKind.TIMEOUT):
                result.truncated = "time"
            else:
                result.truncated = "disconnect"
            result.error_kind, result.error = exc.kind, exc.message
            return False
        finally:
            result.body = bytes(sink) if len(sink) <= cap else bytes(sink[:cap])

    def _until_close(self, conn: _Conn, sink: bytearray, cap: int, result: FetchResult) -> bool:
        sink += conn.buf
        conn.buf.clear()
        while len(sink) <= cap:
            if not conn.read_into(sink, RECV_BYTES):
                return False
        self._cut(result, cap)
        return False

    def _chunked(self, conn: _Conn, sink: bytearray, cap: int, result: FetchResult) -> bool:
        """Chunked transfer coding (extensions ignored, trailers skipped)."""
        limit = self.settings.MAX_HEADER_BYTES
        while True:
            line = conn.readline(limit)
            if line is None:
                raise _Fail(ErrorKind.PROTOCOL, f"connection closed inside a chunked body after {len(sink)} bytes")
            size_text = line.split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise _Fail(ErrorKind.PROTOCOL, f"bad chunk size {size_text[:20]!r}") from None
            if size == 0:
                break
            left = size
            while left:
                if not conn.buf and not conn.fill():
                    raise _Fail(ErrorKind.PROTOCOL, f"connection closed inside a chunk after {len(sink)} bytes")
                take = min(left, len(conn.buf))
                sink += conn.buf[:take]
                del conn.buf[:take]
                left -= take
                if len(sink) > cap:
                    self._cut(result, cap)
                    return False
            if conn.readline(limit) is None:
                raise _Fail(ErrorKind.PROTOCOL, "connection closed after a chunk")
        for _ in range(self.settings.MAX_HEADERS + 1):  # trailer section, up to its blank line
            line = conn.readline(limit)
            if not line:
                return line is not None
        raise _Fail(ErrorKind.TOO_MANY_HEADERS, f"more than {self.settings.MAX_HEADERS} trailer lines")

    @staticmethod
    def _cut(result: FetchResult, cap: int) -> None:
        result.truncated = "length"
        result.error_kind = ErrorKind.BODY_TOO_LARGE
        result.error = f"body over {cap} bytes (cut there)"


def _refusal(proxy: Proxy, what: str, status: int, reason: str) -> str:
    """A proxy's refusal as a record says it: the proxy named, its credentials never."""
    text = f"proxy {proxy.label} refused {what}: {status} {reason}".rstrip()
    if status in (401, 407):   # tinyproxy 1.11 refuses bad credentials with a 401
        text += " (credentials refused)" if proxy.authorization else " (it asks for credentials: PROXY_URL user:pass@)"
    return text


def _split(url: str) -> tuple[str, str, int, str, str]:
    """(scheme, ASCII host, port, request target, Host header) or _Fail(bad_url)."""
    try:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        host = parts.hostname or ""
        port = parts.port or (443 if scheme == "https" else 80)
        if scheme not in ("http", "https") or not host:
            raise ValueError("not an http(s) URL with a host")
        if not host.isascii():
            host = idna.encode(host, uts46=True).decode("ascii")
    except (ValueError, idna.IDNAError) as exc:
        raise _Fail(ErrorKind.BAD_URL, f"cannot fetch {url[:200]!r}: {exc}") from None
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    if _UNSAFE_TARGET.search(target):
        target = quote(target, safe=_TARGET_SAFE)
    name = f"[{host}]" if ":" in host else host
    default_port = port == (443 if scheme == "https" else 80)
    return scheme, host, port, target, name if default_port else f"{name}:{port}"


def _parse_headers(lines: list[bytes]) -> list[tuple[str, str]]:
    """Header lines as (name, value) in order; folded lines join the previous value,
    lines without a colon are dropped."""
    out: list[tuple[str, str]] = []
    for raw in lines:
        line = raw.decode("latin-1").rstrip("\r")
        if line[:1] in (" ", "\t"):
            if out:
                out[-1] = (out[-1][0], f"{out[-1][1]} {line.strip()}")
            continue
        name, sep, value = line.partition(":")
        name = name.strip()
        if sep and name:
            out.append((name, value.strip()))
    return out


def decode_body(body: bytes, encoding: str | None, max_bytes: int) -> tuple[bytes, bool]:
    """Undo gzip/deflate/br content coding with an output cap (bombs).

    Returns (decoded, truncated). Unknown or broken codings give the raw body back,
    which the parser then treats as whatever it is.
    """
    coding = (encoding or "").strip().lower()
    if coding in ("", "identity") or not body:
        return body[:max_bytes], len(body) > max_bytes
    if coding == "br":
        try:
            d = brotli.Decompressor()
            out = d.process(body, output_buffer_limit=max_bytes)
            if out or d.is_finished():  # else not brotli at all: fall through to the raw body
                # the limit is soft (output grows in blocks): cut to the cap here
                return out[:max_bytes], len(out) > max_bytes or len(out) == max_bytes and not d.is_finished()
        except brotli.error:
            pass
        return body[:max_bytes], len(body) > max_bytes
    if coding in ("gzip", "x-gzip"):
        wbits_options: tuple[int, ...] = (47,)   # gzip or zlib header, auto-detected
    elif coding == "deflate":
        wbits_options = (15, -15)      # zlib-wrapped (RFC) or raw deflate (what IIS sends)
    else:
        return body[:max_bytes], len(body) > max_bytes
    for wbits in wbits_options:
        try:
            z = zlib.decompressobj(wbits)
            out = z.decompress(body, max_bytes)
            return out, bool(z.unconsumed_tail) or len(out) >= max_bytes and not z.eof
        except zlib.error:
            continue
    return body[:max_bytes], len(body) > max_bytes
