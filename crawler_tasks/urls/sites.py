"""Per-site rules of a crawl job (Heritrix's "sheets", in a simpler form), pure.

A rule matches a domain and its subdomains (``match = "example.org"``) or a URL prefix
(``match = "https://example.org/docs/"``). For a URL the most specific rule wins: a
prefix beats a domain, a longer prefix or domain a shorter one. What a rule sets for
URLs (scope, include/exclude patterns, depth) is read from the URL's rule; what it sets
for a host (its minimum delay, request headers, page budget, rendering, revisit bounds,
``ignore_robots``) from the host's: its most specific domain rule, or a prefix rule on
that very host (the longest). A site's delay is its
own, faster or slower than ``MIN_DELAY_S``; robots.txt's Crawl-delay, Retry-After and
backoff still lengthen it (``fetch.politeness``), and one connection per host holds
whatever the rules say.

The rules travel as JSON in the ``SITES`` setting (the job file writes it), so every
process of every node reads the same ones.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

KEYS = ("match", "in_scope", "include", "exclude", "max_depth", "min_delay", "headers", "max_pages", "render",
        "recrawl_min", "recrawl_max", "ignore_robots")
RENDER_MODES = ("auto", "always", "never")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


@dataclass(frozen=True, slots=True)
class Site:
    match: str
    in_scope: bool = True
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    max_depth: int | None = None
    min_delay: float | None = None
    headers: tuple[tuple[str, str], ...] = ()
    max_pages: int | None = None         # the host's page budget, in place of MAX_PAGES_PER_HOST
    render: str | None = None            # auto | always | never, in place of RENDER
    recrawl_min: float | None = None     # revisit interval bounds, s (continuous crawls)
    recrawl_max: float | None = None
    ignore_robots: bool = False          # a site the operator owns (recorded in the job)
    _include: tuple[re.Pattern[str], ...] = field(default=(), compare=False, repr=False)
    _exclude: tuple[re.Pattern[str], ...] = field(default=(), compare=False, repr=False)

    @property
    def is_prefix(self) -> bool:
        return "://" in self.match

    def reason(self, url: str, depth: int, check_depth: bool = True) -> str | None:
        """Why this site's rule refuses ``url`` (a filter name), or None."""
        if not self.in_scope:
            return "site_out_of_scope"
        if self._include and not any(p.search(url) for p in self._include):
            return "site_not_included"
        if any(p.search(url) for p in self._exclude):
            return "site_excluded"
        if check_depth and self.max_depth is not None and depth > self.max_depth:
            return "site_max_depth"
        return None

    def describe(self) -> str:
        """The rule in one line: its match and what it sets."""
        default = Site(self.match)
        return ", ".join([f"match {self.match}"] + [f"{k} {getattr(self, k)!r}" for k in KEYS[1:]
                                                    if getattr(self, k) != getattr(default, k)])


