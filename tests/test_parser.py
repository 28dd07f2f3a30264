"""Tests for crawler_tasks.parse.html: an odd-HTML corpus, case tables, properties."""

from __future__ import annotations

import html
import random
import time
from urllib.parse import urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crawler_tasks.parse.budget import MAX_TEXT_CHARS
from crawler_tasks.parse.html import Link, ParsedPage, decode_html, is_html, parse_html
from crawler_tasks.urls import Resolver, normalize_url

URL = "https://example.com/dir/page.html"


def parse(html: str | bytes, url: str = URL, **kw: object) -> ParsedPage:
    body = html.encode("utf-8") if isinstance(html, str) else html
    return parse_html(body, url, **kw)  # type: ignore[arg-type]


def urls(page: ParsedPage) -> list[str]:
    return [link.url for link in page.links]


def check_invariants(page: ParsedPage, max_text_chars: int = MAX_TEXT_CHARS) -> None:
    assert isinstance(page, ParsedPage)
    assert isinstance(page.title, str) and isinstance(page.text, str)
    assert len(page.text) <= max_text_chars
    assert isinstance(page.charset, str) and page.charset
    seen = set()
    for link in page.links:
        assert isinstance(link, Link)
        assert link.url.startswith(("http://", "https://", "HTTP://", "HTTPS://")) or urlsplit(
            link.url
        ).scheme.lower() in ("http", "https")
        assert len(link.text) <= 200
        assert link.url not in seen
        seen.add(link.url)
    for extra in (page.canonical, page.meta_refresh):
        assert extra is None or urlsplit(extra).scheme.lower() in ("http", "https")


# --------------------------------------------------------------------------- odd corpus

_rng = random.Random(1234)
ODD_CORPUS: dict[str, bytes] = {
    "empty": b"",
    "whitespace": b" \n\t\r ",
    "binary-junk": bytes(_rng.getrandbits(8) for _ in range(4000)),
    "png-header": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(200),
    "nul-bytes": b"<html>\x00<a href='/n\x00ul'>x\x00y</a>\x00</html>",
    "truncated-mid-tag": b'<html><body><p>hello <a href="/x',
    "truncated-mid-attr": b"<a href='/x' title='unterminated",
    "truncated-mid-comment": b"<p>a</p><!-- <a href='/hidden'>",
    "only-doctype": b"<!DOCTYPE html>",
    "only-lt": b"<<<<<<<<<<<",
    "processing-instruction": b"<?xml version='1.0'?><?php echo 1 ?><html/>",
    "uppercase-tags": b'<HTML><HEAD><TITLE>Up</TITLE></HEAD><BODY><A HREF="/UP">X</A></BODY></HTML>',
    "unclosed-tags": b"<div><p>one<p>two<li>three<b><i>four<a href=/u>five",
    "nested-tables": b"<table><tr><td><table><tr><td><a href=/t>t</a></td></tr></table>" * 50,
    "entities": b"<p>&amp; &lt;&gt; &quot; &#39; &#x41; &eacute; &nbsp; &bogus; &#0; &#xFFFFFF;</p>",
    "huge-attribute": b'<a href="/big" title="' + b"x" * 1_000_000 + b'">big</a>',
    "huge-href": b'<a href="/' + b"y" * 100_000 + b'">long</a><a href="/ok">ok</a>',
    "many-attributes": b"<a " + b" ".join(b"a%d=%d" % (i, i) for i in range(1000)) + b" href=/m>m</a>",
    "broken-utf8": b"<p>\xc3\x28 \xa0\xa1 \xe2\x28\xa1 \xf0\x90\x28\xbc</p>",
    "surrogates-utf16": b"\xff\xfe" + b"\x00\xd8a\x00<\x00/\x00",
    "frameset": b"<frameset><frame src=/f1><frame src=/f2></frameset>",
    "svg-math": b"<svg><a href='/svg'>s</a><title>icon</title></svg><math><mi>x</mi></math>",
    "select-in-table": b"<table><select><option><a href=/opt>o</a></select></table>",
    "script-unclosed": b"<script>var a = '<a href=/s>';",
    "style-unclosed": b"<style>a{}<a href=/s>",
    "plaintext": b"<plaintext><a href=/p>not a link",
    "crlf-only": b"\r\n" * 1000,
}


