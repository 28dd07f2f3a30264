"""The fetch -> parse -> dedup stages run in-process against a real Redis and a local
web: robots.txt status semantics, Retry-After, SSRF refusals, redirects, records."""
from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest

from crawler_tasks.frontier import Frontier
from crawler_tasks.maintenance import read_progress, run_maintenance
from crawler_tasks.pipeline import Worker, dedup_stage, fetch_stage, parse_stage, seed_urls
from crawler_tasks.robots import MAX_ROBOTS_BYTES
from crawler_tasks.scheduler import FINISHED, plan_wake
from crawler_tasks.settings import reset_settings
from crawler_tasks.testweb import HostSpec, TestWeb

HTML = {"Content-Type": "text/html; charset=utf-8"}


def crawl_inline(settings, seeds: list[str], seconds: float = 20.0) -> list[dict]:
    """Run the stages in this process until the crawl finishes or time runs out."""
    reset_settings(settings)
    seed_urls(settings, seeds)
    worker = Worker.create(settings)
    deadline = time.time() + seconds
    while time.time() < deadline:
        batches = plan_wake(settings, worker.frontier)
        for b in batches:
            pages, spool = fetch_stage(worker, b.leases, b.batch_id)
            dedup_stage(worker, parse_stage(worker, pages, spool), b.batch_id)
        if not batches:
            if run_maintenance(settings, worker.frontier).state == FINISHED:
                break
            time.sleep(0.02)
    path = Path(settings.OUT_DIR) / "pages.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def fast(settings):
    return dataclasses.replace(settings, MIN_DELAY_S=0.0, DELAY_FACTOR=0.0, CONNECT_TIMEOUT_S=1.0,
                               READ_TIMEOUT_S=1.0, TOTAL_TIMEOUT_S=2.0, LEASE_S=10.0, BACKOFF_BASE_S=0.2,
                               BACKOFF_MAX_S=0.5, MAX_RETRIES=1)


def paths(web: TestWeb, host: int) -> list[str]:
    return [r.path for r in web.requests if r.host == web.hosts[host]]


def test_robots_503_disallows_all_and_urls_wait(fast):
    with TestWeb(n_hosts=1, pages_per_host=3, host_specs={0: HostSpec(robots_status=503)}) as web:
        recs = crawl_inline(fast, web.seeds(), seconds=3)
        assert paths(web, 0) == ["/robots.txt"]  # no page request, robots asked once (error TTL)
        assert recs == []
        progress = read_progress(fast)
        assert progress.queued == 1  # the seed waits, it is not dropped


def test_robots_404_allows_all(fast):
    with TestWeb(n_hosts=1, pages_per_host=3, host_specs={0: HostSpec(robots_txt=None)}) as web:
        recs = crawl_inline(fast, web.seeds())
        fetched = {r["url"] for r in recs if r["status"] == 200}
        assert web.page_urls() <= fetched
        assert any(r["url"].endswith("/private/x.html") for r in recs if r["status"] == 200)


def test_robots_redirects_followed_and_rules_apply(fast):
    rules = b"User-agent: *\nDisallow: /p/\n"
    routes = {"/robots.txt": (301, {"Location": "/r1"}, b""), "/r1": (302, {"Location": "/r2"}, b""),
              "/r2": (200, {"Content-Type": "text/plain"}, rules)}
    spec = HostSpec(pages=3, extra_routes=routes, link_extra_routes=False)
    with TestWeb(n_hosts=1, pages_per_host=3, host_specs={0: spec}) as web:
        recs = crawl_inline(fast, web.seeds())
        assert not [p for p in paths(web, 0) if p.startswith("/p/")]
        assert any(r["error_kind"] == "robots" for r in recs)


