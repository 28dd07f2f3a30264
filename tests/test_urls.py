"""Tests for crawler_tasks.urls.normalize: case tables, library assumptions, properties."""

from __future__ import annotations

import ipaddress
import json
import re
from pathlib import Path
from urllib.parse import quote, unquote_to_bytes, urljoin

import idna
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from crawler_tasks.urls import normalize as urls
from crawler_tasks.urls.normalize import (
    DEFAULT_SESSION_PARAMS,
    DEFAULT_TRACKING_PARAMS,
    host_key,
    normalize_url,
)

RFC_BASE = "http://a/b/c/d;p?q"

# RFC 3986 5.4.1.  Differences from the RFC text, all from normalization:
# "g:h" is not http(s) -> None; "//g" gets the "/" of an empty path;
# fragments are dropped.
RFC_NORMAL = [
    ("g:h", None),
    ("g", "http://a/b/c/g"),
    ("./g", "http://a/b/c/g"),
    ("g/", "http://a/b/c/g/"),
    ("/g", "http://a/g"),
    ("//g", "http://g/"),
    ("?y", "http://a/b/c/d;p?y"),
    ("g?y", "http://a/b/c/g?y"),
    ("#s", "http://a/b/c/d;p?q"),
    ("g#s", "http://a/b/c/g"),
    ("g?y#s", "http://a/b/c/g?y"),
    (";x", "http://a/b/c/;x"),
    ("g;x", "http://a/b/c/g;x"),
    ("g;x?y#s", "http://a/b/c/g;x?y"),
    ("", "http://a/b/c/d;p?q"),
    (".", "http://a/b/c/"),
    ("./", "http://a/b/c/"),
    ("..", "http://a/b/"),
    ("../", "http://a/b/"),
    ("../g", "http://a/b/g"),
    ("../..", "http://a/"),
    ("../../", "http://a/"),
    ("../../g", "http://a/g"),
]

# RFC 3986 5.4.2.  "http:g" takes the backward-compatible reading, which is
# also what browsers (WHATWG) do.
RFC_ABNORMAL = [
    ("../../../g", "http://a/g"),
    ("../../../../g", "http://a/g"),
    ("/./g", "http://a/g"),
    ("/../g", "http://a/g"),
    ("g.", "http://a/b/c/g."),
    (".g", "http://a/b/c/.g"),
    ("g..", "http://a/b/c/g.."),
    ("..g", "http://a/b/c/..g"),
    ("./../g", "http://a/b/g"),
    ("./g/.", "http://a/b/c/g/"),
    ("g/./h", "http://a/b/c/g/h"),
    ("g/../h", "http://a/b/c/h"),
    ("g;x=1/./y", "http://a/b/c/g;x=1/y"),
    ("g;x=1/../y", "http://a/b/c/y"),
    ("g?y/./x", "http://a/b/c/g?y/./x"),
    ("g?y/../x", "http://a/b/c/g?y/../x"),
    ("g#s/./x", "http://a/b/c/g"),
    ("g#s/../x", "http://a/b/c/g"),
    ("http:g", "http://a/b/c/g"),
]


@pytest.mark.parametrize(("ref", "expected"), RFC_NORMAL + RFC_ABNORMAL)
def test_rfc3986_section_5_4(ref: str, expected: str | None) -> None:
    assert normalize_url(ref, RFC_BASE) == expected


