"""A generated multi-host web served on loopback, for crawler tests and benchmarks.

Why this exists: crawler tests need a web whose shape is known in advance
(pages, links, robots rules, odd responses) so results can be checked exactly,
and politeness can only be judged from the server side (what was asked, when,
on which TCP connection).  The benchmark also runs the crawler on the same
small machine, so serving must be cheap: one selector thread serves every host,
page bodies are assembled from a pre-built paragraph pool and cached, and
responses use HTTP/1.1 keep-alive with Content-Length and no per-request
logging.

Host ``i`` listens on ``127.0.0.(first_ip + i)`` at a port chosen by the OS.
Its pages are ``/`` and ``/p/<n>.html``; ``/robots.txt`` follows its
:class:`HostSpec`; anything under ``/private/`` is served (200) even though the
default robots.txt forbids it, so a crawler that ignores robots shows up in the
request log.  Unknown paths get a small 404 page.

Run ``python -m crawler_tasks.testweb --hosts N --pages P`` to serve one by hand.
"""

from __future__ import annotations

import argparse
import heapq
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
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from functools import lru_cache
from http import HTTPStatus
from typing import Callable, Iterable
from urllib.parse import urldefrag, urljoin, urlsplit
from urllib.robotparser import RobotFileParser

__all__ = ["HostSpec", "RequestRecord", "TestWeb", "main"]


@dataclass(slots=True)
class RequestRecord:
    """One request as the server saw it; the evidence for politeness checks."""

    host: str  # "127.0.0.5:41234": address:port of the listening socket
    path: str  # raw request target (path + query)
    method: str
    status: int  # status sent (or that would have been sent if the peer left)
    start: float  # time.time() when the request was read
    end: float  # time.time() after the response was written (or the peer left)
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
_POOL_PARAGRAPHS = 2048


@dataclass(frozen=True, slots=True)
class _Corpus:
    """Word bag and paragraph pool shared by all pages of one seed."""

    bag: tuple[str, ...]  # words repeated roughly by Zipf frequency
    paras: tuple[bytes, ...]  # ASCII b"<p>...</p>\n" blocks used as padding


@lru_cache(maxsize=4)
def _corpus(seed: int) -> _Corpus:
    """Build the corpus once per seed: padding then costs a few list picks per page."""
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
    paras: list[bytes] = []
    for _ in range(_POOL_PARAGRAPHS):
        sentences = [
            " ".join(rng.choices(bag, k=rng.randint(5, 16))).capitalize() + "."
            for _ in range(rng.randint(3, 8))
        ]
        paras.append(("<p>" + " ".join(sentences) + "</p>\n").encode("ascii"))
    return _Corpus(tuple(bag), tuple(paras))


# ---------------------------------------------------------------------------
# Link graph
# ---------------------------------------------------------------------------

# How a link is spelled in the HTML (targets on other hosts are always absolute).
_ABS, _ROOT, _REL, _DOTREL, _FRAG = range(5)
_STYLE_CUM = ((0.25, _ABS), (0.55, _ROOT), (0.80, _REL), (0.90, _DOTREL), (1.01, _FRAG))
_HREF_RE = re.compile(rb"""href\s*=\s*["']([^"']*)["']""", re.IGNORECASE)
_PRIVATE_PATH = "/private/x.html"


def _pick_style(r: float) -> int:
    for edge, style in _STYLE_CUM:
        if r < edge:
            return style
    return _ROOT


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
        if v & 255 not in (0, 255):
            out.append(f"127.{(v >> 16) & 255}.{(v >> 8) & 255}.{v & 255}")
        v += 1
    if v > 1 << 24:
        raise ValueError("too many hosts for 127.0.0.0/8")
    return out


# ---------------------------------------------------------------------------
# HTTP bits
# ---------------------------------------------------------------------------

