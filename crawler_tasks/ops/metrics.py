"""Prometheus metrics of one crawl, computed from Redis when scraped.

Why on scrape: the crawl's truth is already in Redis (the stats hash every stage
HINCRBYs, the frontier's queues), shared by all worker processes on all machines.
A collector that reads it on each scrape needs no per-process metric state, no
multiprocess mode and no push gateway: one scrape target per crawl (``serve_metrics``,
started by ``manage.py crawl``) sees every worker's counts.

Mapping of the stats hash (``<prefix>:{g}:stats``) to metric families:

==========================  ==================================================
``fetch/status/<code>``     ``crawler_fetch_status_total{status}``
``fetch/pages|skipped``     ``crawler_fetch_pages_total``, ``crawler_fetch_skipped_total``
``fetch/bytes``             ``crawler_fetch_bytes_total``
``fetch/batches``           ``crawler_fetch_batches_total``
``fetch/error/<kind>``      ``crawler_fetch_errors_total{kind}``
``records/written``         ``crawler_records_written_total``
``records/error/<kind>``    ``crawler_records_errors_total{kind}``
``error/<exception>``       ``crawler_internal_errors_total{exception}`` (bugs caught per URL)
``robots/<outcome>``        ``crawler_robots_total{outcome}``
``robots/status/<code>``    ``crawler_robots_status_total{status}``
``filter/<rule>``           ``crawler_filter_drops_total{rule}``
``dedup/duplicate_content`` ``crawler_dedup_total{kind="duplicate_content"}``
``frontier/dropped/seen``   ``crawler_dedup_total{kind="url_seen"}``
``frontier/enqueued|seeds`` ``crawler_frontier_enqueued_total``, ``crawler_frontier_seeds_total``
``frontier/dropped/<why>``  ``crawler_frontier_dropped_total{reason}`` (budgets, query traps)
``frontier/lease_<event>``  ``crawler_frontier_leases_total{event}`` (expired, lost)
``dns/<event>``             ``crawler_dns_total{event}`` (lookups, queries, cache_hits, nxdomain, timeouts, ...)
anything else               ``crawler_stat_total{name}`` (a new counter is never invisible)
==========================  ==================================================

Plus gauges from ``maintenance.read_progress`` and the frontier: queue sizes and
host counts per shard, batches in flight, crawl state, Bloom fill; and the fetch
latency histogram kept by ``runtime.latency`` in ``<prefix>:{g}:latency``.
"""
from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import redis
from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString

from crawler_tasks.connection import global_client
from crawler_tasks.frontier import BloomFill, Frontier
from crawler_tasks.keys import GlobalKeys
from crawler_tasks.runtime.control import CrawlState
from crawler_tasks.runtime.latency import INF_FIELD, LATENCY_BUCKETS
from crawler_tasks.runtime.maintenance import read_progress
from crawler_tasks.settings import Settings

log = logging.getLogger(__name__)

# BITCOUNT of a large Bloom filter blocks Redis for a while (~0.1 s per 100 MB):
# recompute the fill at most this often.
BLOOM_REFRESH_S = 60.0
STOP_POLL_S = 0.05        # how often the server loop looks for a stop (a crawl exit waits for it)


def _counter(name: str, doc: str, labels: list[str] | None = None) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, labels=labels)


