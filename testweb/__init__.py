"""A generated multi-host web served on loopback, for crawler tests and benchmarks.

Why this exists: crawler tests need a web whose shape is known in advance
(pages, links, robots rules, odd responses) so results can be checked exactly,
and politeness can only be judged from the server side (what was asked, when,
on which TCP connection).  The benchmark also runs the crawler on the same
small machine, so serving must be cheap: one selector thread serves every host,
page bodies are cut from a pre-built text stream (exact, seeded sizes) and
cached, and responses use HTTP/1.1 keep-alive with Content-Length and no
per-request logging.

Host ``i`` listens on ``127.0.0.(first_ip + i)`` at a port chosen by the OS.
Its pages are ``/`` and ``/p/<n>.html``; ``/robots.txt`` follows its
:class:`HostSpec`; anything under ``/private/`` is served (200) even though the
default robots.txt forbids it, so a crawler that ignores robots shows up in the
request log.  Unknown paths get a small 404 page.

Run ``python -m testweb --hosts N --pages P`` to serve one by hand.
"""

from __future__ import annotations

import argparse
import heapq
import html
import math
import random
import re
import selectors
import signal
import socket
import sys
import threading
import time
import traceback
from bisect import bisect_right
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from functools import lru_cache
from http import HTTPStatus
from typing import Callable, Iterable
from urllib.parse import urldefrag, urljoin, urlsplit

__all__ = ["HostSpec", "RequestRecord", "TestWeb", "main"]


@dataclass(slots=True)
class RequestRecord:
    """One request as the server saw it; the evidence for politeness checks."""

    host: str  # "127.0.0.5:41234": address:port of the listening socket
    path: str  # raw request target (path + query)
    method: str
    status: int  # status sent (or that would have been sent if the peer left)
    start: float  # time.time() when the bytes carrying the request were read
    end: float  # time.time() at the final write of the response (or when the peer left)
    conn_id: int  # distinct per TCP connection
    user_agent: str
    headers: dict[str, str]  # request headers, names lower-cased


@dataclass
class HostSpec:
    """Per-host behaviour knobs; the defaults describe a normal, polite host.

    ``pages=None`` means "use the TestWeb's ``pages_per_host``", so a spec that
    only changes robots does not silently change the page count.
    ``extra_routes`` override generated paths (and ``/robots.txt``) and are
    served verbatim; the server adds only Content-Length and Connection unless
    the route's headers already carry them.  When ``link_extra_routes`` is true
    the host's home page links to every extra route that is not a generated
    path, so a crawler finds them on its own.
    """

    pages: int | None = None
    robots_txt: str | None = "User-agent: *\nDisallow: /private/\n"
    robots_status: int = 200
    extra_routes: dict[str, tuple[int, dict[str, str], bytes]] = field(default_factory=dict)
    delay_s: float = 0.0
    link_extra_routes: bool = True


# ---------------------------------------------------------------------------
# Text generation
# ---------------------------------------------------------------------------

_SYLLABLES = (
    "ka lo mi ra to ne su vi an el or is ul en ta po de ri ba mo ce fu gi ho "
    "ja ki lu ma no pe qua sa ti va we xe yo zu ar on in et um ex al bro cla "
    "dri fen gor hal ist jun kel lim mar nor pla ros sen tur ven wil"
).split()
_COMMON = "the of and a to in is it that for on with as was by at from this be or".split()
_ACCENTED = ["café", "naïve", "Zürich", "façade", "jalapeño", "smörgåsbord", "über", "crème"]
_STREAM_SENTENCES = 16_000  # about 1 MB of padding text per seed
_MIN_SLICE, _MAX_SLICE = 2048, 12_288  # bytes copied from the stream per slice


@dataclass(frozen=True, slots=True)
class _Corpus:
    """Words and a long paragraph stream shared by all pages of one seed.

    Pages copy a handful of random paragraph-aligned slices of the stream, so
    padding 60 KB costs a few C-level slices instead of hundreds of Python
    steps, while two pages still share little text.
    """

    bag: tuple[str, ...]  # words repeated roughly by Zipf frequency
    phrases: tuple[str, ...]  # short anchor texts
    text: bytes  # ASCII b"<p>...</p>\n" paragraphs back to back
    offs: tuple[int, ...]  # start offset of each paragraph, then len(text)
    n_start: int  # slices start before this paragraph so they never run off the end


