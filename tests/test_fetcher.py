"""Fetcher limits and WARC output against a real local HTTP server."""
from __future__ import annotations

import dataclasses
import gzip
import subprocess
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import brotli
import pytest
from warcio.archiveiterator import ArchiveIterator

from crawler_tasks.fetch.http import Fetcher, decode_body
from crawler_tasks.output.jsonl import append_jsonl
from crawler_tasks.output.warc import WarcStore
from crawler_tasks.settings import Settings

BIG = b"x" * (300 * 1024)
PAGE = b"<html><head><title>t</title></head><body>" + b"hello " * 2000 + b"</body></html>"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def _send(self, status, body, headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/page":
            self._send(200, PAGE, [("Content-Type", "text/html; charset=utf-8")])
        elif self.path == "/gzip":
            self._send(200, gzip.compress(PAGE), [("Content-Type", "text/html"), ("Content-Encoding", "gzip")])
        elif self.path == "/bomb":
            body = gzip.compress(b"\0" * (50 * 1024 * 1024))
            self._send(200, body, [("Content-Type", "text/html"), ("Content-Encoding", "gzip")])
        elif self.path == "/big":
            self._send(200, BIG, [("Content-Type", "text/plain")])
        elif self.path == "/cond":
            if self.headers.get("If-None-Match") == '"v1"':
                self._send(304, b"", [("ETag", '"v1"')])
            else:
                self._send(200, PAGE, [("Content-Type", "text/html"), ("ETag", '"v1"')])
        elif self.path == "/redirect":
            self._send(301, b"", [("Location", "/page")])
        elif self.path == "/drip":
            self.send_response(200)
            self.send_header("Content-Length", "100000")
            self.end_headers()
            try:
                for _ in range(100):
                    self.wfile.write(b"x" * 10)
                    self.wfile.flush()
                    time.sleep(0.1)
            except OSError:
                pass
        else:
            self._send(404, b"nope", [("Content-Type", "text/plain")])


@pytest.fixture(scope="module")
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def fetcher():
    f = Fetcher(dataclasses.replace(Settings(), ALLOW_PRIVATE=True, MAX_BODY_BYTES=100 * 1024,
                                    TOTAL_TIMEOUT_S=1.0, READ_TIMEOUT_S=2.0))
    yield f
    f.close()


def test_plain_page_and_keepalive(server, fetcher):
    a = fetcher.fetch(server + "/page")
    b = fetcher.fetch(server + "/page")
    assert a.status == 200 and a.content == PAGE and a.error is None
    assert b.status == 200 and b.ip == "127.0.0.1"
    assert len(fetcher._idle) == 1  # one idle keep-alive connection


def test_gzip_is_decoded_raw_kept(server, fetcher):
    res = fetcher.fetch(server + "/gzip")
    assert res.content == PAGE
    assert res.body[:2] == b"\x1f\x8b"


def test_gzip_bomb_is_capped(server):
    f = Fetcher(dataclasses.replace(Settings(), ALLOW_PRIVATE=True, MAX_DECODED_BYTES=1024 * 1024))
    res = f.fetch(server + "/bomb")
    assert len(res.content) <= 1024 * 1024
    assert res.truncated in ("decoded-length", "length")


def test_body_cap_flags_truncation(server, fetcher):
    res = fetcher.fetch(server + "/big")
    assert res.truncated == "length"
    assert len(res.body) == 100 * 1024
    again = fetcher.fetch(server + "/page")  # the cut connection was not reused wrongly
    assert again.status == 200 and again.content == PAGE


def test_slow_drip_hits_total_deadline(server, fetcher):
    t0 = time.time()
    res = fetcher.fetch(server + "/drip")
    assert res.truncated == "time"
    assert time.time() - t0 < 1.0 + 2.0 + 0.5


def test_redirect_not_followed(server, fetcher):
    res = fetcher.fetch(server + "/redirect")
    assert res.status == 301 and res.location == "/page"


def test_private_address_refused_by_default(server):
    f = Fetcher(Settings())
    res = f.fetch(server + "/page")
    assert res.status is None and res.error_kind == "refused"
    assert "127.0.0.1" in res.error


def test_connection_refused_and_bad_url(fetcher):
    from crawler_tasks.ops.embedded import free_port

    res = fetcher.fetch(f"http://127.0.0.1:{free_port()}/")
    assert res.status is None and res.error_kind in ("connect", "protocol")
    bad = fetcher.fetch("http://[::1/")
    assert bad.error_kind in ("bad_url", "dns")


def test_decode_body_variants():
    raw = zlib.compress(PAGE)
    assert decode_body(raw, "deflate", 10**7) == (PAGE, False)
    co = zlib.compressobj(wbits=-15)
    rawdeflate = co.compress(PAGE) + co.flush()
    assert decode_body(rawdeflate, "deflate", 10**7)[0] == PAGE
    assert decode_body(b"not gzip", "gzip", 100) == (b"not gzip", False)
    assert decode_body(b"abc", "zstd", 2) == (b"ab", True)  # unknown coding: raw, capped
    assert decode_body(b"abc", "br", 10) == (b"abc", False)  # not brotli: raw
    assert decode_body(brotli.compress(PAGE), "br", 10**7) == (PAGE, False)
    assert decode_body(brotli.compress(PAGE), "br", 100) == (PAGE[:100], True)


def test_warc_records_pass_warcio_check(server, fetcher, tmp_path):
    store = WarcStore(tmp_path, max_bytes=10**9)
    for path in ("/page", "/gzip", "/redirect", "/big"):
        store.write_exchange(fetcher.fetch(server + path))
    store.close()
    files = list((tmp_path / "warc").glob("*.warc.gz"))
    assert len(files) == 1
    with open(files[0], "rb") as fh:
        records = [(r.rec_type, r.rec_headers.get_header("WARC-Target-URI"),
                    r.rec_headers.get_header("WARC-Truncated")) for r in ArchiveIterator(fh)]
    assert records[0][0] == "warcinfo"
    assert [r[0] for r in records[1:]] == ["response", "request"] * 4
    assert records[-2][2] == "length"
    check = subprocess.run([sys.executable, "-m", "warcio.cli", "check", str(files[0])],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def test_warc_rotation(server, fetcher, tmp_path):
    store = WarcStore(tmp_path, max_bytes=1000)
    for _ in range(3):
        store.write_exchange(fetcher.fetch(server + "/page"))
    store.close()
    assert len(list((tmp_path / "warc").glob("*.warc.gz"))) == 3


def test_append_jsonl_whole_lines(tmp_path):
    path = tmp_path / "p.jsonl"

    def writer(n):
        for i in range(50):
            append_jsonl(path, [{"w": n, "i": i, "pad": "x" * 5000}])

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    import json

    lines = path.read_text().splitlines()
    assert len(lines) == 200
    assert all(json.loads(line)["pad"] == "x" * 5000 for line in lines)


def test_append_cuts_a_torn_line_left_by_a_killed_writer(tmp_path):
    """A writer killed inside its write() leaves part of a line: the next append cuts it
    off rather than gluing its own first line onto the fragment."""
    path = tmp_path / "p.jsonl"
    path.write_bytes(b'{"i": 0}\n{"i": 1, "pad": "xx')
    append_jsonl(path, [{"i": 1}, {"i": 2}])
    assert path.read_bytes() == b'{"i": 0}\n{"i":1}\n{"i":2}\n'
    path.write_bytes(b'{"no newline at all')
    append_jsonl(path, [{"i": 3}])
    assert path.read_bytes() == b'{"i":3}\n'


def test_conditional_get_304_is_a_revisit_record(server, fetcher, tmp_path):
    first = fetcher.fetch(server + "/cond")
    again = fetcher.fetch(server + "/cond", extra_headers={"If-None-Match": first.header("etag")})
    assert (first.status, again.status, again.content) == (200, 304, b"")
    store = WarcStore(tmp_path, max_bytes=10**9)
    store.write_exchange(first)
    store.write_exchange(again)
    store.close()
    path = next((tmp_path / "warc").glob("*.warc.gz"))
    with open(path, "rb") as fh:
        types = [(r.rec_type, r.rec_headers.get_header("WARC-Profile")) for r in ArchiveIterator(fh)]
    assert ("revisit", "http://netpreserve.org/warc/1.1/revisit/server-not-modified") in types
    check = subprocess.run([sys.executable, "-m", "warcio.cli", "check", str(path)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def test_json_lines_are_utf8_and_survive_a_lone_surrogate(tmp_path):
    import json

    from crawler_tasks.output.jsonl import json_line

    assert json_line({"t": "caf\u00e9 \u65e5", "n": 1}) == '{"t":"caf\u00e9 \u65e5","n":1}'.encode()
    broken = json_line({"t": "a\ud800b", "big": 2**70})
    assert json.loads(broken) == {"t": "a\ud800b", "big": 2**70} and broken.isascii()
    path = tmp_path / "p.jsonl"
    append_jsonl(path, [{"t": "a\ud800b"}, {"t": "ok"}])
    assert [json.loads(line) for line in path.read_text().splitlines()] == [{"t": "a\ud800b"}, {"t": "ok"}]
