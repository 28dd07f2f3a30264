"""HTTP fetching with hard limits, over urllib3 keep-alive pools, one connection per host.

Policy: a fetch never raises for anything the server or the network does; the
result carries ``error`` and ``error_kind`` instead. What we connect to is the
address we resolved and checked (DNS cache + private-address refusal): the pool
dials the IP and sends the host name in ``Host`` and TLS SNI, so the HTTP library
does no second lookup. Redirects are not followed here; the 3xx and its
``Location`` are returned, and the caller enqueues the target like a link.

Limits: connect and read timeouts, a total deadline checked between reads (so a
slow-drip server costs at most TOTAL_TIMEOUT_S + READ_TIMEOUT_S), a raw body cap
(``truncated="length"``), a cap on the decoded size of gzip/deflate bodies
(``truncated="decoded-length"``), and urllib3's header line/count limits.
"""
from __future__ import annotations

import threading
import time
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import certifi
import urllib3
from urllib3.exceptions import (
    ConnectTimeoutError,
    HTTPError,
    LocationParseError,
    NewConnectionError,
    ProtocolError,
    ReadTimeoutError,
    SSLError,
)

from crawler_tasks.fetch.netsafety import AddressRefused, DnsCache, ResolveError, check_address, parse_resolve_overrides
from crawler_tasks.settings import Settings

ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,text/plain;q=0.8,*/*;q=0.5"
READ_CHUNK = 64 * 1024
MAX_POOLS = 2048


@dataclass(slots=True)
class FetchResult:
    url: str
    started: float                       # epoch seconds
    ended: float = 0.0
    status: int | None = None
    reason: str = ""
    headers: list[tuple[str, str]] = field(default_factory=list)   # as received
    request_headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""                    # raw payload as transferred (content-coded), capped
    content: bytes = b""                 # decoded payload (gzip/deflate removed), capped
    truncated: str | None = None         # "length" | "time" | "decoded-length"
    ip: str | None = None
    error: str | None = None
    error_kind: str | None = None

    @property
    def duration_s(self) -> float:
        return max(0.0, self.ended - self.started)

    def header(self, name: str) -> str | None:
        name = name.lower()
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None

    @property
    def content_type(self) -> str:
        return (self.header("content-type") or "").strip()

    @property
    def location(self) -> str | None:
        return self.header("location") if self.status and 300 <= self.status < 400 else None


class Fetcher:
    """One per worker process; thread-safe as long as one host is fetched by one thread."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.dns = DnsCache(overrides=parse_resolve_overrides(settings.RESOLVE))
        self._pools: OrderedDict[tuple, urllib3.HTTPConnectionPool] = OrderedDict()
        self._lock = threading.Lock()
        self.timeout = urllib3.Timeout(connect=settings.CONNECT_TIMEOUT_S, read=settings.READ_TIMEOUT_S)

    def _pool(self, scheme: str, host: str, port: int, ip: str) -> urllib3.HTTPConnectionPool:
        key = (scheme, host, port, ip)
        with self._lock:
            pool = self._pools.get(key)
            if pool is not None:
                self._pools.move_to_end(key)
                return pool
            common = dict(maxsize=1, block=False, timeout=self.timeout, retries=False)
            if scheme == "https":
                pool = urllib3.HTTPSConnectionPool(
                    ip, port, server_hostname=host, assert_hostname=host,
                    cert_reqs="CERT_REQUIRED", ca_certs=certifi.where(), **common)
            else:
                pool = urllib3.HTTPConnectionPool(ip, port, **common)
            self._pools[key] = pool
            while len(self._pools) > MAX_POOLS:
                _, old = self._pools.popitem(last=False)
                old.close()
            return pool

    def close(self) -> None:
        with self._lock:
            for pool in self._pools.values():
                pool.close()
            self._pools.clear()

    def check_host(self, host: str) -> str:
        """Resolve and vet a host before anything is sent to it; returns the address.
        Raises AddressRefused (private target) or ResolveError (DNS)."""
        ip = self.dns.resolve(host)
        check_address(ip, self.settings.ALLOW_PRIVATE, self.settings.ALLOW_METADATA_ADDRESSES)
        return ip

    def fetch(self, url: str, extra_headers: dict[str, str] | None = None,
              max_body_bytes: int | None = None, max_decoded_bytes: int | None = None) -> FetchResult:
        """GET one URL under every limit; never raises for network or server faults."""
        s = self.settings
        result = FetchResult(url=url, started=time.time())
        try:
            parts = urlsplit(url)
            scheme = parts.scheme.lower()
            host = parts.hostname or ""
            if scheme not in ("http", "https") or not host:
                raise LocationParseError(url)
            port = parts.port or (443 if scheme == "https" else 80)
            if len(url) > s.MAX_URL_LENGTH:
                return self._fail(result, "url_too_long", f"URL longer than {s.MAX_URL_LENGTH} characters")
            result.ip = ip = self.check_host(host)
            default_port = (scheme == "http" and port == 80) or (scheme == "https" and port == 443)
            host_header = parts.netloc.rsplit("@", 1)[-1] if not default_port else (
                f"[{host}]" if ":" in host else host)
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            headers = {"Host": host_header, "User-Agent": s.USER_AGENT, "Accept": ACCEPT,
                       "Accept-Encoding": "gzip, deflate", "Connection": "keep-alive"}
            if extra_headers:
                headers.update(extra_headers)
            result.request_headers = list(headers.items())
            pool = self._pool(scheme, host, port, ip)
            resp = pool.urlopen("GET", target, headers=headers, redirect=False, retries=False,
                                preload_content=False, decode_content=False, assert_same_host=False,
                                release_conn=False)
            try:
                self._read(resp, result, max_body_bytes or s.MAX_BODY_BYTES,
                           max_decoded_bytes or s.MAX_DECODED_BYTES)
            finally:
                if result.truncated or result.error:
                    resp.close()  # unread bytes: the connection cannot be reused
                resp.release_conn()
        except AddressRefused as exc:
            self._fail(result, "refused", exc.reason)
        except ResolveError as exc:
            self._fail(result, "dns", exc.reason)
        except NewConnectionError as exc:  # before its base class ConnectTimeoutError
            self._fail(result, "connect", str(exc))
        except (ConnectTimeoutError, ReadTimeoutError, TimeoutError) as exc:
            self._fail(result, "timeout", str(exc))
        except SSLError as exc:
            self._fail(result, "tls", str(exc))
        except (ValueError, LocationParseError) as exc:
            self._fail(result, "bad_url", f"cannot fetch {url!r}: {exc}")
        except (ProtocolError, HTTPError, OSError) as exc:
            self._fail(result, "protocol", f"{type(exc).__name__}: {exc}")
        result.ended = time.time()
        return result

    def _read(self, resp: urllib3.BaseHTTPResponse, result: FetchResult, cap: int, decoded_cap: int) -> None:
        s = self.settings
        result.status = resp.status
        result.reason = resp.reason or ""
        result.headers = list(resp.headers.items())
        header_bytes = sum(len(k) + len(v) + 4 for k, v in result.headers)
        if header_bytes > s.MAX_HEADER_BYTES:
            self._fail(result, "headers_too_large", f"response headers of {header_bytes} bytes")
            return
        deadline = result.started + s.TOTAL_TIMEOUT_S
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = resp.read1(READ_CHUNK)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size >= cap:
                result.truncated = "length"
                break
            if time.time() > deadline:
                result.truncated = "time"
                break
        body = b"".join(chunks)
        if len(body) > cap:
            body = body[:cap]
        result.body = body
        result.content, decoded_truncated = decode_body(body, result.header("content-encoding"), decoded_cap)
        if decoded_truncated and not result.truncated:
            result.truncated = "decoded-length"

    @staticmethod
    def _fail(result: FetchResult, kind: str, message: str) -> FetchResult:
        result.error_kind = kind
        result.error = message
        result.ended = time.time()
        return result


def decode_body(body: bytes, encoding: str | None, max_bytes: int) -> tuple[bytes, bool]:
    """Undo gzip/deflate content coding with an output cap (gzip bombs).

    Returns (decoded, truncated). Unknown or broken codings give the raw body back,
    which the parser then treats as whatever it is.
    """
    coding = (encoding or "").strip().lower()
    if coding in ("", "identity") or not body:
        return body[:max_bytes], len(body) > max_bytes
    if coding in ("gzip", "x-gzip"):
        wbits_options = (47,)          # gzip or zlib header, auto-detected
    elif coding == "deflate":
        wbits_options = (15, -15)      # zlib-wrapped (RFC) or raw deflate (what IIS sends)
    else:
        return body[:max_bytes], len(body) > max_bytes
    for wbits in wbits_options:
        try:
            d = zlib.decompressobj(wbits)
            out = d.decompress(body, max_bytes)
            return out, bool(d.unconsumed_tail) or len(out) >= max_bytes and not d.eof
        except zlib.error:
            continue
    return body[:max_bytes], len(body) > max_bytes
