"""A whole crawl (`manage.py crawl`, real workers) against a hostile server beside an
ordinary site: every limit leaves an error record, the ordinary site is crawled in full,
one connection per host holds, and the crawl ends on its own in bounded time."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testweb import TestWeb

from .hostile import start_hostile

ROOT = Path(__file__).resolve().parent.parent

# endpoint -> (error_kind, truncated) the crawl must record for it
EXPECTED = {
    "/gzip-bomb": ("decoded_too_large", "decoded-length"),
    "/deflate-bomb": ("decoded_too_large", "decoded-length"),
    "/huge": ("body_too_large", "length"),
    "/trickle-body": ("deadline", "time"),
    "/trickle-headers": ("deadline", None),
    "/black-hole": ("deadline", None),
    "/many-headers": ("too_many_headers", None),
    "/big-header": ("headers_too_large", None),
    "/http09": ("http09", None),
    "/garbage-status": ("bad_status_line", None),
    "/reset": ("protocol", None),
}


def crawl(urls: list[str], out: Path, env: dict[str, str], *flags: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """``manage.py crawl`` with only the given CRAWLER_* settings; the run and its wall time."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")}, **env}
    cmd = [sys.executable, str(ROOT / "manage.py"), "crawl", *urls, "--out", str(out), "--allow-private",
           "--user-agent", "testbot/1.0 (+http://127.0.0.1/bot)", *flags]
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=ROOT, env=env)
    return proc, time.monotonic() - started


@pytest.fixture(scope="module")
def hostile():
    srv = start_hostile("127.0.0.40")
    yield srv
    srv.stop()


def test_hostile_server_costs_only_its_own_urls(hostile, tmp_path):
    out = tmp_path / "out"
    with TestWeb(n_hosts=2, pages_per_host=6, seed=21, mean_page_bytes=4000, first_ip=41) as web:
        seeds = [hostile.base_url + path for path in EXPECTED] + [hostile.base_url + "/redirect-loop"]
        env = {"CRAWLER_TOTAL_TIMEOUT_S": "3", "CRAWLER_READ_TIMEOUT_S": "10", "CRAWLER_CONNECT_TIMEOUT_S": "1",
               "CRAWLER_MAX_FACTOR_DELAY_S": "0.5", "CRAWLER_BACKOFF_BASE_S": "0.1", "CRAWLER_BACKOFF_MAX_S": "0.5",
               "CRAWLER_LEASE_S": "10", "CRAWLER_MAX_RETRIES": "0", "CRAWLER_SOFT404_PROBE": "0"}
        proc, elapsed = crawl(web.seeds() + seeds, out, env, "--min-delay", "0.05", "--max-seconds", "120")
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "frontier exhausted" in proc.stderr, proc.stderr[-2000:]
        records = [json.loads(line) for line in (out / "pages.jsonl").read_text().splitlines()]
        by_path = {r["url"].split(hostile.base_url, 1)[1]: r for r in records if r["url"].startswith(hostile.base_url)}
        for path, (kind, truncated) in EXPECTED.items():
            assert path in by_path, f"no record for {path}"
            assert by_path[path]["error_kind"] == kind, (path, by_path[path])
            assert by_path[path].get("truncated") == truncated or truncated is None, (path, by_path[path])
        # what came before a stalled transfer is not the page: not for the indexer
        assert by_path["/trickle-body"]["status"] == 200 and not by_path["/trickle-body"]["indexable"]
        loops = [r for r in records if "/redirect-loop" in r["url"]]
        assert any(r["error_kind"] == "redirects" for r in loops), loops
        # the ordinary site beside it: every reachable page, one request at a time per host
        fetched = {r["url"] for r in records if r.get("status") == 200}
        assert web.reachable(web.seeds()) <= fetched
        for host in web.hosts:
            reqs = sorted((r for r in web.requests if r.host == host), key=lambda r: r.start)
            assert all(b.start >= a.end for a, b in zip(reqs, reqs[1:])), "two requests at once on a host"
        # ~12 hostile URLs one after another on one host, four of them using their whole
        # 3 s deadline: the crawl is down well before the 120 s limit
        assert elapsed < 100, elapsed


