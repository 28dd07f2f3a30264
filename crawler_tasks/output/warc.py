"""Raw exchanges in WARC files.

- ``OUT/warc/<prefix>-<UTC time>-<machine>-<pid>-<serial>.warc.gz``: one writer per
  process (no locking between processes), a ``warcinfo`` record first, then a
  ``request`` and a ``response`` record per fetch (a ``revisit`` record for a 304 to
  our conditional GET, profile server-not-modified, and for a payload byte-identical to
  an earlier capture, profile identical-payload-digest); parse workers add ``metadata``
  records with each page's outlinks to their own files; rotated past WARC_MAX_BYTES.
  The response payload is stored as transferred (content coding kept, chunking
  removed), so digests match what the server sent; HTTP headers are stored as the
  bytes received (latin-1).
- Records are serialized here (WARC/1.1, each its own gzip member so readers can seek
  to any record) and compressed with ISA-L at levels 0-3 (zlib above): writing is most
  of a fetch worker's CPU, and ISA-L's level 1 takes a quarter of zlib's time for a
  slightly smaller file. Each digest is one hashlib call over the whole block.

Policy: records wait in memory (``pending``) until ``flush`` or WRITE_AT_BYTES; a
write that fails (disk full...) is cut back to the file's last whole record and its
records stay pending, so a file never holds a torn record in its middle (resume would
cut every record after it) and a flush made again writes each record once. ``flush``
raises the failure: losing output silently is worse than a visible failure.
"""
from __future__ import annotations

import atexit
import base64
import contextlib
import hashlib
import json
import os
import random
import socket
import threading
import time
import uuid
import zlib
from datetime import UTC, datetime
from pathlib import Path

from isal import isal_zlib

from crawler_tasks import __version__
from crawler_tasks.fetch.http import FetchResult
from crawler_tasks.output.jsonl import JOB_FILE

_HOP_BY_HOP = {"transfer-encoding"}
NOT_MODIFIED_PROFILE = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
IDENTICAL_PAYLOAD_PROFILE = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
_ISAL_MAX_LEVEL = 3
# Pending records are written once they reach this size (and at every flush).
WRITE_AT_BYTES = 1 << 20
# Pending records a failing disk may hold back before a record write fails too.
MAX_PENDING_BYTES = 64 << 20


# Calls that let go of the GIL hand it to another of the fetch worker's hundreds of threads
# (a futex round and a context switch: 50-70 of them a page were half its CPU), so each
# record takes as few as it can: ``hashlib.sha1()`` lets go of it to look the algorithm up
# (a copy does not), ``uuid4`` to read the kernel's random bytes, and every ``compress``
# call of a compressor to deflate.
_SHA1 = hashlib.sha1()


def warc_digest(data: bytes) -> str:
    """A WARC-Payload-Digest or WARC-Block-Digest (sha1, base32, as warcio and Heritrix
    write them)."""
    h = _SHA1.copy()
    h.update(data)
    return "sha1:" + base64.b32encode(h.digest()).decode("ascii")


