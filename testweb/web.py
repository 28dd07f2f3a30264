"""TestWeb: the hosts of a generated web, what each path of each host answers, and its queries.

Pages come from :mod:`testweb.pages`, responses are :mod:`testweb.responses`
sent by :mod:`testweb.server`, robots.txt is :mod:`testweb.robots` and the
model of what a polite crawler reaches is :mod:`testweb.reach`.

The real web's addressing is optional, and off by default (IP literals, plain
HTTP, one address per host): ``names`` gives host ``i`` the name
``h<i>.<suffix>`` (URLs then carry names, and ``zone`` is what a DNS server must
answer); ``addresses=K`` puts the hosts on K shared addresses with one port per
scheme (host ``i`` on address ``i mod K``: virtual hosting by Host and SNI);
``https_share``/``https_hosts`` serve some hosts over TLS only, with certificates
from a CA of the web's own (:mod:`testweb.tls`; ``ca_pem`` is the file to trust),
and ``bad_tls`` gives a few a certificate a verifying client refuses.
``dead_names`` are names that serve nothing (a DNS server answers them with an
error or never): pages link to them at ``dead_link_share`` of cross-host links, and
``seeds(dead=True)`` lists their homes.
"""

from __future__ import annotations

import math
import re
import shutil
import ssl
import tempfile
from collections import OrderedDict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
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
from testweb.server import Bind, Server
from testweb.shape import Latency
from testweb.tls import BadCert, WebCerts

