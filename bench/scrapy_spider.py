"""The Scrapy side of bench/vs_scrapy.py: follow every same-web link from the seeds.

Run by the benchmark in its own venv (bench/.venv-scrapy), never imported by the
crawler:

    scrapy runspider bench/scrapy_spider.py -a seeds=SEEDS_FILE -a out=RESPONSES_JSONL \
        [-a outputs=DIR] -s DOWNLOAD_DELAY=0.05 -s CLOSESPIDER_PAGECOUNT=5000

"Same web" means a host of the seed file (all hosts of the test web are seeds).
Each response except /robots.txt is written as one JSON line with its receive
time, so the benchmark measures Scrapy's steady rate the way it reads our
pages.jsonl. The settings below are the comparison's rules (one connection per
host, robots.txt obeyed, no autothrottle, no cache); the command line sets the
delay and the page cap; the web-shaped scenario also gives one delay per host
(-s BENCH_SLOTS_FILE=slots.json) and the broad-crawl settings.

``-a outputs=DIR`` makes it the Scrapy that produces our outputs, built as an
operator who feeds an index would add them, all in the ``response_received``
handler (the reactor's thread, as any pipeline would run):

- every response, robots.txt included (we archive it too), goes to
  ``DIR/scrapy.warc.gz`` through warcio: a ``response`` record (the status line,
  the headers Scrapy kept and the body) and a ``request`` record (the headers
  Scrapy sent, with Host), as warcio's README writes them. warcio compresses each
  record with zlib at level 9, fixed in its code; ``-s BENCH_WARC_GZIP_LEVEL=N``
  compresses each record at level N instead (we use 1, with ISA-L);
- each HTML 200 gets its main text from trafilatura (``extract(html, fast=True,
  include_comments=False)``: ``fast`` skips its fallback extractors, the speed
  setting its docs give) and a 64-bit simhash of that text (``simhash64`` below:
  the simhash package on PyPI has had no release since 2022 and hashes every
  4-character shingle with MD5, a feature a character);
- every response but robots.txt gets one line in ``DIR/pages.jsonl``: url,
  status, text_chars, simhash (16 hex digits; null without text), the
  counterpart of our pages.jsonl and feed.
"""
from __future__ import annotations

import hashlib
import json
import time
import zlib
from collections.abc import Iterator
from functools import partial
from http import HTTPStatus
from io import BytesIO
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlsplit

import scrapy
from scrapy import signals
from scrapy.http import HtmlResponse, Request, Response
from scrapy.linkextractors import LinkExtractor