CASES: list[tuple[str, str | None, str | None]] = [
    # RFC 3986 6.2.2
    ("HTTP://www.Example.com/", None, "http://www.example.com/"),
    ("http://example.com/%7Efoo", None, "http://example.com/~foo"),
    ("http://example.com/a/./b/../b/%63/%7bfoo%7d", None, "http://example.com/a/b/c/%7Bfoo%7D"),
    ("HTTPS://A.COM/X", None, "https://a.com/X"),  # path case is significant
    # whitespace and control characters
    ("  http://a.com/x  ", None, "http://a.com/x"),
    ("\x00\x1f http://a.com/\x7f \n", None, "http://a.com/"),
    ("\u00a0\ufeffhttp://a.com/x\u00a0", None, "http://a.com/x"),
    ("http://a\tb.com/x\ny\r", None, "http://ab.com/xy"),
    ("http://a.com/x\x01y", None, "http://a.com/x%01y"),
    # backslashes (WHATWG, http(s) only, not in the query)
    ("http://a.com/a\\b", None, "http://a.com/a/b"),
    ("http:\\\\a.com\\x", None, "http://a.com/x"),
    ("http://a.com\\@evil.com/", None, "http://a.com/@evil.com/"),
    ("\\\\a.com\\x", "http://b.com/", "http://a.com/x"),
    ("x\\y?a\\b", "http://b.com/d/", "http://b.com/d/x/y?a%5Cb"),
    # hosts: case, IDN, trailing dot, percent-encoding
    ("http://EXAMPLE.com:80/", None, "http://example.com/"),
    ("http://münchen.de/", None, "http://xn--mnchen-3ya.de/"),
    ("http://MÜNCHEN.de/", None, "http://xn--mnchen-3ya.de/"),
    ("http://xn--mnchen-3ya.de/", None, "http://xn--mnchen-3ya.de/"),
    ("http://ｅｘａｍｐｌｅ.com/", None, "http://example.com/"),
    ("http://a\u3002b.com/", None, "http://a.b.com/"),
    ("http://my_host.bücher.de/", None, "http://my_host.xn--bcher-kva.de/"),
    # UTS 46 as the URL Standard applies it, not IDNA 2008: symbols are valid
    ("http://☃.net/", None, "http://xn--n3h.net/"),
    ("http://i❤.ws/", None, "http://xn--i-7iq.ws/"),
    ("https://%e2%98%83", None, "https://xn--n3h/"),
    ("http://xn--n3h.ß/", None, "http://xn--n3h.xn--zca/"),  # a valid A-label beside Unicode
    ("http://xn--a.ß/", None, None),  # invalid punycode beside Unicode
    ("http://xn---zca.ß/", None, None),  # not RFC 3492 (Python's decoder would take it as "ß")
    ("http://xn--a.com/", None, "http://xn--a.com/"),  # all ASCII: only lower-cased
    ("http://a\u200cb.com/", None, None),  # ZWNJ outside its context (CheckJoiners)
    ("http://نامه\u200cای.com/", None, "http://xn--mgba3gch31f060k.com/"),  # ZWNJ in context
    ("http://يa.com/", None, None),  # RTL then LTR in one label (CheckBidi)
    ("http://-x.ß/", None, "http://-x.xn--zca/"),  # CheckHyphens false
    ("http://\u0301a.ß/", None, None),  # leading combining mark
    ("http://a\u00adb.com/", None, "http://ab.com/"),  # soft hyphen is ignored
    ("http://a\u200db.com/", None, None),  # ZWJ outside its context
    ("http://a／b.com/", None, None),  # fullwidth solidus maps to "/"
    ("http://a.com./x", None, "http://a.com/x"),
    ("http://%65xample.com/", None, "http://example.com/"),
    ("http://m%C3%BCnchen.de/", None, "http://xn--mnchen-3ya.de/"),
    ("http://exa%mple.com/", None, None),
    ("http://%ff.com/", None, None),
    ("http://a b.com/", None, None),
    ("http://a<b.com/", None, None),
    ("http://a.com:80@b.com/", None, "http://b.com/"),
    # IP addresses
    ("http://192.168.0.1/", None, "http://192.168.0.1/"),
    ("http://192.168.0.1:8080/x", None, "http://192.168.0.1:8080/x"),
    ("http://0x7f.0.0.1/", None, "http://127.0.0.1/"),
    ("http://0300.0250.0.1/", None, "http://192.168.0.1/"),
    ("http://2130706433/", None, "http://127.0.0.1/"),
    ("http://127.1/", None, "http://127.0.0.1/"),
    ("http://256.1.1.1/", None, None),
    ("http://1.2.3.4.5/", None, None),
    ("http://09.1.1.1/", None, None),
    ("http://[::1]/", None, "http://[::1]/"),
    ("http://[2001:DB8:0:0::A]:8080/x", None, "http://[2001:db8::a]:8080/x"),
    ("http://[::1/", None, None),
    ("http://[::1]x/", None, None),
    ("http://[fe80::1%25eth0]/", None, None),
    ("http://[v1.x]/", None, None),
    # ports
    ("https://a.com:443/x", None, "https://a.com/x"),
    ("https://a.com:80/x", None, "https://a.com:80/x"),
    ("http://a.com:443/x", None, "http://a.com:443/x"),
    ("http://a.com:8080/x", None, "http://a.com:8080/x"),
    ("http://a.com:/x", None, "http://a.com/x"),
    ("http://a.com:0080/", None, "http://a.com/"),
    ("http://a.com:65535/", None, "http://a.com:65535/"),
    ("http://a.com:65536/", None, None),
    ("http://a.com:8o/", None, None),
    ("http://a.com:-1/", None, None),
    ("http://a.com:８０/", None, None),  # fullwidth digits are not a port
    ("http://a.com:80:80/", None, None),
    # userinfo is dropped
    ("http://user:pass@a.com/x", None, "http://a.com/x"),
    ("http://user@a.com:8080/", None, "http://a.com:8080/"),
    ("http://a@b@c.com/", None, "http://c.com/"),
    ("http://user:pass@/x", None, None),
    # paths: dot segments, empty path, percent-encoding
    ("http://a.com", None, "http://a.com/"),
    ("http://a.com?x=1", None, "http://a.com/?x=1"),
    ("http://a.com/./", None, "http://a.com/"),
    ("http://a.com/..", None, "http://a.com/"),
    ("http://a.com/a/b/../../..", None, "http://a.com/"),
    ("http://a.com/a//b", None, "http://a.com/a//b"),
    ("http://a.com/a/%2e%2E/b", None, "http://a.com/b"),
    ("http://a.com/a/.%2e/b", None, "http://a.com/b"),
    ("http://a.com/a/%2e/b", None, "http://a.com/a/b"),
    ("http://a.com/a b", None, "http://a.com/a%20b"),
    ("http://a.com/ä?q=ü", None, "http://a.com/%C3%A4?q=%C3%BC"),
    ("http://a.com/%c3%a4", None, "http://a.com/%C3%A4"),
    ("http://a.com/😀", None, "http://a.com/%F0%9F%98%80"),
    ("http://a.com/%zz", None, "http://a.com/%25zz"),
    ("http://a.com/100%", None, "http://a.com/100%25"),
    ("http://a.com/%2", None, "http://a.com/%252"),
    ("http://a.com/a%2Fb", None, "http://a.com/a%2Fb"),
    ("http://a.com/a%2fb", None, "http://a.com/a%2Fb"),
    ("http://a.com/%41%42c%5F", None, "http://a.com/ABc_"),
    ("http://a.com/%3A%40%21", None, "http://a.com/%3A%40%21"),
    ("http://a.com/:@!$&'()*+,;=", None, "http://a.com/:@!$&'()*+,;="),
    ('http://a.com/"<>`{}|^', None, "http://a.com/%22%3C%3E%60%7B%7D%7C%5E"),
    ("http://a.com/a[1]", None, "http://a.com/a%5B1%5D"),
    # jsessionid-style path parameters
    ("http://a.com/p;jsessionid=ABC", None, "http://a.com/p"),
    ("http://a.com/p;jsessionid=ABC?x=1", None, "http://a.com/p?x=1"),
    ("http://a.com/p;JSESSIONID=ABC;v=2", None, "http://a.com/p;v=2"),
    ("http://a.com/d;jsessionid=1/p", None, "http://a.com/d/p"),
    ("http://a.com/x;p=1", None, "http://a.com/x;p=1"),
    ("..;jsessionid=1/x", "http://a.com/a/b/c", "http://a.com/a/x"),
    # fragments and empty queries
    ("http://a.com/x#frag", None, "http://a.com/x"),
    ("http://a.com/x?y#z?w", None, "http://a.com/x?y"),
    ("http://a.com/b?", None, "http://a.com/b"),
    ("http://a.com/b?#f", None, "http://a.com/b"),
    ("#top", "http://a.com/p?utm_source=1&x=2", "http://a.com/p?x=2"),
    ("?", "http://a.com/p?q", "http://a.com/p"),
    # query: dropped parameters, order and spelling otherwise kept
    ("http://a.com/?utm_source=x&id=3&sid=abc&PHPSESSID=1", None, "http://a.com/?id=3"),
    ("http://a.com/?utm_campaign=x", None, "http://a.com/"),
    ("http://a.com/?UTM_Source=x&a=1", None, "http://a.com/?a=1"),
    ("http://a.com/?utm%5Fsource=x&q=1", None, "http://a.com/?q=1"),
    ("http://a.com/?gclid=1&fbclid=2&msclkid=3&_ga=4", None, "http://a.com/"),
    ("http://a.com/?JSessionID=1&q=x&cfid=2&cftoken=3", None, "http://a.com/?q=x"),
    ("http://a.com/?a=1&&b=2&", None, "http://a.com/?a=1&b=2"),
    ("http://a.com/?b=2&a=1", None, "http://a.com/?b=2&a=1"),
    ("http://a.com/?q=a+b&r=a%20b", None, "http://a.com/?q=a+b&r=a%20b"),
    ("http://a.com/?q=%7e&r=%2f", None, "http://a.com/?q=~&r=%2F"),
    ('http://a.com/?q="x y"', None, "http://a.com/?q=%22x%20y%22"),
    ("http://a.com/?a[]=1&b=?/", None, "http://a.com/?a%5B%5D=1&b=?/"),
    ("http://a.com/?it's", None, "http://a.com/?it%27s"),  # as browsers send it
    ("http://a.com/?it%27s", None, "http://a.com/?it%27s"),
    ("/it's?it's", "http://a.com/", "http://a.com/it's?it%27s"),  # path keeps "'"
    ("http://a.com/?sid", None, "http://a.com/"),
    ("http://a.com/?side=1&ref=x", None, "http://a.com/?side=1&ref=x"),
    # resolution
    ("//a.com/x", "https://b.com/y", "https://a.com/x"),
    ("//a.com/x", "http://b.com/y", "http://a.com/x"),
    ("///a.com/x", "http://b.com/y", "http://a.com/x"),
    ("http:g", "https://a/b", "http://g/"),
    ("https:/g", "http://a/b", "https://g/"),
    ("http:/g", "http://a/b/c", "http://a/g"),
    ("HTTP:g", "http://a/b/c", "http://a/b/g"),
    ("http:///a.com/x", None, "http://a.com/x"),
    ("http:a.com/x", None, "http://a.com/x"),
    ("http://a.com/x", "garbage", "http://a.com/x"),
    ("g", "http://A.COM:80/b/c?q#f", "http://a.com/b/g"),
    ("../x", "http://a.com/%7Eu/d/p", "http://a.com/~u/x"),
    ("x", "http://a.com", "http://a.com/x"),
    # not crawlable
    ("mailto:a@b.com", None, None),
    ("mailto:a@b.com", "http://a.com/", None),
    ("javascript:void(0)", "http://a.com/", None),
    ("JavaScript:alert(1)", None, None),
    ("tel:+123", "http://a.com/", None),
    ("data:text/html,hi", None, None),
    ("ftp://a.com/x", None, None),
    ("file:///etc/passwd", None, None),
    ("a.com:8080/x", None, None),
    ("/x", None, None),
    ("x", None, None),
    ("", None, None),
    ("#top", None, None),
    ("g", "mailto:a@b.com", None),
    ("g", "not a url", None),
    ("g", "ftp://a.com/", None),
    ("http://", None, None),
    ("http:///", None, None),
    ("http:", None, None),
    ("http://:80/", None, None),
    ("http://.../", None, None),
]


