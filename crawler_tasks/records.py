"""Typed records between the stages, and the one JSON form they take at the Celery boundary.

fetch -> ``Capture`` (the ``FetchedPage``: what the exchange gave; beside it where its
body lies in the group's spool file) -> parse -> ``PageRecord`` (the page, plus the
``Parsed`` part: title, fingerprints, verdicts; and the ``Found`` URLs) -> enqueue, which
writes the record to ``pages.jsonl``. Records are composed: each stage adds its own part,
and nothing a later stage need not see travels on. Inside a process stages pass these objects;
``to_message``/``from_message`` are the only JSON conversions, and ``from_message``
validates everything a forged or corrupt message could carry (types, sizes, enums,
control characters): a task refuses a bad message instead of acting on it.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

from crawler_tasks.exceptions import MessageError

MAX_URL_CHARS = 8192        # anything longer is refused before it reaches a record
MAX_TEXT_FIELD_CHARS = 4096  # titles, errors, header values in records
MAX_LIST_ITEMS = 1_000_000   # links or sitemap entries in one record
_R = TypeVar("_R", "Capture", "PageRecord")


class EntryKind(StrEnum):
    """What a queued URL is; the value is its one-letter code in frontier entries."""

    PAGE = "p"
    SITEMAP = "s"
    PROBE = "x"     # soft-404 probe: a random path of the host

    @property
    def label(self) -> str:
        return _KIND_LABELS[self]


_KIND_LABELS = {EntryKind.PAGE: "page", EntryKind.SITEMAP: "sitemap", EntryKind.PROBE: "probe"}
_KIND_BY_LABEL = {label: kind for kind, label in _KIND_LABELS.items()}


class Action(StrEnum):
    """What ``Frontier.complete`` does with a leased host's head URL."""

    DONE = "done"     # fetched (or given up): pop it
    RETRY = "retry"   # to the tail of the host's queue with one more try
    KEEP = "keep"     # leave it at the head for the host's next turn


class ErrorKind(StrEnum):
    """``error_kind`` of a record: why a URL has no (usable) answer; counted as
    ``fetch/error/<kind>`` and ``records/error/<kind>``."""

    # the exchange (fetch.http)
    BAD_URL = "bad_url"                    # not an http(s) URL we can send
    URL_TOO_LONG = "url_too_long"          # longer than MAX_URL_LENGTH
    REFUSED = "refused"                    # private/forbidden address (netsafety)
    DNS = "dns"                            # no address (or the lookup ran out of time)
    CONNECT = "connect"                    # connection refused or unreachable
    TIMEOUT = "timeout"                    # connect or one read silent for its timeout
    DEADLINE = "deadline"                  # the exchange used up TOTAL_TIMEOUT_S
    TLS = "tls"                            # handshake or certificate failure
    PROTOCOL = "protocol"                  # reset, early close, broken framing
    HTTP09 = "http09"                      # no status line: HTTP/0.9 or not HTTP at all
    BAD_STATUS_LINE = "bad_status_line"    # "HTTP/..." but not a valid status line
    HEADERS_TOO_LARGE = "headers_too_large"
    TOO_MANY_HEADERS = "too_many_headers"
    BODY_TOO_LARGE = "body_too_large"      # truncated="length"; status and body kept
    DECODED_TOO_LARGE = "decoded_too_large"  # truncated="decoded-length"; a bomb
    ABORTED = "aborted"                    # the crawl stopped during the exchange: never recorded,
                                           # the URL stays queued
    # policy and content (stages)
    ROBOTS = "robots"                      # disallowed by robots.txt
    FILTERED = "filtered"                  # queued, then dropped at fetch time (a learned rule, a trap)
    REDIRECTS = "redirects"                # redirect chain over the cap
    PARSE = "parse"
    PARSE_LIMIT = "parse_limit"            # a parse cap cut the page (elements, depth, ...)
    SITEMAP = "sitemap"


