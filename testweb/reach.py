"""The model behind ``TestWeb.reachable()``: what a robots-obeying crawler finds, without the network.

Generated pages follow the link graph; /private/ pages count only if the
host's robots.txt allows them; extra routes count if 200 text/html (their
hrefs are followed) and redirects lead to their Location.  Generated pages are
keyed (host, node) so the big part of the walk needs no URL parsing; anything
else is keyed by its URL string.  Hosts are told apart by origin (scheme and
authority: an https host is not reached by http); links to dead hosts (past the
live ones) lead nowhere.
"""

from __future__ import annotations

import html
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urldefrag, urljoin, urlsplit

from crawler_tasks.robots import RobotsRules
from testweb.pages import HREF_RE, PRIVATE_PATH, Link, links_private, node_path, path_node
from testweb.responses import Resp, head_fields


@dataclass(frozen=True, slots=True)
class Model:
    """What the walk reads of a web (``TestWeb.model()``): its hosts, each host's number of
    generated pages and link graph, its routes, and how it answers."""

    origins: list[str]                                  # [host] -> "http://h1.web.test:8080"
    pages: list[int]
    links: list[list[list[Link]]]                       # [host][node] -> links
    routes: list[dict[str, Resp]]                       # [host] path -> pre-rendered response
    robots: Callable[[int], RobotsRules]                # host -> its robots.txt rules
    linked_extras: Callable[[int], list[str]]           # host -> extra routes its home links to
    classify: Callable[[int, str], tuple[str, Resp | None, int]]   # (host, target) -> (kind, resp, node)


def reachable(web: Model, seeds: list[str], user_agent: str) -> set[str]:
    """Absolute URLs (no fragment) of the HTML pages reachable from ``seeds``."""
    origins = web.origins
    n_live = len(origins)
    index = {o: i for i, o in enumerate(origins)}
    n_pages = web.pages
    links = web.links
    routes = web.routes
    overridden = [  # generated nodes an extra route replaces
        {k for k in (path_node(p, n_pages[h]) for p in routes[h]) if k is not None}
        for h in range(n_live)
    ]
    rules: dict[int, RobotsRules] = {}
    seen: set[tuple[int, int] | str] = set()
    queue: deque[tuple[int, int] | str] = deque()
    out: set[str] = set()

    def push(u: str) -> None:
        parts = urlsplit(urldefrag(u)[0])
        origin = f"{parts.scheme}://{parts.netloc}"
        h = index.get(origin)
        if h is None:
            return
        path = parts.path or "/"
        k = path_node(path, n_pages[h])
        key: tuple[int, int] | str
        if k is not None and not parts.query and path not in routes[h]:
            key = (h, k)
        else:
            key = f"{origin}{path}" + (f"?{parts.query}" if parts.query else "")
        if key not in seen:
            seen.add(key)
            queue.append(key)

    def allowed(h: int, target: str) -> bool:
        rule = rules.get(h)
        if rule is None:
            rule = rules[h] = web.robots(h)
        return rule.is_allowed(target, user_agent)

    def add_page(h: int, k: int, url: str) -> None:
        out.add(url)
        for th, tk, _ in links[h][k]:
            if th >= n_live:
                continue
            if tk in overridden[th]:
                push(f"{origins[th]}{node_path(tk)}")
            elif (th, tk) not in seen:
                seen.add((th, tk))
                queue.append((th, tk))
        if links_private(k):
            push(f"{origins[h]}{PRIVATE_PATH}")
        if k == 0:
            for route in web.linked_extras(h):
                push(f"{origins[h]}{route}")

    for seed in seeds:
        push(seed)
    while queue:
        key = queue.popleft()
        if isinstance(key, tuple):
            h, k = key
            path = node_path(k)
            if allowed(h, path):
                add_page(h, k, f"{origins[h]}{path}")
            continue
        parts = urlsplit(key)
        h = index[f"{parts.scheme}://{parts.netloc}"]
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        if not allowed(h, target):
            continue
        kind, resp, k = web.classify(h, target)
        if kind == "page":
            add_page(h, k, key)
        elif kind == "private":
            out.add(key)
            push(f"{origins[h]}/")
        elif kind == "extra" and resp is not None:
            status, head, body, _ = resp
            fields = head_fields(head)
            if 300 <= status < 400 and "location" in fields:
                push(urljoin(key, fields["location"]))
            elif status == 200 and fields.get("content-type", "").startswith("text/html"):
                out.add(key)
                for href in HREF_RE.findall(body):
                    push(urljoin(key, html.unescape(href.decode("utf-8", "replace").strip())))
    return out
