"""The fetch -> parse -> enqueue stages run in-process against a real Redis and a local
web (their messages through the JSON boundary, as between Celery tasks): robots.txt
status semantics, Retry-After, SSRF refusals, redirects, records."""
from __future__ import annotations

import dataclasses
import json
import random
import time
from collections import Counter
from pathlib import Path

import pytest

from crawler_tasks.dedup.simhash import NearPrint
from crawler_tasks.frontier import Frontier
from crawler_tasks.ops.seeds import seed_urls
from crawler_tasks.output.spool import remove_spool, spool_path
from crawler_tasks.records import capture_from_message, record_from_message, to_message
from crawler_tasks.robots.rules import MAX_ROBOTS_BYTES
from crawler_tasks.runtime.control import CrawlState
from crawler_tasks.runtime.maintenance import read_progress, run_maintenance
from crawler_tasks.settings import reset_settings
from crawler_tasks.stages.enqueue import enqueue_stage
from crawler_tasks.stages.fetch import fetch_stage
from crawler_tasks.stages.parse import parse_stage
from crawler_tasks.stages.wake import plan_wake
from crawler_tasks.stages.worker import Worker
from testweb import HostSpec, TestWeb

HTML = {"Content-Type": "text/html; charset=utf-8"}


def crawl_inline(settings, seeds: list[str], seconds: float = 20.0) -> list[dict]:
    """Run the stages in this process until the crawl finishes or time runs out: each
    fetch session hands its page groups straight to parse and enqueue."""
    settings = dataclasses.replace(settings, SESSION_MAX_S=min(settings.SESSION_MAX_S, max(1.0, seconds / 2)))
    reset_settings(settings)
    seed_urls(settings, seeds)
    worker = Worker.create(settings)

    def emit(pages, group_id):
        pages = [capture_from_message(to_message(p)) for p in pages]
        records = [record_from_message(to_message(r)) for r in parse_stage(worker, pages, group_id)]
        enqueue_stage(worker, records, group_id)

    deadline = time.time() + seconds
    while time.time() < deadline:
        batches = plan_wake(settings, worker.frontier)
        for b in batches:
            fetch_stage(worker, b.shard, b.leases, b.session_id, emit)
        if settings.CONTINUOUS:
            worker.recrawler.requeue_due()
        if not batches:
            if run_maintenance(settings, worker.frontier).state == CrawlState.FINISHED:
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
        assert old["error_kind"] is None


def test_a_redirect_target_the_filters_refuse_is_named_in_the_redirects_record(fast):
    """The target gets no record of its own (it never enters the frontier): the record of
    the URL that redirected says it was not followed, and why."""
    long_target = "/" + "a" * 5000
    routes = {"/long": (301, {"Location": long_target}, b""), "/img": (302, {"Location": "/x.png"}, b"")}
    with TestWeb(n_hosts=1, pages_per_host=1, host_specs={0: HostSpec(pages=1, extra_routes=routes)}) as web:
        recs = {r["url"]: r for r in crawl_inline(fast, [web.url(0, "/long"), web.url(0, "/img")])}
        long, img = recs[web.url(0, "/long")], recs[web.url(0, "/img")]
        assert long["status"] == 301 and long["error_kind"] == "filtered", long
        assert long["error"] == "redirect target not followed (url_too_long)"
        assert img["error"] == "redirect target not followed (extension)", img
        assert not any(r.startswith(web.url(0, "/aaa")) or r.endswith("/x.png") for r in recs)


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
        assert got["pdf"]["error_kind"] == "parse" and got["pdf"]["error"].startswith("pdf: ")   # read, unreadable
        assert all(r.get("error_kind") != "parse" for r in recs if r is not got["pdf"])


def _urlset(urls: list[str]) -> bytes:
    body = "".join(f"<url><loc>{u}</loc><priority>0.9</priority></url>" for u in urls)
    return f'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{body}</urlset>'.encode()


def test_sitemaps_from_robots_index_and_gzip_reach_unlinked_pages(fast):
    import gzip

    xml = {"Content-Type": "application/xml"}
    spec = HostSpec(pages=1, link_extra_routes=False)
    with TestWeb(n_hosts=1, pages_per_host=1, host_specs={0: spec}) as web:
        base = web.url(0, "/").rstrip("/")
        hidden = [f"{base}/hidden/{i}.html" for i in range(3)]
        for i in range(3):
            web.set_route(0, f"/hidden/{i}.html", 200, HTML,
                          b"<html><title>hidden</title><body>only in the sitemap %d</body></html>" % i)
        index = (f'<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
                 f'<sitemap><loc>{base}/sm-1.xml.gz</loc></sitemap></sitemapindex>').encode()
        web.set_route(0, "/sm-index.xml", 200, xml, index)
        web.set_route(0, "/sm-1.xml.gz", 200, {"Content-Type": "application/x-gzip"}, gzip.compress(_urlset(hidden)))
        web.set_route(0, "/robots.txt", 200, {"Content-Type": "text/plain"},
                      f"User-agent: *\nSitemap: {base}/sm-index.xml\n".encode())
        recs = crawl_inline(fast, web.seeds())
        fetched = {r["url"] for r in recs if r["status"] == 200}
        assert set(hidden) <= fetched
        kinds = {r["url"].rsplit("/", 1)[1]: r.get("sitemap") for r in recs if r.get("kind") == "sitemap"}
        assert kinds.get("sm-index.xml") == "sitemapindex" and kinds.get("sm-1.xml.gz") == "urlset"
        assert all(not r["indexable"] for r in recs if r.get("kind"))


