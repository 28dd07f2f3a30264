"""A local web built to waste a crawler's budget: duplicate spellings, session ids,
a calendar, facets, deep relative paths, nofollow, canonical, base href, a sitemap-only
page, redirect chains and loops, a mirror host. The crawl must fetch every allowed page
once, no variant twice, and stay within the trap budgets."""
from __future__ import annotations

import dataclasses
import random
from collections import Counter

from testweb import HostSpec, TestWeb

from .test_pipeline import HTML, crawl_inline

CAL_MONTHS = 120
BUDGET = 60


def page(body: str, head: str = "") -> bytes:
    return f"<html><head><title>t</title>{head}</head><body>{body}</body></html>".encode()


def build(web: TestWeb) -> tuple[str, set[str]]:
    """Routes of host 0 (the trap site) and host 1 (its mirror); returns (base, must-fetch paths)."""
    base = web.url(0, "/").rstrip("/")
    host_upper = base.replace("http://", "HTTP://").upper().replace("HTTP://", "http://")
    variants = ["/a.html", "/a.html#top", "/a.html?utm_source=news&utm_medium=x", "/./a.html", "/x/../a.html",
                f"{host_upper}/a.html", "/%61.html", "/b.html;jsessionid=0123ABCD", "/b.html?PHPSESSID=9f9f",
                "/b.html?sid=77", "b.html"]
    links = "".join(f'<a href="{v}">v</a>' for v in variants)
    links += ('<a href="/cal/2026/1.html">calendar</a><a href="/shop?color=0&size=0">shop</a>'
              '<a href="/deep/x/y/z.html">deep</a><a href="/nf.html" rel="nofollow">nf</a>'
              '<a href="/c1.html">c1</a><a href="/base/page.html">base</a><a href="/r1">redirect</a>'
              '<a href="/l1">loop</a>')
    routes = {
        "/": page(links + " home"),
        "/a.html": page("page a"), "/b.html": page("page b"),
        "/deep/x/y/z.html": page('<a href="../../../a.html">up</a><a href="../../w.html">w</a> deep'),
        "/deep/w.html": page("deep w"),
        "/nf.html": page("must not be fetched"),
        "/c1.html": page("variant of c", '<link rel="canonical" href="/c.html">'),
        "/c.html": page("the canonical c"),
        "/base/page.html": page('<a href="t.html">t</a>', '<base href="/other/">'),
        "/other/t.html": page("other t"), "/base/t.html": page("must not be fetched"),
        "/hidden.html": page("only in the sitemap"),
        "/final.html": page("end of the chain"),
    }
    for m in range(1, CAL_MONTHS + 1):  # a calendar: every month links to the next one
        routes[f"/cal/2026/{m}.html"] = page(f'<a href="/cal/2026/{m + 1}.html">next</a> month {m}')
    facets = "".join(f'<a href="/shop?color={c}&size={z}">f</a>' for c in range(8) for z in range(8))
    for path, body in routes.items():
        web.set_route(0, path, 200, HTML, body)
    web.set_route(0, "/shop", 200, HTML, page(facets + " shop"))
    for src, dst in (("/r1", "/r2"), ("/r2", "/r3"), ("/r3", "/final.html"), ("/l1", "/l2"), ("/l2", "/l1")):
        web.set_route(0, src, 301, {"Location": dst}, b"")
    web.set_route(0, "/robots.txt", 200, {"Content-Type": "text/plain"},
                  f"User-agent: *\nDisallow: /private/\nSitemap: {base}/sitemap.xml\n".encode())
    web.set_route(0, "/sitemap.xml", 200, {"Content-Type": "application/xml"},
                  (f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>{base}/hidden.html'
                   f'</loc></url><url><loc>{base}/a.html</loc><lastmod>2026-11-01</lastmod></url>'
                   f'</urlset>').encode())
    # host 1 mirrors host 0's pages a and b
    for path in ("/a.html", "/b.html"):
        web.set_route(1, path, 200, HTML, routes[path])
    web.set_route(1, "/", 200, HTML, page('<a href="/a.html">a</a><a href="/b.html">b</a> mirror home'))
    must = {"/", "/a.html", "/b.html", "/deep/x/y/z.html", "/deep/w.html", "/c1.html", "/c.html",
            "/base/page.html", "/other/t.html", "/hidden.html", "/final.html", "/shop?color=0&size=0"}
    return base, must


