"""URL normalization for the crawler frontier.

Every link found on a page goes through :func:`normalize_url` before it is
deduplicated or queued, so two spellings of the same resource must map to the
same string, and anything a crawler cannot fetch must map to ``None``.

Resolution follows RFC 3986 section 5; normalization follows RFC 3986 section 6
(case, percent-encoding, dot segments, default port).  Where browsers (the
WHATWG URL standard) disagree with RFC 3986 on input that appears on real
pages, we do what browsers do, because the link means what the browser that
the page author tested with made of it:

* tab/CR/LF are removed anywhere, C0 controls and spaces trimmed at the ends;
* ``\\`` counts as ``/`` before the query of http(s) URLs;
* ``http:g`` against an ``http:`` base is relative, ``http:g`` otherwise and
  ``http:///g`` mean host ``g`` (extra slashes are ignored);
* ``%2e`` counts as ``.`` in dot segments (falls out of RFC 6.2.2.2 anyway);
* the host is percent-decoded, then goes through UTS 46 as the URL Standard
  applies it (CheckHyphens false, CheckBidi and CheckJoiners true,
  nontransitional, no DNS length check), not IDNA 2008: ``☃.net`` is a host;
  numeric IPv4 forms (``0x7f.1``) are canonicalized to dotted decimal, IPv6 to
  RFC 5952 form;
* ``'`` is percent-encoded in the query, as the URL Standard does for http(s).

tests/test_urls.py runs the Standard's web-platform-tests data (vendored in
tests/data/whatwg/) and lists there every deliberate difference with its reason.

Where RFC 3986 is stricter than browsers we keep RFC 3986 for the output:
every character outside the RFC 3986 set (including ``[ ] { } | ^ ` \\``)
is percent-encoded in the path and query, so the output is a valid URI and
one resource has one spelling.

:class:`Resolver` is the same normalization bound to one base URL (parsed
once), for the links of one page; the HTML parser uses it for every URL it
reports, so its links come out normalized.

The module is pure (no I/O); neither :func:`normalize_url` nor
:class:`Resolver` raises.  Control characters never survive: they are
stripped, removed (tab, CR, LF) or percent-encoded.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from functools import lru_cache
from typing import NamedTuple
from urllib.parse import unquote_to_bytes

import idna

__all__ = [
    "DEFAULT_SESSION_PARAMS",
    "DEFAULT_TRACKING_PARAMS",
    "MAX_LINK_CHARS",
    "Resolver",
    "host_key",
    "normalize_url",
]

# Query parameters that only identify the campaign or click and never change
# the content; dropped so that one page is not crawled once per ad campaign.
# Any name starting with ``utm_`` is also dropped (handled by prefix).
DEFAULT_TRACKING_PARAMS: frozenset[str] = frozenset(
    {
        "gclid", "gclsrc", "dclid", "gbraid", "wbraid", "srsltid",  # Google
        "_ga", "_gl",  # Google Analytics cross-domain linker
        "fbclid", "igshid", "igsh",  # Meta
        "msclkid",  # Microsoft Ads
        "yclid", "ysclid",  # Yandex
        "twclid", "ref_src", "ref_url",  # Twitter / X
        "ttclid",  # TikTok
        "li_fat_id",  # LinkedIn
        "epik",  # Pinterest
        "mc_cid", "mc_eid",  # Mailchimp
        "_hsenc", "_hsmi", "__hstc", "__hssc", "__hsfp", "hsctatracking",  # HubSpot
        "mkt_tok",  # Marketo
        "oly_anon_id", "oly_enc_id",  # Omeda
        "vero_conv", "vero_id",  # Vero
        "wickedid",
        "rb_clickid",
        "s_cid",  # Adobe
        "_openstat",
    }
)

# Query parameters that carry a server-side session id: every visit produces
# a new URL for the same page, which would make the frontier grow forever.
DEFAULT_SESSION_PARAMS: frozenset[str] = frozenset(
    {
        "sid", "sessid", "sess_id", "sessionid", "session_id",
        "jsessionid", "phpsessid", "aspsessionid",
        "cfid", "cftoken",  # ColdFusion
        "zenid",  # Zen Cart
        "oscsid",  # osCommerce
    }
)

_DEFAULT_DROP: frozenset[str] = DEFAULT_TRACKING_PARAMS | DEFAULT_SESSION_PARAMS
_DROP_PREFIX = "utm_"

_DEFAULT_PORTS = {"http": "80", "https": "443"}

# Characters stripped from both ends: C0 controls, space, and the Unicode
# spaces / BOM that scraped href attributes often carry (WHATWG only strips
# C0 and space; stripping more loses nothing a server could want).
_STRIP = (
    "".join(chr(c) for c in range(0x21))
    + "\x7f\x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000\ufeff"
    + "".join(chr(c) for c in range(0x2000, 0x200C))  # en quad .. zero width space
)
_TAB_NL = str.maketrans("", "", "\t\n\r")

_SCHEME_RE = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):")

_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
# RFC 3986: pchar = unreserved / pct-encoded / sub-delims / ":" / "@"
_PATH_SAFE = r"A-Za-z0-9\-._~!$&'()*+,;=:@/"
# The query also allows "?", but not "'": the URL Standard percent-encodes it in
# the query of special schemes, so "?it's" and "?it%27s" are one URL.
_QUERY_SAFE = r"A-Za-z0-9\-._~!$&()*+,;=:@/?"
# One match per thing that needs rewriting: an escape, a stray "%", or a
# character that is not allowed raw.
_PATH_FIX_RE = re.compile(r"%([0-9A-Fa-f]{2})|%|[^" + _PATH_SAFE + "]")
_QUERY_FIX_RE = re.compile(r"%([0-9A-Fa-f]{2})|%|[^" + _QUERY_SAFE + "]")

# Fast paths: already clean ASCII links (the large majority on real pages).
# No "%", "\\", ";" in the path, port, userinfo or upper-case host: those take
# the full path so that there is only one place where they are handled.
_CLEAN_PATH = r"A-Za-z0-9\-._~!$&'()*+,=:@/"
_CLEAN_QUERY = r"A-Za-z0-9\-._~!$&()*+,=:@/;?"
_FAST_ABS_RE = re.compile(
    r"(?:(https?):)?//([a-z0-9][a-z0-9.\-]*)"
    r"(/[" + _CLEAN_PATH + r"]*)?"
    r"(?:\?([" + _CLEAN_QUERY + r"]*))?"
    r"(?:#.*)?\Z",
    re.S,
)
_FAST_REL_RE = re.compile(
    r"([" + _CLEAN_PATH + r"]+)"
    r"(?:\?([" + _CLEAN_QUERY + r"]*))?"
    r"(?:#.*)?\Z",
    re.S,
)

# RFC 3986 reg-name after decoding: unreserved / sub-delims.  Stricter than
# WHATWG (which also lets through e.g. '"' and '{'), so output is a valid URI.
_BAD_HOST_RE = re.compile(r"[^a-z0-9\-._~!$&'()*+,;=]")
_HEX_RE = re.compile(r"[0-9A-Fa-f]*")


class _Parts(NamedTuple):
    """A resolved, normalized URL; the query is not yet filtered (None: no "?")."""

    scheme: str
    netloc: str
    path: str
    query: str | None


def normalize_url(
    href: str, base: str | None = None, *, drop_params: frozenset[str] | None = None
) -> str | None:
    """Resolve ``href`` against ``base`` and return the canonical http(s) URL.

    Returns None for anything the crawler should not or cannot fetch
    (other schemes, no host, relative link without base, malformed input),
    so callers can filter with one ``if``.  Never raises.
    """
    try:
        drop = _DEFAULT_DROP if drop_params is None else _lower_set(drop_params)
        fast = _fast(href, base, drop)
        if fast is not None:
            return fast
        return _normalize_slow(href, base, drop)
    except Exception:  # noqa: BLE001 - the contract is "never raises"
        return None


def host_key(url: str) -> str:
    """Return the politeness key of ``url``: punycode host plus non-default port.

    Requests to one key share a rate limit, so ``http://A.com:80`` and
    ``http://a.com/x`` must give the same key.  Returns "" when there is no
    usable host.
    """
    norm = normalize_url(url, drop_params=frozenset())
    if norm is None:
        return ""
    start = norm.index("://") + 3
    end = norm.find("/", start)
    return norm[start:end] if end >= 0 else norm[start:]


MAX_LINK_CHARS = 4096  # longer hrefs are junk or traps; skipping them is cheaper than storing them

_MISS = object()


class Resolver:
    """Normalizes the links of one document against its base URL, parsed once.

    :meth:`link` gives exactly what ``normalize_url(href, base)`` gives, except
    that it skips (returns None) what a crawler should not follow from a page:
    hrefs longer than ``max_chars`` (before or after normalization) and
    references to the document itself (empty, ``#fragment``, ``http:``).
    Results are cached per href, since pages repeat their navigation links.
    Never raises.
    """

    __slots__ = ("_b", "_cache", "_drop", "_max", "base")

    def __init__(
        self, base: str | None, *, drop_params: frozenset[str] | None = None, max_chars: int = MAX_LINK_CHARS
    ) -> None:
        self.base = base
        try:
            self._drop = _DEFAULT_DROP if drop_params is None else _lower_set(drop_params)
            self._b = _base_parts(base) if isinstance(base, str) else None
        except Exception:  # noqa: BLE001 - an unhashable drop set or base: no base, defaults
            self._drop, self._b = _DEFAULT_DROP, None
        self._max = max_chars
        self._cache: dict[str, str | None] = {}

    @property
    def base_url(self) -> str | None:
        """The normalized base URL, or None when the base is not a usable http(s) URL."""
        b = self._b
        return None if b is None else _serialize(b.scheme, b.netloc, b.path, _filter_query(b.query, self._drop))

    def link(self, href: str) -> str | None:
        """The normalized http(s) URL an href points to, or None to skip it."""
        out = self._cache.get(href, _MISS) if isinstance(href, str) else None
        if out is _MISS:
            out = self._cache[href] = self._link(href)
        return out  # type: ignore[return-value]

    def _link(self, href: str) -> str | None:
        if not href or len(href) > self._max or href[0] == "#":
            return None
        try:
            out = _fast_on(href, self._b, self._drop)
            if out is None:
                cleaned = _clean(href)
                b = self._b
                if not cleaned or (b is not None and cleaned.lower() == b.scheme + ":"):
                    return None  # "", "#top", "http:" on an http page: the page itself
                out = _slow_on(href, b, self._drop)
        except Exception:  # noqa: BLE001 - the contract is "never raises"
            return None
        return out if out is not None and len(out) <= self._max else None


# --------------------------------------------------------------------------
# Internals


@lru_cache(maxsize=32)
def _lower_set(names: frozenset[str]) -> frozenset[str]:
    """Lower-case a caller's parameter set once (names compare case-insensitively)."""
    return frozenset(n.lower() for n in names)


def _dropped(name: str, drop: frozenset[str]) -> bool:
    """Tell whether a query/path parameter name is tracking or session noise."""
    low = name.lower()
    return low in drop or low.startswith(_DROP_PREFIX)


def _filter_query(query: str | None, drop: frozenset[str]) -> str:
    """Remove dropped parameters and empty pairs; keep order and spelling."""
    if not query:
        return ""
    kept = [
        pair
        for pair in query.split("&")
        if pair and not _dropped(pair.partition("=")[0], drop)
    ]
    return "&".join(kept)


def _serialize(scheme: str, netloc: str, path: str, query: str) -> str:
    """Join the parts; an empty query gets no "?"."""
    if query:
        return f"{scheme}://{netloc}{path}?{query}"
    return f"{scheme}://{netloc}{path}"


def _fast(href: str, base: str | None, drop: frozenset[str]) -> str | None:
    """Handle clean ASCII links cheaply; None means "use the full path"."""
    return _fast_on(href, _base_parts(base) if base is not None else None, drop)


def _fast_on(href: str, b: _Parts | None, drop: frozenset[str]) -> str | None:
    """:func:`_fast` against an already parsed base (None: no usable base).

    Only accepts input for which the full path would do nothing but remove
    dot segments, the fragment and dropped parameters (a property test
    checks that both paths agree).
    """
    m = _FAST_ABS_RE.match(href)
    if m is not None:
        scheme, host, path, query = m.groups()
        last = host[host.rfind(".") + 1:]
        # Trailing dot, or a numeric last label (IPv4 forms): full path.
        if not last or last[0] in "0123456789":
            return None
        if scheme is None:
            if b is None:
                return None
            scheme = b.scheme
        if path is None:
            path = "/"
        elif "/." in path:
            path = _remove_dot_segments(path)
        return _serialize(scheme, host, path, _filter_query(query, drop))
    if b is None:
        return None
    if not href or href[0] == "#":
        return _serialize(b.scheme, b.netloc, b.path, _filter_query(b.query, drop))
    m = _FAST_REL_RE.match(href)
    if m is None:
        return None
    path, query = m.groups()
    if path[0] == "/":
        if path[:2] == "//":
            return None
    else:
        colon = path.find(":")
        if colon >= 0:
            slash = path.find("/")
            if slash < 0 or colon < slash:
                return None  # could be a scheme
        path = b.path[: b.path.rfind("/") + 1] + path
    if "/." in path:
        path = _remove_dot_segments(path)
    return _serialize(b.scheme, b.netloc, path, _filter_query(query, drop))


@lru_cache(maxsize=64)
def _base_parts(base: str) -> _Parts | None:
    """Parse and normalize a base once per page, not once per link."""
    if not isinstance(base, str):
        return None
    try:
        return _parse(base, None)
    except Exception:  # noqa: BLE001
        return None


def _normalize_slow(href: str, base: str | None, drop: frozenset[str]) -> str | None:
    """The full algorithm: resolve, then normalize every component."""
    return _slow_on(href, _base_parts(base) if base is not None else None, drop)


def _slow_on(href: str, b: _Parts | None, drop: frozenset[str]) -> str | None:
    """:func:`_normalize_slow` against an already parsed base."""
    p = _parse(href, b)
    if p is None:
        return None
    return _serialize(p.scheme, p.netloc, p.path, _filter_query(p.query, drop))


def _clean(s: str) -> str:
    """Trim ends, drop tab/CR/LF anywhere and the fragment (WHATWG pre-processing)."""
    s = s.strip(_STRIP).translate(_TAB_NL)
    return s.partition("#")[0]


def _backslashes(s: str) -> str:
    """Treat "\\" as "/" before the query, as browsers do for http(s)."""
    if "\\" not in s:
        return s
    q = s.find("?")
    if q < 0:
        return s.replace("\\", "/")
    return s[:q].replace("\\", "/") + s[q:]


def _parse(href: str, base: _Parts | None) -> _Parts | None:
    """Resolve ``href`` against a parsed base (RFC 3986 5.2) and normalize it."""
    s = _clean(href)
    m = _SCHEME_RE.match(s)
    if m is not None:
        scheme = m.group(1).lower()
        if scheme not in _DEFAULT_PORTS:
            return None
        rest = _backslashes(s[m.end():])
        if base is not None and base.scheme == scheme and not rest.startswith("//"):
            # "http:g" on an http page is relative (RFC 5.4.2 non-strict, WHATWG).
            return _resolve(rest, base)
        return _absolute(scheme, rest.lstrip("/"))
    if base is None:
        return None
    return _resolve(_backslashes(s), base)


def _absolute(scheme: str, rest: str) -> _Parts | None:
    """Build parts from "authority/path?query" (leading slashes already gone)."""
    end = len(rest)
    for ch in "/?":
        i = rest.find(ch)
        if 0 <= i < end:
            end = i
    netloc = _normalize_netloc(scheme, rest[:end])
    if netloc is None:
        return None
    path, query = _split_query(rest[end:])
    return _Parts(scheme, netloc, _normalize_path(path), _normalize_query(query))


def _split_query(s: str) -> tuple[str, str | None]:
    """Split "path?query"; the query is None when there is no "?"."""
    path, sep, query = s.partition("?")
    return path, (query if sep else None)


def _resolve(ref: str, base: _Parts) -> _Parts | None:
    """RFC 3986 5.2.2 for a reference without scheme (fragment already gone)."""
    if ref.startswith("//"):
        # WHATWG ignores any number of slashes after the first two.
        return _absolute(base.scheme, ref.lstrip("/"))
    path, query = _split_query(ref)
    if not path:
        path = base.path
        if query is None:
            query = base.query
    elif not path.startswith("/"):
        path = base.path[: base.path.rfind("/") + 1] + path
    return _Parts(base.scheme, base.netloc, _normalize_path(path), _normalize_query(query))


# ---- components


def _fix_escape(m: re.Match[str]) -> str:
    """Rewrite one match of the *_FIX_RE patterns (RFC 3986 6.2.2.1/6.2.2.2)."""
    hx = m.group(1)
    if hx is not None:
        ch = chr(int(hx, 16))
        return ch if ch in _UNRESERVED else "%" + hx.upper()
    text = m.group(0)
    if text == "%":
        return "%25"
    return "".join(f"%{b:02X}" for b in text.encode("utf-8"))


def _normalize_path(path: str) -> str:
    """Normalize escapes, drop session path parameters and dot segments."""
    path = _PATH_FIX_RE.sub(_fix_escape, path)
    if ";" in path:
        path = _strip_path_params(path)
    path = _remove_dot_segments(path)
    if not path.startswith("/"):
        path = "/" + path
    return path


def _normalize_query(query: str | None) -> str | None:
    """Normalize escapes in the query without touching its structure."""
    if query is None:
        return None
    return _QUERY_FIX_RE.sub(_fix_escape, query)


def _strip_path_params(path: str) -> str:
    """Remove ``;jsessionid=...``-style session ids that servers put in the path.

    Uses the fixed DEFAULT_SESSION_PARAMS, not ``drop_params``: session ids in
    the path are never content, and the parsed base is cached per base string.
    """
    segs = []
    for seg in path.split("/"):
        if ";" in seg:
            head, *params = seg.split(";")
            kept = [p for p in params if p.partition("=")[0].lower() not in DEFAULT_SESSION_PARAMS]
            seg = ";".join([head, *kept])
        segs.append(seg)
    return "/".join(segs)


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 5.2.4, written on segments; ``%2e`` is already decoded to ".".

    Equivalent to the RFC's buffer algorithm for absolute paths.
    """
    if "." not in path:
        return path
    segs = path.split("/")
    out: list[str] = []
    # segs[0] is "" for an absolute path; keep that leading empty segment.
    for i, seg in enumerate(segs):
        last = i == len(segs) - 1
        if seg == ".":
            if last:
                out.append("")
        elif seg == "..":
            if len(out) > 1:
                out.pop()
            if last:
                out.append("")
        else:
            out.append(seg)
    result = "/".join(out)
    if path.startswith("/") and not result.startswith("/"):
        result = "/" + result
    return result


@lru_cache(maxsize=1024)
def _normalize_netloc(scheme: str, authority: str) -> str | None:
    """Return "host[:port]" without userinfo and default port, or None."""
    at = authority.rfind("@")
    if at >= 0:
        authority = authority[at + 1:]  # credentials are never sent
    if authority.startswith("["):
        close = authority.find("]")
        if close < 0:
            return None
        host = _normalize_ipv6(authority[1:close])
        rest = authority[close + 1:]
        if rest and not rest.startswith(":"):
            return None
        port = rest[1:] if rest else ""
    else:
        raw, _, port = authority.partition(":")
        host = _normalize_host(raw)
    if host is None:
        return None
    if port:
        if not (port.isascii() and port.isdigit()) or int(port) > 65535:
            return None
        port = str(int(port))
        if port != _DEFAULT_PORTS[scheme]:
            return f"{host}:{port}"
    return host


def _normalize_ipv6(text: str) -> str | None:
    """Validate an IPv6 literal and give it its RFC 5952 (lower-case) form."""
    if "%" in text or not text:
        return None  # zone ids are meaningless to a crawler and WHATWG rejects them
    try:
        return "[" + ipaddress.IPv6Address(text).compressed + "]"
    except ValueError:
        return None


def _percent_decode_host(host: str) -> str | None:
    """Percent-decode a host as UTF-8 (WHATWG does this before IDNA)."""
    try:
        return unquote_to_bytes(host).decode("utf-8")
    except UnicodeError:
        return None


def _normalize_host(host: str) -> str | None:
    """Lower-case, IDNA-encode and validate a registered name or IPv4 host."""
    if "%" in host:
        decoded = _percent_decode_host(host)
        if decoded is None:
            return None
        host = decoded
    if not host.isascii():
        encoded = _idna_host(host)
        if encoded is None:
            return None
        host = encoded
    else:
        host = host.lower()
    if _BAD_HOST_RE.search(host):
        return None
    host = host.rstrip(".")
    if not host:
        return None
    if _ends_in_number(host):
        return _parse_ipv4(host)
    return host


def _idna_host(host: str) -> str | None:
    """Domain to ASCII as the URL Standard has it, for a host with non-ASCII characters.

    UTS 46 with UseSTD3ASCIIRules, CheckHyphens, Transitional_Processing and
    VerifyDnsLength false, CheckBidi and CheckJoiners true.  The mapping table
    is the ``idna`` package's; the validity rules are here, because ``idna``
    applies IDNA 2008's stricter ones (it refuses ``☃.net``, which browsers
    open).  Labels that are ASCII after mapping stay as they are, punycode
    labels included once decoded and checked.  None: the URL is refused.
    """
    try:
        labels = idna.uts46_remap(host, std3_rules=False).split(".")
        decoded = [_decode_alabel(label) if label.startswith("xn--") else label for label in labels]
        if any(label is None for label in decoded):
            return None
        uts = [label for label in decoded if label]
        bidi = any(_is_rtl(label) for label in uts)
        for label in uts:
            if not _valid_label(label, bidi):
                return None
        return ".".join(
            label if label.isascii() else "xn--" + label.encode("punycode").decode("ascii") for label in labels
        )
    except (idna.IDNAError, UnicodeError, ValueError):
        return None


def _is_rtl(label: str) -> bool:
    """A label with a character of bidi class R, AL or AN makes a Bidi domain name (RFC 5893 1.4)."""
    return any(unicodedata.bidirectional(ch) in ("R", "AL", "AN") for ch in label)


def _decode_alabel(label: str) -> str | None:
    """The Unicode label behind an ``xn--`` label, or None when it is no valid A-label."""
    if not label.isascii():
        return None
    code = label[4:].encode("ascii")
    text = code.decode("punycode")
    if text.encode("punycode") != code:
        return None  # the stdlib decoder is lenient ("-zca"); RFC 3492 decoding is one-to-one
    if not text or text.isascii() or idna.uts46_remap(text, std3_rules=False) != text:
        return None  # UTS 46 4.1 step 4 and V7: only valid (or deviation) code points, NFC
    return text


def _valid_label(label: str, bidi: bool) -> bool:
    """UTS 46 validity criteria for one non-empty label (CheckHyphens false).

    NFC and the code point statuses hold by construction after the mapping,
    and are checked in :func:`_decode_alabel` for decoded labels.
    """
    if label.startswith("xn--") or unicodedata.category(label[0])[0] == "M":
        return False
    for i, ch in enumerate(label):
        if ch in "\u200c\u200d" and not idna.valid_contextj(label, i):
            return False
    return not bidi or idna.check_bidi(label, check_ltr=True)


def _ends_in_number(host: str) -> bool:
    """WHATWG "ends in a number": the host must then parse as IPv4."""
    last = host[host.rfind(".") + 1:]
    if last.isdigit():
        return True
    return last[:2] in ("0x", "0X") and _HEX_RE.fullmatch(last[2:]) is not None


def _parse_ipv4_part(part: str) -> int | None:
    """Parse one IPv4 part in decimal, octal (leading 0) or hex (0x)."""
    if not part:
        return None
    if part[:2] in ("0x", "0X"):
        digits = part[2:]
        if _HEX_RE.fullmatch(digits) is None:
            return None
        return int(digits, 16) if digits else 0
    if len(part) > 1 and part[0] == "0":
        return int(part[1:], 8) if all(c in "01234567" for c in part[1:]) else None
    return int(part) if part.isdigit() and part.isascii() else None


def _parse_ipv4(host: str) -> str | None:
    """WHATWG IPv4 parser: ``0x7f.1`` -> ``127.0.0.1``; invalid -> None."""
    parts = host.split(".")
    if len(parts) > 4:
        return None
    nums = []
    for part in parts:
        n = _parse_ipv4_part(part)
        if n is None:
            return None
        nums.append(n)
    if any(n > 255 for n in nums[:-1]) or nums[-1] >= 256 ** (5 - len(nums)):
        return None
    value = nums[-1]
    for i, n in enumerate(nums[:-1]):
        value += n * 256 ** (3 - i)
    return ".".join(str((value >> shift) & 0xFF) for shift in (24, 16, 8, 0))