_MAX_HEAD = 64 * 1024
_MAX_INBUF = 1024 * 1024
_KA = b"Connection: keep-alive\r\n\r\n"
_CLOSE = b"Connection: close\r\n\r\n"
_END = b"\r\n"
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
        self.out: memoryview | None = None
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
        for h in range(self._n):
            rng = random.Random(f"testweb-graph:{self._seed}:{h}")
            n_nodes = self._pages[h] + 1
            self._sizes.append(
                [min(cap, int(rng.lognormvariate(mu, sigma))) for _ in range(n_nodes)]
            )
            host_links: list[list[tuple[int, int, int]]] = []
            for k in range(n_nodes):
                lk: list[tuple[int, int, int]] = [
                    (h, c, _pick_style(rng.random()))
                    for c in range(k * fan + 1, min(k * fan + fan, n_nodes - 1) + 1)
                ]
                if k == 0 and h + 1 < self._n:
                    lk.append((h + 1, 0, _ABS))
                while len(lk) < self._links_per_page:
                    if self._n > 1 and rng.random() < cross:
                        th = rng.randrange(self._n - 1)
                        th += th >= h
                        lk.append((th, rng.randrange(self._pages[th] + 1), _ABS))
                    elif n_nodes > 1:
                        tk = rng.randrange(n_nodes - 1)
                        tk += tk >= k
                        lk.append((h, tk, _pick_style(rng.random())))
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
        follows RFC 9309 status rules (4xx: allow all, 5xx: disallow all) and
        urllib.robotparser matching (no wildcards).  URLs are absolute,
        without fragments.
        """
        self._require_started()
        index = {hp: i for i, hp in enumerate(self.hosts)}
        allow: dict[int, Callable[[str], bool]] = {}
        seen: set[str] = set()
        out: set[str] = set()
        queue: deque[str] = deque()

        def push(u: str) -> None:
            u = urldefrag(u)[0]
            parts = urlsplit(u)
            if not parts.path:
                u = f"{parts.scheme}://{parts.netloc}/" + (f"?{parts.query}" if parts.query else "")
            if u not in seen:
                seen.add(u)
                queue.append(u)

        for s in self.seeds() if seeds is None else seeds:
            push(s)
        while queue:
            u = queue.popleft()
            parts = urlsplit(u)
            h = index.get(parts.netloc)
            if parts.scheme != "http" or h is None:
                continue
            if h not in allow:
                allow[h] = self._robots_rule(h, user_agent)
            if not allow[h](u):
                continue
            target = parts.path + (f"?{parts.query}" if parts.query else "")
            kind, resp, k = self._classify(h, target)
            if kind == "page":
                out.add(u)
                for th, tk, _ in self._links[h][k]:
                    push(f"http://{self.hosts[th]}{_node_path(tk)}")
                if k == 0:
                    push(f"http://{self.hosts[h]}{_PRIVATE_PATH}")
                    for route in self._linked_extras(h):
                        push(f"http://{self.hosts[h]}{route}")
                elif k % 10 == 5:
                    push(f"http://{self.hosts[h]}{_PRIVATE_PATH}")
            elif kind == "private":
                out.add(u)
                push(f"http://{self.hosts[h]}/")
            elif kind == "extra" and resp is not None:
                status, head, body, _ = resp
                hdrs = self._head_fields(head)
                if 300 <= status < 400 and "location" in hdrs:
                    push(urljoin(u, hdrs["location"]))
                elif status == 200 and hdrs.get("content-type", "").startswith("text/html"):
                    out.add(u)
                    for href in _HREF_RE.findall(body):
                        push(urljoin(u, href.decode("utf-8", "replace").strip()))
        return out

    @property
    def requests(self) -> list[RequestRecord]:
        """A copy of the request log (completion order)."""
        with self._log_lock:
            return list(self._log)

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
        """What a robots.txt-obeying crawler may fetch on host h (RFC 9309 statuses)."""
        url = f"http://{self.hosts[h]}/robots.txt"
        for _ in range(6):
            parts = urlsplit(url)
            if parts.netloc not in self.hosts:
                break
            hh = self.hosts.index(parts.netloc)
            kind, resp, k = self._classify(hh, parts.path + (f"?{parts.query}" if parts.query else ""))
            if kind == "page":
                status, head, body = 200, b"", self._render(hh, k)  # not the cache: other thread
            elif kind == "private":
                status, head, body = 200, b"", _PRIVATE_BODY
            elif resp is None:
                return lambda u: True  # 404
            else:
                status, head, body = resp[0], resp[1], resp[2]
            if 300 <= status < 400:
                loc = self._head_fields(head).get("location")
                if not loc:
                    break
                url = urljoin(url, loc)
                continue
            if 200 <= status < 300:
                rp = RobotFileParser()
                rp.parse(body.decode("utf-8", "replace").splitlines())
                return lambda u: rp.can_fetch(user_agent, u)
            if status >= 500:
                return lambda u: False
            return lambda u: True
        return lambda u: True  # unresolvable redirects: treated as unavailable

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

    def _render(self, h: int, k: int) -> bytes:
        """Build page (h, k): exact target size, text unique to the page."""
        corpus = self._corpus
        bag = corpus.bag
        rng = random.Random(f"{self._seed}/{h}/{k}")
        words = " ".join(rng.choices(bag, k=rng.randint(3, 6))).title()
        title = f"{words} - {'home' if k == 0 else f'page {k - 1}'} of site {h}"

        def intro() -> str:
            text = " ".join(rng.choices(bag, k=rng.randint(40, 80))).capitalize()
            if rng.random() < 0.3:
                text += " " + rng.choice(_ACCENTED)
            return text + "."

        items = [
            f'<li><a href="{self._href(h, k, th, tk, st)}">'
            f'{" ".join(rng.choices(bag, k=rng.randint(1, 3)))}</a></li>\n'
            for th, tk, st in self._links[h][k]
        ]
        if k == 0 or k % 10 == 5:
            items.append(f'<li><a href="{_PRIVATE_PATH}">members only</a></li>\n')
        if k == 0:
            items.extend(f'<li><a href="{r}">extra {r}</a></li>\n' for r in self._linked_extras(h))
        head = (
            '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f"<title>{title}</title>\n</head>\n<body>\n<h1>{title}</h1>\n"
            f"<p>{intro()}</p>\n<ul class=\"links\">\n{''.join(items)}</ul>\n"
            f"<p>{intro()}</p>\n"
        ).encode("utf-8")
        tail = b"</body>\n</html>\n"
        remaining = self._sizes[h][k] - len(head) - len(tail)
        paras = corpus.paras
        n = len(paras)
        rnd = rng.random
        pad: list[bytes] = [head]
        while remaining > 0:
            p = paras[int(rnd() * n)]
            if len(p) <= remaining:
                pad.append(p)
                remaining -= len(p)
            else:  # cut the last paragraph's text so the body has the exact size
                pad.append(b"<p>" + p[3 : 3 + remaining - 8] + b"</p>\n" if remaining >= 9
                           else b"\n" * remaining)
                remaining = 0
        pad.append(tail)
        return b"".join(pad)

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
        conn.busy = True
        conn.record = rec
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
        conn.record = RequestRecord(
            host=self.hosts[conn.host_idx], path=parts[1] if len(parts) > 1 else "",
            method=parts[0], status=status, start=conn.rx_time, end=0.0,
            conn_id=conn.conn_id, user_agent=headers.get("user-agent", ""), headers=headers,
        )
        conn.busy = True
        body = f"<html><body><h1>{status} {_reason(status)}</h1></body></html>\n".encode()
        self._send(conn, _make_resp(status, [("Content-Type", _HTML_CT)], body), False, False)

    def _send(self, conn: _Conn, resp: _Resp, head_only: bool, keep_alive: bool) -> None:
        _, head, body, forced = resp
        if forced is not None:
            keep_alive = keep_alive and "close" not in forced.lower()
            conn_line = f"Connection: {forced}\r\n\r\n".encode("latin-1")
        else:
            conn_line = _KA if keep_alive else _CLOSE
        data = head + conn_line if head_only or not body else head + conn_line + body
        conn.close_after = not keep_alive
        conn.out = memoryview(data)
        self._flush(conn)

    def _flush(self, conn: _Conn) -> None:
        out = conn.out
        assert out is not None
        send = conn.sock.send
        try:
            while out:
                n = send(out)
                out = out[n:]
        except (BlockingIOError, InterruptedError):
            conn.out = out
            self._update(conn)
            return
        except OSError:
            conn.out = None
            self._close(conn)
            return
        conn.out = None
        self._finish(conn)

    def _finish(self, conn: _Conn) -> None:
        """The response is fully written: log it, then close or await the next request."""
        rec = conn.record
        if rec is not None:
            rec.end = time.time()
            with self._log_lock:
                self._log.append(rec)
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
        rec = conn.record
        if rec is not None:  # peer left (or we stopped) before the response was done
            rec.end = time.time()
            with self._log_lock:
                self._log.append(rec)
            conn.record = None
        if conn.events and self._sel is not None:
            try:
                self._sel.unregister(conn.sock)
            except (KeyError, ValueError):
                pass
        conn.events = 0
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
    ap = argparse.ArgumentParser(prog="python -m crawler_tasks.testweb", description="Serve a generated multi-host web on loopback.")
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
    # Block the signals before the server thread exists so only sigwait sees them.
    sigs = {signal.SIGINT, signal.SIGTERM}
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


if __name__ == "__main__":
    sys.exit(main())