@pytest.mark.parametrize("name", sorted(ODD_CORPUS))
def test_odd_corpus_never_raises(name: str) -> None:
    page = parse_html(ODD_CORPUS[name], URL, content_type="text/html")
    check_invariants(page)
    assert page.base_url == URL


def test_odd_corpus_details() -> None:
    assert urls(parse(ODD_CORPUS["uppercase-tags"])) == ["https://example.com/UP"]
    assert parse(ODD_CORPUS["uppercase-tags"]).title == "Up"
    assert urls(parse(ODD_CORPUS["unclosed-tags"])) == ["https://example.com/u"]
    assert "five" in parse(ODD_CORPUS["unclosed-tags"]).text
    assert urls(parse(ODD_CORPUS["nested-tables"])) == ["https://example.com/t"]
    assert urls(parse(ODD_CORPUS["truncated-mid-tag"])) == []
    assert urls(parse(ODD_CORPUS["truncated-mid-comment"])) == []
    assert urls(parse(ODD_CORPUS["huge-href"])) == ["https://example.com/ok"]
    assert urls(parse(ODD_CORPUS["huge-attribute"])) == ["https://example.com/big"]
    assert urls(parse(ODD_CORPUS["many-attributes"])) == ["https://example.com/m"]
    assert urls(parse(ODD_CORPUS["script-unclosed"])) == []
    assert urls(parse(ODD_CORPUS["style-unclosed"])) == []
    assert urls(parse(ODD_CORPUS["plaintext"])) == []
    assert urls(parse(ODD_CORPUS["svg-math"])) == ["https://example.com/svg"]
    text = parse(ODD_CORPUS["entities"]).text
    assert text.startswith("& <> \" ' A é ")
    nul = parse(ODD_CORPUS["nul-bytes"])
    assert len(nul.links) == 1 and "\x00" not in nul.text


def test_empty_page_shape() -> None:
    page = parse(b"")
    assert page == ParsedPage(
        title="", text="", links=[], base_url=URL, canonical=None, noindex=False,
        nofollow=False, meta_refresh=None, lang=None, charset="utf-8",
    )


def test_non_bytes_body_does_not_raise() -> None:
    assert parse_html(bytearray(b"<a href=/x>x</a>"), URL).links[0].url == "https://example.com/x"
    assert parse_html(None, URL).links == []  # type: ignore[arg-type]


def test_failure_keeps_header_signals() -> None:
    page = parse_html(None, URL, headers={"X-Robots-Tag": "noindex"})  # type: ignore[arg-type]
    assert page.noindex is True and page.links == []


# --------------------------------------------------------------------------- pathological nesting


@pytest.mark.parametrize(
    "html",
    [
        "<div>" * 60_000 + '<a href="/deep">deep</a>',  # over the depth cap, under the element cap
        "<div>" * 20_000 + "</div>" * 20_000 + '<a href="/deep">deep</a>',
        "<span>" * 20_000 + "<div></div>" * 20_000 + '<a href="/deep">deep</a>',
        # unclosed formatting elements re-opened after every </div>: quadratic
        # element count in an HTML5 tree builder (45 KB -> GBs without a guard)
        "<div>" * 3000 + "".join(f"<b id={i}>" for i in range(3000)) + "</div>x" * 3000
        + '<a href="/deep">deep</a>',
    ],
    ids=["deep-divs", "deep-closed-divs", "spans-then-divs", "formatting-bomb"],
)
def test_pathological_nesting_is_fast(html: str) -> None:
    start = time.perf_counter()
    page = parse(html)
    elapsed = time.perf_counter() - start
    assert urls(page) == ["https://example.com/deep"]
    assert page.text.endswith("deep")
    assert elapsed < 5.0, elapsed  # unguarded lexbor needs minutes and gigabytes here


def test_pathological_nesting_in_a_legacy_charset() -> None:
    body = ("<div>" * 60_000 + '<a href="/deep">café</a>').encode("cp1252")
    start = time.perf_counter()
    page = parse_html(body, URL, content_type="text/html; charset=windows-1252")
    assert time.perf_counter() - start < 5.0
    assert page.links == [Link("https://example.com/deep", "café", False)]