def site_from(item: dict[str, Any]) -> Site:
    """One rule from its JSON/TOML table; ValueError names the bad key."""
    unknown = [k for k in item if k not in KEYS]
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r}")
    match = item.get("match")
    if not isinstance(match, str) or not match.strip():
        raise ValueError("match must be a domain or a URL prefix")
    match = match.strip().lower() if "://" not in match else match.strip()
    if "://" in match:
        parts = urlsplit(match)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"match {match!r} must be a domain or an http(s) URL prefix")
    elif "/" in match or not re.fullmatch(r"[a-z0-9.\-]+", match.strip(".")):
        raise ValueError(f"match {match!r} must be a domain or an http(s) URL prefix")
    kw: dict[str, Any] = {"match": match.strip(".") if "://" not in match else match}
    if "in_scope" in item:
        if not isinstance(item["in_scope"], bool):
            raise ValueError("in_scope must be true or false")
        kw["in_scope"] = item["in_scope"]
    for key in ("include", "exclude"):
        if key in item:
            value = item[key]
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"{key} must be a list of regular expressions")
            compiled = []
            for pattern in value:
                try:
                    compiled.append(re.compile(pattern))
                except re.error as exc:
                    raise ValueError(f"{key}: {pattern[:200]!r} is not a regular expression: {exc}") from None
            kw[key], kw[f"_{key}"] = tuple(value), tuple(compiled)
    if "max_depth" in item:
        if not isinstance(item["max_depth"], int) or isinstance(item["max_depth"], bool) or item["max_depth"] < 0:
            raise ValueError("max_depth must be an integer >= 0")
        kw["max_depth"] = item["max_depth"]
    if "min_delay" in item:
        value = item["min_delay"]
        if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value <= 86_400:
            raise ValueError(f"min_delay must be a number of seconds, got {value!r}"[:120])
        kw["min_delay"] = float(value)
    if "headers" in item:
        value = item["headers"]
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise ValueError("headers must be a table of header names and string values")
        for name, text in value.items():
            if not _HEADER_NAME.match(name) or "\r" in text or "\n" in text or not text.isascii():
                raise ValueError(f"headers: {name!r} is not a header a request can carry")
            if name.lower() in ("host", "content-length", "connection", "transfer-encoding"):
                raise ValueError(f"headers: {name!r} is the crawler's own")
        kw["headers"] = tuple(value.items())
    if "max_pages" in item:
        if not isinstance(item["max_pages"], int) or isinstance(item["max_pages"], bool) or item["max_pages"] < 0:
            raise ValueError("max_pages must be an integer >= 0 (0: no budget)")
        kw["max_pages"] = item["max_pages"]
    if "render" in item:
        if item["render"] not in RENDER_MODES:
            raise ValueError(f"render must be one of {', '.join(RENDER_MODES)}, got {item['render']!r}"[:120])
        kw["render"] = item["render"]
    for key in ("recrawl_min", "recrawl_max"):
        if key in item:
            value = item[key]
            if not isinstance(value, int | float) or isinstance(value, bool) or not value > 0:
                raise ValueError(f"{key} must be a number of seconds > 0, got {value!r}"[:120])
            kw[key] = float(value)
    if kw.get("recrawl_min") and kw.get("recrawl_max") and kw["recrawl_min"] > kw["recrawl_max"]:
        raise ValueError("recrawl_min must be <= recrawl_max")
    if "ignore_robots" in item:
        if not isinstance(item["ignore_robots"], bool):
            raise ValueError("ignore_robots must be true or false")
        kw["ignore_robots"] = item["ignore_robots"]
    return Site(**kw)


def _domain_of(site: Site) -> str:
    return (urlsplit(site.match).hostname or "") if site.is_prefix else site.match


def _within(host: str, domain: str) -> bool:
    return host == domain or host.endswith("." + domain)


class Sites:
    """The rules of a job, looked up by URL or by host (see the module doc)."""

    def __init__(self, sites: list[Site]) -> None:
        self.sites = sites
        self._prefixes = sorted((s for s in sites if s.is_prefix), key=lambda s: -len(s.match))
        self._domains = sorted((s for s in sites if not s.is_prefix), key=lambda s: -len(s.match))

    def __bool__(self) -> bool:
        return bool(self.sites)

    def for_url(self, url: str) -> Site | None:
        """The most specific rule matching ``url``."""
        for site in self._prefixes:
            if url.startswith(site.match):
                return site
        host = (urlsplit(url).hostname or "").lower()
        return next((s for s in self._domains if _within(host, s.match)), None)

    def for_host(self, host: str) -> Site | None:
        """The rule that sets a host's delay and headers: a prefix rule on that very host
        (the longest), else its most specific domain rule. ``host`` may carry a port."""
        name = _hostname(host)
        prefix = next((s for s in self._prefixes if urlsplit(s.match).netloc.lower() == host.lower()), None)
        return prefix or next((s for s in self._domains if _within(name, s.match)), None)

    def matching(self, host: str) -> list[Site]:
        """Every rule that names this host (for ``manage.py hosts``), most specific first."""
        name = _hostname(host)
        return [s for s in (*self._prefixes, *self._domains) if _within(name, _domain_of(s))]


def _hostname(host: str) -> str:
    """A politeness key's host name, without its port."""
    return (urlsplit("//" + host).hostname or host).lower()


def parse_sites(text: str) -> Sites:
    """The ``SITES`` setting (a JSON list of rules); ValueError names the rule and key."""
    return _parsed(text)


@lru_cache(maxsize=8)
def _parsed(text: str) -> Sites:
    if not text.strip():
        return Sites([])
    try:
        items = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise ValueError("must be a list of rules (tables)")
    out = []
    for i, item in enumerate(items):
        try:
            out.append(site_from(item))
        except ValueError as exc:
            raise ValueError(f"sites[{i}]: {exc}") from None
    return Sites(out)