@pytest.mark.parametrize(("href", "base", "expected"), CASES)
def test_normalize_cases(href: str, base: str | None, expected: str | None) -> None:
    assert normalize_url(href, base) == expected


def test_case_table_is_large() -> None:
    assert len(RFC_NORMAL) + len(RFC_ABNORMAL) + len(CASES) >= 80


def test_never_raises_on_non_strings() -> None:
    assert normalize_url(None) is None  # type: ignore[arg-type]
    assert normalize_url(b"http://a.com/") is None  # type: ignore[arg-type]
    assert normalize_url("x", ["unhashable"]) is None  # type: ignore[arg-type]
    assert normalize_url("http://a.com/\ud800") is None  # lone surrogate


# ---------------------------------------------------------------- parameters


def test_default_sets_are_lower_case_frozensets() -> None:
    for names in (DEFAULT_TRACKING_PARAMS, DEFAULT_SESSION_PARAMS):
        assert isinstance(names, frozenset)
        assert all(n == n.lower() for n in names)
    assert {"gclid", "fbclid", "dclid", "gbraid", "wbraid", "msclkid", "mc_cid", "mc_eid",
            "yclid", "_ga", "_gl", "igshid", "ref_src"} <= DEFAULT_TRACKING_PARAMS
    assert {"sid", "sessionid", "session_id", "jsessionid", "phpsessid", "aspsessionid",
            "cfid", "cftoken", "sessid"} <= DEFAULT_SESSION_PARAMS