def test_moderate_nesting_is_parsed_normally() -> None:
    html = "<div>" * 300 + "<p>a<b>b</b></p>" + '<a href="/x">x</a>'
    assert urls(parse(html)) == ["https://example.com/x"]


# --------------------------------------------------------------------------- links

LINK_CASES = [
    ('<a href="/abs">', "https://example.com/abs"),
    ('<a href="rel">', "https://example.com/dir/rel"),
    ('<a href="./rel">', "https://example.com/dir/rel"),
    ('<a href="../up">', "https://example.com/up"),
    ('<a href="../../../above-root">', "https://example.com/above-root"),
    ('<a href="/a/./b/../c">', "https://example.com/a/c"),
    ('<a href="..">', "https://example.com/"),
    ('<a href="?q=1">', "https://example.com/dir/page.html?q=1"),
    ('<a href="//cdn.example.net/x">', "https://cdn.example.net/x"),
    ('<a href="http://other.org/p?a=1&amp;b=2">', "http://other.org/p?a=1&b=2"),
    ('<a href="HTTPS://Other.Org/Up">', "https://other.org/Up"),  # normalized
    ('<a href="/page#frag">', "https://example.com/page"),
    ('<a href="  /spaced  ">', "https://example.com/spaced"),
    ('<a href="/inner space.pdf">', "https://example.com/inner%20space.pdf"),
    ('<a href="/new\nline\t/x">', "https://example.com/newline/x"),
    ('<a href="\\back\\slash?q=\\">', "https://example.com/back/slash?q=%5C"),
    ('<a href="\\\\evil.example\\x">', "https://evil.example/x"),
    # WHATWG: same scheme without "//" is relative; otherwise slashes are optional.
    ('<a href="https:relative">', "https://example.com/dir/relative"),
    ('<a href="https:/rooted">', "https://example.com/rooted"),
    ('<a href="http:other.example/p">', "http://other.example/p"),
    ('<a href="https:///three.example/p">', "https://three.example/p"),
    ('<a href="////four.example/p">', "https://four.example/p"),
    ('<a href="https://bücher.example/ü">', "https://xn--bcher-kva.example/%C3%BC"),
    ('<area href="/map" alt="Map">', "https://example.com/map"),
    ('<a href=";">', "https://example.com/dir/;"),
    ('<a href="?">', "https://example.com/dir/page.html"),
    ('<a href="/x?utm_source=feed&amp;id=1&amp;fbclid=z">', "https://example.com/x?id=1"),  # tracking dropped
    ('<a href="/a\x01b">', "https://example.com/a%01b"),  # controls never survive raw
    ('<a href="a//b">', "https://example.com/dir/a//b"),
]


@pytest.mark.parametrize(("html", "expected"), LINK_CASES)
def test_link_resolution(html: str, expected: str) -> None:
    assert urls(parse(html)) == [expected]


SKIPPED_HREFS = [
    "", "   ", "#", "#top", " #top", "javascript:void(0)", " JavaScript:alert(1)",
    "java\nscript:alert(1)", "mailto:a@example.com", "MAILTO:a@example.com", "tel:+123",
    "data:text/html,<a>", "ftp://example.com/f", "file:///etc/passwd", "about:blank",
    "http://[bad", "http://[::1", "https://]x/", "//[bad/x", "http://", "https://", "//", "https:",
    "/" + "x" * 5000,
]


@pytest.mark.parametrize("href", SKIPPED_HREFS)
def test_skipped_hrefs(href: str) -> None:
    page = parse(f'<a href="{href}">x</a><a>no href</a>')
    assert page.links == []


def test_links_never_taken_from_hidden_places() -> None:
    html = """
    <!-- <a href="/comment">c</a> -->
    <script>document.write('<a href="/script">s</a>'); var s = "</scr" + "ipt>";</script>
    <script type="text/template"><a href="/tmpl-script">t</a></script>
    <style>/* <a href="/style"> */</style>
    <template><a href="/template">t</a></template>
    <noscript><a href="/noscript">n</a></noscript>
    <iframe><a href="/iframe">i</a></iframe>
    <textarea><a href="/textarea">t</a></textarea>
    <a href="/real">real</a>
    """
    assert urls(parse(html)) == ["https://example.com/real"]