@lru_cache(maxsize=4)
def _corpus(seed: int) -> _Corpus:
    """Build the corpus once per seed (tens of ms), reused by every TestWeb."""
    rng = random.Random(f"testweb-corpus:{seed}")
    words: list[str] = list(_COMMON)
    seen = set(words)
    while len(words) < 3000:
        w = "".join(rng.choices(_SYLLABLES, k=rng.choice((1, 2, 2, 3, 3, 4))))
        if w not in seen:
            seen.add(w)
            words.append(w)
    bag: list[str] = []
    for rank, w in enumerate(words):
        bag.extend([w] * max(1, 300 // (rank + 1)))
    sentences = [
        " ".join(rng.choices(bag, k=rng.randint(5, 16))).capitalize() + "."
        for _ in range(_STREAM_SENTENCES // 3)
    ]
    picks = rng.choices(sentences, k=_STREAM_SENTENCES)
    paras: list[str] = []
    i = 0
    while i < len(picks):
        m = rng.randint(3, 8)
        paras.append("<p>" + " ".join(picks[i : i + m]) + "</p>\n")
        i += m
    offs = [0]
    for para in paras:
        offs.append(offs[-1] + len(para))
    phrases = tuple(" ".join(rng.choices(bag, k=rng.randint(1, 3))) for _ in range(1024))
    room = _MAX_SLICE + 2 * max(len(para) for para in paras)
    return _Corpus(tuple(bag), phrases, "".join(paras).encode("ascii"), tuple(offs),
                   bisect_right(offs, offs[-1] - room) - 1)


# ---------------------------------------------------------------------------
# Link graph
# ---------------------------------------------------------------------------

# How a link is spelled in the HTML (targets on other hosts are always absolute).
_ABS, _ROOT, _REL, _DOTREL, _FRAG = range(5)
# 20 slots: 25% absolute, 30% root-relative, 25% relative, 10% ./ or ../, 10% with #fragment
_STYLES = (_ABS,) * 5 + (_ROOT,) * 6 + (_REL,) * 5 + (_DOTREL,) * 2 + (_FRAG,) * 2
_HREF_RE = re.compile(rb"""href\s*=\s*["']([^"']*)["']""", re.IGNORECASE)
_PRIVATE_PATH = "/private/x.html"


def _node_path(k: int) -> str:
    """Node 0 is the home page; node k >= 1 is /p/<k-1>.html."""
    return "/" if k == 0 else f"/p/{k - 1}.html"


def _path_node(path: str, n_pages: int) -> int | None:
    """Inverse of _node_path; only the canonical spelling maps to a page."""
    if path == "/":
        return 0
    if path.startswith("/p/") and path.endswith(".html"):
        num = path[3:-5]
        if num.isdigit() and num.isascii() and (num == "0" or num[0] != "0"):
            n = int(num)
            if n < n_pages:
                return n + 1
    return None


def _loopback_ips(first: int, count: int) -> list[str]:
    """127.0.0.first, ... (spills into 127.0.1.x etc., skipping .0 and .255)."""
    out: list[str] = []
    v = first
    while len(out) < count:
        if v >= 1 << 24:
            raise ValueError("too many hosts for 127.0.0.0/8")
        if v & 255 not in (0, 255):
            out.append(f"127.{(v >> 16) & 255}.{(v >> 8) & 255}.{v & 255}")
        v += 1
    return out


_TOKEN_RE = re.compile(r"\*|[A-Za-z_-]+")


def _product_token(agent: str) -> str:
    """'FooBot/1.2 (+http://x)' -> 'foobot'; '*' stays '*' (what robots groups match on)."""
    m = _TOKEN_RE.match(agent.strip())
    return m.group(0).lower() if m else ""


def _allow_all(target: str) -> bool:
    return True


def _disallow_all(target: str) -> bool:
    return False


class _RobotsRules:
    """RFC 9309 matching for one user agent: longest pattern wins, Allow wins ties.

    urllib.robotparser is not used because it takes the first matching rule
    and ignores wildcards, which is not what a modern crawler does.
    """

    def __init__(self, text: str, user_agent: str) -> None:
        token = _product_token(user_agent)
        groups: list[tuple[set[str], list[tuple[bool, str]]]] = []
        agents: set[str] = set()
        rules: list[tuple[bool, str]] = []
        for raw in text.splitlines():
            line = raw.split("#", 1)[0].strip()
            key, sep, value = line.partition(":")
            if not sep:
                continue
            key, value = key.strip().lower(), value.strip()
            if key == "user-agent":
                if rules:  # a user-agent line after rules starts a new group
                    groups.append((agents, rules))
                    agents, rules = set(), []
                agents.add(_product_token(value))
            elif key in ("allow", "disallow") and agents and value:
                rules.append((key == "allow", value))
        if agents:
            groups.append((agents, rules))
        chosen = [r for a, rs in groups if token in a for r in rs] or [
            r for a, rs in groups if "*" in a for r in rs
        ]
        self._rules = [
            (allow, len(pattern), re.compile(
                "".join(".*" if ch == "*" else re.escape(ch) for ch in pattern.rstrip("$"))
                + ("\\Z" if pattern.endswith("$") else "")))
            for allow, pattern in chosen
        ]

    def __call__(self, target: str) -> bool:
        best_len, verdict = -1, True
        for allow, length, rx in self._rules:
            if (length > best_len or (length == best_len and allow)) and rx.match(target):
                best_len, verdict = length, allow
        return verdict


# ---------------------------------------------------------------------------
# HTTP bits
# ---------------------------------------------------------------------------

_MAX_HEAD = 64 * 1024
_MAX_INBUF = 1024 * 1024
_KA = b"Connection: keep-alive\r\n\r\n"
_CLOSE = b"Connection: close\r\n\r\n"
_HTML_CT = "text/html; charset=utf-8"
_NOT_FOUND_BODY = (
    b"<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head>"
    b"<body><h1>Not Found</h1><p>No such page.</p></body></html>\n"
)
_PRIVATE_BODY = (
    b'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>Private</title></head>'
    b'<body><h1>Private area</h1><p>Robots were asked not to come here.</p>'
    b'<p><a href="/">home</a></p></body></html>\n'
)

# A response: (status, head without the Connection line and blank line, body,
# Connection value forced by an extra route or None).
_Resp = tuple[int, bytes, bytes, str | None]


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


def _make_resp(status: int, headers: Iterable[tuple[str, str]], body: bytes) -> _Resp:
    """Pre-render a response head; Content-Length/Connection added only if absent."""
    lines = [f"HTTP/1.1 {status} {_reason(status)}", "Server: testweb"]
    forced_conn: str | None = None
    has_len = False
    for name, value in headers:
        low = name.lower()
        if low == "connection":
            forced_conn = value
            continue
        if low in ("content-length", "transfer-encoding"):
            has_len = True
        lines.append(f"{name}: {value}")
    if not has_len and status not in (204, 304) and status >= 200:
        lines.append(f"Content-Length: {len(body)}")
    head = ("\r\n".join(lines) + "\r\n").encode("latin-1")
    return (status, head, body, forced_conn)


class _Conn:
    """Per-connection state for the selector loop."""

    __slots__ = (
        "sock", "host_idx", "conn_id", "inbuf", "out", "busy", "close_after",
        "eof", "closed", "last_active", "events", "record", "rx_time",
    )

    def __init__(self, sock: socket.socket, host_idx: int, conn_id: int) -> None:
        self.sock = sock
        self.host_idx = host_idx
        self.conn_id = conn_id
        self.inbuf = bytearray()
        self.out: list[bytes | memoryview] | None = None  # pending buffers, in order
        self.busy = False  # a response is pending (delayed or being written)
        self.close_after = False
        self.eof = False
        self.closed = False
        self.last_active = time.monotonic()
        self.events = 0
        self.record: RequestRecord | None = None
        self.rx_time = 0.0


# ---------------------------------------------------------------------------
# The web
# ---------------------------------------------------------------------------


class TestWeb:
    """A deterministic web of ``n_hosts`` sites on loopback, served by one thread."""

    __test__ = False  # not a pytest test class despite the name

    def __init__(
        self,
        n_hosts: int = 5,
        pages_per_host: int = 20,
        *,
        seed: int = 0,
        mean_page_bytes: int = 8_000,
        size_sigma: float = 0.6,
        max_page_bytes: int = 400_000,
        links_per_page: int = 8,
        cross_host_ratio: float = 0.2,
        host_specs: dict[int, HostSpec] | None = None,
        first_ip: int = 2,
        idle_timeout_s: float | None = None,
        cache_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        if n_hosts < 1:
            raise ValueError("n_hosts must be >= 1")
        if first_ip < 1:
            raise ValueError("first_ip must be >= 1")
        self._seed = seed
        self._n = n_hosts
        self._links_per_page = max(0, links_per_page)
        self._idle_timeout = idle_timeout_s
        self._cache_budget = cache_bytes
        specs = host_specs or {}
        self._specs = [specs.get(i) or HostSpec() for i in range(n_hosts)]
        for spec in self._specs:
            for route in spec.extra_routes:
                if not route.startswith("/"):
                    raise ValueError(f"extra route must start with '/': {route!r}")
        self._pages = [
            spec.pages if spec.pages is not None else pages_per_host for spec in self._specs
        ]
        self._ips = _loopback_ips(first_ip, n_hosts)
        self.hosts: list[str] = []
        self._corpus = _corpus(seed)
        self._sizes: list[list[int]] = []
        self._links: list[list[list[tuple[int, int, int]]]] = []
        self._build_graph(mean_page_bytes, size_sigma, max_page_bytes, cross_host_ratio)

        self._log: list[RequestRecord] = []
        self._log_lock = threading.Lock()
        self._cache: OrderedDict[tuple[int, int], tuple[bytes, bytes, str]] = OrderedDict()
        self._cache_size = 0
        self._static: list[dict[str, _Resp]] = []
        self._listeners: list[socket.socket] = []
        self._sel: selectors.BaseSelector | None = None
        self._conns: set[_Conn] = set()
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._timer_seq = 0
        self._next_conn_id = 1
        self._thread: threading.Thread | None = None
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._stopping = False
        self._stopped = False
        self._cpu_final: float | None = None

    # -- graph ---------------------------------------------------------------

    def _build_graph(self, mean: int, sigma: float, cap: int, cross: float) -> None:
        """Sizes and links for every page, fixed at construction from the seed.

        A tree (fan-out links_per_page // 2) makes every page of a host
        reachable from its home, and each home links the next host's home, so
        everything is reachable from host 0's home page.
        """
        mu = math.log(max(1, mean)) - sigma * sigma / 2.0  # so E[size] == mean
        fan = max(1, self._links_per_page // 2)
        n_hosts, per_page = self._n, self._links_per_page
        styles = _STYLES
        for h in range(n_hosts):
            rng = random.Random(f"testweb-graph:{self._seed}:{h}")
            rnd = rng.random
            n_nodes = self._pages[h] + 1
            self._sizes.append(
                [min(cap, int(rng.lognormvariate(mu, sigma))) for _ in range(n_nodes)]
            )
            host_links: list[list[tuple[int, int, int]]] = []
            for k in range(n_nodes):
                lk: list[tuple[int, int, int]] = [
                    (h, c, styles[int(rnd() * 20)])
                    for c in range(k * fan + 1, min(k * fan + fan, n_nodes - 1) + 1)
                ]
                if k == 0 and h + 1 < n_hosts:
                    lk.append((h + 1, 0, _ABS))
                while len(lk) < per_page:
                    if n_hosts > 1 and rnd() < cross:
                        th = int(rnd() * (n_hosts - 1))
                        th += th >= h
                        lk.append((th, int(rnd() * (self._pages[th] + 1)), _ABS))
                    elif n_nodes > 1:
                        tk = int(rnd() * (n_nodes - 1))
                        tk += tk >= k
                        lk.append((h, tk, styles[int(rnd() * 20)]))
                    else:
                        break
                rng.shuffle(lk)
                host_links.append(lk)
            self._links.append(host_links)

    # -- lifecycle -----------------------------------------------------------

    def start(self) -> TestWeb:
        """Bind one listening socket per host and start the serving thread."""
        if self._thread is not None or self._stopped:
            raise RuntimeError("TestWeb can be started only once")
        sel = selectors.DefaultSelector()
        try:
            for i, ip in enumerate(self._ips):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                self._listeners.append(s)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind((ip, 0))
                s.listen(1024)
                s.setblocking(False)
                self.hosts.append(f"{ip}:{s.getsockname()[1]}")
                sel.register(s, selectors.EVENT_READ, i)
            self._wake_r, self._wake_w = socket.socketpair()
            self._wake_r.setblocking(False)
            self._wake_w.setblocking(False)
            sel.register(self._wake_r, selectors.EVENT_READ, None)
        except BaseException:
            for s in self._listeners:
                s.close()
            self._listeners.clear()
            self.hosts.clear()
            sel.close()
            raise
        self._sel = sel
        self._static = [self._static_routes(h) for h in range(self._n)]
        self._thread = threading.Thread(target=self._loop, name="testweb", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Close every socket and join the serving thread; safe to call twice."""
        if self._stopped:
            return
        self._stopped = True
        self._stopping = True
        if self._thread is not None:
            assert self._wake_w is not None
            try:
                self._wake_w.send(b"x")
            except OSError:
                pass
            self._thread.join()
        self._shutdown_sockets()

    def __enter__(self) -> TestWeb:
        return self if self._thread is not None else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _shutdown_sockets(self) -> None:
        for conn in list(self._conns):
            self._close(conn)
        for s in self._listeners:
            s.close()
        self._listeners.clear()
        for w in (self._wake_r, self._wake_w):
            if w is not None:
                w.close()
        if self._sel is not None:
            self._sel.close()
            self._sel = None

    # -- public queries ------------------------------------------------------

    def url(self, host_index: int, path: str) -> str:
        """Absolute URL of ``path`` on host ``host_index``."""
        self._require_started()
        if not path.startswith("/"):
            path = "/" + path
        return f"http://{self.hosts[host_index]}{path}"

    def seeds(self, all_hosts: bool = False) -> list[str]:
        """Host 0's home page (everything is reachable from it), or every home."""
        return [self.url(h, "/") for h in (range(self._n) if all_hosts else range(1))]

    def page_urls(self) -> set[str]:
        """Every generated page (homes and /p/<n>.html; not private or extra routes)."""
        self._require_started()
        return {
            f"http://{self.hosts[h]}{_node_path(k)}"
            for h in range(self._n)
            for k in range(self._pages[h] + 1)
        }

    def reachable(self, seeds: list[str] | None = None, *, user_agent: str = "*") -> set[str]:
        """HTML page URLs a robots-obeying crawler can reach from ``seeds``.

        Models what the server would answer, without the network: generated
        pages follow the link graph, /private/ pages count only if that host's
        robots.txt allows them, extra routes count if 200 text/html (their
        hrefs are followed) and redirects lead to their Location.  robots.txt
        follows RFC 9309: 4xx allows all, 429/5xx disallow all, and rules match
        by longest pattern (``*`` and ``$`` understood, Allow wins ties).
        URLs are absolute, without fragments.
        """
        self._require_started()
        hosts = self.hosts
        index = {hp: i for i, hp in enumerate(hosts)}
        rules: dict[int, Callable[[str], bool]] = {}
        links = self._links
        overridden = [
            {k for k in (_path_node(p, self._pages[h]) for p in self._static[h]) if k is not None}
            for h in range(self._n)
        ]
        # Generated pages are keyed (host, node) so the big part of the walk
        # needs no URL parsing; anything else is keyed by its URL string.
        seen: set[tuple[int, int] | str] = set()
        queue: deque[tuple[int, int] | str] = deque()
        out: set[str] = set()

        def push(u: str) -> None:
            parts = urlsplit(urldefrag(u)[0])
            h = index.get(parts.netloc)
            if parts.scheme != "http" or h is None:
                return
            path = parts.path or "/"
            k = _path_node(path, self._pages[h])
            key: tuple[int, int] | str
            if k is not None and not parts.query and path not in self._static[h]:
                key = (h, k)
            else:
                key = f"http://{parts.netloc}{path}" + (f"?{parts.query}" if parts.query else "")
            if key not in seen:
                seen.add(key)
                queue.append(key)

        def allowed(h: int, target: str) -> bool:
            rule = rules.get(h)
            if rule is None:
                rule = rules[h] = self._robots_rule(h, user_agent)
            return rule(target)

        def add_page(h: int, k: int, url: str) -> None:
            out.add(url)
            for th, tk, _ in links[h][k]:
                if tk in overridden[th]:
                    push(f"http://{hosts[th]}{_node_path(tk)}")
                elif (th, tk) not in seen:
                    seen.add((th, tk))
                    queue.append((th, tk))
            if k == 0 or k % 10 == 5:
                push(f"http://{hosts[h]}{_PRIVATE_PATH}")
            if k == 0:
                for route in self._linked_extras(h):
                    push(f"http://{hosts[h]}{route}")

        for seed in self.seeds() if seeds is None else seeds:
            push(seed)
        while queue:
            key = queue.popleft()
            if isinstance(key, tuple):
                h, k = key
                path = _node_path(k)
                if allowed(h, path):
                    add_page(h, k, f"http://{hosts[h]}{path}")
                continue
            parts = urlsplit(key)
            h = index[parts.netloc]
            target = parts.path + (f"?{parts.query}" if parts.query else "")
            if not allowed(h, target):
                continue
            kind, resp, k = self._classify(h, target)
            if kind == "page":
                add_page(h, k, key)
            elif kind == "private":
                out.add(key)
                push(f"http://{hosts[h]}/")
            elif kind == "extra" and resp is not None:
                status, head, body, _ = resp
                fields = self._head_fields(head)
                if 300 <= status < 400 and "location" in fields:
                    push(urljoin(key, fields["location"]))
                elif status == 200 and fields.get("content-type", "").startswith("text/html"):
                    out.add(key)
                    for href in _HREF_RE.findall(body):
                        push(urljoin(key, html.unescape(href.decode("utf-8", "replace").strip())))
        return out

    @property
    def requests(self) -> list[RequestRecord]:
        """Snapshot of the log in the order requests were read.

        ``end`` is 0.0 for a response still pending (e.g. a delayed host).
        """
        with self._log_lock:
            log = list(self._log)
        return [
            RequestRecord(r.host, r.path, r.method, r.status, r.start, r.end, r.conn_id,
                          r.user_agent, r.headers)
            for r in log
        ]

    def clear_log(self) -> None:
        """Forget logged requests, e.g. between phases of a test."""
        with self._log_lock:
            self._log.clear()

    def server_cpu_seconds(self) -> float:
        """CPU time used by the serving thread, so benchmarks can subtract it."""
        if self._cpu_final is not None:
            return self._cpu_final
        t = self._thread
        if t is None or t.ident is None:
            return 0.0
        try:
            return time.clock_gettime(time.pthread_getcpuclockid(t.ident))
        except (AttributeError, OSError):
            return float("nan")

    # -- routing -------------------------------------------------------------

    def _require_started(self) -> None:
        if not self.hosts:
            raise RuntimeError("call start() first: URLs need the bound ports")

    def _linked_extras(self, h: int) -> list[str]:
        spec = self._specs[h]
        if not spec.link_extra_routes:
            return []
        return sorted(
            r
            for r in spec.extra_routes
            if r != "/robots.txt" and _path_node(r.split("?", 1)[0], self._pages[h]) is None
        )

    def set_route(self, host_index: int, path: str, status: int, headers: dict[str, str], body: bytes) -> None:
        """Add or replace a route on a running web: for bodies that must name the web's
        own URLs (sitemaps, absolute redirects), which are known only after start()."""
        if not path.startswith("/"):
            raise ValueError(f"route must start with '/': {path!r}")
        self._specs[host_index].extra_routes[path] = (status, headers, body)
        if self._static:
            self._static[host_index][path] = _make_resp(status, headers.items(), body)

    def _static_routes(self, h: int) -> dict[str, _Resp]:
        """Pre-rendered responses for robots.txt and extra routes of host h."""
        spec = self._specs[h]
        routes: dict[str, _Resp] = {}
        if spec.robots_txt is None:
            routes["/robots.txt"] = _make_resp(404, [("Content-Type", _HTML_CT)], _NOT_FOUND_BODY)
        else:
            routes["/robots.txt"] = _make_resp(
                spec.robots_status,
                [("Content-Type", "text/plain; charset=utf-8")],
                spec.robots_txt.encode("utf-8"),
            )
        for path, (status, headers, body) in spec.extra_routes.items():
            routes[path] = _make_resp(status, headers.items(), body)
        return routes

    def _classify(self, h: int, target: str) -> tuple[str, _Resp | None, int]:
        """Route a request target: ('extra'|'robots'|'page'|'private'|'missing', resp, node)."""
        if target.startswith("http://") or target.startswith("https://"):
            target = "/" + target.split("/", 3)[3] if target.count("/") >= 3 else "/"
        static = self._static[h]
        resp = static.get(target)
        path = target.split("?", 1)[0]
        if resp is None and path != target:
            resp = static.get(path)
        if resp is not None:
            return ("robots" if path == "/robots.txt" and path not in self._specs[h].extra_routes
                    else "extra", resp, -1)
        k = _path_node(path, self._pages[h])
        if k is not None:
            return ("page", None, k)
        if path.startswith("/private/"):
            return ("private", None, -1)
        return ("missing", None, -1)

    @staticmethod
    def _head_fields(head: bytes) -> dict[str, str]:
        fields: dict[str, str] = {}
        for line in head.decode("latin-1").split("\r\n")[1:]:
            name, sep, value = line.partition(":")
            if sep:
                fields[name.strip().lower()] = value.strip()
        return fields

    def _robots_rule(self, h: int, user_agent: str) -> Callable[[str], bool]:
        """What a robots.txt-obeying crawler may fetch on host h (RFC 9309).

        2xx: the rules; 4xx except 429: allow all; 429, 5xx or a redirect to a
        host outside this web (unreachable): disallow all; a redirect chain
        longer than five or to a non-HTTP scheme: allow all (unavailable).
        """
        url = f"http://{self.hosts[h]}/robots.txt"
        for _ in range(6):  # the RFC asks crawlers to follow at least five redirects
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https"):
                break
            if parts.scheme != "http" or parts.netloc not in self.hosts:
                return _disallow_all
            hh = self.hosts.index(parts.netloc)
            kind, resp, k = self._classify(hh, parts.path + (f"?{parts.query}" if parts.query else ""))
            if kind == "page":
                status, head, body = 200, b"", self._render(hh, k)  # not the cache: other thread
            elif kind == "private":
                status, head, body = 200, b"", _PRIVATE_BODY
            elif resp is None:
                return _allow_all  # 404
            else:
                status, head, body = resp[0], resp[1], resp[2]
            if 300 <= status < 400:
                loc = self._head_fields(head).get("location")
                if not loc:
                    break
                url = urljoin(url, loc)
                continue
            if 200 <= status < 300:
                return _RobotsRules(body.decode("utf-8", "replace"), user_agent)
            if status >= 500 or status == 429:
                return _disallow_all
            return _allow_all
        return _allow_all

    # -- page rendering ------------------------------------------------------

    def _href(self, h: int, k: int, th: int, tk: int, style: int) -> str:
        path = _node_path(tk)
        if th != h or style == _ABS:
            return f"http://{self.hosts[th]}{path}"
        if style == _ROOT:
            return path
        if style == _FRAG:
            return f"{path}#s{tk % 7}"
        if style == _REL:
            if k == 0:
                return path[1:] or "./"
            return path[3:] if tk else "../"
        return ("." if k == 0 else "..") + path

    def _padding(self, rnd: Callable[[], float], nbytes: int) -> list[bytes]:
        """Exactly ``nbytes`` of paragraphs: random slices of the corpus stream."""
        c = self._corpus
        text, offs = c.text, c.offs
        n_start = c.n_start
        out: list[bytes] = []
        while nbytes > 0:
            seg = min(nbytes, _MIN_SLICE + int(rnd() * (_MAX_SLICE - _MIN_SLICE)))
            i = int(rnd() * n_start)
            start = offs[i]
            j = bisect_right(offs, start + seg) - 1
            if j > i:
                out.append(text[start : offs[j]])
            if seg == nbytes:  # last slice: cut paragraph j's text to land exactly
                r = start + seg - offs[j]
                if r >= 9:
                    out.append(b"<p>" + text[offs[j] + 3 : offs[j] + r - 5] + b"</p>\n")
                elif r:
                    out.append(b"\n" * r)
                nbytes = 0
            else:
                nbytes -= offs[j] - start
        return out

    def _render(self, h: int, k: int) -> bytes:
        """Build page (h, k): exact target size, text unique to the page."""
        c = self._corpus
        rng = random.Random((self._seed * 1_000_003 + h) * 1_000_003 + k)
        rnd = rng.random
        words = " ".join(rng.choices(c.bag, k=rng.randint(3, 6))).title()
        title = f"{words} - {'home' if k == 0 else f'page {k - 1}'} of site {h}"
        accent = _ACCENTED[int(rnd() * len(_ACCENTED))]
        phrases = c.phrases
        n_phrases = len(phrases)
        items = [
            f'<li><a href="{self._href(h, k, th, tk, st)}">'
            f"{phrases[int(rnd() * n_phrases)]}</a></li>\n"
            for th, tk, st in self._links[h][k]
        ]
        if k == 0 or k % 10 == 5:
            items.append(f'<li><a href="{_PRIVATE_PATH}">members only</a></li>\n')
        if k == 0:
            items.extend(
                f'<li><a href="{html.escape(r)}">extra {html.escape(r)}</a></li>\n'
                for r in self._linked_extras(h)
            )
        head = (
            '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f"<title>{title}</title>\n</head>\n<body>\n<h1>{title}</h1>\n"
            f"<p>About {words.lower()}, {accent}.</p>\n<ul class=\"links\">\n{''.join(items)}</ul>\n"
        ).encode("utf-8")
        tail = b"</body>\n</html>\n"
        parts = [head]
        parts.extend(self._padding(rnd, self._sizes[h][k] - len(head) - len(tail)))
        parts.append(tail)
        return b"".join(parts)

    def _page(self, h: int, k: int) -> tuple[bytes, bytes, str]:
        """(head, body, etag) for page (h, k), from a byte-bounded LRU cache."""
        key = (h, k)
        cache = self._cache
        hit = cache.get(key)
        if hit is not None:
            cache.move_to_end(key)
            return hit
        body = self._render(h, k)
        etag = f'"tw-{self._seed}-{self.hosts[h].rsplit(":", 1)[1]}-{h}-{k}"'
        head = (
            "HTTP/1.1 200 OK\r\nServer: testweb\r\n"
            f"Content-Type: {_HTML_CT}\r\nContent-Length: {len(body)}\r\nETag: {etag}\r\n"
        ).encode("latin-1")
        entry = (head, body, etag)
        cache[key] = entry
        self._cache_size += len(body)
        while self._cache_size > self._cache_budget and len(cache) > 1:
            _, old = cache.popitem(last=False)
            self._cache_size -= len(old[1])
        return entry

    def _respond_to(self, h: int, method: str, target: str, headers: dict[str, str]) -> _Resp:
        if method not in ("GET", "HEAD"):
            return _METHOD_NOT_ALLOWED
        kind, resp, k = self._classify(h, target)
        if resp is not None:
            return resp
        if kind == "page":
            head, body, etag = self._page(h, k)
            inm = headers.get("if-none-match")
            if inm is not None and (inm.strip() == "*" or etag in [t.strip() for t in inm.split(",")]):
                return (304, f"HTTP/1.1 304 Not Modified\r\nServer: testweb\r\nETag: {etag}\r\n"
                        .encode("latin-1"), b"", None)
            return (200, head, body, None)
        if kind == "private":
            return _PRIVATE_RESP
        return _NOT_FOUND_RESP

    # -- serving loop ----------------------------------------------------------

    def _loop(self) -> None:
        sel = self._sel
        assert sel is not None
        timers = self._timers
        sweep_every = None if self._idle_timeout is None else max(0.05, min(1.0, self._idle_timeout / 4))
        next_sweep = time.monotonic() + (sweep_every or 0)
        try:
            while not self._stopping:
                timeout: float | None = None
                if timers:
                    timeout = max(0.0, timers[0][0] - time.monotonic())
                if sweep_every is not None:
                    timeout = sweep_every if timeout is None else min(timeout, sweep_every)
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
                            self._accept(key.fileobj, data)  # type: ignore[arg-type]
                    except Exception:  # a bug must not take the whole web down
                        traceback.print_exc()
                        if data.__class__ is _Conn:
                            self._close(data)
                if timers:
                    now = time.monotonic()
                    while timers and timers[0][0] <= now:
                        fn = heapq.heappop(timers)[2]
                        try:
                            fn()
                        except Exception:
                            traceback.print_exc()
                if sweep_every is not None and time.monotonic() >= next_sweep:
                    self._sweep_idle()
                    next_sweep = time.monotonic() + sweep_every
        finally:
            self._cpu_final = time.thread_time()
            self._shutdown_sockets()

    def _drain_wake(self) -> None:
        assert self._wake_r is not None
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:
            pass

    def _sweep_idle(self) -> None:
        assert self._idle_timeout is not None
        limit = time.monotonic() - self._idle_timeout
        for conn in [c for c in self._conns if not c.busy and c.last_active < limit]:
            self._close(conn)

    def _accept(self, lsock: socket.socket, h: int) -> None:
        assert self._sel is not None
        while True:
            try:
                sock, _ = lsock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # e.g. out of file descriptors; the client will retry
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Conn(sock, h, self._next_conn_id)
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

    def _on_readable(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(262144)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn)
            return
        if not data:
            conn.eof = True
            if conn.busy:
                self._update(conn)
            else:
                self._process(conn)
            return
        conn.rx_time = time.time()
        conn.last_active = time.monotonic()
        conn.inbuf += data
        if conn.busy:
            self._update(conn)
        else:
            self._process(conn)

    def _on_writable(self, conn: _Conn) -> None:
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
        resp = self._respond_to(h, method, target, headers)
        rec = RequestRecord(
            host=self.hosts[h], path=target, method=method, status=resp[0],
            start=conn.rx_time, end=0.0, conn_id=conn.conn_id,
            user_agent=headers.get("user-agent", ""), headers=headers,
        )
        self._begin(conn, rec)
        delay = self._specs[h].delay_s
        if delay > 0:
            def fire() -> None:
                if not conn.closed:
                    self._send(conn, resp, method == "HEAD", keep_alive)
                    if not conn.busy and not conn.closed:
                        self._process(conn)

            self._timer_seq += 1
            heapq.heappush(self._timers, (time.monotonic() + delay, self._timer_seq, fire))
        else:
            self._send(conn, resp, method == "HEAD", keep_alive)

    def _reject(self, conn: _Conn, status: int, line: str = "",
                headers: dict[str, str] | None = None) -> None:
        """Answer a malformed request and close: its framing can't be trusted."""
        parts = line.split(" ")
        headers = headers or {}
        self._begin(conn, RequestRecord(
            host=self.hosts[conn.host_idx], path=parts[1] if len(parts) > 1 else "",
            method=parts[0], status=status, start=conn.rx_time, end=0.0,
            conn_id=conn.conn_id, user_agent=headers.get("user-agent", ""), headers=headers,
        ))
        body = f"<html><body><h1>{status} {_reason(status)}</h1></body></html>\n".encode()
        self._send(conn, _make_resp(status, [("Content-Type", _HTML_CT)], body), False, False)

    def _begin(self, conn: _Conn, rec: RequestRecord) -> None:
        """Log the request before answering, so a client never outruns the log."""
        with self._log_lock:
            self._log.append(rec)
        conn.record = rec
        conn.busy = True

    def _send(self, conn: _Conn, resp: _Resp, head_only: bool, keep_alive: bool) -> None:
        _, head, body, forced = resp
        if forced is not None:
            keep_alive = keep_alive and "close" not in forced.lower()
            conn_line = f"Connection: {forced}\r\n\r\n".encode("latin-1")
        else:
            conn_line = _KA if keep_alive else _CLOSE
        conn.close_after = not keep_alive
        # Head and body go out in one sendmsg: no copy of the (cached) body.
        conn.out = [head + conn_line] if head_only or not body else [head + conn_line, body]
        self._flush(conn)

    def _flush(self, conn: _Conn) -> None:
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

    def _finish(self, conn: _Conn) -> None:
        """The response is fully written: close, or await the next request."""
        conn.record = None
        conn.busy = False
        conn.last_active = time.monotonic()
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
        try:
            for _ in range(16):  # unread input would make close() send a RST
                if not conn.sock.recv(65536):
                    break
        except OSError:
            pass
        try:
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        conn.sock.close()
        self._conns.discard(conn)


_METHOD_NOT_ALLOWED = _make_resp(
    405, [("Content-Type", _HTML_CT), ("Allow", "GET, HEAD")],
    b"<html><body><h1>405 Method Not Allowed</h1></body></html>\n",
)
_NOT_FOUND_RESP = _make_resp(404, [("Content-Type", _HTML_CT)], _NOT_FOUND_BODY)
_PRIVATE_RESP = _make_resp(200, [("Content-Type", _HTML_CT)], _PRIVATE_BODY)


# ---------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Serve a web until SIGINT/SIGTERM; print each host's home URL first."""
    ap = argparse.ArgumentParser(prog="python -m testweb", description="Serve a generated multi-host web on loopback.")
    ap.add_argument("--hosts", type=int, default=5)
    ap.add_argument("--pages", type=int, default=20, help="pages per host")
    ap.add_argument("--mean-bytes", type=int, default=8_000)
    ap.add_argument("--sigma", type=float, default=0.6)
    ap.add_argument("--max-bytes", type=int, default=400_000)
    ap.add_argument("--links", type=int, default=8)
    ap.add_argument("--cross-ratio", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--first-ip", type=int, default=2)
    args = ap.parse_args(argv)
    # A real handler replaces an inherited SIG_IGN (shells start background jobs
    # that way), and blocking before the server thread exists means only
    # sigwait below ever receives the signals.
    sigs = {signal.SIGINT, signal.SIGTERM}
    for sig in sigs:
        signal.signal(sig, lambda signum, frame: None)
    signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    web = TestWeb(
        args.hosts, args.pages, seed=args.seed, mean_page_bytes=args.mean_bytes,
        size_sigma=args.sigma, max_page_bytes=args.max_bytes, links_per_page=args.links,
        cross_host_ratio=args.cross_ratio, first_ip=args.first_ip,
    ).start()
    try:
        sys.stdout.write("".join(u + "\n" for u in web.seeds(all_hosts=True)))
        sys.stdout.flush()
        signal.sigwait(sigs)
    finally:
        web.stop()
    return 0

