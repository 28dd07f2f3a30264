"""Prometheus endpoint: values put into Redis come out of a real HTTP scrape."""
from __future__ import annotations

import socket
import urllib.request

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from crawler_tasks.frontier import Discovered, Frontier
from crawler_tasks.keys import GlobalKeys
from crawler_tasks.ops import metrics
from crawler_tasks.ops.metrics import serve_metrics, stop
from crawler_tasks.runtime.latency import record_latencies, record_latency


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        assert resp.status == 200
        text = resp.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


@pytest.fixture
def served(settings):
    server, port = serve_metrics(settings)
    yield port
    stop(server)


def test_scrape_reports_what_redis_holds(settings, rclient, served):
    g = GlobalKeys(settings.KEY_PREFIX)
    rclient.hset(g.stats, mapping={
        "fetch/pages": 9, "fetch/status/200": 7, "fetch/status/404": 2, "fetch/bytes": 12345,
        "fetch/error/timeout": 3, "records/written": 11, "records/error/robots": 1, "records/error/timeout": 3,
        "error/KeyError": 1, "robots/rules": 4, "robots/unreachable": 1, "robots/status/200": 4,
        "filter/offsite": 6, "filter/depth": 2, "dedup/duplicate_content": 5, "frontier/dropped/seen": 8,
        "frontier/enqueued": 30, "frontier/dropped/host_budget": 4, "fetch/batches": 2, "frontier/lease_expired": 2, "something/new": 42,
    })
    rclient.zadd(g.inflight, {"b1": 1e12, "b2": 1e12, "b3": 1e12})
    frontier = Frontier(settings)
    urls = [Discovered(url=f"http://h{i % 5}.example/{i}", host=f"h{i % 5}.example") for i in range(40)]
    assert frontier.put_discovered(urls) == [1] * len(urls)
    frontier.get_urls(0, 2, now=1000.0)
    record_latencies(rclient, settings.KEY_PREFIX, [0.005, 0.01, 0.2, 0.2, 3.0, 45.0, float("nan"), -1])
    record_latency(rclient, settings.KEY_PREFIX, 0.02)

    m = scrape(served)
    assert m[("crawler_up", ())] == 1
    assert m[("crawler_fetch_status_total", (("status", "200"),))] == 7
    assert m[("crawler_fetch_status_total", (("status", "404"),))] == 2
    assert m[("crawler_fetch_pages_total", ())] == 9
    assert m[("crawler_fetch_bytes_total", ())] == 12345
    assert m[("crawler_fetch_errors_total", (("kind", "timeout"),))] == 3
    assert m[("crawler_records_written_total", ())] == 11
    assert m[("crawler_records_errors_total", (("kind", "robots"),))] == 1
    assert m[("crawler_internal_errors_total", (("exception", "KeyError"),))] == 1
    assert m[("crawler_robots_total", (("outcome", "rules"),))] == 4
    assert m[("crawler_robots_total", (("outcome", "unreachable"),))] == 1
    assert m[("crawler_robots_status_total", (("status", "200"),))] == 4
    assert m[("crawler_filter_drops_total", (("rule", "offsite"),))] == 6
    assert m[("crawler_filter_drops_total", (("rule", "depth"),))] == 2
    assert m[("crawler_dedup_total", (("kind", "duplicate_content"),))] == 5
    assert m[("crawler_dedup_total", (("kind", "url_seen"),))] == 8
    assert m[("crawler_frontier_enqueued_total", ())] == 30
    assert m[("crawler_frontier_leases_total", (("event", "expired"),))] == 2
    assert m[("crawler_frontier_dropped_total", (("reason", "host_budget"),))] == 4
    assert ("crawler_frontier_dropped_total", (("reason", "seen"),)) not in m
    assert m[("crawler_fetch_batches_total", ())] == 2
    assert m[("crawler_stat_total", (("name", "something/new"),))] == 42
    assert m[("crawler_batches_inflight", ())] == 3
    assert m[("crawler_crawl_state", (("state", "running"),))] == 1

    queued = sum(v for (name, labels), v in m.items() if name == "crawler_frontier_urls")
    assert queued == 40
    sizes = [frontier.sizes(s) for s in range(settings.SHARDS)]
    for shard, size in enumerate(sizes):
        assert m[("crawler_frontier_urls", (("queue", "front"), ("shard", str(shard))))] == size["front"]
        assert m[("crawler_frontier_hosts", (("shard", str(shard)), ("state", "leased")))] == size["leased_hosts"]
    assert sum(s["leased_hosts"] for s in sizes) == 2

    fill = frontier.bloom_fill()
    assert m[("crawler_bloom_bits_set", ())] == fill.bits_set > 0
    assert m[("crawler_bloom_capacity_bits", ())] == frontier.bloom.bits * settings.SHARDS
    assert 0 < m[("crawler_bloom_fill_ratio", ())] < 0.01
    assert m[("crawler_bloom_false_positive_rate", ())] == pytest.approx(fill.fp_rate)
    assert m[("crawler_bloom_lost_urls_estimated", ())] == pytest.approx(fill.lost) and fill.lost < 1

    hist = "crawler_fetch_latency_seconds"
    assert m[(hist + "_bucket", (("le", "0.01"),))] == 2
    assert m[(hist + "_bucket", (("le", "0.025"),))] == 3
    assert m[(hist + "_bucket", (("le", "0.25"),))] == 5
    assert m[(hist + "_bucket", (("le", "5.0"),))] == 6
    assert m[(hist + "_bucket", (("le", "30.0"),))] == 6
    assert m[(hist + "_bucket", (("le", "+Inf"),))] == 7
    assert m[(hist + "_count", ())] == 7
    assert m[(hist + "_sum", ())] == pytest.approx(0.005 + 0.01 + 0.2 + 0.2 + 3.0 + 45.0 + 0.02)


def test_latency_hash_layout_and_pipeline(settings, rclient):
    pipe = rclient.pipeline(transaction=False)
    assert record_latencies(pipe, settings.KEY_PREFIX, [0.01, 0.0100001, 30.0, 30.5]) == 4
    assert rclient.hgetall(GlobalKeys(settings.KEY_PREFIX).latency) == {}   # queued on the caller's pipeline
    pipe.execute()
    raw = rclient.hgetall(GlobalKeys(settings.KEY_PREFIX).latency)
    assert raw["le:0.01"] == "1" and raw["le:0.025"] == "1" and raw["le:30"] == "1" and raw["le:+Inf"] == "1"
    assert raw["count"] == "4" and float(raw["sum"]) == pytest.approx(60.5200001, abs=1e-9)
    assert GlobalKeys("crawl").latency == "crawl:{g}:latency"


def test_empty_crawl_and_redis_down(settings, served, monkeypatch):
    m = scrape(served)
    assert m[("crawler_up", ())] == 1
    assert m[("crawler_fetch_pages_total", ())] == 0
    assert m[("crawler_fetch_latency_seconds_count", ())] == 0

    def down(*_a, **_k):
        raise redis.ConnectionError("connection refused")

    monkeypatch.setattr(metrics, "read_progress", down)
    m = scrape(served)   # still HTTP 200, and says why there is nothing else
    assert m[("crawler_up", ())] == 0
    assert not any(name.startswith("crawler_fetch") for name, _ in m)


def test_stop_releases_the_port(settings):
    server, port = serve_metrics(settings)
    assert port > 0
    stop(server)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