# transient: the URL is tried again (MAX_RETRIES) before it gets an error record
RETRYABLE_ERRORS = frozenset({ErrorKind.TIMEOUT, ErrorKind.DEADLINE, ErrorKind.CONNECT, ErrorKind.PROTOCOL,
                              ErrorKind.DNS})
# errors after which a request did reach (or try to reach) the host (a name that did not
# resolve sent nothing: it is not a page of the budget)
NETWORK_ERRORS = (RETRYABLE_ERRORS - {ErrorKind.DNS}) | {ErrorKind.TLS, ErrorKind.HEADERS_TOO_LARGE,
                                                         ErrorKind.TOO_MANY_HEADERS, ErrorKind.HTTP09,
                                                         ErrorKind.BAD_STATUS_LINE}


@dataclass(frozen=True, slots=True)
class BodyRef:
    """Where a page's body lies in its batch's spool file."""

    offset: int
    length: int


@dataclass(slots=True)
class SitemapUrl:
    url: str
    priority: float | None = None
    lastmod: str | None = None


@dataclass(slots=True)
class FetchedPage:
    """What the fetch stage found for one leased URL: the exchange's answer, or why there
    was none. ``error_kind``, ``error`` and ``truncated`` are the URL's outcome, which
    parse (a parse failure, a sitemap cut) and enqueue (a redirect loop) may still set."""

    url: str
    depth: int = 0
    hops: int = 0
    kind: EntryKind = EntryKind.PAGE
    status: int | None = None
    error_kind: ErrorKind | None = None
    error: str | None = None
    fetched_at: str = ""
    final_url: str | None = None
    content_type: str | None = None
    bytes: int | None = None
    fetch_ms: float | None = None
    ip: str | None = None
    truncated: bool | str = False
    headers: dict[str, str] = field(default_factory=dict)
    rendered: str | None = None     # why the page was rendered in a browser (its body is the DOM)
    node: str | None = None         # the node that fetched it: its WARC and feed are in that node's folder


@dataclass(slots=True)
class Capture:
    """A fetched page as parse takes it: beside the page, what only parse reads."""

    page: FetchedPage
    body: BodyRef | None = None
    warc_id: str | None = None      # the response record, for the metadata record parse writes
    location: str | None = None     # raw Location header; parse normalizes it into redirect_to


@dataclass(slots=True)
class Parsed:
    """What parse and content dedup make of a page."""

    title: str | None = None
    lang: str | None = None
    fingerprint: str | None = None
    simhash: str | None = None
    text_chars: int | None = None
    modified: str | None = None         # the page's own modified date (meta, JSON-LD), ISO 8601
    n_links: int | None = None
    canonical: str | None = None
    redirect_to: str | None = None
    noindex: bool = False
    nofollow: bool = False
    sitemap: str | None = None          # "urlset" or "sitemapindex" for sitemap fetches
    duplicate_of: str | None = None
    near_duplicate_of: str | None = None
    soft_404: bool = False
    indexable: bool = False


@dataclass(slots=True)
class Found:
    """The URLs parse found, for the enqueue stage only: never written."""

    links: list[str] = field(default_factory=list)
    sitemap_urls: list[SitemapUrl] = field(default_factory=list)
    sitemaps: list[str] = field(default_factory=list)


@dataclass(slots=True)
class PageRecord:
    """A page after parse and content dedup, and the enqueue stage's outcome for it: one
    line of ``pages.jsonl``. Each stage fills its own part."""

    page: FetchedPage
    parsed: Parsed = field(default_factory=Parsed)
    found: Found = field(default_factory=Found)
    revisit_s: float | None = None      # continuous mode: when the enqueue stage scheduled its next visit

    def output(self) -> dict[str, Any]:
        """The ``pages.jsonl`` form: always the identity and outcome, other fields when set."""
        page = self.page
        out: dict[str, Any] = {"url": page.url, "depth": page.depth, "hops": page.hops, "status": page.status,
                               "error_kind": page.error_kind, "error": page.error, "fetched_at": page.fetched_at}
        if page.kind != EntryKind.PAGE:
            out["kind"] = page.kind.label
        for part, name in _OUTPUT_OPTIONAL:
            value = getattr(self if part is None else getattr(self, part), name)
            if value is not None and value is not False and value != {}:
                out[name] = value
        out["indexable"] = self.parsed.indexable
        return out


