"""HTTP response values and the request record, shared by the server and the routing.

Responses are pre-rendered once (status line and headers as bytes) and the
server adds only the Connection line, so serving a route is a dict lookup.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from http import HTTPStatus

HTML_CT = "text/html; charset=utf-8"

# A response: (status, head without the Connection line and blank line, body,
# Connection value forced by the route or None).
Resp = tuple[int, bytes, bytes, str | None]


@dataclass(slots=True)
class RequestRecord:
    """One request as the server saw it; the evidence for politeness checks."""

    host: str  # the host served, as in TestWeb.hosts ("127.0.0.5:41234", "h3.web.test:41234");
    #            for a misdirected request (421) the Host header as sent
    path: str  # raw request target (path + query)
    method: str
    status: int  # status sent (or that would have been sent if the peer left)
    start: float  # time.time() when the bytes carrying the request were read
    end: float  # time.time() at the final write of the response (or when the peer left)
    conn_id: int  # distinct per TCP connection
    user_agent: str
    headers: dict[str, str]  # request headers, names lower-cased
    host_index: int = -1  # index of the host served; -1 when none (misdirected, or unknown yet)


@dataclass(slots=True)
class ConnRecord:
    """One TCP connection as the server saw it: the evidence for "one connection per host"
    (and, with hosts sharing addresses, per address)."""

    host: str  # as in RequestRecord: the host it served (its first, if several); "" while not
    #            known (a shared address learns it from SNI or the first request's Host)
    conn_id: int  # as in RequestRecord
    opened: float  # time.time() at accept
    closed: float  # time.time() at close (0.0 while open)
    address: str = ""  # "127.0.0.5:41234": address:port of the listening socket it reached
    tls: str = ""  # TLS version once the handshake is done ("TLSv1.3"); "" for plain HTTP
    resumed: bool = False  # the TLS handshake resumed an earlier session (a ticket)
    tls_error: str = ""  # why the handshake failed (OpenSSL's reason, e.g. the client's alert)


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


def make_resp(status: int, headers: Iterable[tuple[str, str]], body: bytes) -> Resp:
    """Pre-render a response head; Content-Length/Connection added only if absent."""
    lines = [f"HTTP/1.1 {status} {_reason(status)}", "Server: testweb"]
    forced_conn: str | None = None
    has_len = False
    for name, value in headers:
        low = name.lower()
        if low == "connection":
            forced_conn = value
            continue
        if low in ("content-length", "transfer-encoding"):
            has_len = True
        lines.append(f"{name}: {value}")
    if not has_len and status not in (204, 304) and status >= 200:
        lines.append(f"Content-Length: {len(body)}")
    head = ("\r\n".join(lines) + "\r\n").encode("latin-1")
    return (status, head, body, forced_conn)


def head_fields(head: bytes) -> dict[str, str]:
    """Header fields of a pre-rendered head, names lower-cased."""
    fields: dict[str, str] = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, sep, value = line.partition(":")
        if sep:
            fields[name.strip().lower()] = value.strip()
    return fields


def error_resp(status: int, headers: Iterable[tuple[str, str]] = ()) -> Resp:
    """A small HTML error page."""
    body = f"<html><body><h1>{status} {_reason(status)}</h1></body></html>\n".encode()
    return make_resp(status, [("Content-Type", HTML_CT), *headers], body)


NOT_FOUND = make_resp(404, [("Content-Type", HTML_CT)], (
    b"<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head>"
    b"<body><h1>Not Found</h1><p>No such page.</p></body></html>\n"
))