def test_custom_drop_params_replace_defaults_case_insensitively() -> None:
    url = "http://a.com/?sid=1&Foo=2&utm_x=3&fbclid=4"
    assert normalize_url(url, drop_params=frozenset({"FOO"})) == "http://a.com/?sid=1&fbclid=4"
    # utm_ is dropped whatever the set
    assert normalize_url(url, drop_params=frozenset()) == "http://a.com/?sid=1&Foo=2&fbclid=4"
    assert normalize_url(url) == "http://a.com/?Foo=2"


def test_drop_params_on_fast_and_slow_paths() -> None:
    drop = frozenset({"page"})
    assert normalize_url("/s?page=2&q=x", "http://a.com/", drop_params=drop) == "http://a.com/s?q=x"
    assert normalize_url("/s ?page=2&q=x", "http://a.com/", drop_params=drop) == "http://a.com/s%20?q=x"


# ---------------------------------------------------------- host_key / depth


@pytest.mark.parametrize(
    ("url", "key"),
    [
        ("http://Example.COM:80/x", "example.com"),
        ("https://a.com:8443/", "a.com:8443"),
        ("https://a.com:443/", "a.com"),
        ("http://a.com:443/", "a.com:443"),
        ("http://münchen.de/", "xn--mnchen-3ya.de"),
        ("http://[::1]:8080/", "[::1]:8080"),
        ("http://[::1]", "[::1]"),
        ("http://u:p@a.com/", "a.com"),
        ("http://a.com?sid=1", "a.com"),
        ("http://127.0.0.1:8000/", "127.0.0.1:8000"),
        ("mailto:x@y.com", ""),
        ("/relative", ""),
        ("", ""),
        ("http://", ""),
    ],
)
def test_host_key(url: str, key: str) -> None:
    assert host_key(url) == key


