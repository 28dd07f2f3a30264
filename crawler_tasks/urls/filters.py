"""URL filters applied to every link and redirect target before the URL-seen test.

Each rule has a name; a dropped URL is counted as ``filter/<name>``. Filters see
normalized URLs only (urls.normalize_url ran first). Pure: no Redis.
"""
from __future__ import annotations

import re
from collections import Counter
from urllib.parse import urlsplit

from crawler_tasks.settings import Settings
from crawler_tasks.urls.sites import parse_sites


def _domain_match(host: str, domains: tuple[str, ...]) -> bool:
    host = host.split(":")[0].rstrip(".")
    return any(host == d or host.endswith("." + d) for d in domains)


class UrlFilter:
    def __init__(self, settings: Settings) -> None:
        self.settings = s = settings
        self._allowed = tuple(d.lower().strip(".") for d in s.ALLOWED_DOMAINS)
        self._blocked = tuple(d.lower().strip(".") for d in s.BLOCKED_DOMAINS)
        self._include = [re.compile(p) for p in s.INCLUDE_PATTERNS]
        self._exclude = [re.compile(p) for p in s.EXCLUDE_PATTERNS]
        self._sites = parse_sites(s.SITES)   # per-site scope (urls/sites.py)
        self._skip_ext = frozenset(e.lower().lstrip(".") for e in s.SKIP_EXTENSIONS)

    def reason(self, url: str, depth: int = 0, *, check_depth: bool = True,
               check_extension: bool = True) -> str | None:
        """Why ``url`` must not be crawled (a rule name), or None when it may be.
        Sitemaps skip the depth and extension rules (``sitemap.xml.gz`` is fine)."""
        s = self.settings
        if len(url) > s.MAX_URL_LENGTH:
            return "url_too_long"
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            return "scheme"
        host = (parts.hostname or "").lower()
        if not host:
            return "no_host"
        if self._allowed and not _domain_match(host, self._allowed):
            return "out_of_scope"
        if self._blocked and _domain_match(host, self._blocked):
            return "blocked_domain"
        if check_depth and s.MAX_DEPTH >= 0 and depth > s.MAX_DEPTH:
            return "max_depth"
        segments = [seg for seg in parts.path.split("/") if seg]
        if len(segments) > s.MAX_PATH_SEGMENTS:
            return "path_too_deep"
        repeats = len(segments) - len(set(segments))   # a segment n times makes n - 1 of them
        if repeats and repeats + 1 >= s.MAX_REPEATED_SEGMENTS \
                and Counter(segments).most_common(1)[0][1] >= s.MAX_REPEATED_SEGMENTS:
            return "repeated_segments"
        if check_extension and segments and "." in segments[-1]:
            ext = segments[-1].rsplit(".", 1)[1].lower()
            if ext in self._skip_ext:
                return "extension"
        if self._include and not any(p.search(url) for p in self._include):
            return "not_included"
        if any(p.search(url) for p in self._exclude):
            return "excluded"
        site = self._sites.for_url(url) if self._sites else None
        return site.reason(url, depth, check_depth) if site is not None else None
