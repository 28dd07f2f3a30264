"""HTML parsing for the crawler: decoding, links, robots directives, text.

Parsing is the crawler's CPU bottleneck, so this module uses selectolax's
lexbor backend (an HTML5 tree builder written in C) directly and keeps the
per-link Python work small.  Everything here is pure: no network, no I/O.

Entry points: :func:`decode_html`, :func:`parse_html`, :func:`is_html`.
None of them raises on hostile input; bad input gives empty results.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any
from urllib.parse import urljoin, urlsplit

from selectolax.lexbor import LexborHTMLParser

__all__ = ["Link", "ParsedPage", "decode_html", "is_html", "parse_html"]


@dataclass(slots=True)
class Link:
    """One outgoing link, resolved but not normalized (the caller normalizes)."""

    url: str
    text: str
    nofollow: bool


@dataclass(slots=True)
class ParsedPage:
    """What the crawler needs from one HTML document."""

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


# ---------------------------------------------------------------------------
# Limits
# ---------------------------------------------------------------------------

_MAX_URL_CHARS = 4096  # longer hrefs are junk or traps; skipping them is cheaper than storing them
_MAX_LINK_TEXT = 200
_MAX_TITLE_CHARS = 1000  # an unbounded <title> would let one page bloat every record built from it
_MAX_LANG_CHARS = 64
_META_PRESCAN_BYTES = 4096

# ---------------------------------------------------------------------------
# Character encodings (WHATWG Encoding Standard, reduced to what Python has)
# ---------------------------------------------------------------------------

# WHATWG encoding name -> Python codec.  Only these are ever used to decode, so a
# page cannot pick a dangerous or non-text codec (utf-7, base64, rot13, ...).
_CODECS: dict[str, str] = {
    "utf-8": "utf-8",
    "ibm866": "cp866",
    "iso-8859-2": "iso8859-2",
    "iso-8859-3": "iso8859-3",
    "iso-8859-4": "iso8859-4",
    "iso-8859-5": "iso8859-5",
    "iso-8859-6": "iso8859-6",
    "iso-8859-7": "iso8859-7",
    "iso-8859-8": "iso8859-8",
    "iso-8859-8-i": "iso8859-8",
    "iso-8859-10": "iso8859-10",
    "iso-8859-13": "iso8859-13",
    "iso-8859-14": "iso8859-14",
    "iso-8859-15": "iso8859-15",
    "iso-8859-16": "iso8859-16",
    "koi8-r": "koi8-r",
    "koi8-u": "koi8-u",
    "macintosh": "mac-roman",
    "x-mac-cyrillic": "mac-cyrillic",
    "windows-874": "cp874",
    "windows-1250": "cp1250",
    "windows-1251": "cp1251",
    "windows-1252": "cp1252",  # decoded with _WIN1252 below, see there
    "windows-1253": "cp1253",
    "windows-1254": "cp1254",
    "windows-1255": "cp1255",
    "windows-1256": "cp1256",
    "windows-1257": "cp1257",
    "windows-1258": "cp1258",
    "gbk": "gb18030",  # WHATWG decodes GBK with the gb18030 decoder (a superset)
    "gb18030": "gb18030",
    "big5": "big5hkscs",
    "euc-jp": "euc_jp",
    "iso-2022-jp": "iso2022_jp",
    "shift_jis": "cp932",  # what browsers call Shift_JIS is Microsoft's variant
    "euc-kr": "cp949",  # likewise windows-949
    "utf-16le": "utf-16-le",
    "utf-16be": "utf-16-be",
}

# Python's canonical codec name -> WHATWG name.  latin-1 and ascii deliberately
# map to windows-1252: that is what those labels mean on the web.
_PY_TO_WHATWG: dict[str, str] = {
    "utf-8": "utf-8",
    "cp866": "ibm866",
    "iso8859-1": "windows-1252",
    "ascii": "windows-1252",
    "iso8859-9": "windows-1254",
    "iso8859-11": "windows-874",
    "tis-620": "windows-874",
    "cp874": "windows-874",
    "koi8-r": "koi8-r",
    "koi8-u": "koi8-u",
    "mac-roman": "macintosh",
    "mac-cyrillic": "x-mac-cyrillic",
    "gb2312": "gbk",
    "gbk": "gbk",
    "gb18030": "gb18030",
    "big5": "big5",
    "big5hkscs": "big5",
    "euc_jp": "euc-jp",
    "iso2022_jp": "iso-2022-jp",
    "shift_jis": "shift_jis",
    "cp932": "shift_jis",
    "euc_kr": "euc-kr",
    "cp949": "euc-kr",
    "utf-16": "utf-16le",
    "utf-16-le": "utf-16le",
    "utf-16-be": "utf-16be",
}
_PY_TO_WHATWG.update({f"iso8859-{n}": f"iso-8859-{n}" for n in (2, 3, 4, 5, 6, 7, 8, 10, 13, 14, 15, 16)})
_PY_TO_WHATWG.update({f"cp125{n}": f"windows-125{n}" for n in range(9)})

# WHATWG labels that Python's codec registry does not know.
_EXTRA_LABELS: dict[str, str] = {
    "unicode-1-1-utf-8": "utf-8",
    "unicode11utf8": "utf-8",
    "unicode20utf8": "utf-8",
    "x-unicode20utf8": "utf-8",
    "csibm866": "ibm866",
    "csiso88598i": "iso-8859-8-i",
    "logical": "iso-8859-8-i",
    "visual": "iso-8859-8",
    "sun_eu_greek": "iso-8859-7",
    "koi": "koi8-r",
    "koi8": "koi8-r",
    "koi8-ru": "koi8-u",
    "mac": "macintosh",
    "x-mac-roman": "macintosh",
    "csmacintosh": "macintosh",
    "x-mac-ukrainian": "x-mac-cyrillic",
    "dos-874": "windows-874",
    "x-gbk": "gbk",
    "csgb2312": "gbk",
    "gb_2312": "gbk",
    "cn-big5": "big5",
    "x-x-big5": "big5",
    "x-euc-jp": "euc-jp",
    "x-sjis": "shift_jis",
    "windows-31j": "shift_jis",
    "ms932": "shift_jis",
    "windows-949": "euc-kr",
    "cseuckr": "euc-kr",
    "csksc56011987": "euc-kr",
    "iso-ir-149": "euc-kr",
    "ks_c_5601-1989": "euc-kr",
    "ksc_5601": "euc-kr",
    "ucs-2": "utf-16le",
    "unicode": "utf-16le",
    "csunicode": "utf-16le",
    "iso-10646-ucs-2": "utf-16le",
    "unicodefeff": "utf-16le",
    "unicodefffe": "utf-16be",
}
_EXTRA_LABELS.update({f"x-cp125{n}": f"windows-125{n}" for n in range(9)})


def _build_win1252_table() -> str:
    """windows-1252 as browsers decode it.

    Python's cp1252 leaves 0x81, 0x8D, 0x8F, 0x90, 0x9D undefined (errors or
    U+FFFD); WHATWG maps them to the C1 control with the same number.
    """
    chars = []
    for b in range(256):
        try:
            chars.append(bytes([b]).decode("cp1252"))
        except UnicodeDecodeError:
            chars.append(chr(b))
    return "".join(chars)


_WIN1252 = _build_win1252_table()

_BOMS = ((b"\xef\xbb\xbf", "utf-8"), (b"\xff\xfe", "utf-16le"), (b"\xfe\xff", "utf-16be"))
_ASCII_WS = " \t\n\r\x0c"
_CT_CHARSET_RE = re.compile(r"""charset\s*=\s*["']?([^"';,\s]*)""", re.IGNORECASE)
_COMMENT_RE = re.compile(rb"<!--.*?(?:-->|\Z)", re.DOTALL)
_META_RE = re.compile(rb"<meta[\s/]([^>]*)", re.IGNORECASE)
_ATTR_RE = re.compile(rb"""([^\s=/>]+)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]*)))?""")
_META_CHARSET_RE = re.compile(rb"""charset\s*=\s*(?:"([^"]*)|'([^']*)|([^\s;"']+))""", re.IGNORECASE)


@lru_cache(maxsize=512)
def _encoding_for_label(label: str) -> str | None:
    """WHATWG "get an encoding": a label to a supported encoding name, or None."""
    norm = label.strip(_ASCII_WS).lower()
    if not norm or len(norm) > 40:
        return None
    name = _EXTRA_LABELS.get(norm)
    if name is not None:
        return name
    if norm in _CODECS:
        return norm
    try:
        return _PY_TO_WHATWG.get(codecs.lookup(norm).name)
    except Exception:  # noqa: BLE001 - LookupError, or odd labels the registry chokes on
        return None


def _label_from_content_type(content_type: str | None) -> str | None:
    if not content_type:
        return None
    m = _CT_CHARSET_RE.search(content_type)
    return _encoding_for_label(m.group(1)) if m else None


def _prescan_meta(head: bytes) -> str | None:
    """Find a <meta charset> / <meta http-equiv=content-type> declaration."""
    if b"<!--" in head:
        head = _COMMENT_RE.sub(b"", head)
    for meta in _META_RE.finditer(head):
        attrs: dict[bytes, bytes] = {}
        for am in _ATTR_RE.finditer(meta.group(1)):
            key = am.group(1).lower()
            if key not in attrs:
                attrs[key] = am.group(2) or am.group(3) or am.group(4) or b""
        label: bytes | None = attrs.get(b"charset")
        if label is None:
            if attrs.get(b"http-equiv", b"").strip().lower() != b"content-type":
                continue
            cm = _META_CHARSET_RE.search(attrs.get(b"content", b""))
            if not cm:
                continue
            label = cm.group(1) or cm.group(2) or cm.group(3) or b""
        name = _encoding_for_label(label.decode("latin-1"))
        if name is None:
            continue
        # A document that could carry a UTF-16 meta in ASCII bytes is not UTF-16.
        return "utf-8" if name in ("utf-16le", "utf-16be") else name
    return None


def _sniff(body: bytes, content_type: str | None) -> tuple[str, int]:
    """Pick the encoding; returns (WHATWG name, length of BOM to skip)."""
    for bom, name in _BOMS:
        if body.startswith(bom):
            return name, len(bom)
    declared = _label_from_content_type(content_type)
    if declared is not None:
        return declared, 0
    head = body[:_META_PRESCAN_BYTES]
    if b"<meta" in head.lower():
        declared = _prescan_meta(head)
        if declared is not None:
            return declared, 0
    if body.isascii():
        return "utf-8", 0
    try:
        body.decode("utf-8")
        return "utf-8", 0
    except UnicodeDecodeError as exc:
        # A body cut mid-character by a download size cap is still UTF-8, if
        # what came before shows real (non-ASCII) UTF-8.
        if (
            exc.start >= len(body) - 3
            and exc.reason == "unexpected end of data"
            and not body[: exc.start].isascii()
        ):
            return "utf-8", 0
    return "windows-1252", 0


def _decode(body: bytes, name: str, start: int) -> str:
    data = body[start:] if start else body
    if name == "windows-1252":
        return codecs.charmap_decode(data, "strict", _WIN1252)[0]
    return data.decode(_CODECS[name], "replace")


def decode_html(body: bytes, content_type: str | None) -> tuple[str, str]:
    """Decode an HTML body the way a browser would; returns (text, charset).

    Order: BOM, Content-Type charset, <meta> in the first 4 KB, strict UTF-8,
    else windows-1252.  Unknown or unsafe labels are ignored.  Never raises.
    """
    try:
        body = bytes(body)
        name, start = _sniff(body, content_type)
        return _decode(body, name, start), name
    except Exception:  # noqa: BLE001 - never raises
        try:
            return bytes(body).decode("utf-8", "replace"), "utf-8"
        except Exception:  # noqa: BLE001 - never raises
            return "", "utf-8"


# ---------------------------------------------------------------------------
# Content sniffing
# ---------------------------------------------------------------------------

_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_UNKNOWN_TYPES = frozenset({"unknown/unknown", "application/unknown", "*/*"})
_HTML_STARTS = (b"<!doctype html", b"<html", b"<head", b"<body")
_TAG_END = frozenset(b" \t\n\r\x0c>/")


def is_html(content_type: str | None, body_head: bytes) -> bool:
    """Decide whether a response should go through :func:`parse_html`.

    A declared type wins; only a missing (or explicitly unknown) type is
    sniffed from the leading bytes.  Never raises.
    """
    try:
        if content_type:
            mime = content_type.split(";", 1)[0].strip().lower()
            if mime and mime not in _UNKNOWN_TYPES:
                return mime in _HTML_TYPES
        return _sniff_html(bytes(body_head[:4096]))
    except Exception:  # noqa: BLE001 - never raises
        return False


def _sniff_html(head: bytes) -> bool:
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        codec = "utf-16-le" if head[0] == 0xFF else "utf-16-be"
        head = head[2:].decode(codec, "ignore").encode("ascii", "ignore")
    elif head.startswith(b"\xef\xbb\xbf"):
        head = head[3:]
    pos = 0
    while True:
        while pos < len(head) and head[pos] in b" \t\n\r\x0c":
            pos += 1
        # Leading comments and an XML declaration are common before <!DOCTYPE>.
        if head.startswith(b"<!--", pos):
            end = head.find(b"-->", pos + 4)
            if end < 0:
                return False
            pos = end + 3
        elif head.startswith(b"<?", pos):
            end = head.find(b">", pos + 2)
            if end < 0:
                return False
            pos = end + 1
        else:
            break
    start = head[pos : pos + 16].lower()
    for marker in _HTML_STARTS:
        if start.startswith(marker):
            return len(start) == len(marker) or start[len(marker)] in _TAG_END
    return False


# ---------------------------------------------------------------------------
# URL resolution
# ---------------------------------------------------------------------------

_HREF_STRIP = "".join(chr(i) for i in range(0x21))  # C0 controls and space, as WHATWG strips
_TAB_NL = str.maketrans("", "", "\t\n\r")
_SCHEME_RE = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):")
_HTTP = ("http", "https")