# ------------------------------------------- the libraries do what we rely on


def test_idna_library_assumptions() -> None:
    """What _idna_host takes from ``idna``: the UTS 46 table and the context and Bidi checks."""
    assert idna.uts46_remap("MÜNCHEN.ｄｅ", std3_rules=False) == "münchen.de"
    assert idna.uts46_remap("faß_x.a\u00adb", std3_rules=False) == "faß_x.ab"  # ß kept, _ allowed, SHY ignored
    assert idna.uts46_remap("☃", std3_rules=False) == "☃"  # valid in UTS 46 ...
    with pytest.raises(idna.IDNAError):
        idna.alabel("☃")  # ... but not in IDNA 2008: why alabel() is not used
    with pytest.raises(idna.IDNAError):
        idna.uts46_remap("a\u0378", std3_rules=False)  # unassigned: disallowed
    assert not idna.valid_contextj("a\u200cb", 1)
    assert idna.valid_contextj("\u0915\u094d\u200d", 2)  # after a virama
    with pytest.raises(idna.IDNABidiError):
        idna.check_bidi("1com", check_ltr=True)  # in a Bidi domain name an LTR label must start with L
    assert "münchen".encode("punycode") == b"mnchen-3ya"


def test_stdlib_assumptions() -> None:
    assert unquote_to_bytes("a%zz%4") == b"a%zz%4"
    assert unquote_to_bytes("m%C3%BC") == "mü".encode()
    assert ipaddress.IPv6Address("2001:DB8:0:0::A").compressed == "2001:db8::a"
    assert urljoin(RFC_BASE, "../../../g") == "http://a/g"