class BenchSpider(scrapy.Spider):
    name = "bench"
    custom_settings = {
        "ROBOTSTXT_OBEY": True,
        "DOWNLOAD_DELAY": 0.05,
        "RANDOMIZE_DOWNLOAD_DELAY": False,
        "CONCURRENT_REQUESTS": 128,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
        "AUTOTHROTTLE_ENABLED": False,
        "HTTPCACHE_ENABLED": False,
        "LOG_LEVEL": "INFO",
        "TELNETCONSOLE_ENABLED": False,
        "USER_AGENT": "benchbot/1.0 (+http://127.0.0.1/bench)",
    }

    @classmethod
    def update_settings(cls, settings: Any) -> None:
        """Per-host delays (the test web's Crawl-delays) from the JSON file named by
        BENCH_SLOTS_FILE: {hostname: {"delay": s, ...}}, Scrapy's DOWNLOAD_SLOTS.
        A file, because thousands of hosts do not fit one command-line argument."""
        super().update_settings(settings)
        path = settings.get("BENCH_SLOTS_FILE")
        if path:
            with open(path) as f:
                settings.set("DOWNLOAD_SLOTS", json.load(f), priority="cmdline")

    def __init__(self, seeds: str, out: str, outputs: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        with open(seeds) as f:
            self.seed_urls = [line.strip() for line in f if line.strip()]
        self.web_hosts = {urlsplit(u).netloc for u in self.seed_urls}
        self.links = LinkExtractor()
        self.out = open(out, "w", buffering=1)  # line-buffered: the benchmark counts lines as they land
        self.outputs_dir = outputs
        self.outputs: Outputs | None = None

    @classmethod
    def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> BenchSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        if spider.outputs_dir:
            spider.outputs = Outputs(Path(spider.outputs_dir), crawler.settings.getint("BENCH_WARC_GZIP_LEVEL", 0))
        crawler.signals.connect(spider.on_response, signal=signals.response_received)
        crawler.signals.connect(spider.on_closed, signal=signals.spider_closed)
        return spider

    async def start(self) -> Any:  # Scrapy >= 2.13
        for url in self.seed_urls:
            yield Request(url, callback=self.parse)

    def start_requests(self) -> Iterator[Request]:  # older Scrapy
        for url in self.seed_urls:
            yield Request(url, callback=self.parse)

    def on_response(self, response: Response, request: Request, spider: scrapy.Spider) -> None:
        """Every HTTP response (also non-2xx and redirects); robots.txt is only archived."""
        t = time.time()
        if self.outputs is not None:
            self.outputs.archive(response, request)
        if urlsplit(response.url).path == "/robots.txt":
            return
        if self.outputs is not None:
            self.outputs.record(response)
        self.out.write(json.dumps({"url": response.url, "status": response.status,
                                   "bytes": len(response.body), "t": t}) + "\n")

    def on_closed(self, spider: scrapy.Spider, reason: str) -> None:
        self.out.close()
        if self.outputs is not None:
            self.outputs.close()

    def parse(self, response: Response) -> Iterator[Request]:
        if not isinstance(response, scrapy.http.TextResponse):
            return
        for link in self.links.extract_links(response):
            if urlsplit(link.url).netloc in self.web_hosts:
                yield response.follow(link, callback=self.parse)


class Outputs:
    """The WARC file and pages.jsonl of ``-a outputs=DIR`` (see the module doc). warcio and
    trafilatura are imported here: bare Scrapy must not pay for them (start-up, memory)."""

    def __init__(self, folder: Path, gzip_level: int) -> None:
        import trafilatura
        from warcio.statusandheaders import StatusAndHeaders
        from warcio.warcwriter import WARCWriter

        self.extract, self.headers = trafilatura.extract, StatusAndHeaders
        folder.mkdir(parents=True, exist_ok=True)
        self.warc_file = open(folder / "scrapy.warc.gz", "wb")
        # level 0: warcio's own gzip (level 9); else each record one gzip member at that level
        target: Any = Members(self.warc_file, gzip_level) if gzip_level else self.warc_file
        self.warc = WARCWriter(target, gzip=not gzip_level)
        self.warc.write_record(self.warc.create_warcinfo_record(
            "scrapy.warc.gz", {"software": f"Scrapy {scrapy.__version__}", "format": "WARC File Format 1.0"}))
        self.pages = open(folder / "pages.jsonl", "w")

    def archive(self, response: Response, request: Request) -> None:
        try:
            reason = HTTPStatus(response.status).phrase
        except ValueError:
            reason = ""
        status_line = f"{response.status} {reason}".rstrip()
        http_response = self.headers(status_line, _header_list(response.headers),
                                     protocol=getattr(response, "protocol", None) or "HTTP/1.1")
        parts = urlsplit(request.url)
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        http_request = self.headers(f"{request.method} {target} HTTP/1.1",
                                    [("Host", parts.netloc), *_header_list(request.headers)], is_http_request=True)
        extra = {"WARC-IP-Address": str(response.ip_address)} if getattr(response, "ip_address", None) else {}
        record = self.warc.create_warc_record(response.url, "response", payload=BytesIO(response.body),
                                              http_headers=http_response, warc_headers_dict=extra)
        sent = self.warc.create_warc_record(request.url, "request", payload=BytesIO(b""), http_headers=http_request)
        self.warc.write_request_response_pair(sent, record)

    def record(self, response: Response) -> None:
        text = ""
        if response.status == 200 and isinstance(response, HtmlResponse):
            text = self.extract(response.text, url=response.url, fast=True, include_comments=False) or ""
        self.pages.write(json.dumps({"url": response.url, "status": response.status, "text_chars": len(text),
                                     "simhash": f"{simhash64(text):016x}" if text else None}) + "\n")

    def close(self) -> None:
        self.warc_file.close()
        self.pages.close()


class Members:
    """A file for warcio's writer (``gzip=False``) that compresses each record as one gzip
    member at a level of our choosing: the writer flushes once at the end of each record."""

    def __init__(self, out: BinaryIO, level: int) -> None:
        self.out, self.level, self.buf = out, level, BytesIO()

    def write(self, data: bytes) -> None:
        self.buf.write(data)

    def flush(self) -> None:
        self.out.write(zlib.compress(self.buf.getvalue(), self.level, 31))
        self.buf = BytesIO()


def _header_list(headers: Any) -> list[tuple[str, str]]:
    """Scrapy's headers (bytes names, lists of bytes values) as warcio's (str, str) pairs."""
    return [(name.decode("latin-1"), value.decode("latin-1")) for name, values in headers.items() for value in values]


_WITHOUT_BIT = [bytes(v for v in range(256) if not v >> b & 1) for b in range(8)]
_HASH64 = partial(hashlib.blake2b, digest_size=8)


def simhash64(text: str) -> int:
    """Charikar's simhash of the text's distinct lower-cased words, each hashed to 64 bits by
    BLAKE2b: bit j is set when more than half of the words have it. The counts go by byte
    column (``translate`` keeps the bytes with the bit set), not by a Python loop per word."""
    words = set(text.lower().encode().split())
    if not words:
        return 0
    hashes = b"".join(map(hashlib.blake2b.digest, map(_HASH64, words)))
    value = 0
    for byte in range(8):
        column = hashes[byte::8]
        for bit in range(8):
            if 2 * len(column.translate(None, _WITHOUT_BIT[bit])) > len(words):
                value |= 1 << (8 * byte + bit)
    return value