class _Resolver:
    """urljoin against one fixed base, with fast paths for the common shapes.

    Plain urljoin re-parses the base for every link: about 1 ms for a page
    of 150 links on the reference machine, more than lexbor's whole parse.
    Anything unusual still goes through urljoin.
    """

    __slots__ = ("base", "dir", "fast", "noquery", "ok", "origin", "scheme")

    def __init__(self, base: str) -> None:
        self.base = base
        self.ok = self.fast = False
        self.scheme = self.origin = self.dir = self.noquery = ""
        try:
            parts = urlsplit(base)
        except Exception:  # noqa: BLE001 - never raises
            return
        if parts.scheme not in _HTTP or not parts.netloc:
            return
        self.ok = True
        self.fast = "/." not in parts.path  # dot segments in the base need urljoin's cleanup
        self.scheme = parts.scheme
        self.origin = f"{parts.scheme}://{parts.netloc}"
        path = parts.path or "/"
        self.dir = path[: path.rfind("/") + 1]
        self.noquery = self.origin + parts.path

    def resolve(self, href: str) -> str | None:
        """Absolute http(s) URL for href, or None if it should be skipped."""
        href = href.strip(_HREF_STRIP)
        if not href or len(href) > _MAX_URL_CHARS:
            return None
        if "\t" in href or "\n" in href or "\r" in href:
            href = href.translate(_TAB_NL)
            if not href:
                return None
        if href[0] == "#":
            return None
        if "\\" in href:
            href = _fix_backslashes(href)
        first = href[0]
        if first not in "/?." and (m := _SCHEME_RE.match(href)) is not None:
            scheme = m.group(1).lower()
            if scheme not in _HTTP:
                return None  # javascript:, mailto:, tel:, data:, ftp:, ...
            rest = href[m.end() :]
            if self.ok and scheme == self.scheme and not rest.startswith("//"):
                # WHATWG: "http:foo" on an http page is relative...
                return self._relative(rest) if rest else None
            # ...otherwise extra or missing slashes are ignored: "http:/x" is http://x.
            result = href[: m.end()] + "//" + rest.lstrip("/")
            netloc_at = m.end() + 2
        elif href.startswith("//"):
            if not self.ok:
                return None
            result = self.scheme + "://" + href.lstrip("/")
            netloc_at = len(self.scheme) + 3
        else:
            return self._relative(href)
        if len(result) > _MAX_URL_CHARS or not _netloc_ok(result, netloc_at):
            return None
        return result

    def _relative(self, href: str) -> str | None:
        """Resolve a reference without scheme or authority."""
        if not self.ok or href[0] == "#":
            return None
        if not self.fast:
            return self._slow(href)
        if href[0] == "?":
            result = self.noquery + href
        else:
            result = self._join_path("" if href[0] == "/" else self.dir, href)
        return result if len(result) <= _MAX_URL_CHARS else None

    def _join_path(self, prefix: str, href: str) -> str:
        """origin + prefix + href, with RFC 3986 dot segments removed."""
        if "." not in href:
            return self.origin + prefix + href
        cut = _first_index(href, "?#", 0)
        path = prefix + href[:cut]
        if "/." in path:
            path = _remove_dot_segments(path)
        return self.origin + path + href[cut:]

    def _slow(self, href: str) -> str | None:
        try:
            result = urljoin(self.base, href)
            parts = urlsplit(result)
        except Exception:  # noqa: BLE001 - never raises
            return None
        if parts.scheme not in _HTTP or not parts.netloc or len(result) > _MAX_URL_CHARS:
            return None
        return result


