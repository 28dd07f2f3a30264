"""Tests for crawler_tasks.parse.budget: hostile documents are parsed, and the cap is reported."""

from __future__ import annotations

import pytest

from crawler_tasks.parse.budget import MAX_ATTRS, MAX_DEPTH, MAX_ELEMENTS, apply_budget
from crawler_tasks.parse.html import parse_html
from crawler_tasks.settings import Settings

URL = "https://bomb.example/"
MIB = 1 << 20


def test_defaults_match_settings() -> None:
    s = Settings()
    assert (s.PARSE_MAX_ELEMENTS, s.PARSE_MAX_DEPTH, s.PARSE_MAX_ATTRS) == (MAX_ELEMENTS, MAX_DEPTH, MAX_ATTRS)


@pytest.mark.parametrize(
    ("body", "cap"),
    [
        # fake end tags in a comment used to fool the old nesting estimate
        (b"<!--" + b"</" * (MIB // 8) + b"-->" + b"<div>" * 50_000 + b'<a href="/end">e</a>', "max_depth"),
        (b"<!--" + b"</div>" * 50_000 + b"-->" + b"<div>" * 50_000 + b'<a href="/end">e</a>', "max_depth"),
        (b"<script>" + b"</div>" * 50_000 + b"</script>" + b"<div>" * 50_000 + b'<a href="/end">e</a>', "max_depth"),
        (b"<div title='</div>'>" * 50_000 + b'<a href="/end">e</a>', "max_depth"),
        (b"<div></zzz>" * 50_000 + b'<a href="/end">e</a>', "max_depth"),
        (b"<div " + b" ".join(b"a%d=%d" % (i, i) for i in range(40_000)) + b' href=x>x</div><a href="/end">e</a>',
         "max_attrs"),
        (b"<div>" * (MIB // 5), "max_elements"),
        (b"<span><b><div>" * (22_000_000 // 14), "max_elements"),
        (b"".join(b'<a href="/l%d">l</a>' % i for i in range(200_000)), "max_elements"),
        # unclosed formatting elements re-created before every paragraph
        (b"".join(b"<div><b id=%d></div>" % i for i in range(400)) + b"<p>x</p>" * 50_000, "max_elements"),
    ],
    ids=["comment-lt-slash", "comment-end-tags", "script-end-tags", "attr-end-tags", "stray-end-tags",
         "40k-attributes", "1mib-divs", "22mb-nested", "200k-links", "formatting-reconstruction"],
)
def test_bombs_are_parsed_and_the_cap_is_reported(body: bytes, cap: str) -> None:
    page = parse_html(body, URL)
    assert page.limited is not None and cap in page.limited.split(",")
    if body.endswith(b'<a href="/end">e</a>'):
        assert [link.url for link in page.links][-1:] == ["https://bomb.example/end"]
    if cap == "max_elements" and b"/l1" in body:
        assert 0 < len(page.links) < 200_000


def test_over_deep_start_tags_are_dropped_but_text_and_links_stay() -> None:
    out, limited = apply_budget(b"<div>" * 600 + b"<a href=/x>x</a>", 1000, 512, 64)
    assert limited == "max_depth"
    assert isinstance(out, bytes) and out.count(b"<div>") == 512 and out.endswith(b"<a href=/x>x</a>")


def test_attribute_cap_keeps_the_attributes_the_parser_reads() -> None:
    tag = b"<a " + b" ".join(b"d%d=1" % i for i in range(2000)) + b' href="/m" rel=nofollow>m</a>'  # a giant tag
    page = parse_html(tag, URL)
    assert page.limited == "max_attrs"
    assert [(link.url, link.nofollow) for link in page.links] == [("https://bomb.example/m", True)]


def test_ordinary_pages_are_untouched() -> None:
    body = (b"<!doctype html><html><head><title>t</title><script>if (a<b) x='</div>';</script></head><body>"
            + b"<div><p>para <b>bold</b> <a href='/x'>x</a></p></div>" * 2000
            + b"<svg><style>a{}</style><path d='M0'/></svg><table>" + b"<tr><td><font>c</td>" * 500 + b"</table>")
    out, limited = apply_budget(body)
    assert limited is None and out is body
    assert apply_budget(body.decode())[1] is None


@pytest.mark.parametrize("text", [True, False])
def test_legacy_charset_documents_are_budgeted_too(text: bool) -> None:
    body = b"<div>" * 10_000 + b"<a href=/x>caf\xe9</a>"  # over the tag-density gate
    page = parse_html(body, URL, content_type="text/html; charset=windows-1252")
    assert page.limited == "max_depth" and page.links[0].text == "café"


def test_caps_can_be_switched_off() -> None:
    body = b"<div>" * 1000
    assert apply_budget(body, 0, 0, 0) == (body, None)
    assert parse_html(body, URL, max_elements=0, max_depth=0, max_attrs=0).limited is None


def test_never_raises_on_odd_input() -> None:
    for body in (b"", b"<", b"</", b"<!--", b"<a", b"<a b='", b"<script>", b"<svg><title>", b"<![CDATA[<div>"):
        assert isinstance(apply_budget(body)[0], bytes)
        assert isinstance(apply_budget(body.decode())[0], str)
