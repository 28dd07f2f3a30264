"""The model behind ``TestWeb.reachable()``: what a robots-obeying crawler finds, without the network.

Generated pages follow the link graph; /private/ pages count only if the
host's robots.txt allows them; extra routes count if 200 text/html (their
hrefs are followed) and redirects lead to their Location.  Generated pages are
keyed (host, node) so the big part of the walk needs no URL parsing; anything
else is keyed by its URL string.
"""

from __future__ import annotations

import html
from collections import deque
from typing import TYPE_CHECKING
from urllib.parse import urldefrag, urljoin, urlsplit

from crawler_tasks.robots import RobotsRules
from testweb.pages import HREF_RE, PRIVATE_PATH, links_private, node_path, path_node
from testweb.responses import head_fields

if TYPE_CHECKING:
    from testweb.web import TestWeb


def reachable(web: TestWeb, seeds: list[str], user_agent: str) -> set[str]:
    """Absolute URLs (no fragment) of the HTML pages reachable from ``seeds``."""
    hosts = web.hosts
    index = {hp: i for i, hp in enumerate(hosts)}
    n_pages = web._pages.pages
    links = web._pages.links
    routes = web._routes
    overridden = [  # generated nodes an extra route replaces
        {k for k in (path_node(p, n_pages[h]) for p in routes[h]) if k is not None}
        for h in range(len(hosts))
    ]
    rules: dict[int, RobotsRules] = {}
    seen: set[tuple[int, int] | str] = set()
    queue: deque[tuple[int, int] | str] = deque()
    out: set[str] = set()

    def push(u: str) -> None:
        parts = urlsplit(urldefrag(u)[0])
        h = index.get(parts.netloc)
        if parts.scheme != "http" or h is None:
            return
        path = parts.path or "/"
        k = path_node(path, n_pages[h])
        key: tuple[int, int] | str
        if k is not None and not parts.query and path not in routes[h]:
            key = (h, k)
        else:
            key = f"http://{parts.netloc}{path}" + (f"?{parts.query}" if parts.query else "")
        if key not in seen:
            seen.add(key)
            queue.append(key)

    def allowed(h: int, target: str) -> bool:
        rule = rules.get(h)
        if rule is None:
            rule = rules[h] = web._robots(h)
        return rule.is_allowed(target, user_agent)

    def add_page(h: int, k: int, url: str) -> None:
        out.add(url)
        for th, tk, _ in links[h][k]:
            if tk in overridden[th]:
                push(f"http://{hosts[th]}{node_path(tk)}")
            elif (th, tk) not in seen:
                seen.add((th, tk))
                queue.append((th, tk))
        if links_private(k):
            push(f"http://{hosts[h]}{PRIVATE_PATH}")
        if k == 0:
            for route in web._linked_extras(h):
                push(f"http://{hosts[h]}{route}")

    for seed in seeds:
        push(seed)
    while queue:
        key = queue.popleft()
        if isinstance(key, tuple):
            h, k = key
            path = node_path(k)
            if allowed(h, path):
                add_page(h, k, f"http://{hosts[h]}{path}")
            continue
        parts = urlsplit(key)
        h = index[parts.netloc]
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        if not allowed(h, target):
            continue
        kind, resp, k = web._classify(h, target)
        if kind == "page":
            add_page(h, k, key)
        elif kind == "private":
            out.add(key)
            push(f"http://{hosts[h]}/")
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
