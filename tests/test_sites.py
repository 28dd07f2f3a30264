"""Per-site rules of a crawl job (urls/sites.py, pure): the most specific match wins."""
from __future__ import annotations

import json

import pytest

from crawler_tasks.urls.sites import parse_sites

RULES = [
    {"match": "example.org", "min_delay": 2.0, "headers": {"Accept-Language": "fr"}},
    {"match": "docs.example.org", "in_scope": False},
    {"match": "https://docs.example.org/api/", "in_scope": True, "exclude": [r"\?print"], "max_depth": 3},
    {"match": "https://docs.example.org/api/v2/", "include": [r"\.html$"]},
    {"match": "http://fast.test:8080/", "min_delay": 0.1},
]


def sites():
    return parse_sites(json.dumps(RULES))


def test_a_prefix_beats_a_domain_and_a_longer_one_a_shorter():
    s = sites()
    assert s.for_url("https://docs.example.org/guide/x").match == "docs.example.org"
    assert s.for_url("https://docs.example.org/api/x").match == "https://docs.example.org/api/"
    assert s.for_url("https://docs.example.org/api/v2/x.html").match == "https://docs.example.org/api/v2/"
    assert s.for_url("https://www.example.org/").match == "example.org"
    assert s.for_url("https://example.com/") is None and s.for_url("https://notexample.org/") is None


def test_what_a_rule_refuses():
    s = sites()
    assert s.for_url("https://docs.example.org/guide/").reason("https://docs.example.org/guide/", 1) == \
        "site_out_of_scope"
    api = s.for_url("https://docs.example.org/api/a")
    assert api.reason("https://docs.example.org/api/a", 3) is None
    assert api.reason("https://docs.example.org/api/a?print=1", 1) == "site_excluded"
    assert api.reason("https://docs.example.org/api/a", 4) == "site_max_depth"
    v2 = s.for_url("https://docs.example.org/api/v2/a.txt")
    assert v2.reason("https://docs.example.org/api/v2/a.txt", 0) == "site_not_included"


def test_a_hosts_delay_and_headers_come_from_its_own_rule():
    s = sites()
    assert s.for_host("www.example.org").min_delay == 2.0
    assert dict(s.for_host("example.org:443").headers) == {"Accept-Language": "fr"}
    assert s.for_host("docs.example.org").min_delay is None        # its own rule says nothing of delay
    assert s.for_host("fast.test:8080").min_delay == 0.1            # a prefix on that very host
    assert s.for_host("fast.test:9090") is None
    assert [r.match for r in s.matching("docs.example.org")] == [
        "https://docs.example.org/api/v2/", "https://docs.example.org/api/", "docs.example.org", "example.org"]


@pytest.mark.parametrize("rule, message", [
    ({"match": "a.org", "min_delay": "fast"}, "sites[0]: min_delay must be a number of seconds, got 'fast'"),
    ({"match": "a.org", "delay": 1}, "sites[0]: unknown key 'delay'"),
    ({"match": "a.org", "include": ["("]}, "sites[0]: include: '(' is not a regular expression"),
    ({"match": "ftp://a.org/"}, "sites[0]: match 'ftp://a.org/' must be a domain or an http(s) URL prefix"),
    ({"match": "a.org/docs"}, "sites[0]: match 'a.org/docs' must be a domain or an http(s) URL prefix"),
    ({"match": "a.org", "headers": {"Host": "b"}}, "sites[0]: headers: 'Host' is the crawler's own"),
    ({"match": "a.org", "headers": {"X-A": "b\r\nX-B: c"}}, "sites[0]: headers: 'X-A' is not a header"),
])
def test_a_bad_rule_names_itself(rule, message):
    with pytest.raises(ValueError) as err:
        parse_sites(json.dumps([rule]))
    assert str(err.value).startswith(message), str(err.value)


def test_a_hosts_budget_rendering_revisits_and_robots():
    s = parse_sites(json.dumps([{"match": "a.org", "max_pages": 50, "render": "never", "recrawl_min": 60,
                                 "recrawl_max": 3600, "ignore_robots": True}, {"match": "b.org", "render": "always"}]))
    a, b = s.for_host("www.a.org"), s.for_host("b.org")
    assert (a.max_pages, a.render, a.recrawl_min, a.recrawl_max, a.ignore_robots) == (50, "never", 60.0, 3600.0, True)
    assert (b.max_pages, b.render, b.ignore_robots) == (None, "always", False)
    assert "ignore_robots True" in a.describe() and "render 'never'" in a.describe()
    for rule, message in (({"match": "a.org", "render": "sometimes"}, "render must be one of auto, always, never"),
                          ({"match": "a.org", "recrawl_min": 10, "recrawl_max": 5}, "recrawl_min must be <="),
                          ({"match": "a.org", "max_pages": -1}, "max_pages must be an integer >= 0"),
                          ({"match": "a.org", "ignore_robots": "yes"}, "ignore_robots must be true or false")):
        with pytest.raises(ValueError, match=message):
            parse_sites(json.dumps([rule]))


def test_a_sites_revisit_bounds_and_render_mode_reach_their_components(settings):
    import dataclasses

    from crawler_tasks.frontier import Frontier
    from crawler_tasks.frontier.recrawl import Recrawler
    from crawler_tasks.render.policy import RenderPolicy

    s = dataclasses.replace(settings, SITES=json.dumps([{"match": "a.org", "recrawl_min": 60, "recrawl_max": 600,
                                                          "render": "never"}, {"match": "b.org", "render": "always"}]))
    recrawler = Recrawler(s, Frontier(s))
    bounds = recrawler._bounds("a.org")
    assert (round(1 / bounds.max_freq), round(1 / bounds.min_freq)) == (60, 600)
    assert recrawler._bounds("c.org") == recrawler.bounds
    policy = RenderPolicy(dataclasses.replace(s, RENDER="auto"))
    policy.enabled = True   # what a Chromium on the machine would make it (no browser starts here)
    page = b"<html><body><p>" + b"plain words " * 400 + b"</p></body></html>"
    assert policy.reason("b.org", "text/html", page, mode="always") == "always"
    assert policy.reason("a.org", "text/html", b"<html><body><div id=app></div></body></html>", mode="never") is None
    assert policy.reason("c.org", "text/html", page) is None