class CrawlCollector:
    """Reads one crawl's state from Redis on every scrape."""

    def __init__(self, settings: Settings, bloom_refresh_s: float = BLOOM_REFRESH_S) -> None:
        self.settings = settings
        self.frontier = Frontier(settings)
        self.bloom_refresh_s = bloom_refresh_s
        self._bloom: tuple[float, BloomFill] | None = None   # (when read, the fill)
        self._lock = threading.Lock()

    def describe(self) -> list[Metric]:
        return []  # nothing read from Redis at registration time

    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        up = GaugeMetricFamily("crawler_up", "1 if the crawl's Redis answered this scrape")
        try:
            families = self._families()
        except (redis.RedisError, OSError) as exc:
            log.warning("metrics: cannot read crawl state from Redis: %s", exc)
            families = []
            up.add_metric([], 0)
        else:
            up.add_metric([], 1)
        yield from families
        yield up
        took = GaugeMetricFamily("crawler_scrape_duration_seconds", "Time spent reading Redis for this scrape")
        took.add_metric([], time.perf_counter() - started)
        yield took

    def _bloom_fill(self) -> BloomFill:
        with self._lock:
            now = time.monotonic()
            if self._bloom is None or now - self._bloom[0] >= self.bloom_refresh_s:
                self._bloom = (now, self.frontier.bloom_fill())
            return self._bloom[1]

    def _families(self) -> list[Metric]:
        s = self.settings
        progress = read_progress(s, self.frontier)
        latency: dict[str, str] = global_client(s).hgetall(GlobalKeys(s.KEY_PREFIX).latency)  # type: ignore[assignment]
        bloom = self._bloom_fill()
        out: list[Metric] = []
        out += self._stats_families(progress.stats)

        urls = GaugeMetricFamily("crawler_frontier_urls", "URLs queued per shard: front queues (not yet "
                                 "assigned to a host) and back queues (per host)", labels=["shard", "queue"])
        hosts = GaugeMetricFamily("crawler_frontier_hosts", "Hosts per shard: active (holding a back queue), "
                                  "ready (in the ready heap), leased (a fetch in flight)", labels=["shard", "state"])
        for shard, sizes in enumerate(progress.shards):
            urls.add_metric([str(shard), "front"], sizes["front"])
            urls.add_metric([str(shard), "back"], sizes["back"])
            hosts.add_metric([str(shard), "active"], sizes["active_hosts"])
            hosts.add_metric([str(shard), "ready"], sizes["ready_hosts"])
            hosts.add_metric([str(shard), "leased"], sizes["leased_hosts"])
        out += [urls, hosts]
        inflight = GaugeMetricFamily("crawler_batches_inflight", "Fetch batches dispatched and not through dedup")
        inflight.add_metric([], progress.inflight)
        state = GaugeMetricFamily("crawler_crawl_state", "1 for the crawl's current state", labels=["state"])
        for crawl_state in (CrawlState.RUNNING, CrawlState.STOPPING, CrawlState.FINISHED):
            state.add_metric([crawl_state], 1.0 if progress.state == crawl_state else 0.0)
        out += [inflight, state]
        if progress.next_ready_s is not None:
            wait = GaugeMetricFamily("crawler_next_ready_seconds", "Seconds until the earliest waiting host is ready")
            wait.add_metric([], progress.next_ready_s)
            out.append(wait)

        capacity = self.frontier.bloom.bits * s.SHARDS
        for name, doc, value in (
            ("crawler_bloom_bits_set", "URL-seen Bloom filter bits set, all shards", bloom.bits_set),
            ("crawler_bloom_capacity_bits", "URL-seen Bloom filter size in bits, all shards", capacity),
            ("crawler_bloom_fill_ratio", "Fraction of Bloom bits set", bloom.bits_set / capacity if capacity else 0.0),
            ("crawler_bloom_false_positive_rate", ("Estimated false-positive rate of the fullest shard's "
                                                   "Bloom filter (new URLs wrongly taken as seen)"), bloom.fp_rate),
            ("crawler_bloom_lost_urls_estimated", ("New URLs estimated dropped as seen by Bloom false "
                                                   "positives so far, from the fill"), bloom.lost),
        ):
            g = GaugeMetricFamily(name, doc)
            g.add_metric([], value)
            out.append(g)
        out.append(self._latency_family(latency))
        return out

    @staticmethod
    def _latency_family(raw: dict[str, str]) -> HistogramMetricFamily:
        buckets = []
        cumulative = 0
        for le in LATENCY_BUCKETS:
            cumulative += int(raw.get(f"le:{le:g}", 0))
            buckets.append((floatToGoString(le), cumulative))
        cumulative += int(raw.get(INF_FIELD, 0))
        buckets.append(("+Inf", cumulative))   # _count is this bucket, consistent with the others
        return HistogramMetricFamily("crawler_fetch_latency_seconds", "Duration of fetches (request to body)",
                                     buckets=buckets, sum_value=float(raw.get("sum", 0.0)))

    @staticmethod
    def _stats_families(stats: dict[str, int]) -> list[Metric]:
        fam = {
            "status": _counter("crawler_fetch_status", "Fetched pages by HTTP status", ["status"]),
            "pages": _counter("crawler_fetch_pages", "Requests sent for pages (robots.txt not counted)"),
            "skipped": _counter("crawler_fetch_skipped", "Leased URLs not requested (refused, robots)"),
            "bytes": _counter("crawler_fetch_bytes", "Body bytes fetched"),
            "fetch_errors": _counter("crawler_fetch_errors", "Fetches that failed, by kind", ["kind"]),
            "written": _counter("crawler_records_written", "Records written to pages.jsonl"),
            "record_errors": _counter("crawler_records_errors", "Records written with an error, by kind", ["kind"]),
            "internal": _counter("crawler_internal_errors", "Unexpected exceptions caught per URL (bugs)",
                                 ["exception"]),
            "robots": _counter("crawler_robots", "robots.txt fetches by outcome", ["outcome"]),
            "robots_status": _counter("crawler_robots_status", "robots.txt fetches by HTTP status", ["status"]),
            "filter": _counter("crawler_filter_drops", "Discovered URLs dropped by a filter rule", ["rule"]),
            "dedup": _counter("crawler_dedup", "Duplicates removed: content fingerprints and URL-seen test",
                              ["kind"]),
            "enqueued": _counter("crawler_frontier_enqueued", "URLs added to the frontier"),
            "seeds": _counter("crawler_frontier_seeds", "Seed URLs added"),
            "dropped": _counter("crawler_frontier_dropped", "Discovered URLs not enqueued, by frontier verdict "
                                "(URL-seen drops are in crawler_dedup_total)", ["reason"]),
            "leases": _counter("crawler_frontier_leases", "Host leases that expired or were lost", ["event"]),
            "dns": _counter("crawler_dns", "The resolver's lookups, queries and outcomes (fetch/dns.py)", ["event"]),
            "batches": _counter("crawler_fetch_batches", "Fetch batches run"),
            "other": _counter("crawler_stat", "Other counters of the stats hash, by name", ["name"]),
        }
        plain = {"fetch/pages": "pages", "fetch/skipped": "skipped", "fetch/bytes": "bytes",
                 "records/written": "written", "frontier/enqueued": "enqueued", "frontier/seeds": "seeds",
                 "fetch/batches": "batches"}
        labelled = (("fetch/status/", "status"), ("fetch/error/", "fetch_errors"), ("records/error/", "record_errors"),
                    ("error/", "internal"), ("robots/status/", "robots_status"), ("robots/", "robots"),
                    ("filter/", "filter"), ("dedup/", "dedup"), ("frontier/dropped/", "dropped"),
                    ("frontier/lease_", "leases"), ("dns/", "dns"))
        for name in ("pages", "skipped", "bytes", "batches", "written", "enqueued", "seeds"):
            fam[name].add_metric([], 0)   # always present, so rate() works from the first scrape
        for key, value in sorted(stats.items()):
            if key in plain:
                fam[plain[key]].samples.clear()
                fam[plain[key]].add_metric([], value)
                continue
            if key == "frontier/dropped/seen":
                fam["dedup"].add_metric(["url_seen"], value)
                continue
            for prefix, target in labelled:
                if key.startswith(prefix) and len(key) > len(prefix):
                    fam[target].add_metric([key[len(prefix):]], value)
                    break
            else:
                fam["other"].add_metric([key], value)
        return list(fam.values())


def make_registry(settings: Settings) -> CollectorRegistry:
    """A registry holding only this crawl's collector (no process metrics of the caller)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(CrawlCollector(settings))
    return registry


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - a scrape is not a log line
        pass


def serve_metrics(settings: Settings, port: int = 0, addr: str = "127.0.0.1") -> tuple[WSGIServer, int]:
    """Serve ``/metrics`` for one crawl in a daemon thread; returns (server, bound port).
    Port 0 picks a free port. Loopback by default: the endpoint has no authentication.
    prometheus_client's ``start_http_server`` would do, but its loop looks for a stop
    every 0.5 s, which a crawl's exit then waits for."""
    family = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM)[0][0]
    server_class = _Server6 if family == socket.AF_INET6 else _Server
    server = make_server(addr, port, make_wsgi_app(make_registry(settings)), server_class, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": STOP_POLL_S}, name="metrics",
                     daemon=True).start()
    return server, int(server.server_address[1])


def stop(server: WSGIServer) -> None:
    """Stop a server from ``serve_metrics`` and release its port."""
    server.shutdown()
    server.server_close()


__all__ = [
    "CrawlCollector",
    "make_registry",
    "serve_metrics",
    "stop",
]
