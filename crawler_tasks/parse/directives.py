"""Robots directives and other page signals from headers and <meta>.

``<meta name=robots>`` / ``X-Robots-Tag`` flags, the URL of a declarative
refresh, the canonical URL of a ``Link:`` header.  Pure string work; nothing
here raises on the strings it is given, and nothing resolves URLs (the caller
does, with its page's resolver).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from crawler_tasks.parse.encoding import ASCII_WS

__all__ = ["header_values", "link_header_canonical", "refresh_url", "robots_flags", "x_robots_flags"]

_ROBOTS_SPLIT_RE = re.compile(r"[\s,]+")
_AGENT_PREFIX_RE = re.compile(r"\s*([a-z0-9_.*\-]+)\s*:(.*)", re.DOTALL)
_VALUED_DIRECTIVES = frozenset({"unavailable_after", "max-snippet", "max-image-preview", "max-video-preview"})
_LINK_HEADER_RE = re.compile(r"<([^>]*)>([^<]*)")
_REL_PARAM_RE = re.compile(r"""rel\s*=\s*(?:"([^"]*)"|([^\s;,"]+))""", re.IGNORECASE)


def robots_flags(content: str) -> tuple[bool, bool]:
    noindex = nofollow = False
    for token in _ROBOTS_SPLIT_RE.split(content.lower()):
        if token == "noindex":
            noindex = True
        elif token == "nofollow":
            nofollow = True
        elif token == "none":
            noindex = nofollow = True
    return noindex, nofollow


def x_robots_flags(value: str, agent: str) -> tuple[bool, bool]:
    """X-Robots-Tag: directives apply to everyone unless prefixed "agent:"."""
    noindex = nofollow = False
    current: str | None = None
    for part in value.lower().split(","):
        m = _AGENT_PREFIX_RE.match(part)
        if m is not None and m.group(1) not in _VALUED_DIRECTIVES:
            current, part = m.group(1), m.group(2)
        if current is not None and current != agent:
            continue
        ni, nf = robots_flags(part)
        noindex |= ni
        nofollow |= nf
    return noindex, nofollow


def refresh_url(content: str) -> str | None:
    """URL part of a refresh value, per the HTML "declarative refresh" steps.

    Returns None when the value is invalid (browsers ignore it) and "" when it
    is valid but reloads the page itself.
    """
    s = content.lstrip(ASCII_WS)
    i = 0
    while i < len(s) and s[i].isdigit() and s[i].isascii():
        i += 1
    if i == 0 and not s.startswith("."):
        return None
    while i < len(s) and (s[i] == "." or (s[i].isdigit() and s[i].isascii())):
        i += 1
    s = s[i:].lstrip(ASCII_WS)
    if not s:
        return ""
    if s[0] not in ";,":
        return None
    s = s[1:].lstrip(ASCII_WS)
    if s[:3].lower() == "url":
        rest = s[3:].lstrip(ASCII_WS)
        if rest.startswith("="):
            s = rest[1:].lstrip(ASCII_WS)
    if s[:1] in ("'", '"'):
        end = s.find(s[0], 1)
        s = s[1:end] if end >= 0 else s[1:]
    return s


def link_header_canonical(value: str) -> str | None:
    for m in _LINK_HEADER_RE.finditer(value):
        rel = _REL_PARAM_RE.search(m.group(2))
        if rel and "canonical" in (rel.group(1) or rel.group(2) or "").lower().split():
            return m.group(1)
    return None


def header_values(headers: Mapping[str, str] | None) -> tuple[str, str]:
    """(X-Robots-Tag, Link) from a mapping whose key case we cannot trust."""
    robots: list[str] = []
    links: list[str] = []
    if headers:
        for key, value in headers.items():
            if not isinstance(key, str) or not isinstance(value, str):
                continue
            k = key.strip().lower()
            if k == "x-robots-tag":
                robots.append(value)
            elif k == "link":
                links.append(value)
    return ", ".join(robots), ", ".join(links)
