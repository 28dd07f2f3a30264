"""TestWeb: the hosts of a generated web, what each path of each host answers, and its queries.

Pages come from :mod:`testweb.pages`, responses are :mod:`testweb.responses`
sent by :mod:`testweb.server`, robots.txt is :mod:`testweb.robots` and the
model of what a polite crawler reaches is :mod:`testweb.reach`.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Self
from urllib.parse import urlsplit

from crawler_tasks.robots import RobotsRules
from testweb.pages import PRIVATE_BODY, Pages, node_path, path_node
from testweb.reach import Model, reachable
from testweb.responses import (
    HTML_CT,
    NOT_FOUND,
    ConnRecord,
    RequestRecord,
    Resp,
    error_resp,
    head_fields,
    make_resp,
)
from testweb.robots import DEFAULT_ROBOTS_TXT, robots_resp, robots_rules
from testweb.server import Server
from testweb.shape import Latency

_CACHE_BYTES = 64 * 1024 * 1024  # rendered page bodies kept for re-serving (LRU)
_METHOD_NOT_ALLOWED = error_resp(405, [("Allow", "GET, HEAD")])
_PRIVATE = make_resp(200, [("Content-Type", HTML_CT)], PRIVATE_BODY)


@dataclass
class HostSpec:
    """Per-host behaviour knobs; the defaults describe a normal, polite host.

    ``pages=None`` means "use the TestWeb's ``pages_per_host``", so a spec that
    only changes robots does not silently change the page count.
    ``extra_routes`` override generated paths (and ``/robots.txt``) and are
    served verbatim; the server adds only Content-Length and Connection unless
    the route's headers already carry them.  When ``link_extra_routes`` is true
    the host's home page links to every extra route that is not a generated
    path, so a crawler finds them on its own.  A spec may be shared by hosts:
    TestWeb never changes it.
    """

    pages: int | None = None
    robots_txt: str | None = DEFAULT_ROBOTS_TXT  # None: /robots.txt is a 404
    robots_status: int = 200
    extra_routes: dict[str, tuple[int, dict[str, str], bytes]] = field(default_factory=dict)
    delay_s: float = 0.0  # every response of the host is sent this late
    link_extra_routes: bool = True


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


class TestWeb:
    """A deterministic web of ``n_hosts`` sites on loopback, served by one thread.

    Host ``i`` listens on ``127.0.0.(first_ip + i)``; ``hosts`` holds the
    "ip:port" of each once started.  ``latency`` (see testweb.shape) delays every
    answer by a time to first byte of its own, as on the real web.
    """

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
        latency: Latency | None = None,
    ) -> None:
        if n_hosts < 1:
            raise ValueError("n_hosts must be >= 1")
        if first_ip < 1:
            raise ValueError("first_ip must be >= 1")
        given = host_specs or {}
        specs = [given.get(i) or HostSpec() for i in range(n_hosts)]
        self._link_extras = [spec.link_extra_routes for spec in specs]
        self._extra_paths: list[set[str]] = [set(spec.extra_routes) for spec in specs]
        self._routes: list[dict[str, Resp]] = []  # per host: pre-rendered robots.txt and extra routes
        for spec in specs:
            routes = {"/robots.txt": robots_resp(spec.robots_txt, spec.robots_status)}
            for path, (status, headers, body) in spec.extra_routes.items():
                if not path.startswith("/"):
                    raise ValueError(f"extra route must start with '/': {path!r}")
                routes[path] = make_resp(status, headers.items(), body)
            self._routes.append(routes)
        self._ips = _loopback_ips(first_ip, n_hosts)
        self._pages = Pages(
            seed, [pages_per_host if s.pages is None else s.pages for s in specs],
            mean_bytes=mean_page_bytes, sigma=size_sigma, max_bytes=max_page_bytes,
            links_per_page=links_per_page, cross_host_ratio=cross_host_ratio,
        )
        self._cache: OrderedDict[tuple[int, int], tuple[Resp, str]] = OrderedDict()
        self._cache_size = 0
        self._server = Server(self._respond, [spec.delay_s for spec in specs], latency)
        self.hosts: list[str] = []

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> Self:
        """Bind one listening socket per host and start the serving thread (once)."""
        self.hosts = self._server.start(self._ips)
        return self

    def stop(self) -> None:
        """Close every socket and join the serving thread; safe to call twice."""
        self._server.stop()

    def __enter__(self) -> Self:
        return self if self.hosts else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- queries ---------------------------------------------------------------

    def url(self, host_index: int, path: str) -> str:
        """Absolute URL of ``path`` on host ``host_index``."""
        self._require_started()
        if not path.startswith("/"):
            path = "/" + path
        return f"http://{self.hosts[host_index]}{path}"

    def seeds(self, all_hosts: bool = False) -> list[str]:
        """Host 0's home page (everything is reachable from it), or every home."""
        return [self.url(h, "/") for h in range(len(self._ips) if all_hosts else 1)]

    def page_urls(self) -> set[str]:
        """Every generated page (homes and /p/<n>.html; not private or extra routes)."""
        self._require_started()
        return {
            f"http://{hp}{node_path(k)}"
            for hp, n in zip(self.hosts, self._pages.pages, strict=True)
            for k in range(n + 1)
        }

    def reachable(self, seeds: list[str] | None = None, *, user_agent: str = "*") -> set[str]:
        """HTML page URLs a robots-obeying crawler can reach from ``seeds`` (default: seeds()).

        Models what the server would answer, without the network (see testweb.reach);
        robots.txt as testweb.robots says. URLs are absolute, without fragments.
        """
        self._require_started()
        return reachable(self.model(), self.seeds() if seeds is None else seeds, user_agent)

    def model(self) -> Model:
        """What a crawler would find here, for ``testweb.reach`` to walk without the network."""
        return Model(self.hosts, self._pages.pages, self._pages.links, self._routes, self._robots,
                     self._linked_extras, self._classify)

    @property
    def requests(self) -> list[RequestRecord]:
        """Snapshot of the log in the order requests were read.

        ``end`` is 0.0 for a response still pending (e.g. a delayed host).
        """
        return self._server.requests()

    @property
    def connections(self) -> list[ConnRecord]:
        """Snapshot of the TCP connections accepted, in order; ``closed`` is 0.0 while open."""
        return self._server.connections()

    def clear_log(self) -> None:
        """Forget logged requests (and closed connections), e.g. between phases of a test."""
        self._server.clear_log()

    def server_cpu_seconds(self) -> float:
        """CPU time used by the serving thread, so a measurement can tell server from client."""
        return self._server.cpu_seconds()

    def set_route(self, host_index: int, path: str, status: int, headers: dict[str, str], body: bytes) -> None:
        """Add or replace a route: for bodies that must name the web's own URLs
        (sitemaps, absolute redirects), which are known only after start()."""
        if not path.startswith("/"):
            raise ValueError(f"route must start with '/': {path!r}")
        self._extra_paths[host_index].add(path)
        self._routes[host_index][path] = make_resp(status, headers.items(), body)

    # -- routing (testweb.reach reads it through model()) --------------------------

    def _require_started(self) -> None:
        if not self.hosts:
            raise RuntimeError("call start() first: URLs need the bound ports")

    def _linked_extras(self, h: int) -> list[str]:
        """Extra routes the home page of host h links to."""
        if not self._link_extras[h]:
            return []
        n = self._pages.pages[h]
        return sorted(
            r for r in self._extra_paths[h]
            if r != "/robots.txt" and path_node(r.split("?", 1)[0], n) is None
        )

    def _classify(self, h: int, target: str) -> tuple[str, Resp | None, int]:
        """Route a request target: ('extra'|'robots'|'page'|'private'|'missing', resp, node)."""
        if target.startswith(("http://", "https://")):
            target = "/" + target.split("/", 3)[3] if target.count("/") >= 3 else "/"
        routes = self._routes[h]
        resp = routes.get(target)
        path = target.split("?", 1)[0]
        if resp is None and path != target:
            resp = routes.get(path)
        if resp is not None:
            generated_robots = path == "/robots.txt" and path not in self._extra_paths[h]
            return ("robots" if generated_robots else "extra", resp, -1)
        k = path_node(path, self._pages.pages[h])
        if k is not None:
            return ("page", None, k)
        if path.startswith("/private/"):
            return ("private", None, -1)
        return ("missing", None, -1)

    def _answer(self, url: str) -> tuple[int, dict[str, str], bytes] | None:
        """What a GET of ``url`` would get, or None outside this web; safe off the serving thread."""
        parts = urlsplit(url)
        if parts.scheme != "http" or parts.netloc not in self.hosts:
            return None
        h = self.hosts.index(parts.netloc)
        kind, resp, k = self._classify(h, parts.path + (f"?{parts.query}" if parts.query else ""))
        if kind == "page":  # rendered afresh: the page cache belongs to the serving thread
            return (200, {}, self._pages.render(h, k, self.hosts, self._linked_extras(h)))
        resp = resp or (_PRIVATE if kind == "private" else NOT_FOUND)
        return (resp[0], head_fields(resp[1]), resp[2])

    def _robots(self, h: int) -> RobotsRules:
        """What host h's robots.txt lets a crawler fetch (testweb.robots has the policy)."""
        return robots_rules(f"http://{self.hosts[h]}/robots.txt", self._answer)

    # -- serving (on the server thread) -------------------------------------------

    def _page(self, h: int, k: int) -> tuple[Resp, str]:
        """(response, etag) for page (h, k), from a byte-bounded LRU cache."""
        key = (h, k)
        cache = self._cache
        hit = cache.get(key)
        if hit is not None:
            cache.move_to_end(key)
            return hit
        body = self._pages.render(h, k, self.hosts, self._linked_extras(h))
        etag = f'"tw-{self._pages.seed}-{self.hosts[h].rsplit(":", 1)[1]}-{h}-{k}"'
        entry = (make_resp(200, [("Content-Type", HTML_CT), ("ETag", etag)], body), etag)
        cache[key] = entry
        self._cache_size += len(body)
        while self._cache_size > _CACHE_BYTES and len(cache) > 1:
            _, old = cache.popitem(last=False)
            self._cache_size -= len(old[0][2])
        return entry

    def _respond(self, h: int, method: str, target: str, headers: dict[str, str]) -> Resp:
        if method not in ("GET", "HEAD"):
            return _METHOD_NOT_ALLOWED
        kind, resp, k = self._classify(h, target)
        if resp is not None:
            return resp
        if kind == "page":
            resp, etag = self._page(h, k)
            inm = headers.get("if-none-match")
            if inm is not None and (inm.strip() == "*" or etag in [t.strip() for t in inm.split(",")]):
                return make_resp(304, [("ETag", etag)], b"")
            return resp
        return _PRIVATE if kind == "private" else NOT_FOUND