def test_soft404_probe_is_earned_by_a_catch_all_host_and_marks_its_pages(fast, monkeypatch):
    """No probe for well-behaved hosts (their pages differ); a host that answers two URLs
    with the very same page gets one probe, and once the probe's answer shows the same
    page, later pages with it are soft 404s, not content."""
    from crawler_tasks.dedup import content

    catch_all = b"<html><title>Welcome</title><body>Nothing here, try <a href='/next.html'>this</a>.</body></html>"
    with TestWeb(n_hosts=2, pages_per_host=3) as web:
        recs = crawl_inline(fast, web.seeds(all_hosts=True))
        assert len([r for r in recs if r.get("status") == 200]) >= 6
        assert not [r for r in recs if r.get("kind") == "probe"]
        assert not any("soft404-probe" in r.path for r in web.requests)
    monkeypatch.setattr(content, "probe_url", lambda scheme, host: f"{scheme}://{host}/dead-soft404-probe.html")
    routes = {"/": (200, HTML, b'<html><body><a href="/old.html">old</a> <a href="/older.html">older</a></body></html>')}
    routes.update({path: (200, HTML, catch_all) for path in ("/old.html", "/older.html", "/next.html",
                                                             "/dead-soft404-probe.html")})
    s = dataclasses.replace(fast, KEY_PREFIX=fast.KEY_PREFIX + "b", OUT_DIR=fast.OUT_DIR + "b")
    with TestWeb(n_hosts=1, pages_per_host=0, host_specs={0: HostSpec(pages=0, extra_routes=routes,
                                                                      link_extra_routes=False)}) as web:
        recs = crawl_inline(s, web.seeds())
        probes = [r for r in recs if r.get("kind") == "probe"]
        assert len(probes) == 1 and probes[0]["status"] == 200
        later = [r for r in recs if r["url"].endswith("/next.html")]
        assert later and later[0]["soft_404"] and not later[0]["indexable"]


def test_canonical_is_a_hint_and_noindex_a_verdict(fast):
    same = b'<html><head><link rel="canonical" href="/c"></head><body>the canonical page</body></html>'
    routes = {"/": (200, HTML, b'<html><body><a href="/c">c</a><a href="/a">a</a><a href="/b">b</a>'
                               b'<a href="/d">d</a><a href="/e">e</a></body></html>'),
              "/a": (200, HTML, b'<html><head><link rel="canonical" href="/c"></head><body>variant a</body></html>'),
              "/b": (200, HTML, b'<html><head><meta name="robots" content="noindex"></head><body>b</body></html>'),
              "/c": (200, HTML, b'<html><body>the canonical page</body></html>'),
              "/d": (200, HTML, same),
              "/e": (200, HTML, b'<html><head><link rel="canonical" href="https://elsewhere.example/e">'
                               b'</head><body>an off-site canonical</body></html>')}
    spec = HostSpec(pages=0, extra_routes=routes, link_extra_routes=False)
    with TestWeb(n_hosts=1, pages_per_host=1, host_specs={0: spec}) as web:
        # the off-site canonical is queued too (and gets its own record, a dns error): not a page of the host
        recs = {r["url"].rsplit("/", 1)[1]: r for r in crawl_inline(fast, web.seeds()) if r["url"].startswith(web.url(0, "/"))}
        # other content than its canonical, or a canonical never fetched: still in the feed
        assert recs["a"]["canonical"] == web.url(0, "/c") and recs["a"]["indexable"]
        assert recs["e"]["canonical"] == "https://elsewhere.example/e" and recs["e"]["indexable"]
        # the canonical target fetched with the same content: the variant is its duplicate
        assert recs["d"]["duplicate_of"] == web.url(0, "/c") and not recs["d"]["indexable"]
        assert recs["b"]["noindex"] and not recs["b"]["indexable"]
        assert recs["c"]["indexable"]
        assert paths(web, 0).count("/c") == 1


def test_pages_without_text_are_not_duplicates_of_one_another(fast):
    """Empty text has no fingerprint: two image-only pages (or two bombs cut to nothing)
    are neither each other's duplicate nor indexable; pages with text still dedup."""
    routes = {"/": (200, HTML, b'<html><body><a href="/i1">1</a><a href="/i2">2</a><a href="/t1">t</a>'
                               b'<a href="/t2">t</a></body></html>'),
              "/i1": (200, HTML, b'<html><body><img src="/a.png"></body></html>'),
              "/i2": (200, HTML, b'<html><body><img src="/b.png"><div></div></body></html>'),
              "/t1": (200, HTML, b'<html><body><p>the same words on two pages</p></body></html>'),
              "/t2": (200, HTML, b'<html><body><p>the same words on two pages</p></body></html>')}
    spec = HostSpec(pages=0, extra_routes=routes, link_extra_routes=False)
    with TestWeb(n_hosts=1, pages_per_host=1, host_specs={0: spec}) as web:
        recs = {r["url"].rsplit("/", 1)[1]: r for r in crawl_inline(fast, web.seeds())}
    for name in ("i1", "i2"):
        assert recs[name]["status"] == 200 and not recs[name].get("fingerprint"), recs[name]
        assert not recs[name].get("duplicate_of") and not recs[name]["indexable"]
    assert [bool(recs[n].get("duplicate_of")) for n in ("t1", "t2")].count(True) == 1


def test_host_budget_and_query_variant_trap(fast):
    links = "".join(f'<a href="/facet?color={i}">{i}</a>' for i in range(30))
    links += "".join(f'<a href="/deep/{i}.html">d{i}</a>' for i in range(30))
    routes = {"/": (200, HTML, f"<html><body>{links}</body></html>".encode())}
    spec = HostSpec(pages=0, extra_routes=routes, link_extra_routes=False)
    s = dataclasses.replace(fast, MAX_QUERY_VARIANTS=5, MAX_PAGES_PER_HOST=100, MAX_PAGES_PER_SEED_HOST=20,
                            SOFT404_PROBE=False, PROBE_SITEMAP_XML=False)
    with TestWeb(n_hosts=1, pages_per_host=1, host_specs={0: spec}) as web:
        recs = crawl_inline(s, web.seeds())
        facets = [r for r in recs if "/facet?" in r["url"]]
        assert len(facets) == 5
        assert len(recs) <= 20  # the seed host's budget
        from crawler_tasks.runtime.maintenance import read_progress as rp
        stats = rp(s).stats
        assert stats["frontier/dropped/query_variants"] == 25
        assert stats["frontier/dropped/host_budget"] > 0