# ------------------------------------------------------------------ properties

_HOSTS = [
    "a.com", "A.COM", "www.example.com", "münchen.de", "xn--mnchen-3ya.de", "a.com.",
    "127.0.0.1", "0x7f.1", "[::1]", "[2001:DB8::1]", "%65x.com", "u:p@a.com", "a.com:80",
    "a.com:8080", "a.com:", "a.com:99999", "", "a b", "☃.net", "ｅｘ.com", "b.org", "1a.b",
    "xn--n3h.net", "xn--a.ß", "faß.de", "-x.ß", "a\u200cb.com",
]
_SEGMENTS = [
    "a", "B", ".", "..", "%2e", "%2E%2e", "", "%7e", "%7B", "%2F", "%zz", "%", "ä", " ",
    "x;jsessionid=1", "g;x=1", "c:d", "@", "\\", "\t", "~u", ".hidden", "a.b", "😀", "[1]",
]
_QUERIES = [
    "", "a=1", "utm_source=x", "sid=2", "PHPSESSID=3", "q=a+b", "q=%20", "x=%7e", "&", "b=?/",
    "ü=1", "k", "fbclid=z", "q=it's", "q=it%27s",
]
_FRAGMENTS = ["", "#", "#f", "#a b", "#\\x"]


@st.composite
def url_like(draw: st.DrawFn) -> str:
    """URL-shaped strings that reach every branch more often than random text."""
    scheme = draw(st.sampled_from(["http://", "https://", "HTTP://", "http:", "http:///", "//", "",
                                   "mailto:", "ftp://", "javascript:", "http:\\\\"]))
    host = draw(st.sampled_from(_HOSTS)) if scheme.endswith(("/", "\\", ":")) else ""
    segs = draw(st.lists(st.sampled_from(_SEGMENTS), max_size=6))
    lead = draw(st.sampled_from(["/", "", "../", "./"]))
    path = lead + "/".join(segs)
    if host and path and not path.startswith("/"):
        path = "/" + path
    query = draw(st.lists(st.sampled_from(_QUERIES), max_size=4))
    q = ("?" + "&".join(query)) if draw(st.booleans()) else ""
    pad = draw(st.sampled_from(["", " ", "\n", "\x00"]))
    return pad + scheme + host + path + q + draw(st.sampled_from(_FRAGMENTS)) + pad


_BASES = st.one_of(
    st.none(),
    st.sampled_from([RFC_BASE, "https://a.com/x/y?q=1", "http://B.com", "mailto:x@y", "",
                     "http://a.com/d;jsessionid=1/p", "https://münchen.de/a/"]),
    url_like(),
)
_ANY_TEXT = st.text(max_size=80)


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(href=st.one_of(_ANY_TEXT, url_like()), base=st.one_of(_ANY_TEXT, _BASES))
@example(href="http://a.com/x", base="\x00")
@example(href="\\\\", base="http://a/")
def test_never_raises_output_is_http_and_idempotent(href: str, base: str | None) -> None:
    out = normalize_url(href, base)
    if out is None:
        return
    assert out.startswith(("http://", "https://"))
    assert out.isascii()
    assert " " not in out and "#" not in out and "\\" not in out
    assert normalize_url(out) == out
    assert normalize_url(out, base) == out


@settings(max_examples=300)
@given(href=url_like(), base=_BASES)
def test_fast_path_agrees_with_full_algorithm(href: str, base: str | None) -> None:
    drop = urls._DEFAULT_DROP
    fast = urls._fast(href, base, drop)
    if fast is not None:
        assert fast == urls._normalize_slow(href, base, drop)


# No empty segments: urljoin collapses "a//b" to "a/b", which RFC 3986 does
# not (that is why we resolve ourselves rather than call urljoin).
_CLEAN_SEG = st.sampled_from(["a", "b", "g", ".", "..", "g;x=1", "x.y"])