def _first_index(s: str, chars: str, start: int) -> int:
    """Index of the first of chars in s at or after start, else len(s)."""
    end = len(s)
    for ch in chars:
        i = s.find(ch, start, end)
        if i >= 0:
            end = i
    return end


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 section 5.2.4 for an absolute path ("/a/./b/../c" -> "/a/c")."""
    segments = path.split("/")[1:]
    out: list[str] = []
    last = len(segments) - 1
    for i, seg in enumerate(segments):
        if seg == "..":
            if out:
                out.pop()
            if i == last:
                out.append("")
        elif seg == ".":
            if i == last:
                out.append("")
        else:
            out.append(seg)
    return "/" + "/".join(out)


def _fix_backslashes(href: str) -> str:
    """Browsers read "\\" as "/" before the query in http(s) URLs."""
    cut = _first_index(href, "?#", 0)
    return href[:cut].replace("\\", "/") + href[cut:]


def _netloc_ok(url: str, start: int) -> bool:
    netloc = url[start : _first_index(url, "/?#", start)]
    if not netloc:
        return False
    if netloc.isascii() and "[" not in netloc and "]" not in netloc:
        return True
    try:  # urlsplit raises on bad IPv6 brackets and NFKC-unsafe hosts
        urlsplit(url)
    except Exception:  # noqa: BLE001 - never raises
        return False
    return True


# ---------------------------------------------------------------------------
# Robots directives, refresh, Link header
# ---------------------------------------------------------------------------

_ROBOTS_SPLIT_RE = re.compile(r"[\s,]+")
_AGENT_PREFIX_RE = re.compile(r"\s*([a-z0-9_.*\-]+)\s*:(.*)", re.DOTALL)
_VALUED_DIRECTIVES = frozenset({"unavailable_after", "max-snippet", "max-image-preview", "max-video-preview"})
_LINK_HEADER_RE = re.compile(r"<([^>]*)>([^<]*)")
_REL_PARAM_RE = re.compile(r"""rel\s*=\s*(?:"([^"]*)"|([^\s;,"]+))""", re.IGNORECASE)


def _robots_flags(content: str) -> tuple[bool, bool]:
    noindex = nofollow = False
    for token in _ROBOTS_SPLIT_RE.split(content.lower()):
        if token == "noindex":
            noindex = True
        elif token == "nofollow":
            nofollow = True
        elif token == "none":
            noindex = nofollow = True
    return noindex, nofollow


def _x_robots_flags(value: str, agent: str) -> tuple[bool, bool]:
    """X-Robots-Tag: directives apply to everyone unless prefixed "agent:"."""
    noindex = nofollow = False
    current: str | None = None
    for part in value.lower().split(","):
        m = _AGENT_PREFIX_RE.match(part)
        if m is not None and m.group(1) not in _VALUED_DIRECTIVES:
            current, part = m.group(1), m.group(2)
        if current is not None and current != agent:
            continue
        ni, nf = _robots_flags(part)
        noindex |= ni
        nofollow |= nf
    return noindex, nofollow


def _refresh_url(content: str) -> str | None:
    """URL part of a refresh value, per the HTML "declarative refresh" steps.

    Returns None when the value is invalid (browsers ignore it) and "" when it
    is valid but reloads the page itself.
    """
    s = content.lstrip(_ASCII_WS)
    i = 0
    while i < len(s) and s[i].isdigit() and s[i].isascii():
        i += 1
    if i == 0 and not s.startswith("."):
        return None
    while i < len(s) and (s[i] == "." or (s[i].isdigit() and s[i].isascii())):
        i += 1
    s = s[i:].lstrip(_ASCII_WS)
    if not s:
        return ""
    if s[0] not in ";,":
        return None
    s = s[1:].lstrip(_ASCII_WS)
    if s[:3].lower() == "url":
        rest = s[3:].lstrip(_ASCII_WS)
        if rest.startswith("="):
            s = rest[1:].lstrip(_ASCII_WS)
    if s[:1] in ("'", '"'):
        end = s.find(s[0], 1)
        s = s[1:end] if end >= 0 else s[1:]
    return s


def _link_header_canonical(value: str) -> str | None:
    for m in _LINK_HEADER_RE.finditer(value):
        rel = _REL_PARAM_RE.search(m.group(2))
        if rel and "canonical" in (rel.group(1) or rel.group(2) or "").lower().split():
            return m.group(1)
    return None


def _header_values(headers: Mapping[str, str] | None) -> tuple[str, str]:
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


# ---------------------------------------------------------------------------
# Pathological nesting guard
# ---------------------------------------------------------------------------
# lexbor follows the HTML5 tree-building algorithm, which is quadratic on
# deeply nested markup (every <div> scans the open-element stack) and on
# unclosed formatting elements that get re-opened again and again ("active
# formatting elements" reconstruction).  A 45 KB page of nested <div>/<b>
# measured 6.5 s and 1.4 GB in lexbor.  Browsers cap tree depth (Blink: 512).
# We check cheaply and, for the rare offender, strip the structural tags
# before parsing, which keeps links, meta data and text.  The cheap check can
# be fooled on purpose (stray end tags); and one element with thousands of
# attributes is quadratic in lexbor as well (20,000 attributes: 3.8 s) and not
# guarded here.  A task time limit in the caller is the backstop for those.

_NEST_CHUNK = 16384
_NEST_ESTIMATE_LIMIT = 600  # upper-ish bound from counting "<" vs "</"
_NEST_DEPTH_LIMIT = 600
_TAG_RE_B = re.compile(rb"<(/?)([A-Za-z][^\s/>]*)")
_TAG_RE_S = re.compile(r"<(/?)([A-Za-z][^\s/>]*)")
# Elements that never stay open long: void elements and the ones the parser
# closes implicitly when a sibling starts.
_NO_DEPTH_NAMES = (
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track",
    "wbr", "param", "keygen", "p", "li", "dd", "dt", "td", "th", "tr", "option", "optgroup",
    "rb", "rt", "rp", "a",
)
_NO_DEPTH = frozenset(_NO_DEPTH_NAMES) | frozenset(n.encode() for n in _NO_DEPTH_NAMES)
# Tags kept when flattening: everything we read, and the raw-text containers
# whose content must stay opaque.
_KEEP = r"(?:a|area|base|meta|link|title|html|head|body|script|style|noscript|template|textarea|xmp|iframe|noembed|noframes|plaintext)"
_FLATTEN_RE_S = re.compile(r"</?(?!" + _KEEP + r"[\s/>])[A-Za-z][^<>]*>", re.IGNORECASE)
_FLATTEN_RE_B = re.compile(rb"</?(?!" + _KEEP.encode() + rb"[\s/>])[A-Za-z][^<>]*>", re.IGNORECASE)


def _too_deep(data: bytes | str) -> bool:
    """True if lexbor would go quadratic on this document."""
    doc: Any = data  # same code for bytes and str
    lt: Any
    close: Any
    tag_re: re.Pattern[Any]
    if isinstance(data, bytes):
        lt, close, tag_re = b"<", b"</", _TAG_RE_B
    else:
        lt, close, tag_re = "<", "</", _TAG_RE_S
    # Cheap bound first (two C-speed passes): opened minus closed tags, per
    # chunk.  Void elements and "<" in scripts make it an overestimate.
    run = peak = 0
    for i in range(0, len(doc), _NEST_CHUNK):
        j = i + _NEST_CHUNK
        run += doc.count(lt, i, j) - 2 * doc.count(close, i, j)
        peak = max(peak, run)
    if peak <= _NEST_ESTIMATE_LIMIT:
        return False
    # Closer look, tag by tag; ignores stray end tags of elements not open.
    open_by_name: dict[Any, int] = {}
    depth = 0
    for slash, name in tag_re.findall(doc):
        name = name.lower()
        if name in _NO_DEPTH:
            continue
        if slash:
            n = open_by_name.get(name)
            if n:
                open_by_name[name] = n - 1
                depth -= 1
        else:
            open_by_name[name] = open_by_name.get(name, 0) + 1
            depth += 1
            if depth > _NEST_DEPTH_LIMIT:
                return True
    return False


def _flatten(data: bytes | str) -> bytes | str:
    if isinstance(data, bytes):
        return _FLATTEN_RE_B.sub(b" ", data)
    return _FLATTEN_RE_S.sub(" ", data)


# ---------------------------------------------------------------------------
# parse_html
# ---------------------------------------------------------------------------

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
    body: bytes,
    url: str,
    *,
    content_type: str | None = None,
    headers: Mapping[str, str] | None = None,
    agent: str = "",
    max_text_chars: int = 100_000,
) -> ParsedPage:
    """Extract title, text, links and robots signals from one HTML response.

    ``agent`` is the crawler's robots token: ``<meta name=agent>`` and
    ``X-Robots-Tag: agent: ...`` apply in addition to the generic forms.
    Never raises: on total failure it returns an empty page that still
    carries the header-derived signals (robots flags, canonical).
    """
    agent_l = agent.strip().lower() if isinstance(agent, str) else ""
    noindex = nofollow = False
    header_canonical: str | None = None
    charset = "utf-8"
    base_url = url if isinstance(url, str) else ""
    try:
        robots_value, link_value = _header_values(headers)
        if robots_value:
            noindex, nofollow = _x_robots_flags(robots_value, agent_l)
        if link_value:
            href = _link_header_canonical(link_value)
            if href:
                header_canonical = _Resolver(base_url).resolve(href)
    except Exception:  # noqa: BLE001, S110 - a bad header must not cost us the page
        pass
    try:
        if not isinstance(body, bytes):
            body = bytes(body)
        charset, start = _sniff(body, content_type)
        data: bytes | str
        if charset == "utf-8":
            data = body[start:] if start else body  # lexbor reads UTF-8 bytes directly
        else:
            data = _decode(body, charset, start)
        if _too_deep(data):
            data = _flatten(data)
        return _extract(data, base_url, agent_l, max_text_chars, charset, noindex, nofollow, header_canonical)
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
        )


def _extract(
    data: bytes | str,
    url: str,
    agent: str,
    max_text_chars: int,
    charset: str,
    noindex: bool,
    nofollow: bool,
    canonical: str | None,
) -> ParsedPage:
    # scripting=True: <noscript> content is raw text, as in a browser that
    # runs scripts, so nothing inside it becomes a link or meta element.
    tree = LexborHTMLParser(data, scripting=True)
    for node in tree.css(_HIDDEN_SELECTOR):
        node.decompose()

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
                    ni, nf = _robots_flags(content)
                    noindex |= ni
                    nofollow |= nf
            equiv = attrs.get("http-equiv")
            if refresh is None and equiv and equiv.strip().lower() == "refresh":
                refresh = _refresh_url(content)  # first valid one wins, even a self-refresh ("")
        elif canonical_href is None:  # link
            rels = (attrs.get("rel") or "").lower().split()
            if "canonical" in rels:
                canonical_href = attrs.get("href") or None

    resolver = _Resolver(url)
    base_url = url
    if base_href:
        resolved_base = resolver.resolve(base_href)
        if resolved_base is not None:
            base_url = resolved_base
            resolver = _Resolver(base_url)

    title = ""
    if titles:
        chosen = next((t for t in titles if t.parent is not None and t.parent.tag == "head"), None)
        if chosen is None:
            chosen = next((t for t in titles if not _in_svg(t)), titles[0])
        title = _collapse(chosen.text())[:_MAX_TITLE_CHARS]

    links: list[Link] = []
    seen: set[str] = set()
    resolve = resolver.resolve
    for node in tree.css(_LINK_SELECTOR):
        attrs = node.attributes
        target = resolve(attrs.get("href") or "")
        if target is None or target in seen:
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

    page_canonical = resolver.resolve(canonical_href) if canonical_href else None
    return ParsedPage(
        title=title,
        text=text,
        links=links,
        base_url=base_url,
        canonical=page_canonical or canonical,
        noindex=noindex,
        nofollow=nofollow,
        meta_refresh=resolver.resolve(refresh) if refresh else None,
        lang=lang,
        charset=charset,
    )
