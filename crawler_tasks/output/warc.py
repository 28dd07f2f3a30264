"""Raw exchanges in WARC files.

- ``OUT/warc/<prefix>-<UTC time>-<machine>-<pid>-<serial>.warc.gz``: one writer per
  process (no locking between processes), a ``warcinfo`` record first, then a
  ``request`` and a ``response`` record per fetch (a ``revisit`` record for a 304 to
  our conditional GET, profile server-not-modified, and for a payload byte-identical to
  an earlier capture, profile identical-payload-digest); parse workers add ``metadata``
  records with each page's outlinks to their own files; rotated past WARC_MAX_BYTES.
  The response payload is stored as transferred (content coding kept, chunking
  removed), so digests match what the server sent.

Policy: a storage failure (disk full...) is raised: losing output silently is worse
than a visible failure, and the batch is retried by Celery.
"""
from __future__ import annotations

import base64
import hashlib
import io
import os
import socket
import threading
import zlib
from datetime import UTC, datetime
from pathlib import Path

from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from crawler_tasks import __version__
from crawler_tasks.fetch.http import FetchResult

_HOP_BY_HOP = {"transfer-encoding"}
NOT_MODIFIED_PROFILE = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
IDENTICAL_PAYLOAD_PROFILE = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"


def payload_digest(body: bytes) -> str:
    """WARC-Payload-Digest as warcio writes it (sha1, base32)."""
    return "sha1:" + base64.b32encode(hashlib.sha1(body).digest()).decode("ascii")


def warc_date(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class WarcStore:
    """Rotating WARC/1.1 writer for one process; thread-safe."""

    def __init__(self, out_dir: str | os.PathLike, max_bytes: int, prefix: str = "crawl",
                 operator: str = "", gzip_level: int = 1) -> None:
        self.gzip_level = gzip_level
        self.dir = Path(out_dir) / "warc"
        self.max_bytes = max_bytes
        self.prefix = prefix
        self.operator = operator
        self._lock = threading.Lock()
        self._file: io.BufferedWriter | None = None
        self._writer: WARCWriter | None = None
        self._serial = 0
        self._buffer = io.BytesIO()
        self.path: Path | None = None

    def _open(self) -> WARCWriter:
        if self._writer is not None and self._file is not None and self._file.tell() < self.max_bytes:
            return self._writer
        self.close()
        self.dir.mkdir(parents=True, exist_ok=True)
        stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S")
        self._serial += 1
        name = f"{self.prefix}-{stamp}-{socket.gethostname()}-{os.getpid()}-{self._serial:05d}.warc.gz"
        self.path = self.dir / name
        self._file = open(self.path, "wb")
        self._writer = WARCWriter(self._buffer, gzip=False, warc_version="WARC/1.1")
        info = {"software": f"crawler_tasks/{__version__} (warcio)", "format": "WARC File Format 1.1",
                "hostname": socket.gethostname()}
        if self.operator:
            info["http-header-user-agent"] = self.operator
        self._write(self._writer.create_warcinfo_record(name, info))
        return self._writer

    def _write(self, record: object) -> None:
        """One record, one gzip member (readers can seek to any record). We compress
        ourselves at ``gzip_level``: warcio's fixed level 9 costs several times the CPU."""
        assert self._writer is not None and self._file is not None
        self._buffer.seek(0)
        self._buffer.truncate()
        self._writer.write_record(record)
        comp = zlib.compressobj(self.gzip_level, zlib.DEFLATED, 31)
        self._file.write(comp.compress(self._buffer.getbuffer()) + comp.flush())

    def write_exchange(self, res: FetchResult, duplicate_of: tuple[str, str] | None = None) -> str | None:
        """Write request + response records of one fetch; returns the response record's
        WARC-Record-ID, or None when there was no HTTP response to record.

        ``duplicate_of`` (url, WARC date of the first capture with the same payload
        digest) turns the response into a ``revisit`` record without payload."""
        if res.status is None:
            return None
        with self._lock:
            writer = self._open()
            date = warc_date(res.started)
            parts = res.url.split("/", 3)
            target = "/" + (parts[3] if len(parts) > 3 else "")
            req_headers = StatusAndHeaders(f"GET {target} HTTP/1.1", res.request_headers,
                                           is_http_request=True)
            req = writer.create_warc_record(res.url, "request", http_headers=req_headers,
                                            warc_headers_dict={"WARC-Date": date})
            headers = [(k, v) for k, v in res.headers if k.lower() not in _HOP_BY_HOP]
            resp_headers = StatusAndHeaders(f"{res.status} {res.reason}".strip(), headers,
                                            protocol="HTTP/1.1")
            extra = {"WARC-Date": date, "WARC-Concurrent-To": req.rec_headers.get_header("WARC-Record-ID")}
            if res.ip:
                extra["WARC-IP-Address"] = res.ip
            if res.truncated:
                extra["WARC-Truncated"] = res.truncated if res.truncated in ("time", "disconnect") else "length"
            if res.status == 304:  # our conditional GET: nothing changed, no payload
                extra.update({"WARC-Profile": NOT_MODIFIED_PROFILE, "WARC-Refers-To-Target-URI": res.url})
                resp = writer.create_warc_record(res.url, "revisit", http_headers=resp_headers,
                                                 warc_headers_dict=extra)
            elif duplicate_of is not None:  # same payload as an earlier capture: headers only
                extra.update({"WARC-Profile": IDENTICAL_PAYLOAD_PROFILE, "WARC-Refers-To-Target-URI": duplicate_of[0],
                              "WARC-Refers-To-Date": duplicate_of[1], "WARC-Payload-Digest": payload_digest(res.body)})
                resp = writer.create_warc_record(res.url, "revisit", http_headers=resp_headers,
                                                 warc_headers_dict=extra)
            else:
                resp = writer.create_warc_record(res.url, "response", payload=io.BytesIO(res.body),
                                                 length=len(res.body), http_headers=resp_headers,
                                                 warc_headers_dict=extra)
            self._write(resp)
            self._write(req)
            return resp.rec_headers.get_header("WARC-Record-ID")

    def write_metadata(self, url: str, refers_to: str | None, outlinks: list[str], date: str) -> None:
        """A ``metadata`` record with the page's outlinks (Heritrix's ``outlink:`` lines)."""
        body = "".join(f"outlink: {link} L a/@href\r\n" for link in outlinks).encode("utf-8", "replace")
        self._write_derived(url, "metadata", body, "application/warc-fields", date,
                            {"WARC-Concurrent-To": refers_to} if refers_to else {})

    def write_conversion(self, url: str, refers_to: str | None, html: bytes, date: str) -> str:
        """A ``conversion`` record: the page's DOM after its scripts ran (rendered), linked
        to the response it came from. Returns its record id."""
        return self._write_derived(url, "conversion", html, "text/html; charset=utf-8", date,
                                   {"WARC-Refers-To": refers_to} if refers_to else {})

    def _write_derived(self, url: str, kind: str, body: bytes, content_type: str, date: str,
                       links: dict[str, str]) -> str:
        """A record derived from a response (``links`` names it); returns its id."""
        with self._lock:
            writer = self._open()
            record = writer.create_warc_record(url, kind, payload=io.BytesIO(body), length=len(body),
                                               warc_content_type=content_type,
                                               warc_headers_dict={"WARC-Date": date, **links})
            self._write(record)
            return str(record.rec_headers.get_header("WARC-Record-ID"))

    def flush(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        self._file = None
        self._writer = None
