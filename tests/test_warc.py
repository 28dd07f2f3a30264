"""The WARC writer: records that warcio reads back byte for byte and `warcio check` accepts,
the payload and headers as received, each record its own gzip member."""
from __future__ import annotations

import gzip
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from crawler_tasks.fetch.http import FetchResult
from crawler_tasks.output.warc import IDENTICAL_PAYLOAD_PROFILE, WarcStore, warc_date, warc_digest

BODY = "<html><body><p>caf\u00e9 \u2014 \u65e5\u672c</p></body></html>".encode() * 50


def result(url: str = "http://a.test/p?q=1", status: int = 200, body: bytes = BODY,
           headers: list[tuple[str, str]] | None = None, **kw: object) -> FetchResult:
    res = FetchResult(url=url, started=1_700_000_000.25, status=status, reason="OK",
                      headers=headers if headers is not None else
                      [("Content-Type", "text/html; charset=utf-8"), ("X-Latin", "caf\xe9"),
                       ("Transfer-Encoding", "chunked")],
                      request_headers=[("Host", "a.test"), ("User-Agent", "bot/1")], body=body, content=body,
                      ip="127.0.0.1", **kw)  # type: ignore[arg-type]
    return res


def records(path: Path) -> list:
    out = []
    with open(path, "rb") as fh:
        for rec in ArchiveIterator(fh):
            out.append((rec.rec_type, rec.rec_headers, rec.http_headers, rec.content_stream().read()))
    return out


def check(path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "warcio.cli", "check", str(path)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.parametrize("level", [0, 1, 3, 6])
def test_exchange_reads_back_as_received(tmp_path: Path, level: int) -> None:
    store = WarcStore(tmp_path, max_bytes=10**9, operator="bot/1 (+http://op.test)", gzip_level=level)
    rid = store.write_exchange(result())
    store.write_exchange(result(status=404, body=b"", truncated="time"))
    store.close()
    path = store.path
    assert path is not None
    check(path)
    recs = records(path)
    assert [r[0] for r in recs] == ["warcinfo", "response", "request", "response", "request"]
    info = recs[0][3].decode()
    assert "http-header-user-agent: bot/1 (+http://op.test)" in info and "WARC File Format 1.1" in info
    _, head, http, payload = recs[1]
    assert payload == BODY and head.get_header("WARC-Record-ID") == rid
    assert head.get_header("WARC-Payload-Digest") == warc_digest(BODY)
    assert head.get_header("WARC-Date") == warc_date(1_700_000_000.25) == "2023-11-14T22:13:20.250000Z"
    assert head.get_header("WARC-IP-Address") == "127.0.0.1"
    assert http.get_statuscode() == "200" and http.get_header("Transfer-Encoding") is None
    # the header bytes as the server sent them (latin-1), not re-encoded
    raw = gzip.decompress(path.read_bytes())
    assert b"X-Latin: caf\xe9\r\n" in raw
    req = recs[2][1]
    assert req.get_header("WARC-Concurrent-To") == rid and recs[1][1].get_header("WARC-Concurrent-To") == \
        req.get_header("WARC-Record-ID")
    assert b"GET /p?q=1 HTTP/1.1\r\nHost: a.test\r\n" in raw
    assert recs[3][1].get_header("WARC-Truncated") == "time"


def test_every_record_is_its_own_gzip_member(tmp_path: Path) -> None:
    store = WarcStore(tmp_path, max_bytes=10**9)
    for i in range(3):
        store.write_exchange(result(url=f"http://a.test/{i}"))
    store.close()
    assert store.path is not None
    data, members = store.path.read_bytes(), 0
    while data:
        d = zlib.decompressobj(31)
        d.decompress(data)
        assert d.eof
        data, members = d.unused_data, members + 1
    assert members == 1 + 3 * 2


def test_revisits_metadata_and_conversion(tmp_path: Path) -> None:
    store = WarcStore(tmp_path, max_bytes=10**9)
    first = store.write_exchange(result(url="http://a.test/a"))
    store.write_exchange(result(url="http://a.test/b"), duplicate_of=("http://a.test/a", "2023-11-14T22:13:20Z"))
    store.write_exchange(result(status=304, body=b""))
    store.write_metadata("http://a.test/a", first, ["http://a.test/x", "http://a.test/\u00e9"], "2023-11-14T22:13:21Z")
    conv = store.write_conversion("http://a.test/a", first, b"<html>rendered</html>", "2023-11-14T22:13:22Z")
    store.close()
    assert store.path is not None
    check(store.path)
    recs = records(store.path)
    kinds = [r[0] for r in recs]
    assert kinds == ["warcinfo", "response", "request", "revisit", "request", "revisit", "request", "metadata",
                     "conversion"]
    dup = recs[3][1]
    assert dup.get_header("WARC-Profile") == IDENTICAL_PAYLOAD_PROFILE
    assert dup.get_header("WARC-Refers-To-Target-URI") == "http://a.test/a"
    assert dup.get_header("WARC-Payload-Digest") == warc_digest(BODY) and recs[3][3] == b""
    assert recs[5][1].get_header("WARC-Profile").endswith("server-not-modified")
    meta = recs[7]
    assert meta[1].get_header("WARC-Concurrent-To") == first
    assert meta[3].decode() == "outlink: http://a.test/x L a/@href\r\noutlink: http://a.test/\u00e9 L a/@href\r\n"
    assert recs[8][1].get_header("WARC-Record-ID") == conv and recs[8][1].get_header("WARC-Refers-To") == first
    assert recs[8][3] == b"<html>rendered</html>"


def test_no_response_no_record(tmp_path: Path) -> None:
    store = WarcStore(tmp_path, max_bytes=10**9)
    assert store.write_exchange(FetchResult(url="http://a.test/", started=0.0, error_kind="dns")) is None
    store.close()
    assert store.path is None
