"""The Scrapy side of bench/vs_scrapy.py: follow every same-web link from the seeds.

Run by the benchmark in its own venv (bench/.venv-scrapy), never imported by the
crawler:

    scrapy runspider bench/scrapy_spider.py -a seeds=SEEDS_FILE -a out=RESPONSES_JSONL \
        -s DOWNLOAD_DELAY=0.05 -s CLOSESPIDER_PAGECOUNT=5000

"Same web" means a host of the seed file (all hosts of the test web are seeds).
Each response except /robots.txt is written as one JSON line with its receive
time, so the benchmark measures Scrapy's steady rate the way it reads our
pages.jsonl. The settings below are the comparison's rules (one connection per
host, robots.txt obeyed, no autothrottle, no cache); the command line sets the
delay and the page cap; the web-shaped scenario also gives one delay per host
(-s BENCH_SLOTS_FILE=slots.json) and the broad-crawl settings.
"""
from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import scrapy
from scrapy import signals
from scrapy.http import Request, Response
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

    def __init__(self, seeds: str, out: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        with open(seeds) as f:
            self.seed_urls = [line.strip() for line in f if line.strip()]
        self.web_hosts = {urlsplit(u).netloc for u in self.seed_urls}
        self.links = LinkExtractor()
        self.out = open(out, "w", buffering=1)  # line-buffered: the benchmark counts lines as they land

    @classmethod
    def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> BenchSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
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
        """Every HTTP response (also non-2xx and redirects), robots.txt aside."""
        if urlsplit(response.url).path == "/robots.txt":
            return
        self.out.write(json.dumps({"url": response.url, "status": response.status,
                                   "bytes": len(response.body), "t": time.time()}) + "\n")

    def on_closed(self, spider: scrapy.Spider, reason: str) -> None:
        self.out.close()

    def parse(self, response: Response) -> Iterator[Request]:
        if not isinstance(response, scrapy.http.TextResponse):
            return
        for link in self.links.extract_links(response):
            if urlsplit(link.url).netloc in self.web_hosts:
                yield response.follow(link, callback=self.parse)