def test_robots_huge_body_is_capped(fast):
    huge = b"User-agent: *\n" + b"# filler line\n" * (2 * MAX_ROBOTS_BYTES // 14) + b"Disallow: /\n"
    spec = HostSpec(extra_routes={"/robots.txt": (200, {"Content-Type": "text/plain"}, huge)},
                    link_extra_routes=False)
    with TestWeb(n_hosts=1, pages_per_host=2, host_specs={0: spec}) as web:
        recs = crawl_inline(fast, web.seeds())
        # the Disallow past 500 KiB is not read: pages are fetched
        assert any(r["status"] == 200 for r in recs)


def test_robots_timeout_is_unreachable(fast):
    with TestWeb(n_hosts=1, pages_per_host=2, host_specs={0: HostSpec(delay_s=2.5)}) as web:
        recs = crawl_inline(fast, web.seeds(), seconds=4)
        assert recs == [] and read_progress(fast).queued == 1
        assert paths(web, 0) == ["/robots.txt"]


def test_retry_after_on_429_is_honoured(fast):
    spec = HostSpec(pages=2, extra_routes={"/": (429, {"Retry-After": "120", **HTML}, b"slow down")},
                    link_extra_routes=False)
    with TestWeb(n_hosts=1, pages_per_host=2, host_specs={0: spec}) as web:
        crawl_inline(fast, web.seeds(), seconds=2)
        frontier = Frontier(fast)
        host = web.hosts[0]
        wait = frontier.next_ready_in(frontier.shard_of(host))
        assert wait is not None and 110 < wait <= 121
        assert paths(web, 0).count("/") == 1


def test_private_targets_refused_without_allow_private(fast):
    strict = dataclasses.replace(fast, ALLOW_PRIVATE=False)
    with TestWeb(n_hosts=1, pages_per_host=2) as web:
        recs = crawl_inline(strict, web.seeds() + ["http://169.254.169.254/latest/meta-data/"])
        assert web.requests == []  # not even robots.txt
        assert {r["error_kind"] for r in recs} == {"refused"}
        assert any("169.254.169.254" in r["error"] for r in recs)


def test_redirect_target_is_enqueued_not_followed(fast):
    routes = {"/old": (301, {"Location": "/p/0.html"}, b""),
              "/loop-a": (302, {"Location": "/loop-b"}, b""), "/loop-b": (302, {"Location": "/loop-a"}, b"")}
    spec = HostSpec(pages=2, extra_routes=routes)
    with TestWeb(n_hosts=1, pages_per_host=2, host_specs={0: spec}) as web:
        recs = crawl_inline(fast, web.seeds())
        by_url = {r["url"]: r for r in recs}
        old = by_url[web.url(0, "/old")]
        assert old["status"] == 301 and old["redirect_to"] == web.url(0, "/p/0.html")
        requested = paths(web, 0)
        assert requested.count("/p/0.html") == 1  # target fetched once although linked too
        assert requested.count("/loop-a") == 1 and requested.count("/loop-b") == 1


def test_content_duplicates_marked(fast):
    same = b"<html><head><title>same</title></head><body><p>identical body text</p></body></html>"
    routes = {"/a": (200, HTML, same), "/b": (200, HTML, same)}
    with TestWeb(n_hosts=1, pages_per_host=1, host_specs={0: HostSpec(extra_routes=routes)}) as web:
        recs = crawl_inline(fast, web.seeds())
        dup = [r for r in recs if r.get("duplicate_of")]
        assert len(dup) == 1 and dup[0]["duplicate_of"] in (web.url(0, "/a"), web.url(0, "/b"))


def test_bad_html_and_odd_content_never_fail_a_batch(fast):
    routes = {"/bin": (200, HTML, bytes(range(256)) * 50), "/empty": (200, HTML, b""),
              "/pdf": (200, {"Content-Type": "application/pdf"}, b"%PDF-1.4 junk"),
              "/badgzip": (200, {**HTML, "Content-Encoding": "gzip"}, b"not gzip at all")}
    with TestWeb(n_hosts=1, pages_per_host=1, host_specs={0: HostSpec(extra_routes=routes)}) as web:
        recs = crawl_inline(fast, web.seeds())
        got = {r["url"].rsplit("/", 1)[1]: r for r in recs}
        assert {"bin", "empty", "pdf", "badgzip"} <= set(got)
        assert got["pdf"]["status"] == 200 and "fingerprint" not in got["pdf"]
        assert all(r.get("error_kind") != "parse" for r in recs)