_OUTPUT_OPTIONAL = tuple(
    [("page", name) for name in ("node", "final_url", "content_type", "bytes", "fetch_ms", "ip", "truncated",
                                 "headers", "rendered")]
    + [("parsed", name) for name in ("title", "lang", "fingerprint", "simhash", "text_chars", "modified", "n_links",
                                     "canonical",
                                     "redirect_to", "noindex", "nofollow", "sitemap", "duplicate_of",
                                     "near_duplicate_of", "soft_404")]
    + [(None, "revisit_s")])


# ----------------------------------------------------------------------------- the boundary
def to_message(record: Capture | PageRecord) -> dict[str, Any]:
    """The JSON form of a stage record: its parts' fields in one flat object (the page's
    ``url`` on top, where the broker tools read it), kinds by label, the body ref as a pair."""
    out: dict[str, Any] = {}
    for name, value in _flat(record):
        if name == "kind":
            value = value.label
        elif name == "body":
            value = None if value is None else [value.offset, value.length]
        elif name == "sitemap_urls":
            value = [[e.url, e.priority, e.lastmod] for e in value]
        if value is None or value is False or value == [] or value == {}:
            continue
        out[name] = value
    return out


def capture_from_message(data: Any) -> Capture:
    """A ``Capture`` from its JSON form; ``MessageError`` if anything is off."""
    return _build(Capture, data)


def record_from_message(data: Any) -> PageRecord:
    return _build(PageRecord, data)


_PARTS: dict[str, type] = {"page": FetchedPage, "parsed": Parsed, "found": Found}


def _layout(cls: type) -> tuple[tuple[str, type | None], ...]:
    """The class's fields in order, each with the record part it holds (None: a value):
    read once per class (``dataclasses.fields`` builds its tuple at every call, and four
    conversions a page made it a twentieth of the parse worker's own CPU)."""
    layout = _LAYOUTS.get(cls)
    if layout is None:
        layout = _LAYOUTS[cls] = tuple((f.name, _PARTS.get(f.name)) for f in dataclasses.fields(cls))
    return layout


_LAYOUTS: dict[type, tuple[tuple[str, type | None], ...]] = {}
_NAMES: dict[type, frozenset[str]] = {}


def _flat(record: Any) -> Iterator[tuple[str, Any]]:
    for name, part in _layout(type(record)):
        value = getattr(record, name)
        if part is not None:
            yield from _flat(value)
        else:
            yield name, value


def _names(cls: type) -> frozenset[str]:
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = frozenset().union(
            *(_names(part) if part is not None else {name} for name, part in _layout(cls)))
    return names


def _assemble(cls: Any, values: dict[str, Any]) -> Any:
    """The record of class ``cls``, each part built from its own fields' values."""
    kwargs = {name: _assemble(part, values) if part is not None else values[name]
              for name, part in _layout(cls) if part is not None or name in values}
    return cls(**kwargs)


def _build(cls: type[_R], data: Any) -> _R:
    if not isinstance(data, dict):
        raise MessageError(f"record must be an object, not {type(data).__name__}")
    unknown = set(data) - _names(cls)
    if unknown:
        raise MessageError(f"unknown record fields: {sorted(unknown)[:5]}")
    values: dict[str, Any] = {}
    for name, value in data.items():
        check = _CHECKS[name]
        try:
            values[name] = check(value)
        except (TypeError, ValueError) as exc:
            raise MessageError(f"bad record field {name!r}: {exc}") from None
    if "url" not in values:
        raise MessageError("record without url")
    record: _R = _assemble(cls, values)
    return record


