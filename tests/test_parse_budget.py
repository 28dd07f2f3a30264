"""Tests for crawler_tasks.parse.budget: hostile documents are parsed, and the cap is reported."""

from __future__ import annotations

import re
import time

import pytest

from crawler_tasks.parse.budget import MAX_ATTRS, MAX_DEPTH, MAX_ELEMENTS, apply_budget
from crawler_tasks.parse.html import parse_html, prepare_document
from crawler_tasks.settings import Settings
from tests import realpages

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


# --- adversarial: one reading of every tag, and work linear in the input -----------------------

SVG_PATH = b'<svg viewBox="0 0 24 24"><path fill="none" d="M0 0' + b"".join(b" L%d.5 %d.25" % (i, 3 * i) for i in range(40))


@pytest.mark.parametrize("body", [
    # a long quoted value read as dozens of fake attributes tripped the cap and cut the tag mid-quote
    SVG_PATH + b' Z"/></svg><p>after</p>',
    b"<div " + b" ".join(b'a%d="w x y z"' % i for i in range(12)) + b"><a href=/x>x</a></div>",
    b"<p " + b" ".join(b'data-a%d="v%d"' % (i, i) for i in range(12)) + b">twelve plain attributes</p>",
    b'<img alt="a > b, c=d" title="see href=/elsewhere" ' + b" ".join(b"x%d=1" % i for i in range(60)) + b">",
    b"<p>x</p><a title='never closed " + b"w " * 200 + b"<a href=/b>b</a>",
], ids=["svg-path", "multi-word-values", "plain-attributes", "markup-in-values", "unclosed-quote"])
def test_a_tag_within_the_caps_is_never_altered(body: bytes) -> None:
    out, limited = apply_budget(body)
    assert limited is None and out is body
    text = body.decode()
    assert apply_budget(text) == (text, None)


def _attributes(html: bytes) -> dict[str, str | None]:
    from selectolax.lexbor import LexborHTMLParser

    node = LexborHTMLParser(html).css_first("body > *")
    assert node is not None
    return dict(node.attributes)


def test_the_attribute_cap_cuts_between_attributes_and_keeps_the_real_ones_the_parser_reads() -> None:
    wide = " ".join(f'd{i}="{i} > {i}=x {i}"' for i in range(70))
    body = f'<a {wide} data-x="y href=/fake" title="t" href="/real">x</a><p id=after>after</p>'.encode()
    out, limited = apply_budget(body)
    assert limited == "max_attrs" and isinstance(out, bytes)
    before, after = _attributes(body), _attributes(out)
    assert list(after) == [f"d{i}" for i in range(MAX_ATTRS)] + ["title", "href"]
    assert all(after[name] == before[name] for name in after)  # no value cut or misread
    assert out.endswith(b"<p id=after>after</p>")
    assert [link.url for link in parse_html(body, URL).links] == ["https://bomb.example/real"]


def _cpu(body: bytes, reps: int = 5) -> float:
    """Best CPU time of the pass over body (min of reps: other processes share the cores)."""
    best = float("inf")
    for _ in range(reps):
        start = time.process_time()
        apply_budget(body)
        best = min(best, time.process_time() - start)
    return max(best, 1e-6)


GROWING = {  # an input of size n, and n
    "attributes-per-tag": (lambda n: (b"<p " + b" ".join(b'data-a%d="v%d"' % (i, i) for i in range(n)) + b">x</p>") * 20,
                           3),
    "long-quoted-value": (lambda n: SVG_PATH + b" L1.5 2" * n + b'"/></svg><p>after</p>', 5000),
    "attributes-over-the-cap": (lambda n: b"<div " + b" ".join(b'a%d="x y z"' % i for i in range(n)) + b">x</div>",
                                2000),
    "tags-at-the-cap": (lambda n: (b"<i " + b" ".join(b'a%d="x y"' % i for i in range(64)) + b">w</i>") * n, 100),
    "unclosed-quotes": (lambda n: b"<p>x</p>" * n + b'<a title="' + b"never closed <b> " * n, 2000),
    "end-tags-past-pending": (lambda n: b"<div>" + b"".join(b"<i id=%d>" % i for i in range(500)) + b"</div>"
                              + b"</b>" * n, 5000),
    "lt-soup": (lambda n: b"<</<!<?<a <a b='>" * n, 5000),
    "nesting": (lambda n: b"<div><b id=1>" * n + b"text", 5000),
}


@pytest.mark.parametrize("name", list(GROWING))
def test_work_grows_linearly(name: str) -> None:
    """4x the input costs about 4x the work (bound 12x: a quadratic pass costs 16x, the
    backtracking that split quoted values thousands of times more)."""
    make, n = GROWING[name]
    small, large = _cpu(make(n)), _cpu(make(4 * n))
    assert large < 12 * small, (name, small, large)


def test_work_does_not_grow_with_pending_formatting_elements() -> None:
    """Each end tag cost a walk of the pending list (4.6 s for 1 MiB of them after 505)."""
    def body(pending: int) -> bytes:
        return b"<div>" + b"".join(b"<i id=%d>" % i for i in range(pending)) + b"</div>" + b"</b>" * 20_000

    assert _cpu(body(500)) < 3 * _cpu(body(5))


# --- real pages: the pinned corpus (tests/realpages.py) ------------------------------------

_DECLARED = re.compile(rb"<meta[^>]*charset=[\"']?([A-Za-z0-9_-]+)", re.I)
_AS_BROWSERS_READ = {"utf-8": "utf-8", "iso-8859-1": "windows-1252"}  # the labels the corpus declares


@pytest.mark.parametrize("part", realpages.PARTS)
def test_real_pages_are_decoded_as_declared_and_never_altered_by_the_budget(part: str) -> None:
    """No page of the corpus is cut or changed by encoding sniffing or the budget. Its pass is
    forced on every page here; a crawl runs it on a page only when its parse is late (or,
    without a deadline, when the page is big, tag-dense or has a giant tag)."""
    for path in realpages.corpus(part):
        body = path.read_bytes()
        declared = _DECLARED.search(body[:4096])
        charset = _AS_BROWSERS_READ[declared.group(1).decode().lower() if declared else "utf-8"]
        doc = prepare_document(body, "text/html")   # a server that names no charset
        assert (doc.charset, doc.limited) == (charset, None), path
        assert doc.data is body if charset == "utf-8" else doc.data == body.decode(charset), path
        out, limited = apply_budget(doc.data)
        assert limited is None and out is doc.data, path