def warc_date(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _record_id() -> str:
    """A random (version 4) UUID from the process's generator, which ``random`` seeds from
    the kernel at start and again in each forked child."""
    return f"<urn:uuid:{uuid.UUID(int=random.getrandbits(128), version=4)}>"


def _http_block(start_line: str, headers: list[tuple[str, str]]) -> bytes:
    """An HTTP message head as bytes: our client decoded the received bytes as latin-1."""
    lines = [start_line, *(f"{name}: {value}" for name, value in headers), "", ""]
    return "\r\n".join(lines).encode("latin-1", "replace")


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
        self._fd: int | None = None
        self._size = 0                 # bytes of whole records in the open file
        self._pending = bytearray()    # records not written yet
        self._serial = 0
        self.path: Path | None = None
        atexit.register(self._at_exit)

    def _at_exit(self) -> None:
        """A worker that exits writes what it holds (as its buffered file did)."""
        with contextlib.suppress(OSError):
            self.close()

    def _open(self) -> None:
        if self._fd is not None and self._size + len(self._pending) < self.max_bytes:
            return
        self._close()
        self.dir.mkdir(parents=True, exist_ok=True)
        stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S")
        self._serial += 1
        name = f"{self.prefix}-{stamp}-{socket.gethostname()}-{os.getpid()}-{self._serial:05d}.warc.gz"
        self.path = self.dir / name
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self._size = 0
        fields = [("software", f"crawler_tasks/{__version__}"), ("format", "WARC File Format 1.1"),
                  ("hostname", socket.gethostname())]
        if self.operator:
            fields.append(("http-header-user-agent", self.operator))
        job = self._job()
        if job:
            fields.append(("crawl-job", job))
        block = "".join(f"{k}: {v}\r\n" for k, v in fields).encode("utf-8", "replace")
        self._append(self._member("warcinfo", None, block, [("WARC-Date", warc_date(time.time())),
                                                            ("WARC-Filename", name),
                                                            ("Content-Type", "application/warc-fields")],
                                  _record_id()))

    def _job(self) -> str:
        """The crawl's effective job (OUT/job.toml, ops/job.py) as one line of JSON (a
        warc-fields value is one line), "" without one: each WARC file says what ran."""
        try:
            text = (self.dir.parent / JOB_FILE).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return ""
        return json.dumps(text, ensure_ascii=False)

    def _member(self, kind: str, url: str | None, block: bytes, headers: list[tuple[str, str]],
                record_id: str, digest: str | None = None) -> bytes:
        """One record as one gzip member. ``digest`` is the WARC-Payload-Digest of records
        about an HTTP payload. Made outside the lock: the digests and the compression are
        most of a record's cost, and the fetch threads of a process waited for each other
        there."""
        lines = ["WARC/1.1", f"WARC-Type: {kind}", f"WARC-Record-ID: {record_id}"]
        if url is not None:
            lines.append(f"WARC-Target-URI: {url}")
        lines += [f"{name}: {value}" for name, value in headers]
        if digest is not None:
            lines.append(f"WARC-Payload-Digest: {digest}")
        lines += [f"WARC-Block-Digest: {warc_digest(block)}", f"Content-Length: {len(block)}", "", ""]
        head = "\r\n".join(lines).encode("utf-8", "replace")
        record = b"".join((head, block, b"\r\n\r\n"))
        level = self.gzip_level
        if level <= _ISAL_MAX_LEVEL:
            return isal_zlib.compress(record, level, 31)
        return zlib.compress(record, level, 31)

    def _append(self, *members: bytes) -> None:
        """Under the lock, after ``_open``: the records go to the file together."""
        if len(self._pending) >= MAX_PENDING_BYTES:
            self._write_pending()   # a disk that keeps failing: the caller hears of it
        for member in members:
            self._pending += member
        if len(self._pending) >= WRITE_AT_BYTES:
            try:
                self._write_pending()
            except OSError:
                pass   # kept pending: the next flush writes them, or says why it cannot

    def _write_pending(self) -> None:
        """Append the pending records whole, or cut the file back to its last whole record
        (keeping them pending) and raise."""
        if self._fd is None or not self._pending:
            return
        view = memoryview(self._pending)
        try:
            while view:
                view = view[os.write(self._fd, view):]
        except BaseException:
            os.ftruncate(self._fd, self._size)   # a shorter file needs no new block: works on a full disk
            raise
        finally:
            view.release()
        self._size += len(self._pending)
        self._pending.clear()

    def write_exchange(self, res: FetchResult, duplicate_of: tuple[str, str] | None = None,
                       digest: str | None = None) -> str | None:
        """Write request + response records of one fetch; returns the response record's
        WARC-Record-ID, or None when there was no HTTP response to record.

        ``duplicate_of`` (url, WARC date of the first capture with the same payload
        digest) turns the response into a ``revisit`` record without payload;
        ``digest`` is the body's ``warc_digest`` when the caller has it already."""
        if res.status is None:
            return None
        date = warc_date(res.started)
        parts = res.url.split("/", 3)
        target = "/" + (parts[3] if len(parts) > 3 else "")
        request_id, response_id = _record_id(), _record_id()
        headers = [(k, v) for k, v in res.headers if k.lower() not in _HOP_BY_HOP]
        http_head = _http_block(f"HTTP/1.1 {res.status} {res.reason}".rstrip(), headers)
        extra = [("WARC-Date", date), ("WARC-Concurrent-To", request_id)]
        if res.status != 304:
            digest = digest or warc_digest(res.body)
        if res.ip:
            extra.append(("WARC-IP-Address", res.ip))
        if res.truncated:
            extra.append(("WARC-Truncated", res.truncated if res.truncated in ("time", "disconnect") else "length"))
        if res.status == 304:  # our conditional GET: nothing changed, no payload
            extra += [("WARC-Profile", NOT_MODIFIED_PROFILE), ("WARC-Refers-To-Target-URI", res.url),
                      ("Content-Type", "application/http; msgtype=response")]
            response = self._member("revisit", res.url, http_head, extra, response_id)
        elif duplicate_of is not None:  # same payload as an earlier capture: headers only
            extra += [("WARC-Profile", IDENTICAL_PAYLOAD_PROFILE), ("WARC-Refers-To-Target-URI", duplicate_of[0]),
                      ("WARC-Refers-To-Date", duplicate_of[1]),
                      ("Content-Type", "application/http; msgtype=response")]
            response = self._member("revisit", res.url, http_head, extra, response_id, digest=digest)
        else:
            extra.append(("Content-Type", "application/http; msgtype=response"))
            response = self._member("response", res.url, http_head + res.body, extra, response_id, digest=digest)
        request = self._member("request", res.url, _http_block(f"GET {target} HTTP/1.1", res.request_headers),
                               [("WARC-Date", date), ("WARC-Concurrent-To", response_id),
                                ("Content-Type", "application/http; msgtype=request")], request_id)
        with self._lock:
            self._open()
            self._append(response, request)
        return response_id

    def write_metadata(self, url: str, refers_to: str | None, outlinks: list[str], date: str) -> None:
        """A ``metadata`` record with the page's outlinks (Heritrix's ``outlink:`` lines)."""
        body = "".join(f"outlink: {link} L a/@href\r\n" for link in outlinks).encode("utf-8", "replace")
        self._write_derived(url, "metadata", body, "application/warc-fields", date,
                            [("WARC-Concurrent-To", refers_to)] if refers_to else [])

    def write_conversion(self, url: str, refers_to: str | None, html: bytes, date: str) -> str:
        """A ``conversion`` record: the page's DOM after its scripts ran (rendered), linked
        to the response it came from. Returns its record id."""
        return self._write_derived(url, "conversion", html, "text/html; charset=utf-8", date,
                                   [("WARC-Refers-To", refers_to)] if refers_to else [])

    def write_dns(self, name: str, addresses: tuple[str, ...], ttl_s: float, when: float) -> str:
        """A lookup's answer as Heritrix archives it: a ``response`` record for ``dns:name``,
        ``text/dns``, a 14-digit timestamp line then one line per address record. Returns its id."""
        stamp = time.strftime("%Y%m%d%H%M%S", time.gmtime(when))
        lines = [f"{name}.\t{int(ttl_s)}\tIN\t{'AAAA' if ':' in a else 'A'}\t{a}" for a in addresses]
        body = "\n".join([stamp, *lines, ""]).encode("ascii", "replace")
        return self._write_derived(f"dns:{name}", "response", body, "text/dns", warc_date(when), [])

    def _write_derived(self, url: str, kind: str, body: bytes, content_type: str, date: str,
                       links: list[tuple[str, str]]) -> str:
        """A record of its own about ``url`` (``links`` names the response it comes from);
        returns its id."""
        record_id = _record_id()
        member = self._member(kind, url, body, [("WARC-Date", date), *links, ("Content-Type", content_type)], record_id)
        with self._lock:
            self._open()
            self._append(member)
        return record_id

    def flush(self) -> None:
        """Write every pending record (OSError when the disk refuses: they stay pending)."""
        with self._lock:
            self._write_pending()

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        if self._fd is not None:
            self._write_pending()
            os.close(self._fd)
        self._fd = None