@settings(max_examples=300)
@given(
    segs=st.lists(_CLEAN_SEG, min_size=1, max_size=6),
    absolute=st.booleans(),
    query=st.one_of(st.none(), st.sampled_from(["", "y", "y/./x", "a=1&b=2"])),
    base=st.sampled_from([RFC_BASE, "http://a/", "https://x.org/p/q/r", "http://a/b/c/"]),
)
def test_resolution_matches_stdlib_urljoin(
    segs: list[str], absolute: bool, query: str | None, base: str
) -> None:
    """urljoin implements RFC 3986 5.2 for these plain references."""
    ref = ("/" if absolute else "") + "/".join(segs) + ("" if query is None else "?" + query)
    if ref.startswith("//"):
        return  # a network-path reference, not a path
    assert normalize_url(ref, base) == normalize_url(urljoin(base, ref))


@given(url=st.one_of(_ANY_TEXT, url_like()))
def test_host_key_never_raises(url: str) -> None:
    key = host_key(url)
    assert isinstance(key, str) and key == key.lower()


# ------------------------------------------ WHATWG URL Standard (web-platform-tests)

WHATWG = Path(__file__).parent / "data" / "whatwg"  # source, commit, licence: README.md there

# Where normalize_url differs from the URL Standard on purpose, as far as this
# data shows it (the data has no tracking or session parameters and no empty
# '&&' pairs, which normalize_url also drops).  Each rewrite is applied to the
# Standard's expected href (by _as_ours below) before comparing, so one rule
# covers every case it touches.
DELIBERATE = {
    "fragment": "dropped: never sent to the server, so it names no other resource",
    "userinfo": "dropped: credentials are never sent, and never stored in a URL-seen key",
    "empty query": "'/p?' is keyed as '/p': servers answer both alike",
    "escapes": "RFC 3986 6.2.2: hex upper-cased, escapes of unreserved characters decoded",
    "stray %": "'%' not followed by two hex digits becomes '%25', so the output is a valid URI",
    "RFC 3986 set": "characters RFC 3986 forbids raw (e.g. [ ] { } | ^ ` \\) are percent-encoded in "
    "path and query (the Standard leaves some raw): one resource, one valid spelling",
    "trailing dot": "'a.com.' is keyed as 'a.com': the same DNS name (only the host data has such names)",
}

# Input the Standard accepts and normalize_url refuses on purpose, with the reason.
REFUSED = {
    "http://./": "a host of dots only: no name to look up",
    "http://../": "a host of dots only: no name to look up",
    "http://foo.09..": "empty DNS labels; without its dots 'foo.09' would be an invalid IPv4 address",
    "http://!\"$&'()*+,-.;=_`{}~/": "host characters outside RFC 3986 reg-name: no DNS name has them",
}

_UNRESERVED_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"
_RFC_PATH = "!$&'()*+,;=:@/"
_ESCAPE_OR_UNSAFE = {
    "path": re.compile(r"%[0-9A-Fa-f]{2}|[^%" + re.escape(_UNRESERVED_CHARS + _RFC_PATH) + "]|%"),
    "query": re.compile(r"%[0-9A-Fa-f]{2}|[^%" + re.escape(_UNRESERVED_CHARS + _RFC_PATH + "?") + "]|%"),
}


def _rfc3986(text: str, part: str) -> str:
    """The "escapes", "stray %" and "RFC 3986 set" rules on an already serialized part."""

    def one(m: re.Match[str]) -> str:
        s = m.group(0)
        if len(s) == 3:
            ch = chr(int(s[1:], 16))
            return ch if ch in _UNRESERVED_CHARS else s.upper()
        return quote(s, safe="")

    return _ESCAPE_OR_UNSAFE[part].sub(one, text)


def _as_ours(href: str) -> str:
    """The Standard's href (http or https) with every DELIBERATE rewrite applied."""
    href = href.partition("#")[0]  # fragment
    scheme, _, rest = href.partition("://")
    authority, _, tail = rest.partition("/")  # a special URL's href always has a path
    authority = authority.rpartition("@")[2]  # userinfo
    path, _, query = ("/" + tail).partition("?")
    path = _rfc3986(path, "path")
    query = _rfc3986(query, "query")
    return f"{scheme}://{authority}{path}" + (f"?{query}" if query else "")  # empty query