def test_document_order_and_first_duplicate_wins() -> None:
    html = (
        '<a href="/b">first b</a><map><area href="/a" alt="area a"></map>'
        '<a href="/b" rel="nofollow">second b</a><a href="https://example.com/b">third b</a>'
        '<a href="/c">c</a>'
    )
    page = parse(html)
    assert page.links == [
        Link("https://example.com/b", "first b", False),
        Link("https://example.com/a", "area a", False),
        Link("https://example.com/c", "c", False),
    ]


@pytest.mark.parametrize(
    ("rel", "nofollow"),
    [
        ("nofollow", True),
        ("NoFollow noopener", True),
        ("noopener\tnofollow", True),
        ("ugc", True),
        ("sponsored", True),
        ("external noopener", False),
        ("", False),
        ("nofollowers", False),
    ],
)
def test_link_nofollow(rel: str, nofollow: bool) -> None:
    assert parse(f'<a href="/x" rel="{rel}">x</a>').links[0].nofollow is nofollow


def test_link_text() -> None:
    html = (
        '<a href="/1">  Hello\n\t <b>bold</b>   world &amp; co </a>'
        '<a href="/2"><img src="i.png" alt="Logo alt"></a>'
        '<a href="/3" aria-label="Labelled"><svg></svg></a>'
        f'<a href="/4">{"word " * 100}</a>'
        '<a href="/5"></a>'
    )
    texts = [link.text for link in parse(html).links]
    assert texts[0] == "Hello bold world & co"
    assert texts[1] == "Logo alt"
    assert texts[2] == "Labelled"
    assert len(texts[3]) == 200 and texts[3].startswith("word word")
    assert texts[4] == ""


def test_many_links_match_normalize_url() -> None:
    hrefs = ["a", "a/b", "/a", "?x", "../x", "./x", "//h.example/p", "x;p?q#f", "a/../b/./c", "."]
    page = parse("".join(f'<a href="{h}">{i}</a>' for i, h in enumerate(hrefs)))
    assert urls(page) == [normalize_url(h, URL) for h in hrefs]


def test_links_use_the_callers_drop_params() -> None:
    page = parse('<a href="/s?page=2&amp;q=x&amp;sid=1">s</a>', drop_params=frozenset({"page"}))
    assert urls(page) == ["https://example.com/s?q=x&sid=1"]


_HREF_ALPHABET = "ab./?#=:%;\\ \t\n\x00\x0b\x1fé"


@settings(max_examples=300, deadline=None)
@given(
    href=st.text(alphabet=_HREF_ALPHABET, max_size=12),
    base=st.sampled_from(
        [URL, "https://example.com", "https://example.com/", "http://h.example/a/b/c?q=1#f",
         "https://example.com/a/./b/../c/", "HTTP://H.example:80/%7Ex/"]
    ),
)
def test_links_are_normalize_url_minus_self_references(href: str, base: str) -> None:
    """One resolver: a link is what normalize_url makes of the href, or skipped as the page itself."""
    got = Resolver(base).link(href)
    expected = normalize_url(href, base)
    if got is None:
        stripped = href.strip("".join(chr(i) for i in range(0x21))).replace("\t", "").replace("\n", "")
        assert expected is None or stripped in ("", "http:", "https:") or stripped.startswith(("#", "http:#", "https:#"))
    else:
        assert got == expected
        assert not any(ord(c) < 0x21 or c == "\x7f" for c in got)  # nothing that could reach a WARC header raw
    if "\x00" not in href:  # the HTML tokenizer turns NUL into U+FFFD
        assert urls(parse(f'<a href="{html.escape(href)}">x</a>', url=base)) == ([got] if got else [])


# --------------------------------------------------------------------------- base href


def test_base_href_absolute() -> None:
    page = parse('<base href="https://other.example/x/y/"><a href="z">z</a><a href="/r">r</a>')
    assert page.base_url == "https://other.example/x/y/"
    assert urls(page) == ["https://other.example/x/y/z", "https://other.example/r"]


def test_base_href_relative_is_resolved_against_page_url() -> None:
    page = parse('<head><base href="../assets/"></head><a href="img">i</a>')
    assert page.base_url == "https://example.com/assets/"
    assert urls(page) == ["https://example.com/assets/img"]


