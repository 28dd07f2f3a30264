from __future__ import annotations

import dataclasses

import pytest

from crawler_tasks.settings import Settings
from crawler_tasks.urls.filters import UrlFilter


@pytest.mark.parametrize("url, depth, reason", [
    ("http://a.com/x.html", 0, None),
    ("ftp://a.com/x", 0, "scheme"),
    ("http://a.com/" + "x" * 3000, 0, "url_too_long"),
    ("http://a.com/pic.JPG", 0, "extension"),
    ("http://a.com/a/b/a/b/a/b/", 0, "repeated_segments"),
    ("http://a.com/" + "/".join(f"s{i}" for i in range(20)), 0, "path_too_deep"),
    ("http://b.com/x", 0, "out_of_scope"),
    ("http://sub.a.com/x", 0, None),
    ("http://bad.a.com/x", 0, "blocked_domain"),
    ("http://a.com/x", 4, "max_depth"),
    ("http://a.com/private/x", 0, "excluded"),
])
def test_rules(url, depth, reason):
    s = dataclasses.replace(Settings(), ALLOWED_DOMAINS=("a.com",), BLOCKED_DOMAINS=("bad.a.com",),
                            MAX_DEPTH=3, EXCLUDE_PATTERNS=(r"/private/",))
    assert UrlFilter(s).reason(url, depth) == reason


def test_no_scope_means_any_host_and_depth_unlimited():
    f = UrlFilter(Settings())
    assert f.reason("http://anything.example/p", 99) is None