def _whatwg_cases() -> list[dict[str, str | bool | None]]:
    data = json.loads((WHATWG / "urltestdata.json").read_text("utf-8"))
    return [case for case in data if isinstance(case, dict)]


def _whatwg_disagreements() -> tuple[int, list[str]]:
    """Run every case; return how many are http(s) or refusals, and the disagreements."""
    counted, wrong = 0, []
    for case in _whatwg_cases():
        href, base = case["input"], case.get("base")
        assert isinstance(href, str) and (base is None or isinstance(base, str))
        got = normalize_url(href, base)
        want_href = case.get("href")
        if case.get("failure") or href in REFUSED:
            want = None
        elif isinstance(want_href, str) and want_href.startswith(("http:", "https:")):
            want = _as_ours(want_href)
        else:
            want = None  # ftp:, file:, ws:, data:, ...: not for a web crawler
        if case.get("failure") or want is not None or href in REFUSED:
            counted += 1
        if got != want:
            wrong.append(f"{href!r} on {base!r}: want {want!r}, got {got!r}")
    return counted, wrong


def test_whatwg_urltestdata_agrees_except_deliberate_normalizations() -> None:
    counted, wrong = _whatwg_disagreements()
    assert counted >= 440, "the vendored data lost its http(s) cases"
    assert wrong == []


def test_whatwg_refused_table_is_current() -> None:
    """Every REFUSED row is a case the data accepts: no row outlives its case."""
    accepted = {c["input"] for c in _whatwg_cases() if not c.get("failure")}
    assert set(REFUSED) <= accepted


def _host_of(url: str | None) -> str | None:
    return None if url is None else url[url.index("://") + 3:].partition("/")[0]


@pytest.mark.parametrize("name", ["toascii.json", "IdnaTestV2.json"])
def test_whatwg_hosts_to_ascii(name: str) -> None:
    """The Standard's host tests, run the way wpt runs them: as ``https://<input>/x``.

    Only the "trailing dot" rewrite of DELIBERATE applies to a host, and the
    REFUSED reason "a host of dots only" (``。`` and ``.``).
    """
    data = json.loads((WHATWG / name).read_text("utf-8"))
    cases = [c for c in data if isinstance(c, dict) and c["input"]]  # "" is no host (wpt skips it too)
    wrong = []
    for case in cases:
        want = case["output"]
        if want is not None:
            want = want.rstrip(".") or None  # trailing dot
        got = _host_of(normalize_url(f"https://{case['input']}/x"))
        if got != want:
            wrong.append(f"{case['input']!r}: want {want!r}, got {got!r}")
    assert len(cases) > 80
    assert wrong == []


# Pieces that exercise the UTS 46 paths: mapped (upper case, fullwidth, ß
# kept), ignored (soft hyphen), joiners, RTL scripts, combining marks, symbols,
# A-labels valid and not.
_IDN_LABEL = st.lists(
    st.sampled_from(list("aZ-0_üÜßΣς☃❤Ａ\u00ad\u200c\u200dאבا1٣\u0301\u094dक日本") + ["xn--", "xn--zca", "xn--a"]),
    min_size=1,
    max_size=6,
).map("".join)


@settings(max_examples=400)
@given(labels=st.lists(_IDN_LABEL, min_size=1, max_size=3))
def test_idn_hosts_round_trip(labels: list[str]) -> None:
    """An accepted host comes out as A-labels that the same rules accept again,
    and their Unicode form maps back to the same A-labels.  (An all-ASCII host is
    only lower-cased, as the Standard has it, so its A-labels were never checked.)"""
    name = ".".join(labels)
    host = _host_of(normalize_url(f"http://{name}/"))
    if host is None:
        return
    assert host.isascii() and host == host.lower()
    assert _host_of(normalize_url(f"http://{host}/")) == host
    if name.isascii():
        return
    unicode_form = ".".join(
        lab[4:].encode("ascii").decode("punycode") if lab.startswith("xn--") else lab for lab in host.split(".")
    )
    assert _host_of(normalize_url(f"http://{unicode_form}/")) == host
