"""HTML parsing for the crawler: links, robots directives, title, text.

Parsing is the crawler's CPU bottleneck, so this module uses selectolax's
lexbor backend (an HTML5 tree builder written in C) directly and keeps the
per-link Python work small.  Before lexbor sees a document, the parse budget
(:mod:`crawler_tasks.parse.budget`) caps elements, depth and attributes, so no
page costs more than a bounded amount of CPU.  Every URL it reports (links,
base, canonical, refresh) is normalized by one :class:`~crawler_tasks.urls.Resolver`
per document.  Everything here is pure: no network, no I/O.

Entry points: :func:`parse_html`, and from :mod:`crawler_tasks.parse.encoding`
:func:`decode_html`, :func:`is_html`.  None of them raises on hostile input;
bad input gives empty results.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from selectolax.lexbor import LexborHTMLParser

from crawler_tasks.parse.budget import MAX_ATTRS, MAX_DEPTH, MAX_ELEMENTS, MAX_TEXT_CHARS, apply_budget, needs_budget
from crawler_tasks.parse.directives import (
    header_values,
    link_header_canonical,
    refresh_url,
    robots_flags,
    x_robots_flags,
)
from crawler_tasks.parse.encoding import decode, decode_html, is_html, sniff
from crawler_tasks.urls import Resolver
from crawler_tasks.urls.normalize import MAX_LINK_CHARS

__all__ = ["Document", "Link", "ParsedPage", "decode_html", "is_html", "parse_html", "prepare_document"]


@dataclass(slots=True)
class Link:
    """One outgoing link; url is normalized (crawler_tasks.urls), ready to dedup."""

    url: str
    text: str
    nofollow: bool


@dataclass(slots=True)
class ParsedPage:
    """What the crawler needs from one HTML document.

    URLs are normalized.  limited names the parse-budget caps that bit
    ("max_elements", "max_depth", "max_attrs", comma-separated), None when the
    whole document was parsed as it came.
    """

    title: str
    text: str
    links: list[Link]
    base_url: str
    canonical: str | None
    noindex: bool
    nofollow: bool
    meta_refresh: str | None
    lang: str | None
    charset: str
    limited: str | None = None
    too_long: str | None = None   # the first href skipped for its length (recorded once)


@dataclass(slots=True)
class Document:
    """A body decoded as a browser would and within the parse budget: what every
    reader of the page (links, main text) parses, so decoding and the budget's
    tokenizer run once per page."""

    data: bytes | str     # UTF-8 bytes when the page is UTF-8 (lexbor reads them as they are)
    charset: str
    limited: str | None   # the parse-budget caps that bit, comma-separated


def prepare_document(body: bytes, content_type: str | None = None, max_elements: int = MAX_ELEMENTS,
                     max_depth: int = MAX_DEPTH, max_attrs: int = MAX_ATTRS, *, budget: bool = True) -> Document:
    """Sniff, decode and cap one HTML body; ``budget=False`` leaves it uncapped (a parse
    under a short deadline, redone with the budget when late). Never raises:
    undecodable input is read as UTF-8 with replacement characters."""
    charset = "utf-8"
    try:
        if not isinstance(body, bytes):
            body = bytes(body)
        charset, start = sniff(body, content_type)
        data: bytes | str
        if charset == "utf-8":
            data = body[start:] if start else body
        else:
            data = decode(body, charset, start)
    except Exception:  # noqa: BLE001 - never raises
        data = bytes(body).decode("utf-8", "replace") if isinstance(body, (bytes, bytearray, memoryview)) else ""
    limited = None
    if budget and needs_budget(data):
        data, limited = apply_budget(data, max_elements, max_depth, max_attrs)
    return Document(data, charset, limited)


_MAX_LINK_TEXT = 200
_MAX_TITLE_CHARS = 1000  # an unbounded <title> would let one page bloat every record built from it
_MAX_LANG_CHARS = 64

_HIDDEN_SELECTOR = "script, style, noscript, template, iframe, noembed, noframes"
_HEAD_SELECTOR = "title, base[href], meta[content], link[href][rel]"
_LINK_SELECTOR = "a[href], area[href]"
_NOFOLLOW_RELS = frozenset({"nofollow", "ugc", "sponsored"})


def _collapse(text: str) -> str:
    return " ".join(text.split())


def _in_svg(node: object) -> bool:
    parent = getattr(node, "parent", None)
    for _ in range(8):
        if parent is None:
            return False
        tag = parent.tag
        if tag in ("svg", "math"):
            return True
        if tag in ("head", "body", "html"):
            return False
        parent = parent.parent
    return False


def parse_html(
    body: bytes | Document,
    url: str,
    *,
    content_type: str | None = None,
    headers: Mapping[str, str] | None = None,
    agent: str = "",
    max_text_chars: int = MAX_TEXT_CHARS,
    drop_params: frozenset[str] | None = None,
    max_elements: int = MAX_ELEMENTS,
    max_depth: int = MAX_DEPTH,
    max_attrs: int = MAX_ATTRS,
) -> ParsedPage:
    """Extract title, text, normalized links and robots signals from one HTML response.

    ``agent`` is the crawler's robots token: ``<meta name=agent>`` and
    ``X-Robots-Tag: agent: ...`` apply in addition to the generic forms.
    ``drop_params`` is passed to the URL normalizer (None: its defaults); the
    ``max_*`` caps are the parse budget (see :mod:`crawler_tasks.parse.budget`);
    a :class:`Document` is parsed as it is (it was decoded and capped already).
    Never raises: on total failure it returns an empty page that still
    carries the header-derived signals (robots flags, canonical).
    """
    agent_l = agent.strip().lower() if isinstance(agent, str) else ""
    noindex = nofollow = False
    header_canonical: str | None = None
    charset = "utf-8"
    limited: str | None = None
    page_url = url if isinstance(url, str) else ""
    resolver = Resolver(page_url, drop_params=drop_params)
    base_url = resolver.base_url or page_url
    try:
        robots_value, link_value = header_values(headers)
        if robots_value:
            noindex, nofollow = x_robots_flags(robots_value, agent_l)
        if link_value:
            href = link_header_canonical(link_value)
            if href:
                header_canonical = resolver.link(href)
    except Exception:  # noqa: BLE001, S110 - a bad header must not cost us the page
        pass
    try:
        doc = body if isinstance(body, Document) else prepare_document(
            body, content_type, max_elements, max_depth, max_attrs)
        charset, limited = doc.charset, doc.limited
        page = _extract(doc.data, resolver, drop_params, agent_l, max_text_chars)
        page.noindex |= noindex
        page.nofollow |= nofollow
        page.canonical = page.canonical or header_canonical
        page.charset = charset
        page.limited = limited
        return page
    except Exception:  # noqa: BLE001 - never raises
        return ParsedPage(
            title="",
            text="",
            links=[],
            base_url=base_url,
            canonical=header_canonical,
            noindex=noindex,
            nofollow=nofollow,
            meta_refresh=None,
            lang=None,
            charset=charset,
            limited=limited,
        )


def _extract(
    data: bytes | str, resolver: Resolver, drop_params: frozenset[str] | None, agent: str, max_text_chars: int
) -> ParsedPage:
    # scripting=True: <noscript> content is raw text, as in a browser that
    # runs scripts, so nothing inside it becomes a link or meta element.
    tree = LexborHTMLParser(data, scripting=True)
    for node in tree.css(_HIDDEN_SELECTOR):
        node.decompose()

    noindex = nofollow = False
    titles = []
    base_href: str | None = None
    canonical_href: str | None = None
    refresh: str | None = None
    for node in tree.css(_HEAD_SELECTOR):
        tag = node.tag
        if tag == "title":
            titles.append(node)
            continue
        attrs = node.attributes
        if tag == "base":
            if base_href is None:
                base_href = attrs.get("href") or ""
        elif tag == "meta":
            content = attrs.get("content") or ""
            name = attrs.get("name")
            if name:
                name = name.strip().lower()
                if name == "robots" or (agent and name == agent):
                    ni, nf = robots_flags(content)
                    noindex |= ni
                    nofollow |= nf
            equiv = attrs.get("http-equiv")
            if refresh is None and equiv and equiv.strip().lower() == "refresh":
                refresh = refresh_url(content)  # first valid one wins, even a self-refresh ("")
        elif canonical_href is None:  # link
            rels = (attrs.get("rel") or "").lower().split()
            if "canonical" in rels:
                canonical_href = attrs.get("href") or None

    base_url = resolver.base_url or resolver.base or ""
    if base_href:
        resolved_base = resolver.link(base_href)
        if resolved_base is not None:
            base_url = resolved_base
            resolver = Resolver(base_url, drop_params=drop_params)

    title = ""
    if titles:
        chosen = next((t for t in titles if t.parent is not None and t.parent.tag == "head"), None)
        if chosen is None:
            chosen = next((t for t in titles if not _in_svg(t)), titles[0])
        title = _collapse(chosen.text())[:_MAX_TITLE_CHARS]

    links: list[Link] = []
    seen: set[str] = set()
    too_long: str | None = None
    resolve = resolver.link
    for node in tree.css(_LINK_SELECTOR):
        attrs = node.attributes
        href = attrs.get("href") or ""
        target = resolve(href)
        if target is None or target in seen:
            if target is None and too_long is None and len(href) > MAX_LINK_CHARS:
                too_long = href
            continue
        seen.add(target)
        rel = attrs.get("rel")
        link_nofollow = rel is not None and not _NOFOLLOW_RELS.isdisjoint(rel.lower().split())
        if node.tag == "area":
            text = attrs.get("alt") or ""
        else:
            text = node.text(separator=" ", skip_empty=True)
            if not text or text.isspace():
                text = attrs.get("aria-label") or attrs.get("title") or ""
                if not text:
                    img = node.css_first("img[alt]")
                    text = (img.attributes.get("alt") or "") if img is not None else ""
        links.append(Link(target, _collapse(text)[:_MAX_LINK_TEXT], link_nofollow))

    text = ""
    if max_text_chars > 0:
        root = tree.body or tree.root
        if root is not None:
            raw = root.text(separator=" ", skip_empty=True)
            # Collapsing costs ~10 ns a character; a 10 MB text dump needs only
            # its head (unless it is >75 % whitespace, then we return less).
            text = _collapse(raw[: 4 * max_text_chars])[:max_text_chars]

    lang: str | None = None
    html = tree.root
    if html is not None and html.tag == "html":
        raw_lang = (html.attributes.get("lang") or "").strip()
        if raw_lang and len(raw_lang) <= _MAX_LANG_CHARS:
            lang = raw_lang

    return ParsedPage(
        title=title,
        text=text,
        links=links,
        base_url=base_url,
        canonical=resolver.link(canonical_href) if canonical_href else None,
        noindex=noindex,
        nofollow=nofollow,
        meta_refresh=resolver.link(refresh) if refresh else None,
        lang=lang,
        charset="",
        too_long=too_long,
    )