def test_trap_web(settings):
    s = dataclasses.replace(settings, MIN_DELAY_S=0.0, DELAY_FACTOR=0.0, MAX_QUERY_VARIANTS=5,
                            MAX_PAGES_PER_HOST=BUDGET, MAX_PAGES_PER_SEED_HOST=BUDGET)
    spec = HostSpec(pages=0, link_extra_routes=False)
    with TestWeb(n_hosts=2, pages_per_host=1, host_specs={0: spec, 1: spec}) as web:
        base, must = build(web)
        recs = crawl_inline(s, [web.url(0, "/"), web.url(1, "/")], seconds=60)
        trap = [r for r in web.requests if r.host == web.hosts[0]]
        paths = Counter(r.path for r in trap)

        assert must <= set(paths), must - set(paths)
        twice = {p: n for p, n in paths.items() if n > 1}
        assert not twice, twice                                  # no variant fetched twice
        assert "/nf.html" not in paths and "/base/t.html" not in paths
        assert paths["/r1"] == paths["/r2"] == paths["/r3"] == 1
        assert paths["/l1"] == paths["/l2"] == 1                 # the loop ends
        facets = [p for p in paths if p.startswith("/shop?")]
        assert len(facets) <= 5                                  # query-variant budget
        calendar = [p for p in paths if p.startswith("/cal/")]
        assert len(calendar) < CAL_MONTHS and len(trap) <= BUDGET + 5  # host budget (+ robots, probes)

        print(f"trap host: {len(trap)} requests, {len(paths)} distinct paths, calendar {len(calendar)}, "
              f"facets {len(facets)}, variants of /a.html and /b.html fetched {paths['/a.html'] + paths['/b.html']}")
        by_url = {r["url"]: r for r in recs}
        # a canonical is a hint: the variant has other content, so it stays, keyed by it
        assert by_url[base + "/c1.html"]["canonical"] == base + "/c.html" and by_url[base + "/c1.html"]["indexable"]
        for name in ("/a.html", "/b.html"):  # one copy of each mirrored page is the duplicate
            pair = [by_url[web.url(0, name)], by_url[web.url(1, name)]]
            dups = [r for r in pair if r.get("duplicate_of")]
            assert len(dups) == 1 and dups[0]["duplicate_of"] in (web.url(0, name), web.url(1, name))


SERIES, MONTHS, PAGER = 320, 40, 30
SYLLABLES = [a + b for a in "bcdfghklmnprstvz" for b in "aeiou"]


def words(seed: str, n: int) -> str:
    rnd = random.Random(seed)
    return " ".join(rnd.choice(SYLLABLES) + rnd.choice(SYLLABLES) for _ in range(n))


def month(m: int) -> str:
    return f"/cal/{2026 + (m - 1) // 12}/{(m - 1) % 12 + 1}.html"