def test_a_stopping_crawl_does_not_wait_for_a_trickling_server(hostile, tmp_path):
    """The time limit passes while an exchange trickles (its deadline 30 s, the default):
    the crawl is down in seconds, and the URL in flight has no record: it stays queued."""
    out = tmp_path / "out"
    proc, elapsed = crawl([hostile.base_url + "/trickle-body"], out,
                          {"CRAWLER_SOFT404_PROBE": "0", "CRAWLER_PROBE_SITEMAP_XML": "0"},
                          "--min-delay", "0.05", "--max-seconds", "3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "max seconds" in proc.stderr and "still queued 1" in proc.stderr, proc.stderr[-2000:]
    # named, though it has no record: `crawl --resume` fetches it
    assert f"still queued, no record yet (`crawl --resume` fetches them): {hostile.base_url}/trickle-body\n" \
        in proc.stderr, proc.stderr[-2000:]
    assert not (out / "pages.jsonl").read_text().strip()
    # and it has an outcome, in the file beside pages.jsonl that says what a stop left
    [left] = [json.loads(line) for line in (out / "unfetched.jsonl").read_text().splitlines()]
    assert left["url"] == hostile.base_url + "/trickle-body" and left["depth"] == 0, left
    assert left["outcome"].startswith("not fetched: the crawl stopped (max seconds"), left
    assert elapsed < 15, elapsed


def test_an_over_long_link_is_recorded_once_with_its_reason(settings):
    """A page linking a 100 KB URL: the link is not followed, and one record says why."""
    from crawler_tasks.records import Capture, capture_from_message, to_message
    from crawler_tasks.stages.parse import parse_stage
    from crawler_tasks.stages.worker import Worker

    long_url = "http://127.0.0.9/" + "a" * 100_000
    body = (f'<html><body><a href="{long_url}">long</a><a href="{long_url}">again</a>'
            '<a href="/ok">ok</a></body></html>').encode()
    from crawler_tasks.output.spool import new_batch_id, write_spool
    from crawler_tasks.records import FetchedPage

    worker = Worker.create(settings)
    batch = new_batch_id()
    page = FetchedPage(url="http://127.0.0.9/page", status=200, content_type="text/html", fetched_at="x")
    capture = Capture(page, write_spool(settings, batch, [body])[0])
    records = parse_stage(worker, [capture_from_message(to_message(capture))], batch)
    long = [r.page for r in records if r.page.error_kind == "url_too_long"]
    assert len(long) == 1 and "100017 characters" in (long[0].error or "")
    assert long[0].url.startswith("http://127.0.0.9/aaaa") and len(long[0].url) <= 1024
    main = next(r for r in records if r.page.url == "http://127.0.0.9/page")
    assert main.found.links == ["http://127.0.0.9/ok"]


def test_a_page_of_200k_links_follows_its_cap_and_loses_no_record(settings):
    """200k links: parse caps what is followed (counted), the record and the others survive."""
    import dataclasses

    from crawler_tasks.output.spool import new_batch_id, write_spool
    from crawler_tasks.records import Capture, FetchedPage, capture_from_message, record_from_message, to_message
    from crawler_tasks.stages.enqueue import enqueue_stage
    from crawler_tasks.stages.parse import parse_stage
    from crawler_tasks.stages.worker import Worker

    s = dataclasses.replace(settings, MAX_OUTLINKS_PER_PAGE=50_000, MAX_PAGES_PER_HOST=0, BLOOM_EXPECTED_URLS=5_000_000)
    body = b"<html><body>" + b"".join(b'<a href="/l%d">x</a>' % i for i in range(200_000)) + b"</body></html>"
    worker = Worker.create(s)
    batch = new_batch_id()
    pages = [FetchedPage(url="http://127.0.0.9/big", status=200, content_type="text/html", fetched_at="x"),
             FetchedPage(url="http://127.0.0.9/small", status=200, content_type="text/html", fetched_at="x")]
    refs = write_spool(s, batch, [body, b"<html><body><a href='/ok'>ok</a></body></html>"])
    captures = [Capture(page, ref) for page, ref in zip(pages, refs, strict=True)]
    records = parse_stage(worker, [capture_from_message(to_message(c)) for c in captures], batch)
    big = next(r for r in records if r.page.url.endswith("/big"))
    assert len(big.found.links) == 50_000 and (big.parsed.n_links or 0) > 50_000
    enqueued = enqueue_stage(worker, [record_from_message(to_message(r)) for r in records], batch)
    assert enqueued == 50_001   # every followed link, in chunks past Redis's argument limit
    lines = (Path(s.OUT_DIR) / "pages.jsonl").read_text().splitlines()
    assert {json.loads(line)["url"] for line in lines} >= {"http://127.0.0.9/big", "http://127.0.0.9/small"}


def test_a_crawl_stopped_at_its_limit_leaves_no_url_without_an_outcome(tmp_path):
    """Stopped at --max-seconds with most of a web still queued: each URL it knows of has
    exactly one outcome, a record in pages.jsonl or a line in unfetched.jsonl."""
    out = tmp_path / "out"
    with TestWeb(n_hosts=3, pages_per_host=40, seed=5, first_ip=44) as web:
        proc, _ = crawl(web.seeds(all_hosts=True), out, {"CRAWLER_SOFT404_PROBE": "0"},
                        "--min-delay", "0.5", "--max-seconds", "4")
        assert proc.returncode == 0, proc.stderr[-3000:]
        reachable = web.reachable()
    queued = int(re.search(r"still queued (\d+)", proc.stderr)[1])
    records = [json.loads(line) for line in (out / "pages.jsonl").read_text().splitlines()]
    recorded = [r["url"] for r in records]
    left = [json.loads(line) for line in (out / "unfetched.jsonl").read_text().splitlines()]
    assert queued > 20 and len(left) == queued, (queued, len(left))
    outcomes = recorded + [r["url"] for r in left]
    assert len(outcomes) == len(set(outcomes)), "a URL with two outcomes"
    assert all(r["outcome"].startswith("not fetched: the crawl stopped (max seconds") for r in left)
    assert {u for u in outcomes if "/private/" not in u} <= reachable   # (robots.txt disallows /private/)
