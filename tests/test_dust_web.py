"""A web of spellings and traps for the learned URL rules (dedup.rules): pages linked
with ``?ref=nav``, ``?ref=sidebar``, ``/print/`` and ``/amp/`` aliases, ``index.html``,
path session ids, a pager whose parameter does change content, a calendar that repeats
one page and a facet shop whose combinations list the same items. Crawled twice, rules and trap shapes off then on: the figures are printed."""
from __future__ import annotations

import dataclasses
import random
from collections import Counter

from crawler_tasks.dedup.rules import UrlRules
from testweb import HostSpec, TestWeb

from .test_pipeline import HTML, crawl_inline

SECTIONS, PAGES, LIST_PAGES, CAL_MONTHS = 6, 5, 6, 120
FACETS, FACET_VALUES = ("brand", "color", "size", "sort"), 4
WORDS = [a + b + c for a in "bcdfg" for b in "aeiou" for c in "klmnprst"]   # no digits: they fold


def text(seed: int | str, n: int = 80) -> str:
    return " ".join(random.Random(str(seed)).sample(WORDS, n))


def page(body: str, words: str) -> bytes:
    return f"<html><head><title>t</title></head><body>{body}<p>{words}</p></body></html>".encode()


def variants(path: str, i: int) -> list[str]:
    return [path, f"{path}?ref=nav", f"{path}?ref=sidebar", f"{path}?ref=sidebar&ref=nav", f"/print{path}",
            f"/amp{path}", f"{path};cid={i}", f"{path};jsessionid=AB{i}"]


def build(web: TestWeb) -> set[str]:
    """Host 0's routes; returns the paths of its ordinary pages (each must be fetched)."""
    routes: dict[str, bytes] = {}
    ordinary = {"/", "/list"} | {f"/list?page={n}" for n in range(2, LIST_PAGES + 1)}
    for j in range(SECTIONS):
        nxt = f"/s{j + 1}/" if j + 1 < SECTIONS else "/"
        links = f'<a href="/s{j}/0.html">first</a><a href="{nxt}">next</a><a href="{nxt}index.html">n</a>'
        routes[f"/s{j}/"] = page(links, text(f"s{j}"))
        ordinary.add(f"/s{j}/")
        for i in range(PAGES):
            path = f"/s{j}/{i}.html"
            ordinary.add(path)
            nxt_page = f"/s{j}/{i + 1}.html" if i + 1 < PAGES else nxt
            links = "".join(f'<a href="{v}">v</a>' for v in variants(nxt_page, i))
            routes[path] = page(links, text(path))
    for path, body in list(routes.items()):   # the aliases serve the very same page
        for alias in (f"/print{path}", f"/amp{path}", f"{path}index.html" if path.endswith("/") else None,
                      *(f"{path};cid={i}" for i in range(PAGES))):
            if alias:
                routes[alias] = body
    home = ('<a href="/s0/">s0</a><a href="/index.html">home</a><a href="/list">list</a>'
            '<a href="/cal/2026/1.html">calendar</a><a href="/shop">shop</a>')
    routes["/"] = routes["/index.html"] = page(home, text("home"))
    routes["/list"] = page('<a href="/list?page=2">2</a>', text("list1"))
    for n in range(2, LIST_PAGES + 1):   # ?page changes content: never a rule
        routes[f"/list?page={n}"] = page(f'<a href="/list?page={n + 1}">next</a><a href="/list">1</a>',
                                         text(f"list{n}"))
    for m in range(1, CAL_MONTHS + 1):   # a calendar: every month links to the next one
        routes[f"/cal/2026/{m}.html"] = page(f'<a href="/cal/2026/{m + 1}.html">next</a>', f"month {m}")
    for path, body in routes.items():
        web.set_route(0, path, 200, HTML, body)
    for query in facet_queries():   # a facet shop: every filter adds one more
        links = "".join(f'<a href="/shop?{q}">f</a>' for q in facet_queries(query))
        web.set_route(0, "/shop" + (f"?{query}" if query else ""), 200, HTML,
                      page(links, text("shop", 70) + " " + text(query, 10)))
    return ordinary


def facet_queries(base: str | None = None) -> list[str]:
    """All filter combinations (base None), or those that add one filter to ``base``."""
    if base is None:
        out = [""]
        for name in FACETS:
            out += [f"{q}&{name}={v}".lstrip("&") for q in out for v in range(FACET_VALUES)]
        return out
    have = {p.split("=")[0] for p in base.split("&") if p}
    return [f"{base}&{name}={v}".lstrip("&") for name in FACETS if name not in have for v in range(FACET_VALUES)]