_CACHE_BYTES = 64 * 1024 * 1024  # rendered page bodies kept for re-serving (LRU)
_METHOD_NOT_ALLOWED = error_resp(405, [("Allow", "GET, HEAD")])
_PRIVATE = make_resp(200, [("Content-Type", HTML_CT)], PRIVATE_BODY)
_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_NAME_RE = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")


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


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a host is served: the name in its URLs, the address it listens on, port, scheme."""

    name: str  # "h3.web.test", or the address when the web has no names
    address: str  # "127.0.0.3"
    port: int
    scheme: str  # "http" or "https"

    @property
    def netloc(self) -> str:
        return f"{self.name}:{self.port}"

    @property
    def origin(self) -> str:
        return f"{self.scheme}://{self.name}:{self.port}"


def _host_name(text: str) -> str:
    """A DNS name in the form URLs and the zone use (lower case, no final dot), or ValueError."""
    name = text.lower().removesuffix(".")
    if not _NAME_RE.fullmatch(name) or len(name) > 253:
        raise ValueError(f"not a host name: {text!r}")
    return name


def _share(n: int, share: float) -> set[int]:
    """Hosts i whose floor((i + 1) x share) steps up: an even spread, floor(n x share) of them."""
    if not 0 <= share <= 1:
        raise ValueError("a share must be in [0, 1]")
    return {i for i in range(n) if math.floor((i + 1) * share + 1e-9) > math.floor(i * share + 1e-9)}


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

    Host ``i`` listens on ``127.0.0.(first_ip + i)`` (with ``addresses=K``: on
    ``127.0.0.(first_ip + i mod K)``); ``hosts`` holds the "ip:port" (with names:
    "name:port") of each once started, ``origins`` the same with the scheme.
    ``latency`` (see testweb.shape) delays every answer by a time to first byte of
    its own, as on the real web.
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
        names: str | None = None,
        addresses: int = 0,
        https_share: float = 0.0,
        https_hosts: Collection[int] = (),
        bad_tls: Mapping[int, str] | None = None,
        dead_names: int | Sequence[str] = 0,
        dead_link_share: float = 0.0,
    ) -> None:
        if n_hosts < 1:
            raise ValueError("n_hosts must be >= 1")
        if first_ip < 1:
            raise ValueError("first_ip must be >= 1")
        suffix = None if names is None else _host_name(names)
        self._names = None if suffix is None else [f"h{i}.{suffix}" for i in range(n_hosts)]
        if addresses < 0 or (addresses and suffix is None):
            raise ValueError("addresses=K needs K >= 1 and names=: hosts on one address are told apart by name")
        if isinstance(dead_names, int):
            self._dead = [f"h{n_hosts + j}.{suffix}" for j in range(dead_names)]
        else:
            self._dead = [_host_name(d) for d in dead_names]
        if self._dead and self._names is None:
            raise ValueError("dead_names need names=")
        if len({*self._dead, *(self._names or ())}) != len(self._dead) + len(self._names or ()):
            raise ValueError("dead names must differ from each other and from the live hosts' names")
        if dead_link_share and not self._dead:
            raise ValueError("dead_link_share needs dead_names")
        self._ips = _loopback_ips(first_ip, min(addresses, n_hosts) if addresses else n_hosts)
        bad = {h: BadCert(kind) for h, kind in (bad_tls or {}).items()}
        tls_hosts = _share(n_hosts, https_share) | set(https_hosts) | set(bad)
        if not all(0 <= h < n_hosts for h in tls_hosts):
            raise ValueError("https_hosts and bad_tls name hosts 0..n_hosts-1")
        self._tls_hosts = frozenset(tls_hosts)
        self._bad_tls = frozenset(bad)
        self._certs: WebCerts | None = None
        contexts: list[ssl.SSLContext | None] | None = None
        if tls_hosts:
            if suffix is not None and "." not in suffix:
                raise ValueError("HTTPS with names needs a suffix of two labels (web.test): "
                                 "a certificate for *.test matches no name")
            self._certs = WebCerts([f"*.{suffix}"] if suffix else [self._ips[h] for h in sorted(tls_hosts)],
                                   bad.values())
            contexts = [self._certs.context(bad.get(h)) if h in tls_hosts else None for h in range(n_hosts)]
        self._binds = self._plan(n_hosts, bool(addresses), contexts)
        self._ca_dir: Path | None = None
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
        self._pages = Pages(
            seed, [pages_per_host if s.pages is None else s.pages for s in specs],
            mean_bytes=mean_page_bytes, sigma=size_sigma, max_bytes=max_page_bytes,
            links_per_page=links_per_page, cross_host_ratio=cross_host_ratio,
            dead_hosts=len(self._dead), dead_link_share=dead_link_share,
        )
        self._cache: OrderedDict[tuple[int, int], tuple[Resp, str]] = OrderedDict()
        self._cache_size = 0
        self._server = Server(self._respond, [spec.delay_s for spec in specs], latency,
                              names=self._names, contexts=contexts)
        self.hosts: list[str] = []
        self.origins: list[str] = []
        self.endpoints: list[Endpoint] = []
        self._origin_index: dict[str, int] = {}
        self._link_hosts: list[str] = []  # what page links spell for each host, dead ones too
        self._link_schemes: list[str] | None = None  # None: every link is http

    def _plan(self, n_hosts: int, shared: bool, contexts: list[ssl.SSLContext | None] | None) -> list[Bind]:
        """The listening sockets: one per host, or per shared address and scheme."""
        if not shared:
            return [Bind(ip, (h,), contexts[h] if contexts else None) for h, ip in enumerate(self._ips)]
        binds: list[Bind] = []
        k = len(self._ips)
        for j, ip in enumerate(self._ips):
            mine = range(j, n_hosts, k)
            plain = tuple(h for h in mine if not contexts or contexts[h] is None)
            secure = tuple(h for h in mine if contexts and contexts[h] is not None)
            if plain:
                binds.append(Bind(ip, plain, None, shared_port=True))
            if secure:
                assert self._certs is not None
                binds.append(Bind(ip, secure, self._certs.good, shared_port=True))
        return binds

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> Self:
        """Bind the listening sockets and start the serving thread (once)."""
        self.hosts = self._server.start(self._binds)
        self.endpoints = [
            Endpoint(hp.rsplit(":", 1)[0], addr.rsplit(":", 1)[0], int(addr.rsplit(":", 1)[1]),
                     "https" if h in self._tls_hosts else "http")
            for h, (hp, addr) in enumerate(zip(self.hosts, self._server.addresses, strict=True))
        ]
        self.origins = [e.origin for e in self.endpoints]
        self._origin_index = {o: h for h, o in enumerate(self.origins)}
        self._link_hosts = [*self.hosts, *self._dead]
        if self._certs is not None:
            self._link_schemes = [*(e.scheme for e in self.endpoints), *(["http"] * len(self._dead))]
            self._ca_dir = Path(tempfile.mkdtemp(prefix="testweb-ca-"))
            (self._ca_dir / "ca.pem").write_bytes(self._certs.ca_pem)
        return self

    def stop(self) -> None:
        """Close every socket and join the serving thread; safe to call twice."""
        self._server.stop()
        if self._ca_dir is not None:
            shutil.rmtree(self._ca_dir, ignore_errors=True)
            self._ca_dir = None

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
        return f"{self.origins[host_index]}{path}"

    def seeds(self, all_hosts: bool = False, *, dead: bool = False) -> list[str]:
        """Host 0's home page (everything is reachable from it), or every home; ``dead``
        adds the homes of the dead names."""
        homes = [self.url(h, "/") for h in range(len(self._routes) if all_hosts else 1)]
        return homes + [f"http://{name}/" for name in self._dead] if dead else homes

    def page_urls(self) -> set[str]:
        """Every generated page (homes and /p/<n>.html; not private or extra routes)."""
        self._require_started()
        return {
            f"{origin}{node_path(k)}"
            for origin, n in zip(self.origins, self._pages.pages, strict=True)
            for k in range(n + 1)
        }

    @property
    def zone(self) -> dict[str, str]:
        """Host name -> the address it listens on, for a DNS server ({} without names).
        Known before start(): a DNS server can be up first."""
        if self._names is None:
            return {}
        ips = self._ips
        return {name: ips[h % len(ips)] for h, name in enumerate(self._names)}

    @property
    def dead_names(self) -> list[str]:
        """Names of hosts that serve nothing (not in ``zone``); their URLs are ``http://<name>/...``."""
        return list(self._dead)

    @property
    def ca_pem(self) -> Path | None:
        """The web's CA certificate (PEM file) a crawler must trust; None without HTTPS hosts.
        Written at start(), removed at stop()."""
        return None if self._ca_dir is None else self._ca_dir / "ca.pem"

    def client_ssl_context(self) -> ssl.SSLContext:
        """A verifying TLS client context that trusts the web's CA."""
        if self._certs is None:
            raise RuntimeError("this web has no HTTPS hosts")
        return self._certs.client_context()

    def reachable(self, seeds: list[str] | None = None, *, user_agent: str = "*") -> set[str]:
        """HTML page URLs a robots-obeying crawler can reach from ``seeds`` (default: seeds()).

        Models what the server would answer, without the network (see testweb.reach);
        robots.txt as testweb.robots says (a host with a bad certificate is unreachable,
        so nothing of it is). URLs are absolute, without fragments.
        """
        self._require_started()
        return reachable(self.model(), self.seeds() if seeds is None else seeds, user_agent)

    def model(self) -> Model:
        """What a crawler would find here, for ``testweb.reach`` to walk without the network."""
        return Model(self.origins, self._pages.pages, self._pages.links, self._routes, self._robots,
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
        h = self._origin_index.get(f"{parts.scheme}://{parts.netloc}")
        if h is None or h in self._bad_tls:  # a verifying client never gets an answer there
            return None
        kind, resp, k = self._classify(h, parts.path + (f"?{parts.query}" if parts.query else ""))
        if kind == "page":  # rendered afresh: the page cache belongs to the serving thread
            return (200, {}, self._pages.render(h, k, self._link_hosts, self._linked_extras(h),
                                                self._link_schemes))
        resp = resp or (_PRIVATE if kind == "private" else NOT_FOUND)
        return (resp[0], head_fields(resp[1]), resp[2])

    def _robots(self, h: int) -> RobotsRules:
        """What host h's robots.txt lets a crawler fetch (testweb.robots has the policy)."""
        return robots_rules(f"{self.origins[h]}/robots.txt", self._answer)

    # -- serving (on the server thread) -------------------------------------------

    def _page(self, h: int, k: int) -> tuple[Resp, str]:
        """(response, etag) for page (h, k), from a byte-bounded LRU cache."""
        key = (h, k)
        cache = self._cache
        hit = cache.get(key)
        if hit is not None:
            cache.move_to_end(key)
            return hit
        body = self._pages.render(h, k, self._link_hosts, self._linked_extras(h), self._link_schemes)
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