def test_first_base_with_href_wins_and_target_only_base_is_skipped() -> None:
    page = parse('<base target="_blank"><base href="/one/"><base href="/two/"><a href="x">x</a>')
    assert page.base_url == "https://example.com/one/"
    assert urls(page) == ["https://example.com/one/x"]


@pytest.mark.parametrize("base", ["javascript:alert(1)", "", "#", "http://[bad", "mailto:x@y"])
def test_invalid_base_is_ignored(base: str) -> None:
    page = parse(f'<base href="{base}"><a href="x">x</a>')
    assert page.base_url == URL
    assert urls(page) == ["https://example.com/dir/x"]


def test_base_in_body_still_counts() -> None:
    page = parse('<body><a href="x">x</a><base href="/late/"></body>')
    assert urls(page) == ["https://example.com/late/x"]


def test_base_applies_to_canonical_and_refresh() -> None:
    page = parse(
        '<base href="/b/"><link rel="canonical" href="c">'
        '<meta http-equiv="refresh" content="0; url=r">'
    )
    assert page.canonical == "https://example.com/b/c"
    assert page.meta_refresh == "https://example.com/b/r"


# --------------------------------------------------------------------------- canonical


@pytest.mark.parametrize(
    ("html", "headers", "expected"),
    [
        ('<link rel="canonical" href="/canon">', None, "https://example.com/canon"),
        ('<link rel="Canonical" href="https://x.example/c">', None, "https://x.example/c"),
        ('<link rel="alternate canonical" href="c2">', None, "https://example.com/dir/c2"),
        ('<link rel="canonical" href="/first"><link rel="canonical" href="/second">', None,
         "https://example.com/first"),
        ('<link rel="canonical" href="javascript:x">', None, None),
        ('<link rel="canonical">', None, None),
        ('<noscript><link rel="canonical" href="/ns"></noscript>', None, None),
        ("<p>x</p>", {"Link": '<https://example.com/hdr>; rel="canonical"'}, "https://example.com/hdr"),
        ("<p>x</p>", {"link": '</hdr-rel>; rel=canonical'}, "https://example.com/hdr-rel"),
        ("<p>x</p>", {"LINK": '<https://cdn.example/s.css>; rel="preload", <https://example.com/c,1>;'
                              ' rel="canonical"'}, "https://example.com/c,1"),
        ("<p>x</p>", {"Link": '<https://example.com/alt>; rel="alternate"'}, None),
        ('<link rel="canonical" href="/html">', {"Link": '</hdr>; rel="canonical"'},
         "https://example.com/html"),
        ("<p>x</p>", None, None),
    ],
)
def test_canonical(html: str, headers: dict[str, str] | None, expected: str | None) -> None:
    assert parse(html, headers=headers).canonical == expected


# --------------------------------------------------------------------------- robots


@pytest.mark.parametrize(
    ("html", "agent", "noindex", "nofollow"),
    [
        ('<meta name="robots" content="noindex">', "", True, False),
        ('<meta name="robots" content="nofollow">', "", False, True),
        ('<meta name="ROBOTS" content="NOINDEX, NOFOLLOW">', "", True, True),
        ('<meta name="robots" content="noindex nofollow">', "", True, True),
        ('<meta name="robots" content="none">', "", True, True),
        ('<meta name="robots" content="all">', "", False, False),
        ('<meta name="robots" content="index, follow, max-snippet:-1">', "", False, False),
        ('<meta name="robots" content="noindexing">', "", False, False),
        ('<meta name="robots" content="noindex"><meta name="robots" content="nofollow">', "", True, True),
        ('<meta name="simbot" content="nofollow">', "simbot", False, True),
        ('<meta name="SimBot" content="noindex">', "simbot", True, False),
        ('<meta name="simbot" content="nofollow">', "", False, False),
        ('<meta name="googlebot" content="noindex">', "simbot", False, False),
        ('<meta name="robots" content="noindex">', "simbot", True, False),
        ('<meta content="noindex">', "", False, False),
        ('<noscript><meta name="robots" content="noindex"></noscript>', "", False, False),
        ('<body><p>late</p><meta name="robots" content="noindex"></body>', "", True, False),
    ],
)
def test_meta_robots(html: str, agent: str, noindex: bool, nofollow: bool) -> None:
    page = parse(html, agent=agent)
    assert (page.noindex, page.nofollow) == (noindex, nofollow)