def test_an_item_path_with_hundreds_of_real_pages_is_crawled_whole(fast):
    """``/item?id=N`` (a forum, a news site, Hacker News): one path, hundreds of distinct
    pages. The query-variant bound of the defaults does not cut them (it cut at 100)."""
    n = 150
    links = "".join(f'<a href="/item?id={i}">{i}</a>' for i in range(n))
    routes = {"/": (200, HTML, f"<html><body>{links}</body></html>".encode())}
    rnd = random.Random(7)
    story = [" ".join("".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(6)) for _ in range(40))
             for _ in range(n)]   # real stories differ in words, not only in numbers
    routes.update({f"/item?id={i}": (200, HTML, f"<html><body><h1>Story {i}</h1><p>{story[i]}</p></body></html>".encode())
                   for i in range(n)})
    spec = HostSpec(pages=0, extra_routes=routes, link_extra_routes=False)
    with TestWeb(n_hosts=1, pages_per_host=1, host_specs={0: spec}) as web:
        recs = crawl_inline(fast, web.seeds(), seconds=60)
        got = {r["url"] for r in recs if "/item?" in r["url"] and r["status"] == 200}
        assert len(got) == n, Counter(str(r.get("error")) for r in recs)


def test_crawl_delay_is_honoured(fast):
    spec = HostSpec(pages=4, robots_txt="User-agent: *\nCrawl-delay: 0.6\nDisallow: /private/\n")
    s = dataclasses.replace(fast, SOFT404_PROBE=False, PROBE_SITEMAP_XML=False)
    with TestWeb(n_hosts=1, pages_per_host=4, host_specs={0: spec}) as web:
        crawl_inline(s, web.seeds())
        reqs = sorted(web.requests, key=lambda r: r.start)
        assert len(reqs) >= 5
        gaps = [b.start - a.end for a, b in zip(reqs, reqs[1:])]
        assert min(gaps) >= 0.6 - 0.02, gaps


def test_backoff_on_server_errors_then_error_record(fast):
    routes = {"/": (503, HTML, b"down")}
    spec = HostSpec(pages=0, extra_routes=routes, link_extra_routes=False)
    s = dataclasses.replace(fast, SOFT404_PROBE=False, PROBE_SITEMAP_XML=False, MAX_RETRIES=2,
                            BACKOFF_BASE_S=0.5, BACKOFF_MAX_S=5.0)
    with TestWeb(n_hosts=1, pages_per_host=1, host_specs={0: spec}) as web:
        recs = crawl_inline(s, web.seeds(), seconds=8)
        home = [r for r in web.requests if r.path == "/"]
        assert len(home) == 3  # first try + 2 retries
        gaps = [b.start - a.end for a, b in zip(home, home[1:])]
        # exponential backoff: 2x the base, with +-25 % jitter on each gap (ratio >= 1.2)
        assert gaps[1] > gaps[0] * 1.05
        assert [r["status"] for r in recs] == [503]


def test_static_resolve_override_connects_to_checked_address(fast):
    with TestWeb(n_hosts=1, pages_per_host=1) as web:
        ip, port = web.hosts[0].split(":")
        s = dataclasses.replace(fast, RESOLVE=(f"site-a.test={ip}",), SOFT404_PROBE=False,
                                PROBE_SITEMAP_XML=False, MAX_DEPTH=0)
        recs = crawl_inline(s, [f"http://site-a.test:{port}/"])
        assert [r["status"] for r in recs] == [200] and recs[0]["ip"] == ip
        assert {r.headers.get("host") for r in web.requests} == {f"site-a.test:{port}"}


def test_near_duplicates_with_changing_timestamp(fast):
    import random as _r

    rng = _r.Random(4)
    vocab = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9))) for _ in range(900)]
    words = " ".join(rng.choice(vocab[:450]) for _ in range(1500))
    page = "<html><body><p>{}</p><p>Generated at 2026-11-30 {} UTC, visit {}</p></body></html>"
    routes = {f"/n{i}": (200, HTML, page.format(words, f"10:{i:02d}:{i:02d}", 1000 + i).encode()) for i in range(4)}
    other = " ".join(rng.choice(vocab[450:]) for _ in range(1500))
    routes["/other"] = (200, HTML, f"<html><body><p>{other}</p></body></html>".encode())
    with TestWeb(n_hosts=1, pages_per_host=1, host_specs={0: HostSpec(extra_routes=routes)}) as web:
        recs = {r["url"].rsplit("/", 1)[1]: r for r in crawl_inline(fast, web.seeds())}
        near = [k for k in ("n0", "n1", "n2", "n3") if recs[k].get("near_duplicate_of")]
        assert len(near) == 3 and not recs["other"].get("near_duplicate_of")
        assert all(not recs[k]["indexable"] for k in near)