def test_numbered_series_is_crawled_whole_and_a_repeating_calendar_is_cut(settings):
    """Host 0: release notes linking k -> k+1 (320 distinct pages, some a dozen words
    long) and a pager over posts (its pages' main text the same); host 1: an endless calendar that repeats one
    page; host 2: the calendar's shape with a distinct page each month. Only host 1's
    calendar is cut, early, and each URL it drops has a record with the evidence."""
    s = dataclasses.replace(settings, MIN_DELAY_S=0.0, DELAY_FACTOR=0.0, MAX_PAGES_PER_HOST=2000,
                            MAX_PAGES_PER_SEED_HOST=2000)
    spec = HostSpec(pages=0, link_extra_routes=False)
    with TestWeb(n_hosts=3, pages_per_host=1, host_specs={0: spec, 1: spec, 2: spec}) as web:
        nav = '<a href="/">home</a><a href="/releases/">releases</a>'
        web.set_route(0, "/", 200, HTML, page('<a href="/releases/3.1.1.html">first</a>'
                                              '<a href="/list?page=1">items</a> Django documentation'))
        for k in range(1, SERIES + 1):
            nxt = f'<a href="/releases/3.1.{k + 1}.html">next</a>' if k < SERIES else ""
            prev = f'<a href="/releases/3.1.{k - 1}.html">previous</a>' if k > 1 else ""
            notes = f"<p>Django 3.1.{k} fixes {words(f'r{k}', 6 + (k * 37) % 200)}.</p>"
            web.set_route(0, f"/releases/3.1.{k}.html", 200, HTML,
                          page(f"{nav}<h1>Django 3.1.{k} release notes</h1>{notes}{prev}{nxt}"))
        for n in range(1, PAGER + 1):   # a pager over posts: its pages' main text is the same chrome
            items = "".join(f'<li><a href="/post/{n * 10 + i}">{words(f"t{n}-{i}", 4)}</a></li>' for i in range(5))
            nxt = f'<a href="/list?page={n + 1}">next page</a>' if n < PAGER else ""
            web.set_route(0, f"/list?page={n}", 200, HTML, page(f'{nav}<ul>{items}</ul>{nxt}'))
            for i in range(5):
                web.set_route(0, f"/post/{n * 10 + i}", 200, HTML,
                              page(f"{nav}<h1>Post {n * 10 + i}</h1><p>{words(f'p{n}-{i}', 30)}</p>"))
        for host in (1, 2):
            web.set_route(host, "/", 200, HTML, page(f'<a href="/cal/2026/1.html">calendar</a> society {host}'))
            for m in range(1, MONTHS + 1):
                body = ("No events this month." if host == 1 else words(f"month{m}", 40))
                nxt = f'<a href="{month(m + 1)}">next month</a>'
                web.set_route(host, month(m), 200, HTML,
                              page(f"<h1>Events of the month {m}</h1><p>{body}</p>{nxt} The society meets "
                                   f"every first Monday at the town hall; all members welcome."))
        recs = crawl_inline(s, [web.url(h, "/") for h in range(3)], seconds=120)
        got = {h: Counter(r.path for r in web.requests if r.host == web.hosts[h]) for h in range(3)}

        releases = {p for p in got[0] if p.startswith("/releases/3.1.")}
        pager = {p for p in got[0] if p.startswith("/list?page=")}
        posts = {p for p in got[0] if p.startswith("/post/")}
        cal1 = [p for p in got[1] if p.startswith("/cal/")]
        cal2 = [p for p in got[2] if p.startswith("/cal/")]
        dropped = [r for r in recs if r.get("error_kind") == "filtered"]
        print(f"\nreleases fetched {len(releases)} of {SERIES}, pager {len(pager)} of {PAGER}, posts {len(posts)}, repeating calendar "
              f"{len(cal1)} (cut), distinct calendar {len(cal2)} of {MONTHS} (+1: a 404); dropped URLs with a record "
              f"{len(dropped)}: {dropped[0]['error'] if dropped else None}")
        assert len(releases) == SERIES and all(got[0][p] == 1 for p in releases)
        assert len(pager) == PAGER and len(posts) == 5 * PAGER
        assert {month(m) for m in range(1, MONTHS + 1)} <= set(cal2)   # the trap on host 1 did not spread
        assert len(cal1) <= s.TRAP_WALK_PAGES + 4                      # a handful, then cut
        assert dropped and all(web.hosts[1] in r["url"] and "/cal/" in r["url"] for r in dropped)
        assert all("trap shape /cal/#/#.html" in r["error"] and "added nothing new" in r["error"]
                   and "template" in r["error"] for r in dropped)
        assert len({r["url"] for r in recs}) == len(recs)              # one record per URL