@pytest.mark.parametrize(
    ("value", "agent", "noindex", "nofollow"),
    [
        ("noindex", "", True, False),
        ("NOFOLLOW", "", False, True),
        ("noindex, nofollow", "", True, True),
        ("none", "", True, True),
        ("all", "", False, False),
        ("simbot: noindex", "simbot", True, False),
        ("SimBot: noindex, nofollow", "simbot", True, True),
        ("simbot: noindex", "", False, False),
        ("googlebot: noindex", "simbot", False, False),
        ("googlebot: noindex, simbot: nofollow", "simbot", False, True),
        ("unavailable_after: 25 Jun 2010 15:00:00 PST", "", False, False),
        ("max-snippet: 20, noindex", "", True, False),
        ("noarchive", "", False, False),
    ],
)
def test_x_robots_tag(value: str, agent: str, noindex: bool, nofollow: bool) -> None:
    page = parse("<p>x</p>", headers={"X-Robots-Tag": value}, agent=agent)
    assert (page.noindex, page.nofollow) == (noindex, nofollow)


def test_x_robots_tag_header_name_is_case_insensitive_and_combines_with_meta() -> None:
    page = parse('<meta name="robots" content="nofollow">', headers={"x-robots-tag": "noindex"})
    assert page.noindex and page.nofollow


def test_odd_headers_do_not_break_parsing() -> None:
    headers = {"X-Robots-Tag": None, 3: "noindex", "Link": "<<<>>>;;rel"}
    page = parse('<a href="/x">x</a>', headers=headers)
    assert urls(page) == ["https://example.com/x"] and not page.noindex


# --------------------------------------------------------------------------- meta refresh


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("0;URL='/next'", "https://example.com/next"),
        ("0; url=/next", "https://example.com/next"),
        ('5;url="next"', "https://example.com/dir/next"),
        ("0,url=/comma", "https://example.com/comma"),
        ("  3 ; URL = /spaces ", "https://example.com/spaces"),
        ("1.5; url=/frac", "https://example.com/frac"),
        ("0; /bare", "https://example.com/bare"),
        ("0;url='https://other.example/q?x=1'", "https://other.example/q?x=1"),
        ("0;url='/unterminated", "https://example.com/unterminated"),
        ("10", None),  # refreshes itself
        ("url=/nodelay", None),  # invalid in browsers
        ("0; url=javascript:alert(1)", None),
        ("", None),
    ],
)
def test_meta_refresh(content: str, expected: str | None) -> None:
    page = parse(f'<meta http-equiv="refresh" content="{html.escape(content)}">')
    assert page.meta_refresh == expected


def test_meta_refresh_first_valid_wins_and_equiv_is_case_insensitive() -> None:
    page = parse(
        '<meta http-equiv="Refresh" content="nonsense">'
        '<meta HTTP-EQUIV="REFRESH" content="0; url=/one">'
        '<meta http-equiv="refresh" content="0; url=/two">'
    )
    assert page.meta_refresh == "https://example.com/one"


# --------------------------------------------------------------------------- title, text, lang


def test_title_text_and_lang() -> None:
    html = """<!DOCTYPE html><html lang=" en-GB "><head><title>  My
      Title &amp; more </title><style>.x{}</style><script>var x = 1;</script></head>
      <body><svg><title>icon title</title></svg>
      <h1>Heading</h1><p>Para   one.</p><!-- hidden comment --><p>Para&nbsp;two</p>
      <noscript>enable js</noscript><template><p>tmpl</p></template>
      <script>alert('no')</script><style>p{}</style></body></html>"""
    page = parse(html)
    assert page.title == "My Title & more"
    assert page.lang == "en-GB"
    assert page.text == "icon title Heading Para one. Para two"


def test_title_outside_head_and_svg_title_not_preferred() -> None:
    assert parse("<body><svg><title>icon</title></svg><title>Real</title></body>").title == "Real"
    assert parse("<p>no title</p>").title == ""


def test_max_text_chars() -> None:
    html = "<p>" + "word " * 1000 + "</p>"
    assert len(parse(html, max_text_chars=50).text) == 50
    assert parse(html, max_text_chars=0).text == ""