def test_indexer_feed_jsonl_and_stream(fast, rclient):
    routes = {"/dup": (200, HTML, b"<html><body><p>same text here</p></body></html>"),
              "/dup2": (200, HTML, b"<html><body><p>same  text here</p></body></html>"),
              "/noidx": (200, HTML, b'<html><head><meta name="robots" content="noindex"></head><body>x</body></html>')}
    with TestWeb(n_hosts=1, pages_per_host=2, host_specs={0: HostSpec(extra_routes=routes)}) as web:
        recs = crawl_inline(fast, web.seeds())
        feed_path = Path(fast.OUT_DIR) / "feed.jsonl"
        feed = [json.loads(line) for line in feed_path.read_text().splitlines()]
        indexable = {r["url"] for r in recs if r["indexable"]}
        assert {f["url"] for f in feed} == indexable
        assert web.url(0, "/noidx") not in indexable
        assert len({web.url(0, "/dup"), web.url(0, "/dup2")} & indexable) == 1
        home = next(f for f in feed if f["url"] == web.url(0, "/"))
        assert home["text"] and home["outlinks"] and all(set(o) == {"url", "text", "rel"} for o in home["outlinks"])
        import jsonschema

        schema = json.loads((Path(__file__).parent.parent / "crawler_tasks" / "output" / "feed.schema.json").read_text())
        for record in feed:   # the real output of a crawl, against the documented schema
            jsonschema.validate(record, schema)
        # an indexer reads the same records from the stream with a consumer group
        stream = f"{fast.KEY_PREFIX}:{{g}}:feed"
        rclient.xgroup_create(stream, "indexer", id="0")
        got = rclient.xreadgroup("indexer", "i1", {stream: ">"}, count=1000)
        urls = {json.loads(fields["record"])["url"] for _, entries in got for _, fields in entries}
        assert urls == indexable


def test_per_ip_politeness_shares_one_gap(fast):
    # two host names on one address: with per-IP politeness their requests never come
    # closer than the delay; hosts are told apart by name (Host header) via --resolve
    with TestWeb(n_hosts=1, pages_per_host=4) as web:
        ip, port = web.hosts[0].split(":")
        s = dataclasses.replace(fast, RESOLVE=(f"one.test={ip}", f"two.test={ip}"), PER_IP_POLITENESS=True,
                                MIN_DELAY_S=0.4, SOFT404_PROBE=False, PROBE_SITEMAP_XML=False, MAX_DEPTH=1)
        crawl_inline(s, [f"http://one.test:{port}/", f"http://two.test:{port}/"], seconds=15)
        reqs = sorted(web.requests, key=lambda r: r.start)
        assert {r.headers.get("host", "").split(":")[0] for r in reqs} == {"one.test", "two.test"}
        gaps = [b.start - a.end for a, b in zip(reqs, reqs[1:])]
        assert len(reqs) >= 6 and min(gaps) >= 0.4 - 0.02, gaps


def test_continuous_recrawl_adapts_to_change_and_uses_304(fast):
    import threading

    # a budget that binds (5 pages could take 10 revisits/s); by age, a faster page is worth more visits
    s = dataclasses.replace(fast, CONTINUOUS=True, RECRAWL_INITIAL_S=1.0, RECRAWL_MIN_S=0.5, RECRAWL_MAX_S=30.0,
                            RECRAWL_BUDGET_PER_S=2.0, RECRAWL_OBJECTIVE="age", RECRAWL_CHECK_S=0.5,
                            SOFT404_PROBE=False, PROBE_SITEMAP_XML=False, MIN_DELAY_S=0.05)
    with TestWeb(n_hosts=1, pages_per_host=3) as web:
        web.set_route(0, "/news.html", 200, HTML, b"<html><body>news 0</body></html>")
        stop = threading.Event()

        def churn() -> None:  # the news page changes every 0.3 s
            n = 0
            while not stop.wait(0.3):
                n += 1
                web.set_route(0, "/news.html", 200, HTML, b"<html><body>news %d breaking</body></html>" % n)

        t = threading.Thread(target=churn, daemon=True)
        t.start()
        try:
            recs = crawl_inline(s, web.seeds() + [web.url(0, "/news.html")], seconds=9)
        finally:
            stop.set()
            t.join()
        visits = Counter(r.path for r in web.requests)
        static = [visits[f"/p/{i}.html"] for i in range(3)]
        assert visits["/news.html"] > max(static) >= 2, visits
        assert any(r["status"] == 304 for r in recs)  # unchanged pages answered our conditional GET
        assert any("if-none-match" in r.headers for r in web.requests)
        news = [r["revisit_s"] for r in recs if r["url"].endswith("/news.html")]
        page = [r["revisit_s"] for r in recs if r["url"].endswith("/p/0.html")]
        assert news[-1] < page[-1]  # the changing page is revisited sooner
        print(f"revisit intervals: news {news}, static page {page}; visits {dict(visits)}")


def test_host_of_duplicates_is_demoted(fast):
    import random as _r

    rng = _r.Random(7)
    vocab = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(7)) for _ in range(300)]
    text = " ".join(rng.choice(vocab) for _ in range(800))
    links = "".join(f'<a href="/item/{i}.html">i</a>' for i in range(30))
    routes = {"/": (200, HTML, f"<html><body>{links}</body></html>".encode())}
    routes.update({f"/item/{i}.html": (200, HTML, f'<html><body><p>{text}</p><p>item {i}</p>'
                                                   f'<a href="/more/{i}.html">m</a></body></html>'.encode())
                   for i in range(30)})
    s = dataclasses.replace(fast, DUP_TRAP_MIN_PAGES=10, SOFT404_PROBE=False, PROBE_SITEMAP_XML=False)
    with TestWeb(n_hosts=1, pages_per_host=1, host_specs={0: HostSpec(extra_routes=routes)}) as web:
        crawl_inline(s, web.seeds(), seconds=10)
        stats = read_progress(s).stats
        assert stats.get("frontier/demoted_duplicate_host", 0) > 0
        assert stats["dedup/near_duplicate"] >= 20


