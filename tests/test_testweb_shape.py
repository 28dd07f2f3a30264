"""Tests for the web-shaped test web: answer times, Crawl-delays, and the server-side evidence.

Why: the benchmark's web-shaped scenario judges two crawlers by what the server
saw (politeness, requests in flight), so the checker must flag a real impolite
client and pass a polite one, and the latency must be what the web claims.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

from crawler_tasks.robots import parse_robots
from tests.test_testweb import RawClient
from testweb import TestWeb
from testweb.evidence import check_politeness, in_flight, read_log, write_log
from testweb.shape import Latency, host_delays, robots_with_delay

REPO = Path(__file__).resolve().parents[1]


def test_latency_is_lognormal_and_stable_per_url() -> None:
    lat = Latency(0.4, 0.9)
    xs = sorted(lat(h, f"/p/{k}.html") for h in range(300) for k in range(17))
    assert abs(statistics.median(xs) / 0.4 - 1) < 0.08
    p95 = xs[int(0.95 * len(xs))]
    assert abs(p95 / lat.quantile(0.95) - 1) < 0.12 and 1.5 < p95 < 2.0
    assert lat(3, "/") == Latency(0.4, 0.9)(3, "/")  # a function of the URL, not of the order
    assert lat(3, "/") != Latency(0.4, 0.9, seed=1)(3, "/")
    assert max(Latency(1.0, 3.0, max_s=2.0)(h, "/") for h in range(200)) == 2.0
    assert Latency(0.0, 0.9)(1, "/") == 0.0


def test_host_delays_and_robots_lines_read_by_the_crawler() -> None:
    delays = host_delays(500, 1, 5, seed=3)
    assert min(delays) >= 1 and max(delays) <= 5 and len(set(delays)) > 30
    assert delays == host_delays(500, 1, 5, seed=3) != host_delays(500, 1, 5, seed=4)
    text = robots_with_delay("User-agent: a\nUser-agent: b\nDisallow: /x\n\nUser-agent: *\nDisallow: /private/\n",
                             2.5)
    rules = parse_robots(text.encode())
    assert rules.crawl_delay("a") == rules.crawl_delay("b") == rules.crawl_delay("benchbot") == 2.5
    assert not rules.is_allowed("http://h/x", "b") and not rules.is_allowed("http://h/private/1", "benchbot")
    assert robots_with_delay("User-agent: *\n", 0) == "User-agent: *\n"


def test_answers_wait_their_latency_without_stalling_each_other() -> None:
    lat = Latency(0.3, 0.5)
    with TestWeb(8, 3, latency=lat) as web:
        took: dict[int, float] = {}

        def get(h: int) -> None:
            t0 = time.monotonic()
            assert RawClient(web.hosts[h]).request("/p/1.html")[0] == 200
            took[h] = time.monotonic() - t0

        t0 = time.monotonic()
        threads = [threading.Thread(target=get, args=(h,)) for h in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - t0
        wants = {h: lat(h, "/p/1.html") for h in range(8)}
        assert all(took[h] >= wants[h] - 0.005 for h in range(8)), (took, wants)
        assert wall < sum(wants.values()) * 0.7  # answered side by side, not in turn
        samples = in_flight(web.requests, web.connections, 0.01)
        assert max(s.exchanges for s in samples) >= 4
        assert max(s.hosts_connected for s in samples) >= 4


def test_checker_passes_a_polite_client_and_flags_an_impolite_one(tmp_path: Path) -> None:
    delay = 0.3
    with TestWeb(2, 4) as web:
        polite = RawClient(web.hosts[0])
        for path in ("/robots.txt", "/", "/p/1.html"):
            assert polite.request(path)[0] == 200
            time.sleep(delay + 0.01)
        polite.close()
        rude, rude2 = RawClient(web.hosts[1]), RawClient(web.hosts[1])  # two connections at once
        assert rude.request("/")[0] == 200  # before robots.txt
        assert rude2.request("/robots.txt")[0] == 200
        assert rude.request("/p/1.html")[0] == 200  # no rest
        rude.close()
        rude2.close()
        time.sleep(0.1)
        requests, conns = web.requests, web.connections
    write_log(tmp_path / "log.jsonl", requests, conns)
    requests, conns = read_log(tmp_path / "log.jsonl")
    assert len(requests) == 6 and len(conns) == 3 and all(c.closed for c in conns)
    only_polite = check_politeness([r for r in requests if r.host == web.hosts[0]], conns[:1],
                                   {web.hosts[0]: delay})
    assert only_polite.violations == 0 and only_polite.short_starts == 0
    assert only_polite.min_gap_ratio >= 1
    report = check_politeness(requests, conns, {web.hosts[0]: delay, web.hosts[1]: delay})
    assert report.hosts == 2 and report.requests == 6
    assert report.robots_late == 1 and report.multi_conn_hosts == 1
    assert report.short_gaps == 1 and report.short_gaps_after_robots == 1
    assert report.violations == 3 and report.examples


def test_cli_writes_manifest_and_logs_at_exit(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    manifest, log = tmp_path / "web.json", tmp_path / "log.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "testweb", "--hosts", "3", "--pages", "2", "--latency-median", "0.05",
         "--crawl-delay", "1-5", "--manifest", str(manifest), "--log", str(log)],
        stdout=subprocess.PIPE, text=True, env=env,
    )
    try:
        assert proc.stdout is not None
        urls = [proc.stdout.readline().strip() for _ in range(3)]
        hosts = json.loads(manifest.read_text())["hosts"]
        assert [h["home"] for h in hosts] == urls
        for h in hosts:
            _, _, body = RawClient(h["host"]).request("/robots.txt")
            assert parse_robots(body).crawl_delay("benchbot") == h["crawl_delay"]
            assert 1 <= h["crawl_delay"] <= 5
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    requests, conns = read_log(log)
    assert sorted(r.host for r in requests) == sorted(urlsplit(u).netloc for u in urls)
    assert all(r.path == "/robots.txt" and r.end - r.start >= 0.0 for r in requests)
    assert len(conns) == 3