def test_lang_missing_or_junk() -> None:
    assert parse("<p>x</p>").lang is None
    assert parse('<html lang=""><p>x</p>').lang is None
    assert parse(f'<html lang="{"x" * 500}"><p>x</p>').lang is None


# --------------------------------------------------------------------------- charsets


@pytest.mark.parametrize(
    ("body", "content_type", "charset", "snippet"),
    [
        (b"\xef\xbb\xbf<title>caf\xc3\xa9</title>", None, "utf-8", "café"),
        (b"\xef\xbb\xbf<title>caf\xc3\xa9</title>", "text/html; charset=iso-8859-1", "utf-8", "café"),
        ("\ufeff<title>Grüße ✓</title>".encode("utf-16-le"), None, "utf-16le", "Grüße ✓"),
        ("\ufeff<title>Grüße ✓</title>".encode("utf-16-be"), "text/html; charset=utf-8", "utf-16be",
         "Grüße ✓"),
        ("<title>Привет</title>".encode("cp1251"), "text/html; charset=windows-1251",
         "windows-1251", "Привет"),
        ("<title>Привет</title>".encode("cp1251"), 'text/html; Charset="CP1251"', "windows-1251",
         "Привет"),
        ('<meta charset="koi8-r"><title>Привет</title>'.encode("koi8-r"), None, "koi8-r", "Привет"),
        ("<meta http-equiv='Content-Type' content='text/html; charset=Shift_JIS'><title>日本</title>"
         .encode("shift_jis"), None, "shift_jis", "日本"),
        ("<title>caf\u00e9 \u20ac\u201c</title>".encode("cp1252"), None, "windows-1252", "café €“"),
        ("<title>caf\u00e9 \u20ac</title>".encode("cp1252"), "text/html; charset=latin-1",
         "windows-1252", "café €"),
        ("<title>caf\u00e9 \u20ac</title>".encode("cp1252"), "text/html; charset=US-ASCII",
         "windows-1252", "café €"),
        ("<title>naïve</title>".encode(), "text/html; charset=bogus-label", "utf-8", "naïve"),
        ("<title>naïve</title>".encode("cp1252"), "text/html; charset=x-unknown", "windows-1252",
         "naïve"),
        (b"<title>+ZeVnLIqe-</title>", "text/html; charset=utf-7", "utf-8", "+ZeVnLIqe-"),
        (b'<meta charset="base64"><title>aGk=</title>', None, "utf-8", "aGk="),
        ('<meta charset="utf-16"><title>é</title>'.encode(), None, "utf-8", "é"),
        ('<!-- <meta charset="koi8-r"> --><title>é</title>'.encode(), None, "utf-8", "é"),
        ("<title>Grüße</title>".encode(), None, "utf-8", "Grüße"),
    ],
)
def test_charset_detection(body: bytes, content_type: str | None, charset: str, snippet: str) -> None:
    text, used = decode_html(body, content_type)
    assert used == charset
    assert snippet in text
    page = parse_html(body, URL, content_type=content_type)
    assert page.charset == charset
    assert page.title == snippet


def test_header_charset_beats_meta() -> None:
    body = '<meta charset="koi8-r"><title>Привет</title>'.encode("cp1251")
    assert decode_html(body, "text/html; charset=windows-1251") == (
        '<meta charset="koi8-r"><title>Привет</title>', "windows-1251"
    )


def test_windows_1252_undefined_bytes_map_to_c1_controls() -> None:
    text, charset = decode_html(b"a\x81\x8d\x8f\x90\x9d\x80", None)
    assert (text, charset) == ("a\x81\x8d\x8f\x90\x9d\u20ac", "windows-1252")


def test_utf8_cut_mid_character_stays_utf8() -> None:
    body = "<p>é ünïcode ".encode() + "✓".encode()[:2]
    text, charset = decode_html(body, None)
    assert charset == "utf-8" and text.startswith("<p>é ünïcode")
    # ...but a lone trailing high byte after pure ASCII is windows-1252 text.
    assert decode_html(b"cafe caf\xe9", None) == ("cafe café", "windows-1252")


def test_meta_prescan_is_limited_to_4kb() -> None:
    body = b"<!-- " + b"x" * 5000 + b' --><meta charset="koi8-r"><p>\xf0\xd2</p>'
    assert decode_html(body, None)[1] == "windows-1252"


