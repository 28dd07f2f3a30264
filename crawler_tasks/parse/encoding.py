"""Character encodings and content sniffing for HTML responses.

Decoding follows the WHATWG Encoding Standard reduced to what Python has: a
fixed table of encodings, so a page cannot pick a dangerous or non-text codec
(utf-7, base64, rot13, ...).  Entry points: :func:`decode_html`,
:func:`is_html`; :func:`sniff` and :func:`decode` for the parser, which hands
UTF-8 bytes to lexbor undecoded.  Nothing here raises on hostile input.
"""

from __future__ import annotations

import codecs
import re
from functools import lru_cache

__all__ = ["ASCII_WS", "decode", "decode_html", "is_html", "sniff"]

_META_PRESCAN_BYTES = 4096

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
ASCII_WS = " \t\n\r\x0c"
_CT_CHARSET_RE = re.compile(r"""charset\s*=\s*["']?([^"';,\s]*)""", re.IGNORECASE)
_COMMENT_RE = re.compile(rb"<!--.*?(?:-->|\Z)", re.DOTALL)
_META_RE = re.compile(rb"<meta[\s/]([^>]*)", re.IGNORECASE)
_ATTR_RE = re.compile(rb"""([^\s=/>]+)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]*)))?""")
_META_CHARSET_RE = re.compile(rb"""charset\s*=\s*(?:"([^"]*)|'([^']*)|([^\s;"']+))""", re.IGNORECASE)


@lru_cache(maxsize=512)
def _encoding_for_label(label: str) -> str | None:
    """WHATWG "get an encoding": a label to a supported encoding name, or None."""
    norm = label.strip(ASCII_WS).lower()
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


def sniff(body: bytes, content_type: str | None) -> tuple[str, int]:
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


def decode(body: bytes, name: str, start: int) -> str:
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
        name, start = sniff(body, content_type)
        return decode(body, name, start), name
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