def test_warc_revisits_for_identical_payloads_and_outlink_metadata(fast):
    import subprocess
    import sys

    from warcio.archiveiterator import ArchiveIterator

    same = b"<html><body><p>byte for byte the same</p></body></html>"
    routes = {"/a": (200, HTML, same), "/b": (200, HTML, same)}
    with TestWeb(n_hosts=1, pages_per_host=1, host_specs={0: HostSpec(extra_routes=routes)}) as web:
        crawl_inline(fast, web.seeds())
        kinds: dict[str, list[str]] = {}
        warcs = sorted((Path(fast.OUT_DIR) / "warc").glob("*.warc.gz"))
        for path in warcs:
            with open(path, "rb") as fh:
                for rec in ArchiveIterator(fh):
                    uri = rec.rec_headers.get_header("WARC-Target-URI")
                    if uri:
                        kinds.setdefault(uri.rsplit("/", 1)[1], []).append(rec.rec_type)
        pair = kinds["a"] + kinds["b"]
        assert pair.count("revisit") == 1 and pair.count("response") == 1
        assert "metadata" in kinds[""]  # the home page's outlinks
        check = subprocess.run([sys.executable, "-m", "warcio.cli", "check", *map(str, warcs)],
                               capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr


def test_robots_txt_and_each_of_its_redirect_hops_are_archived(fast):
    from warcio.archiveiterator import ArchiveIterator

    routes = {"/robots.txt": (301, {"Location": "/rules.txt"}, b""),
              "/rules.txt": (200, {"Content-Type": "text/plain"}, b"User-agent: *\nDisallow: /private/\n")}
    with TestWeb(n_hosts=1, pages_per_host=2,
                 host_specs={0: HostSpec(extra_routes=routes, link_extra_routes=False)}) as web:
        crawl_inline(fast, web.seeds())
        responses: dict[str, int] = {}
        for path in (Path(fast.OUT_DIR) / "warc").glob("*.warc.gz"):
            with open(path, "rb") as fh:
                for rec in ArchiveIterator(fh):
                    if rec.rec_type == "response":
                        uri = rec.rec_headers.get_header("WARC-Target-URI")
                        responses[uri.split("/", 3)[3]] = int(rec.http_headers.get_statuscode())
        assert responses["robots.txt"] == 301 and responses["rules.txt"] == 200
        assert responses[""] == 200   # and the pages, as before


APP_JS = b"""
fetch('/data.json').then(r => r.json()).then(d => {
  const root = document.getElementById('root');
  root.innerHTML = '<h1>' + d.title + '</h1><p>' + d.text + '</p>' +
    d.pages.map(i => '<a href="/page/' + i + '.html">page ' + i + '</a>').join(' ');
});
"""


def test_app_shell_is_rendered_within_the_hosts_politeness(fast):
    """An app shell whose text and 10 links come from its script (with an XHR of the same
    host) is rendered; a robots-disallowed script is never fetched; the static host is
    never rendered; every request of the browser is one of the host's own, one at a time."""
    pytest.importorskip("playwright")
    from crawler_tasks.render.policy import RenderPolicy

    s = dataclasses.replace(fast, RENDER="auto", MIN_DELAY_S=0.05, SOFT404_PROBE=False, PROBE_SITEMAP_XML=False)
    if RenderPolicy(s).executable is None:
        pytest.skip("no Chromium on this machine")
    shell = (b'<!doctype html><html><head><title>app</title><script src="/app.js"></script>'
             b'<script src="/blocked.js"></script></head><body><div id="root"></div>'
             b'<noscript>You need to enable JavaScript to run this app.</noscript></body></html>')
    data = json.dumps({"title": "Rendered heading", "text": "words written by the script " * 20,
                       "pages": list(range(10))}).encode()
    routes = {"/": (200, HTML, shell),
              "/app.js": (200, {"Content-Type": "application/javascript"}, APP_JS),
              "/blocked.js": (200, {"Content-Type": "application/javascript"}, b"document.title='bad'"),
              "/data.json": (200, {"Content-Type": "application/json"}, data)}
    for i in range(10):
        routes[f"/page/{i}.html"] = (200, HTML, f"<html><body><p>static page {i} of the app</p></body></html>".encode())
    specs = {0: HostSpec(pages=0, extra_routes=routes, link_extra_routes=False,
                         robots_txt="User-agent: *\nDisallow: /blocked.js\n")}
    with TestWeb(n_hosts=2, pages_per_host=4, host_specs=specs) as web:
        recs = crawl_inline(s, web.seeds(), seconds=60)
        by_url = {r["url"]: r for r in recs}
        app = paths(web, 0)
        assert "/blocked.js" not in app and "/app.js" in app and "/data.json" in app
        assert all(web.url(0, f"/page/{i}.html") in by_url for i in range(10))
        assert by_url[web.url(0, "/")].get("rendered")
        assert not any(r.get("rendered") for r in recs if r["url"].startswith(web.url(1, "/")))
        feed = [json.loads(line) for line in (Path(s.OUT_DIR) / "feed.jsonl").read_text().splitlines()]
        home = next(f for f in feed if f["url"] == web.url(0, "/"))
        assert "words written by the script" in home["text"]
        for host in web.hosts:   # the browser's requests too: one at a time per host
            reqs = sorted((r for r in web.requests if r.host == host), key=lambda r: r.start)
            assert all(b.start >= a.end for a, b in zip(reqs, reqs[1:], strict=False))


def test_a_parse_task_run_again_after_its_spool_was_removed(fast):
    """A Redis restart from its append-only file can hand a parse task out again after its
    first run removed the spool. When that run had handed its records on (its ack was lost
    with Redis), the second run does nothing: no page is fetched or recorded twice. When
    it stopped before that (a crash in between), its pages are fetched again, or their
    links would be lost to the crawl, and they are not recorded as parse errors."""
    with TestWeb(n_hosts=1, pages_per_host=6, seed=5) as web:
        fast = dataclasses.replace(fast, MAX_PAGES=0)
        reset_settings(fast)
        seed_urls(fast, web.seeds())
        worker = Worker.create(fast)
        stopped: list[str] = []   # pages of a first run that stopped before handing its records on
        handed: list[str] = []    # pages of a first run that handed them on

        def emit(pages, group_id):
            messages = [to_message(p) for p in pages]
            bodies = [p.page.url for p in pages if p.body is not None]
            records = parse_stage(worker, [capture_from_message(m) for m in messages], group_id)
            remove_spool(fast, group_id)   # as the task does once it sent the records on
            if bodies and not stopped:   # the first run's records are lost: the task runs again
                records = parse_stage(worker, [capture_from_message(m) for m in messages], group_id)
                stopped.extend(bodies)
                assert records is not None and not {r.page.url for r in records} & set(bodies)
            assert records is not None
            enqueue_stage(worker, [record_from_message(to_message(r)) for r in records], group_id)
            if bodies and stopped and not handed and not set(bodies) & set(stopped):
                assert parse_stage(worker, [capture_from_message(m) for m in messages], group_id) is None
                handed.extend(bodies)

        deadline = time.time() + 20
        while time.time() < deadline:
            batches = plan_wake(fast, worker.frontier)
            for b in batches:
                fetch_stage(worker, b.shard, b.leases, b.session_id, emit)
            if not batches and run_maintenance(fast, worker.frontier).state == CrawlState.FINISHED:
                break
            time.sleep(0.02)
        assert stopped and handed
        requested = Counter(f"http://{r.host}{r.path}" for r in web.requests)
        assert all(requested[url] == 2 for url in stopped), (stopped, requested)
        assert all(requested[url] == 1 for url in handed), (handed, requested)
        recs = [json.loads(line) for line in (Path(fast.OUT_DIR) / "pages.jsonl").read_text().splitlines()]
        assert not [r for r in recs if r.get("error_kind") == "parse"]
        recorded = Counter(r["url"] for r in recs)
        assert all(recorded[url] == 1 for url in stopped + handed), recorded


def test_a_parse_task_whose_worker_died_is_run_again_from_where_it_stopped(fast):
    """Delivered again (maintenance, past the group's deadline), a parse task goes on from
    where its dead run stopped: after the feed, it parses the spool again and writes no
    feed line twice; after it kept its enqueue message, it sends that one (unless a resume
    moved its feed lines aside: they are written again); once the records are written,
    nothing. The spool file stays until the records are sent on."""
    from crawler_tasks.output.spool import kept_enqueue
    from crawler_tasks.tasks import _enqueue_message

    with TestWeb(n_hosts=1, pages_per_host=8, seed=7) as web:
        fast = dataclasses.replace(fast, MAX_PAGES=0, PARSE_GROUP_PAGES=64, PARSE_GROUP_S=30.0)
        reset_settings(fast)
        seed_urls(fast, sorted(web.reachable())[:6])   # no page's links are enqueued here
        worker = Worker.create(fast)
        groups: list[tuple[list[dict], str]] = []
        deadline = time.time() + 20
        while time.time() < deadline and sum(len(m) for m, _ in groups) < 6:
            for b in plan_wake(fast, worker.frontier):
                fetch_stage(worker, b.shard, b.leases, b.session_id,
                            lambda pages, gid: groups.append(([to_message(p) for p in pages], gid)))
            time.sleep(0.02)
        messages, group_id = max(groups, key=lambda g: len(g[0]))
        assert len(messages) >= 2

        def run() -> list | None:
            return _enqueue_message(worker, [capture_from_message(m) for m in messages], group_id)

        feed = Path(fast.OUT_DIR) / "feed.jsonl"
        first = run()   # the run that dies before it sends its message on
        lines = feed.read_text().splitlines()
        assert first and lines and Path(spool_path(fast, group_id)).exists()
        assert run() == first and worker.control.stats().get("parse/redelivered_resent") == 1
        feed.write_text("")   # a resume moved its feed lines aside as uncommitted, and dropped the markers
        Path(spool_path(fast, group_id)).with_suffix(".feed").unlink()
        assert run() == first and feed.read_text().splitlines() == lines   # written again, from a parse
        Path(spool_path(fast, group_id)).with_suffix(".msg").unlink()   # died before it kept the message
        assert run() == first == kept_enqueue(fast, group_id)           # parsed again from the spool
        assert feed.read_text().splitlines() == lines                   # each feed line once
        enqueue_stage(worker, [record_from_message(r) for r in first], group_id)
        assert run() is None and not Path(spool_path(fast, group_id)).exists()
        recorded = Counter(json.loads(line)["url"] for line in (Path(fast.OUT_DIR) / "pages.jsonl").read_text()
                           .splitlines())
        assert set(recorded.values()) == {1}


def test_first_tasks_of_a_threads_pool_share_one_stage_state(settings):
    """A fetch worker's sessions start together: they must get one Worker (one WARC file,
    one robots and DNS cache per process), not one each."""
    import threading

    from crawler_tasks import tasks

    tasks._reset_after_fork()
    start = threading.Barrier(8)
    got: list[Worker] = []

    def take() -> None:
        start.wait()
        got.append(tasks.get_worker())

    threads = [threading.Thread(target=take) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    try:
        assert len(got) == 8 and len({id(w) for w in got}) == 1
    finally:
        tasks._reset_after_fork()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")   # the injected error
def test_a_host_whose_turn_failed_to_finish_is_given_back_not_stuck(fast, monkeypatch):
    """A Redis error while a turn is finished ends its host's turn; the host must go
    back to the frontier then, not stay leased (and renewed) until the lease runs out."""
    import redis

    from crawler_tasks.stages import fetch as fetch_module

    finish = fetch_module.FetchSession._finish
    failed: list[str] = []

    def flaky(self, host, turn):
        if not failed:
            failed.append(host)
            raise redis.ConnectionError("injected: the store went away")
        return finish(self, host, turn)

    monkeypatch.setattr(fetch_module.FetchSession, "_finish", flaky)
    with TestWeb(n_hosts=1, pages_per_host=4, seed=3) as web:
        records = crawl_inline(dataclasses.replace(fast, LEASE_S=120.0), web.seeds(), seconds=10.0)
        fetched = {r["url"] for r in records if r.get("status") == 200}
        assert failed and web.reachable(web.seeds()) <= fetched


def test_a_host_that_runs_dry_gets_its_links_without_waiting_for_the_group(fast):
    """A host whose queue runs dry waits for links in pages not yet handed on: the
    session hands its group on at once and leases the host again as soon as they are
    queued, though another host keeps the session busy and the group would not be due
    for a long while (PARSE_GROUP_S). A chain (each page links the next) needs one such
    round per page: without it, one page a session."""
    chain = 6
    page = "<html><body><p>chain page {i}</p><a href='/c/{n}.html'>next</a></body></html>"
    routes = {"/": (200, HTML, page.format(i=0, n=1).encode())}
    routes.update({f"/c/{i}.html": (200, HTML, page.format(i=i, n=i + 1 if i < chain else 1).encode())
                   for i in range(1, chain + 1)})
    specs = {0: HostSpec(pages=1, extra_routes=routes, link_extra_routes=False),
             1: HostSpec(pages=100, robots_txt="User-agent: *\nCrawl-delay: 0.3\n")}
    s = dataclasses.replace(fast, SHARDS=1, PARSE_GROUP_S=60.0, PARSE_GROUP_PAGES=1000, SOFT404_PROBE=False,
                            PROBE_SITEMAP_XML=False)
    with TestWeb(n_hosts=2, pages_per_host=1, cross_host_ratio=0.0, host_specs=specs) as web:
        crawl_inline(s, web.seeds(all_hosts=True), seconds=8.0)
        assert {f"/c/{i}.html" for i in range(1, chain + 1)} <= set(paths(web, 0))
        # the busy host kept its pace meanwhile (one session held both hosts)
        busy = sorted((r for r in web.requests if r.host == web.hosts[1]), key=lambda r: r.start)
        assert len(busy) > 10
        assert min(b.start - a.end for a, b in zip(busy, busy[1:])) >= 0.3 - 0.02


@pytest.mark.parametrize(("wait_s", "soon"), [(0.0, True), (0.2, True), (100.0, False)])
def test_an_idle_session_lingers_only_for_hosts_ready_soon(fast, wait_s, soon):
    """An idle session waits a little for hosts about to be ready; one that only has hosts
    waiting long (for robots.txt, a long delay) ends at once, and so does the crawl."""
    from crawler_tasks.records import Action
    from crawler_tasks.stages.fetch import FetchSession

    s = dataclasses.replace(fast, SHARDS=1)
    reset_settings(s)
    seed_urls(s, ["http://127.0.0.9:9/a.html"])
    worker = Worker.create(s)
    (lease,) = worker.frontier.get_urls(0, 1)
    assert worker.frontier.finish(lease, time.time() + wait_s, Action.KEEP).ok
    session = FetchSession(worker, 0, "b1", lambda pages, group_id: None)
    assert session._nothing_ready_soon() is not soon
    worker.frontier.get_urls(0, 1, now=time.time() + wait_s + 1)   # leased: nothing left waiting
    assert session._nothing_ready_soon()


def test_a_busy_session_leases_no_more_hosts_and_new_ones_queue_behind_due_ones(fast):
    """A new host is due when leased, not at time 0: hosts whose next page is due sooner go
    first. While a held host waits past its time (the pool is busy), the session leases no
    more: at 5,000 hosts every host's robots.txt went before any page (first page at 6-10 s)."""
    from crawler_tasks.stages.fetch import FetchSession

    s = dataclasses.replace(fast, SHARDS=1)
    reset_settings(s)
    seed_urls(s, [f"http://127.0.0.{9 + i}:9/a.html" for i in range(6)])
    worker = Worker.create(s)
    session = FetchSession(worker, 0, "b1", lambda pages, group_id: None)
    before = time.time()
    session._take(worker.frontier.get_urls(0, 1), own=True)
    (te, _, host), = session.heap
    assert before <= te <= time.time()
    session.heap[0] = (time.time() - 1.0, 0, host)   # due a second ago, still waiting: the pool is full
    session._lease_more()
    assert len(session.waiting) == 1
    session.heap[0] = (time.time() + 1.0, 0, host)   # waiting for its delay: room for more hosts
    session._lease_more()
    assert len(session.waiting) == 6


def test_held_hosts_wait_in_the_heap_not_in_threads(fast):
    """A session holds every host of the crawl at once, each at its delay, with four
    exchange threads for forty hosts: a waiting host holds no thread. Politeness holds
    for every host, and the hosts were in flight together."""
    n_hosts, delay = 40, 0.5
    spec = HostSpec(robots_txt=f"User-agent: *\nCrawl-delay: {delay}\n")
    # one session slot: wake gives it every host (it cuts ready hosts over free slots), and
    # this loop runs sessions one after the other
    s = dataclasses.replace(fast, SHARDS=1, FETCH_BATCH=n_hosts, FETCH_MAX_EXCHANGES=4, SOFT404_PROBE=False,
                            PROBE_SITEMAP_XML=False, MAX_FETCH_SESSIONS=1)
    with TestWeb(n_hosts=n_hosts, pages_per_host=4, cross_host_ratio=0.0,
                 host_specs={i: spec for i in range(n_hosts)}) as web:
        reset_settings(s)
        seed_urls(s, web.seeds(all_hosts=True))
        worker = Worker.create(s)

        def emit(pages, group_id):
            records = parse_stage(worker, [capture_from_message(to_message(p)) for p in pages], group_id)
            enqueue_stage(worker, [record_from_message(to_message(r)) for r in records], group_id)

        deadline = time.time() + 30
        while time.time() < deadline:
            batches = plan_wake(s, worker.frontier)
            for b in batches:
                fetch_stage(worker, b.shard, b.leases, b.session_id, emit)
            if not batches and run_maintenance(s, worker.frontier).state == CrawlState.FINISHED:
                break
            time.sleep(0.02)
        assert web.reachable(web.seeds(all_hosts=True)) <= {f"http://{r.host}{r.path}" for r in web.requests}
        assert worker.exchanges.peak <= 4 and worker.exchanges.threads <= 4
        for host in web.hosts:
            reqs = sorted((r for r in web.requests if r.host == host), key=lambda r: r.start)
            assert all(b.start - a.end >= delay - 0.002 for a, b in zip(reqs, reqs[1:])), host
        # the hosts were in flight together, more of them than exchange threads (a thread per
        # held host would have had 4 at a time): hosts between their first and last request
        # at the crawl's middle request (a count, whatever the machine's load)
        starts = sorted(r.start for r in web.requests)
        middle = starts[len(starts) // 2]
        spans = {host: [r for r in web.requests if r.host == host] for host in web.hosts}
        together = sum(1 for reqs in spans.values()
                       if reqs and min(r.start for r in reqs) <= middle <= max(r.end for r in reqs))
        assert together > 2 * 4, together


def test_a_host_leased_again_while_its_last_turn_ends_is_not_lost(fast, monkeypatch):
    """A turn gives its host back (its queue ran dry) and then archives its exchange; a
    slow disk makes that long. Links from an earlier group bring the host back meanwhile,
    and the session leases it again: the new lease waits for the old turn's end. (It used
    to take the new turn for the old one's: the session ended under it and the host stayed
    leased, its parked URL unacked, until the lease ran out.)"""
    from crawler_tasks.stages.fetch import session as session_module

    archive = session_module.archive_turn

    def slow_disk(w, turn, end):
        time.sleep(0.3)
        return archive(w, turn, end)

    monkeypatch.setattr(session_module, "archive_turn", slow_disk)
    chain = 5
    page = "<html><body><p>{c} chain page {i}</p><a href='/{c}/{n}.html'>next</a></body></html>"
    routes = {"/": (200, HTML, b"<html><body><a href='/a/1.html'>a</a><a href='/b/1.html'>b</a></body></html>")}
    routes.update({f"/{c}/{i}.html": (200, HTML, page.format(c=c, i=i, n=i + 1).encode())
                   for c in "ab" for i in range(1, chain + 1)})
    specs = {0: HostSpec(pages=1, extra_routes=routes, link_extra_routes=False)}
    s = dataclasses.replace(fast, SHARDS=1, PARSE_GROUP_S=0.05, LEASE_S=120.0, SOFT404_PROBE=False,
                            PROBE_SITEMAP_XML=False)
    with TestWeb(n_hosts=1, pages_per_host=1, host_specs=specs) as web:
        t0 = time.monotonic()
        crawl_inline(s, web.seeds(), seconds=30.0)
        took = time.monotonic() - t0
        wanted = {f"/{c}/{i}.html" for c in "ab" for i in range(1, chain + 1)}
        assert wanted <= set(paths(web, 0)), (sorted(set(paths(web, 0))), took)
        assert took < 25.0   # the crawl ended by itself: no host waited out its lease


def test_a_short_pages_copy_beyond_near_dup_bits_is_found_on_its_check(fast):
    """A page of ~100 words and its repost (a 5-word line more) land 6-8 bits apart: the
    index takes the copy on its NearPrint's check (same title, same links), which the
    parse stage hands it; another such copy with another title is not taken."""
    from crawler_tasks.dedup.simhash import hamming
    from crawler_tasks.parse.page import analyse

    page = "<html><head><title>{}</title></head><body><p>{}</p><p><a href='/'>home</a></p></body></html>"
    rng = random.Random(5)
    vocab = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9))) for _ in range(900)]

    def near(body: bytes) -> NearPrint:
        found = analyse(body, "http://x.test/", {}, fast.TEXT_MODE, fast.MAX_TEXT_CHARS, fast.SIMHASH_MAX_CHARS).near
        assert found is not None
        return found

    def wide(a: NearPrint, b: NearPrint) -> bool:   # beyond 5 bits, within 8, agreeing on a block
        return 5 < hamming(a.simhash, b.simhash) <= 8 and any((a.simhash ^ b.simhash) >> 16 * k & 0xFFFF == 0
                                                             for k in range(4))

    while True:   # a pair as the bench's misses, and a third page as far from both
        text = " ".join(rng.choices(vocab, k=100))
        bodies = {"original": page.format("Notes", text).encode()}
        bodies["copy"] = page.format("Notes", "reposted by " + " ".join(rng.choices(vocab, k=3)) + " " + text).encode()
        bodies["renamed"] = page.format("Other notes", "shared by " + " ".join(rng.choices(vocab, k=3)) + " " + text).encode()
        a, b, c = map(near, bodies.values())
        if wide(a, b) and wide(a, c) and wide(b, c):
            break
    assert hamming(a.check, b.check) <= 10 < min(hamming(a.check, c.check), hamming(b.check, c.check))
    routes = {f"/{name}": (200, HTML, body) for name, body in bodies.items()}
    with TestWeb(n_hosts=1, pages_per_host=1, host_specs={0: HostSpec(extra_routes=routes)}) as web:
        recs = {r["url"].rsplit("/", 1)[1]: r for r in crawl_inline(fast, web.seeds())}
        assert bool(recs["original"].get("near_duplicate_of")) != bool(recs["copy"].get("near_duplicate_of"))
        assert not recs["renamed"].get("near_duplicate_of")