@settings(max_examples=200, deadline=None)
@given(body=st.binary(max_size=300), content_type=st.one_of(st.none(), st.text(max_size=40)))
def test_decode_html_never_raises(body: bytes, content_type: str | None) -> None:
    text, charset = decode_html(body, content_type)
    assert isinstance(text, str) and isinstance(charset, str)


# --------------------------------------------------------------------------- is_html


@pytest.mark.parametrize(
    ("content_type", "head", "expected"),
    [
        ("text/html", b"", True),
        ("text/html; charset=utf-8", b"%PDF", True),
        ("TEXT/HTML ;charset=x", b"", True),
        ("application/xhtml+xml", b"<?xml?>", True),
        ("text/plain", b"<html>", False),
        ("application/json", b"<!doctype html>", False),
        ("image/png", b"\x89PNG", False),
        (None, b"<!DOCTYPE html><html>", True),
        (None, b"  \n<!doctype HTML>", True),
        ("", b"<html lang=en>", True),
        (None, b"<HEAD><title>", True),
        (None, b"<body>", True),
        (None, b"\xef\xbb\xbf<html>", True),
        (None, "<html>".encode("utf-16"), True),
        (None, b"<!-- saved from url --><html>", True),
        (None, b'<?xml version="1.0"?><!DOCTYPE html>', True),
        ("unknown/unknown", b"<html>", True),
        (None, b"<htmlfoo>", False),
        (None, b"<p>hello</p>", False),
        (None, b'<?xml version="1.0"?><urlset>', False),
        (None, b"%PDF-1.4", False),
        (None, b"", False),
        (None, b"<!-- never closed", False),
    ],
)
def test_is_html(content_type: str | None, head: bytes, expected: bool) -> None:
    assert is_html(content_type, head) is expected


@settings(max_examples=300, deadline=None)
@given(content_type=st.one_of(st.none(), st.text(max_size=60)), head=st.binary(max_size=200))
def test_is_html_never_raises(content_type: str | None, head: bytes) -> None:
    assert isinstance(is_html(content_type, head), bool)


# --------------------------------------------------------------------------- properties

_FRAGMENTS = [
    b"<a href='/x'>", b"<a href=\"//h.example/y\">", b"</a>", b"<base href='/b/'>", b"<div>", b"</div>",
    b"<b>", b"<table><tr><td>", b"<script>", b"</script>", b"<style>", b"<!--", b"-->",
    b"<meta http-equiv=refresh content='0;url=/r'>", b"<meta name=robots content=noindex>",
    b"<link rel=canonical href='/c'>", b"<template>", b"</template>", b"<noscript>", b"<svg>",
    b"<math>", b"<title>", b"</title>", b"<html lang=en>", b"&amp;", b"&#x0;", b"\x00", b"\xff",
    b"\xc3", b"<meta charset=utf-16>", b"<a href='javascript:x'>", b"<area href='http://[bad'>",
    b"<plaintext>", b"<textarea>", b"<select><option>", b"<frameset>", b"<?xml?>", b"<!DOCTYPE html>",
    b"text ", b"\n", b"<", b">", b"'", b'"', b"=",
]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    parts=st.lists(st.one_of(st.sampled_from(_FRAGMENTS), st.binary(max_size=8)), max_size=60),
    content_type=st.sampled_from([None, "text/html", "text/html; charset=utf-16", "text/html; charset=cp1252"]),
    agent=st.sampled_from(["", "simbot"]),
)
def test_parse_html_never_raises_on_htmlish_bytes(
    parts: list[bytes], content_type: str | None, agent: str
) -> None:
    page = parse_html(b"".join(parts), URL, content_type=content_type, agent=agent, max_text_chars=500)
    check_invariants(page, max_text_chars=500)


@settings(max_examples=200, deadline=None)
@given(body=st.binary(max_size=2000), url=st.sampled_from([URL, "", "not a url", "http://[bad/"]))
def test_parse_html_never_raises_on_any_bytes(body: bytes, url: str) -> None:
    check_invariants(parse_html(body, url))


def test_random_junk_pages() -> None:
    rng = random.Random(7)
    for _ in range(30):
        check_invariants(parse_html(rng.randbytes(rng.randint(0, 20_000)), URL))