def is_variant(target: str) -> bool:
    return any(mark in target for mark in ("?ref=", "/print/", "/amp/", ";", "index.html"))


def crawl(settings, seconds: float = 60) -> tuple[Counter[str], dict[str, list[str]], str]:
    with TestWeb(n_hosts=1, pages_per_host=1, host_specs={0: HostSpec(pages=0, link_extra_routes=False)}) as web:
        ordinary = build(web)
        recs = crawl_inline(settings, [web.url(0, "/")], seconds=seconds)
        fetched = Counter(r.path for r in web.requests if r.host == web.hosts[0])
        missing = ordinary - set(fetched)
        groups = {
            "variants": [p for p in fetched if is_variant(p)],
            "calendar": [p for p in fetched if p.startswith("/cal/")],
            "facets": [p for p in fetched if p.startswith("/shop?")],
            "missing": sorted(missing),
            "records": [f"{r['url']}: {r['error']}" for r in recs if r.get("error_kind") == "filtered"],
            "twice": [u for u, n in Counter(r["url"] for r in recs).items() if n > 1],
        }
        return fetched, groups, web.hosts[0]


def _rule_of(target: str) -> str:
    for mark in ("?ref=", "/print/", "/amp/", ";cid=", ";", "index.html"):
        if mark in target:
            return mark
    return target


def test_dust_web_variants_and_traps(settings):
    # rules off, the query-variant bound alone keeps the shop from eating the host's budget
    base = dataclasses.replace(settings, DUST_PRIORS=False, MIN_DELAY_S=0.0, DELAY_FACTOR=0.0, MAX_PAGES_PER_HOST=1000,
                               MAX_PAGES_PER_SEED_HOST=1000, MAX_QUERY_VARIANTS=100)
    off = dataclasses.replace(base, DUST_CONFIRMATIONS=0, TRAP_SHAPE_MIN_PAGES=0, TRAP_WALK_PAGES=0,
                              TRAP_FACET_PAGES=0, KEY_PREFIX=base.KEY_PREFIX + "off",
                              OUT_DIR=base.OUT_DIR + "-off")
    _, before, _ = crawl(off)
    fetched, after, host = crawl(base)
    k = base.DUST_CONFIRMATIONS
    print(f"\nvariant fetches: before {len(before['variants'])}, after {len(after['variants'])}; "
          f"calendar before {len(before['calendar'])}, after {len(after['calendar'])}; "
          f"facets before {len(before['facets'])}, after {len(after['facets'])}")
    print("variants fetched after:", sorted(after["variants"]))
    infos, traps = UrlRules(base).host_rules(host)
    print("rules:", [(i.rule, i.units, i.pairs, i.counter_examples, i.active) for i in infos], "traps:", traps)

    assert not before["missing"] and not after["missing"], after["missing"]   # ordinary pages all fetched
    twice = {p: n for p, n in fetched.items() if n > 1 and p != "/robots.txt"}
    assert not twice, twice
    by_rule = Counter(_rule_of(p) for p in after["variants"])
    assert all(n <= k + 2 for n in by_rule.values()), by_rule   # k pairs, then the rule (+ ones in flight)
    active = {i.rule for i in infos if i.active}
    assert {"q:ref", "p:print", "p:amp", "m:cid"} <= active
    assert not any(r.startswith("q:page") for r in active)
    assert len(after["variants"]) < len(before["variants"]) / 2
    assert len(after["calendar"]) <= base.TRAP_WALK_PAGES + 3 < len(before["calendar"])
    # the shop's combinations are all queued (up to MAX_QUERY_VARIANTS) before the facet
    # shape's budget runs out; those already queued are still fetched, later ones are not
    # traps on content evidence: the calendar repeats one page, the shop's combinations
    # list what their siblings list; the pager and the sections, all distinct, are no traps
    assert "template" in traps["/cal/#/#.html"] and "known text" in traps["/shop?&"]
    assert all(name.startswith(("/cal/", "/shop?")) for name in traps), traps
    assert len(after["facets"]) <= len(before["facets"])
    # every URL a learned rule respelled or dropped has one record naming the rule and its evidence
    print("records:", len(after["records"]), after["records"][:2])
    assert not before["records"] and not after["twice"], after["twice"][:5]   # one record per URL
    assert any("'URL rule q:ref'" in r and "the same page as" in r for r in after["records"])
    assert any("'trap shape /cal/#/#.html'" in r and "added nothing new" in r for r in after["records"])