def _url(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError("a URL must be a non-empty string")
    if len(value) > MAX_URL_CHARS:
        raise ValueError(f"URL over {MAX_URL_CHARS} characters")
    if not value.isprintable() or not value.startswith(("http://", "https://")):
        raise ValueError("not a printable http(s) URL")
    return value


def _opt(check: Any) -> Any:
    def inner(value: Any) -> Any:
        return None if value is None else check(value)
    return inner


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("expected an integer")
    if not -(2**53) <= value <= 2**53:
        raise ValueError("integer out of range")
    return value


def _count(value: Any) -> int:
    n = _int(value)
    if n < 0:
        raise ValueError("expected a count")
    return n


def _float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TypeError("expected a finite number")
    return float(value)


def _text(value: Any) -> str:
    """Free text of a record (titles, errors): bounded, no line breaks or controls."""
    if not isinstance(value, str):
        raise TypeError("expected a string")
    text = value
    if not text.isprintable():
        text = "".join(ch if ch.isprintable() else " " for ch in text)
    return text[:MAX_TEXT_FIELD_CHARS]


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError("expected true or false")
    return value


def _truncated(value: Any) -> bool | str:
    return value if isinstance(value, bool) else _text(value)


def _error_kind(value: Any) -> ErrorKind:
    try:
        return ErrorKind(value)
    except ValueError:
        raise ValueError(f"unknown error kind {value!r}") from None


def _kind(value: Any) -> EntryKind:
    if value not in _KIND_BY_LABEL:
        raise ValueError(f"unknown kind {value!r}")
    return _KIND_BY_LABEL[value]


def _headers(value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or len(value) > 64:
        raise TypeError("headers must be a small object")
    return {_text(k).lower(): _text(v) for k, v in value.items()}


def _body(value: Any) -> BodyRef:
    if not isinstance(value, list) or len(value) != 2:
        raise TypeError("body must be [offset, length]")
    return BodyRef(_count(value[0]), _count(value[1]))


def _urls(value: Any) -> list[str]:
    if not isinstance(value, list) or len(value) > MAX_LIST_ITEMS:
        raise TypeError("expected a bounded list of URLs")
    return [_url(v) for v in value]


def _raw_urls(value: Any) -> list[str]:
    """URLs as a document gave them (normalized by the enqueue stage's URL gate)."""
    if not isinstance(value, list) or len(value) > MAX_LIST_ITEMS:
        raise TypeError("expected a bounded list of URLs")
    return [_text(v) for v in value]


def _sitemap_urls(value: Any) -> list[SitemapUrl]:
    if not isinstance(value, list) or len(value) > MAX_LIST_ITEMS:
        raise TypeError("expected a bounded list of sitemap entries")
    out = []
    for item in value:
        if not isinstance(item, list) or len(item) != 3:
            raise TypeError("sitemap entry must be [url, priority, lastmod]")
        out.append(SitemapUrl(_text(item[0]), _opt(_float)(item[1]), _opt(_text)(item[2])))
    return out


_CHECKS: dict[str, Any] = {
    "url": _url, "depth": _count, "hops": _count, "kind": _kind, "status": _opt(_int),
    "error_kind": _opt(_error_kind), "error": _opt(_text), "fetched_at": _text, "final_url": _opt(_url),
    "content_type": _opt(_text), "bytes": _opt(_count), "fetch_ms": _opt(_float), "ip": _opt(_text),
    "truncated": _truncated, "headers": _headers, "location": _opt(_text), "rendered": _opt(_text),
    "warc_id": _opt(_text), "node": _opt(_text),
    "body": _opt(_body), "title": _opt(_text), "lang": _opt(_text), "fingerprint": _opt(_text),
    "simhash": _opt(_text), "text_chars": _opt(_count), "modified": _opt(_text), "n_links": _opt(_count), "canonical": _opt(_url),
    "redirect_to": _opt(_url), "noindex": _bool, "nofollow": _bool, "sitemap": _opt(_text),
    "duplicate_of": _opt(_url), "near_duplicate_of": _opt(_url), "soft_404": _bool, "indexable": _bool,
    "revisit_s": _opt(_float), "links": _urls, "sitemap_urls": _sitemap_urls, "sitemaps": _raw_urls,
}
