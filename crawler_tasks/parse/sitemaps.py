"""Sitemap parsing: XML urlset / sitemapindex, gzip, plain text, RSS / Atom.

Sitemaps come from robots.txt and site owners, so they are untrusted input
of up to 50 MB (uncompressed) by the protocol's own limit: XML is read as a
stream with entity expansion, DTD loading and network access off (no XXE, no
"billion laughs"), gzip output is capped while decompressing (no gzip bomb),
and :func:`parse_sitemap` never raises.  Error policy: a broken document
yields whatever entries came before the damage plus ``error``; nothing is
logged here.  Pure: no I/O.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from urllib.parse import urlsplit

from lxml import etree

__all__ = ["MAX_SITEMAP_BYTES", "MAX_SITEMAP_URLS", "Sitemap", "SitemapEntry", "parse_sitemap"]

MAX_SITEMAP_URLS = 50_000  # sitemaps.org protocol limit per file
MAX_SITEMAP_BYTES = 50 * 1024 * 1024  # protocol limit, uncompressed


@dataclass(slots=True)
class SitemapEntry:
    """One <url> (or, in an index, one child <sitemap>); url is as given, not normalized."""

    url: str
    lastmod: str | None  # as given (W3C datetime)
    priority: float | None  # 0.0-1.0; missing or invalid -> None
    changefreq: str | None  # one of _CHANGEFREQS, lower-cased; else None


@dataclass(slots=True)
class Sitemap:
    """The result of one sitemap file.

    kind: "urlset", "sitemapindex" (entries are child sitemap URLs), "text"
    (one URL per line), "feed" (RSS / Atom items) or "invalid".
    truncated: there were more than max_urls entries, or the (decompressed)
    body was larger than max_bytes; entries holds what fitted.
    error: why the document was invalid or where parsing stopped; may be set
    alongside entries that were read before the damage.
    """

    kind: str
    entries: list[SitemapEntry]
    truncated: bool
    error: str | None


_MAX_URL_CHARS = 4096
_MAX_LASTMOD_CHARS = 64
_CHANGEFREQS = frozenset({"always", "hourly", "daily", "weekly", "monthly", "yearly", "never"})
_GZIP_MAGIC = b"\x1f\x8b"
_KINDS = {"urlset": "urlset", "sitemapindex": "sitemapindex", "rss": "feed", "RDF": "feed", "feed": "feed"}
# Streamed elements: the roots (to learn the kind early) and the records.
_STREAM_TAGS = ("{*}urlset", "{*}sitemapindex", "{*}rss", "{*}RDF", "{*}feed",
                "{*}url", "{*}sitemap", "{*}item", "{*}entry")
_RECORD = {"urlset": "url", "sitemapindex": "sitemap"}
_FIELDS = ("loc", "lastmod", "priority", "changefreq")
# Most locs: plain http(s)://host[:port] then path; others take urlsplit.
_PLAIN_URL_RE = re.compile(r"https?://[A-Za-z0-9.\-]+(?::[0-9]{1,5})?(?:[/?#]|\Z)")


def parse_sitemap(
    body: bytes,
    url: str,
    *,
    max_urls: int = MAX_SITEMAP_URLS,
    max_bytes: int = MAX_SITEMAP_BYTES,
) -> Sitemap:
    """Parse one sitemap file (``url`` is where it came from, used in messages).

    Only absolute http(s) URLs are kept; relative ones are skipped, as the
    protocol requires full URLs.  Never raises.
    """
    truncated = False
    error: str | None = None
    try:
        data = bytes(body)
        if data.startswith(_GZIP_MAGIC):
            data, truncated, error = _gunzip(data, max_bytes)
        elif len(data) > max_bytes:
            data, truncated = data[:max_bytes], True
        head = data[:512]
        if head.startswith(b"\xef\xbb\xbf"):
            head = head[3:]
        head = head.lstrip(b" \t\r\n")
        if not head:
            return Sitemap("invalid", [], truncated, error or "empty document")
        if head.startswith((b"<", b"\x00<", b"\xff\xfe", b"\xfe\xff")):  # UTF-16 XML too
            result = _parse_xml(data, max_urls)
        else:
            result = _parse_text(data, max_urls)
        result.truncated = result.truncated or truncated
        if error is not None:
            result.error = error if result.error is None else f"{error}; {result.error}"
        return result
    except Exception as exc:  # noqa: BLE001 - the contract is "never raises"
        return Sitemap("invalid", [], truncated, f"{type(exc).__name__}: {exc} ({url[:200]!s})")


def _gunzip(data: bytes, max_bytes: int) -> tuple[bytes, bool, str | None]:
    """Decompress at most max_bytes (+1 to detect overflow); multi-member aware.

    Returns (data, truncated, error).  A damaged stream keeps what came out.
    """
    out = bytearray()
    decomp = zlib.decompressobj(16 + zlib.MAX_WBITS)
    pending = data
    try:
        while pending:
            out += decomp.decompress(pending, max_bytes + 1 - len(out))  # max_length >= 1
            if len(out) > max_bytes:
                return bytes(out[:max_bytes]), True, None
            if decomp.unconsumed_tail:
                pending = decomp.unconsumed_tail
            elif decomp.eof and decomp.unused_data.startswith(_GZIP_MAGIC):
                pending = decomp.unused_data  # next gzip member
                decomp = zlib.decompressobj(16 + zlib.MAX_WBITS)
            else:
                break  # done, or trailing garbage after the last member
    except zlib.error as exc:
        return bytes(out), False, f"gzip: {exc}"
    if not decomp.eof:
        return bytes(out), False, "gzip: truncated stream"
    return bytes(out), False, None


_C0_AND_SPACE = "".join(chr(i) for i in range(0x21))


def _http_url(text: str | None) -> str | None:
    """The stripped text if it is an absolute http(s) URL we can use, else None."""
    if not text:
        return None
    loc = text.strip(_C0_AND_SPACE)
    if not loc or len(loc) > _MAX_URL_CHARS or not loc.isprintable():
        return None   # control characters inside a URL are never ours to pass on
    if _PLAIN_URL_RE.match(loc) is not None:
        return loc
    try:
        parts = urlsplit(loc)
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return loc


def _priority(text: str | None) -> float | None:
    if not text:
        return None
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if 0.0 <= value <= 1.0 else None  # NaN fails both comparisons


def _lastmod(text: str | None) -> str | None:
    if not text:
        return None
    value = text.strip()
    return value if 0 < len(value) <= _MAX_LASTMOD_CHARS else None


def _local(tag: object) -> str:
    """Local name of an element tag ("{ns}url" -> "url"); "" for comments etc."""
    return tag.rpartition("}")[2] if isinstance(tag, str) else ""


def _parse_text(data: bytes, max_urls: int) -> Sitemap:
    """One URL per line; lines that are not absolute http(s) URLs are skipped."""
    entries: list[SitemapEntry] = []
    for line in data.decode("utf-8-sig", "replace").splitlines():
        loc = _http_url(line)
        if loc is None:
            continue
        if len(entries) >= max_urls:
            return Sitemap("text", entries, True, None)
        entries.append(SitemapEntry(loc, None, None, None))
    if not entries:
        return Sitemap("invalid", [], False, "no URLs in text sitemap")
    return Sitemap("text", entries, False, None)


def _parse_xml(data: bytes, max_urls: int) -> Sitemap:
    """Stream the XML, keeping memory flat whatever the document holds.

    The parser is fed in chunks; after each, every finished element that is
    not part of an open record is dropped from the tree (records are read
    and dropped at their end tag), so neither entries nor junk accumulate.
    """
    parser = etree.XMLPullParser(
        events=("start", "end"),
        tag=_STREAM_TAGS,
        resolve_entities=False,  # no XXE, no entity expansion at all
        load_dtd=False,
        no_network=True,
        huge_tree=False,
        recover=True,  # keep what precedes damage (e.g. a body cut at max_bytes)
        remove_comments=True,
        remove_pis=True,
    )
    state = _XmlState(max_urls)
    try:
        for off in range(0, len(data), _XML_CHUNK):
            parser.feed(data[off : off + _XML_CHUNK])
            done = state.read(parser.read_events())
            if done is not None:
                return done
            state.prune()
        root = parser.close()
        done = state.read(parser.read_events())
        if done is not None:
            return done
        if not state.kind and root is not None:
            return Sitemap("invalid", [], False, f"unexpected root element <{_local(root.tag)}>")
    except etree.XMLSyntaxError as exc:
        if not state.kind:
            return Sitemap("invalid", [], False, f"XML: {exc}")
        return Sitemap(state.kind, state.entries, False, f"XML: {exc}")
    if not state.kind:
        return Sitemap("invalid", [], False, "no XML root")
    return Sitemap(state.kind, state.entries, False, None)


_XML_CHUNK = 64 * 1024


class _XmlState:
    """What the XML stream has shown so far: kind, record tag, entries."""

    __slots__ = ("entries", "fields", "kind", "max_urls", "record_tag", "root")

    def __init__(self, max_urls: int) -> None:
        self.kind = ""
        self.record_tag = ""
        self.fields: dict[str, int] = {}
        self.entries: list[SitemapEntry] = []
        self.max_urls = max_urls
        self.root: etree._Element | None = None

    def read(self, events: object) -> Sitemap | None:
        """Consume parser events; a Sitemap when the document is decided early."""
        for event, el in events:  # type: ignore[attr-defined]
            if not self.kind:
                root = el.getroottree().getroot()
                name = _local(root.tag)
                self.kind = _KINDS.get(name, "invalid")
                if self.kind == "invalid":
                    return Sitemap("invalid", [], False, f"unexpected root element <{name}>")
                # Records and their fields share the root's namespace (or have
                # none); extension elements (image:, news:, xhtml:) do not.
                ns = root.tag[: root.tag.index("}") + 1] if root.tag.startswith("{") else ""
                self.record_tag = ns + _RECORD.get(self.kind, "")
                self.fields = {ns + field: i for i, field in enumerate(_FIELDS)}
                self.root = root
            if event != "end":
                continue
            if self.kind == "feed":
                if _local(el.tag) not in ("item", "entry"):
                    continue
                entry = _feed_entry(el)
            elif el.tag == self.record_tag:
                entry = _sitemap_entry(el, self.fields)
            else:
                continue
            el.clear(keep_tail=False)
            if entry is None:
                continue
            if len(self.entries) >= self.max_urls:
                return Sitemap(self.kind, self.entries, True, None)
            self.entries.append(entry)
        return None

    def prune(self) -> None:
        """Drop every finished element: all but the last child, down the open path.

        Below a record, its field children stay until the record ends.
        """
        node = self.root
        while node is not None and len(node):
            record = node.tag == self.record_tag or (self.kind == "feed" and _local(node.tag) in ("item", "entry"))
            if record:
                for child in list(node)[:-1]:
                    if child.tag not in self.fields and _local(child.tag) not in _FEED_FIELDS:
                        node.remove(child)
            elif len(node) > 1:
                del node[: len(node) - 1]
            node = node[len(node) - 1]


_FEED_FIELDS = frozenset(("link", "updated", "modified", "date", "pubDate"))


def _sitemap_entry(el: etree._Element, fields: dict[str, int]) -> SitemapEntry | None:
    """One <url>/<sitemap>; fields maps qualified child tags to _FIELDS indexes."""
    values: list[str | None] = [None, None, None, None]
    for child in el:
        i = fields.get(child.tag)
        if i is not None:
            values[i] = child.text
    loc, lastmod, priority, changefreq = values
    url = _http_url(loc)
    if url is None:
        return None
    freq = changefreq.strip().lower() if changefreq else None
    return SitemapEntry(url, _lastmod(lastmod), _priority(priority),
                        freq if freq in _CHANGEFREQS else None)


def _feed_entry(el: etree._Element) -> SitemapEntry | None:
    """RSS <item><link>, or Atom <entry><link href> (rel alternate or none)."""
    link: str | None = None
    updated: str | None = None
    for child in el:
        name = _local(child.tag)
        if name == "link":
            href = child.get("href")
            if href is not None:  # Atom
                if child.get("rel", "alternate") == "alternate" and link is None:
                    link = href
            elif link is None:
                link = child.text  # RSS
        elif name in ("updated", "modified", "date"):
            updated = updated or child.text
        elif name == "pubDate" and updated is None and child.text:
            updated = _rfc822_to_w3c(child.text)
    url = _http_url(link)
    return SitemapEntry(url, _lastmod(updated), None, None) if url is not None else None


def _rfc822_to_w3c(text: str) -> str | None:
    """RSS dates are RFC 822; lastmod is W3C datetime."""
    try:
        return parsedate_to_datetime(text.strip()).isoformat()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
