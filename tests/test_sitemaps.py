"""Tests for crawler_tasks.parse.sitemaps: formats, limits, hostile input."""

from __future__ import annotations

import gzip
import time
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler_tasks.parse.sitemaps import (
    MAX_SITEMAP_BYTES,
    MAX_SITEMAP_URLS,
    Sitemap,
    SitemapEntry,
    parse_sitemap,
)

URL = "https://example.com/sitemap.xml"
NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'

URLSET = f"""<?xml version="1.0" encoding="UTF-8"?>
<urlset {NS}
        xmlns:image="http://www.google.com/schemas/sitemap-image/1.1"
        xmlns:news="http://www.google.com/schemas/sitemap-news/0.9"
        xmlns:xhtml="http://www.w3.org/1999/xhtml">
  <!-- a comment -->
  <url>
    <loc>
      https://example.com/a?x=1&amp;y=2
    </loc>
    <lastmod>2024-01-02T10:00:00+00:00</lastmod>
    <changefreq>Daily</changefreq>
    <priority>0.8</priority>
    <image:image><image:loc>https://example.com/img.png</image:loc></image:image>
    <xhtml:link rel="alternate" hreflang="de" href="https://example.com/de/a"/>
    <news:news><news:title>t</news:title></news:news>
  </url>
  <url><loc>https://example.com/b</loc><priority>1.5</priority><changefreq>sometimes</changefreq></url>
  <url><loc>https://example.com/c</loc><priority>nan</priority><lastmod>  </lastmod></url>
  <url><loc><![CDATA[https://example.com/cdata?q=<1>]]></loc><priority>0</priority></url>
  <url><loc>/relative/path</loc></url>
  <url><loc>ftp://example.com/file</loc></url>
  <url><loc>javascript:alert(1)</loc></url>
  <url><loc>http://[bad</loc></url>
  <url><lastmod>2024-01-01</lastmod></url>
  <url><image:loc>https://example.com/only-image</image:loc></url>
</urlset>
""".encode()


def test_urlset() -> None:
    sm = parse_sitemap(URLSET, URL)
    assert sm == Sitemap(
        kind="urlset",
        entries=[
            SitemapEntry("https://example.com/a?x=1&y=2", "2024-01-02T10:00:00+00:00", 0.8, "daily"),
            SitemapEntry("https://example.com/b", None, None, None),
            SitemapEntry("https://example.com/c", None, None, None),
            SitemapEntry("https://example.com/cdata?q=<1>", None, 0.0, None),
        ],
        truncated=False,
        error=None,
    )


def test_urlset_without_namespace_and_with_bom() -> None:
    body = b"\xef\xbb\xbf  <urlset><url><loc>https://example.com/x</loc><priority>.5</priority></url></urlset>"
    sm = parse_sitemap(body, URL)
    assert sm.kind == "urlset"
    assert sm.entries == [SitemapEntry("https://example.com/x", None, 0.5, None)]


def test_urlset_with_other_namespace_is_read_consistently() -> None:
    body = (b'<urlset xmlns="http://www.google.com/schemas/sitemap/0.84">'
            b"<url><loc>https://example.com/old</loc></url></urlset>")
    assert [e.url for e in parse_sitemap(body, URL).entries] == ["https://example.com/old"]


def test_utf16_sitemap() -> None:
    body = ('<?xml version="1.0" encoding="UTF-16"?>'
            f"<urlset {NS}><url><loc>https://example.com/ü</loc></url></urlset>").encode("utf-16")
    assert [e.url for e in parse_sitemap(body, URL).entries] == ["https://example.com/ü"]


def test_sitemap_index() -> None:
    body = f"""<?xml version="1.0"?><sitemapindex {NS}>
      <sitemap><loc>https://example.com/s1.xml.gz</loc><lastmod>2024-03-01</lastmod></sitemap>
      <sitemap><loc>https://example.com/s2.xml</loc></sitemap>
      <sitemap><loc>s3.xml</loc></sitemap>
      <url><loc>https://example.com/not-a-sitemap</loc></url>
    </sitemapindex>""".encode()
    sm = parse_sitemap(body, URL)
    assert sm.kind == "sitemapindex"
    assert sm.entries == [
        SitemapEntry("https://example.com/s1.xml.gz", "2024-03-01", None, None),
        SitemapEntry("https://example.com/s2.xml", None, None, None),
    ]
    assert not sm.truncated and sm.error is None


def test_gzip() -> None:
    sm = parse_sitemap(gzip.compress(URLSET), URL + ".gz")
    assert sm.kind == "urlset" and len(sm.entries) == 4 and sm.error is None


def test_gzip_multi_member() -> None:
    half = len(URLSET) // 2
    body = gzip.compress(URLSET[:half]) + gzip.compress(URLSET[half:])
    assert len(parse_sitemap(body, URL).entries) == 4


def test_gzip_truncated_keeps_what_came_out() -> None:
    big = (f"<urlset {NS}>" + "".join(f"<url><loc>https://example.com/{i}</loc></url>"
                                     for i in range(2000)) + "</urlset>").encode()
    packed = gzip.compress(big)
    sm = parse_sitemap(packed[: len(packed) // 2], URL)
    assert sm.kind == "urlset"
    assert 0 < len(sm.entries) < 2000
    assert sm.error is not None and "gzip" in sm.error


def test_gzip_garbage() -> None:
    sm = parse_sitemap(b"\x1f\x8b\x08\x00garbage", URL)
    assert sm.kind == "invalid" and sm.entries == [] and sm.error


def test_gzip_bomb_is_capped() -> None:
    # 64 MiB of zeros in ~64 KB of gzip, produced without holding it in memory.
    packer = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = b"\0" * (1 << 20)
    bomb = b"".join(packer.compress(chunk) for _ in range(64)) + packer.flush()
    assert len(bomb) < 1 << 20
    start = time.perf_counter()
    sm = parse_sitemap(bomb, URL, max_bytes=4 << 20)
    assert time.perf_counter() - start < 5
    assert sm.truncated is True
    assert sm.kind == "invalid" and sm.entries == []


def test_gzip_bomb_with_urls_keeps_entries_up_to_the_cap() -> None:
    line = b"https://example.com/page\n"
    body = gzip.compress(line * 200_000)  # ~5 MB of text, very compressible
    sm = parse_sitemap(body, URL, max_bytes=len(line) * 1000)
    assert sm.kind == "text" and sm.truncated
    assert len(sm.entries) == 1000


def test_text_sitemap() -> None:
    body = (b"\xef\xbb\xbfhttps://example.com/1\r\n\n  https://example.com/2  \n"
            b"not a url\n/relative\nmailto:x@example.com\nhttp://example.com/3")
    sm = parse_sitemap(body, URL)
    assert sm.kind == "text"
    assert [e.url for e in sm.entries] == [
        "https://example.com/1", "https://example.com/2", "http://example.com/3",
    ]
    assert sm.entries[0] == SitemapEntry("https://example.com/1", None, None, None)


def test_max_urls_truncation() -> None:
    body = (f"<urlset {NS}>" + "".join(f"<url><loc>https://example.com/{i}</loc></url>"
                                     for i in range(120)) + "</urlset>").encode()
    sm = parse_sitemap(body, URL, max_urls=100)
    assert sm.truncated is True and len(sm.entries) == 100
    assert sm.entries[-1].url == "https://example.com/99"
    exact = parse_sitemap(body, URL, max_urls=120)
    assert exact.truncated is False and len(exact.entries) == 120
    text = parse_sitemap(b"\n".join(b"https://example.com/%d" % i for i in range(10)), URL, max_urls=3)
    assert text.truncated and len(text.entries) == 3


def test_max_bytes_truncation_keeps_the_readable_part() -> None:
    body = (f"<urlset {NS}>" + "".join(f"<url><loc>https://example.com/{i}</loc></url>"
                                     for i in range(1000)) + "</urlset>").encode()
    sm = parse_sitemap(body, URL, max_bytes=len(body) // 2)
    assert sm.truncated is True and sm.kind == "urlset"
    assert 400 < len(sm.entries) < 600


def test_protocol_limits_are_the_defaults() -> None:
    assert MAX_SITEMAP_URLS == 50_000 and MAX_SITEMAP_BYTES == 50 * 1024 * 1024


def test_big_sitemap_streams() -> None:
    body = (f"<urlset {NS}>" + "".join(
        f"<url><loc>https://example.com/p/{i}</loc><lastmod>2024-01-01</lastmod></url>"
        for i in range(MAX_SITEMAP_URLS + 10)) + "</urlset>").encode()
    sm = parse_sitemap(body, URL)
    assert sm.truncated and len(sm.entries) == MAX_SITEMAP_URLS


def test_xxe_external_entity_is_not_resolved(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET")
    body = f"""<?xml version="1.0"?>
    <!DOCTYPE urlset [<!ENTITY xxe SYSTEM "{secret.as_uri()}">]>
    <urlset {NS}><url><loc>https://example.com/&xxe;</loc></url>
    <url><loc>https://example.com/after</loc></url></urlset>""".encode()
    sm = parse_sitemap(body, URL)
    assert "TOP-SECRET" not in repr(sm)
    assert "https://example.com/after" in [e.url for e in sm.entries]


def test_xxe_external_dtd_is_not_loaded(tmp_path: Path) -> None:
    dtd = tmp_path / "evil.dtd"
    dtd.write_text('<!ENTITY leak "TOP-SECRET">')
    body = f"""<?xml version="1.0"?><!DOCTYPE urlset SYSTEM "{dtd.as_uri()}">
    <urlset {NS}><url><loc>https://example.com/&leak;</loc></url></urlset>""".encode()
    assert "TOP-SECRET" not in repr(parse_sitemap(body, URL))


def test_billion_laughs_is_not_expanded() -> None:
    entities = '<!ENTITY lol0 "lol">' + "".join(
        f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10}">' for i in range(1, 10)
    )
    body = f"""<?xml version="1.0"?><!DOCTYPE urlset [{entities}]>
    <urlset {NS}><url><loc>https://example.com/&lol9;</loc></url></urlset>""".encode()
    start = time.perf_counter()
    sm = parse_sitemap(body, URL)
    assert time.perf_counter() - start < 2
    assert all(len(e.url) < 100 for e in sm.entries)


def test_rss_and_atom_feeds() -> None:
    rss = b"""<rss version="2.0"><channel><title>t</title><link>https://example.com/</link>
      <item><title>a</title><link>https://example.com/post1</link>
            <pubDate>Tue, 10 Jun 2003 04:00:00 GMT</pubDate></item>
      <item><link>relative</link></item></channel></rss>"""
    sm = parse_sitemap(rss, URL)
    assert sm.kind == "feed"
    assert sm.entries == [SitemapEntry("https://example.com/post1", "2003-06-10T04:00:00+00:00", None, None)]
    atom = b"""<feed xmlns="http://www.w3.org/2005/Atom"><entry>
      <link rel="edit" href="https://example.com/edit"/><link href="https://example.com/e1"/>
      <updated>2003-12-13T18:30:02Z</updated></entry></feed>"""
    assert parse_sitemap(atom, URL).entries == [
        SitemapEntry("https://example.com/e1", "2003-12-13T18:30:02Z", None, None)
    ]


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"   \n\t",
        b"<html><body>Not found</body></html>",
        b"<!DOCTYPE html><html><head><title>404</title>",
        b"<?xml version='1.0'?>",
        b"<<<<>>>>",
        b"\x00\x01\x02\x03" * 100,
        b"%PDF-1.4 binary",
        b"{\"json\": true}",
        bytes(range(256)) * 20,
    ],
)
def test_junk_is_invalid_and_never_raises(body: bytes) -> None:
    sm = parse_sitemap(body, URL)
    assert sm.kind == "invalid" and sm.entries == [] and sm.error


def test_broken_xml_keeps_entries_before_the_damage() -> None:
    body = (f"<urlset {NS}><url><loc>https://example.com/1</loc></url>"
            "<url><loc>https://example.com/2</loc></url><url><loc>https://exa").encode()
    sm = parse_sitemap(body, URL)
    assert sm.kind == "urlset"
    assert [e.url for e in sm.entries][:2] == ["https://example.com/1", "https://example.com/2"]
    assert parse_sitemap(b"<urlset", URL) == Sitemap("urlset", [], False, None)


def test_non_bytes_input_never_raises() -> None:
    assert parse_sitemap(None, URL).kind == "invalid"  # type: ignore[arg-type]
    assert parse_sitemap(bytearray(b"https://example.com/x"), URL).kind == "text"


_XML_PARTS = [
    b"<urlset>", b"</urlset>", b"<url>", b"</url>", b"<loc>", b"</loc>", b"https://example.com/",
    b"<sitemapindex>", b"<sitemap>", b"<priority>0.5</priority>", b"<lastmod>x</lastmod>",
    b"<!DOCTYPE x [<!ENTITY e 'v'>]>", b"&e;", b"&amp;", b"<![CDATA[", b"]]>", b"<!--", b"-->",
    b"<?xml version='1.0' encoding='bogus'?>", b"\x1f\x8b", b"\xff\xfe", b"\x00", b"\n", b"<", b">",
]


@settings(max_examples=150, deadline=None)
@given(parts=st.lists(st.one_of(st.sampled_from(_XML_PARTS), st.binary(max_size=6)), max_size=40))
def test_parse_sitemap_never_raises(parts: list[bytes]) -> None:
    body = b"".join(parts)
    for data in (body, gzip.compress(body)):
        sm = parse_sitemap(data, URL, max_urls=5, max_bytes=400)
        assert sm.kind in ("urlset", "sitemapindex", "text", "feed", "invalid")
        assert len(sm.entries) <= 5
        assert all(e.url.startswith(("http://", "https://")) for e in sm.entries)


_MEMORY_PROBE = """
import resource, sys
from crawler_tasks.parse.sitemaps import parse_sitemap
junk = b"<junk><a>x</a><b/></junk>" * (int(sys.argv[1]) // 25)
body = (b'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        b"<url><loc>https://a.example/1</loc></url>" + junk
        + b"<url><loc>https://a.example/2<x/>" + junk[: len(junk) // 2] + b"</loc></url>" + junk + b"</urlset>")
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
result = parse_sitemap(body, "https://a.example/sitemap.xml")
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(len(result.entries), result.error, (after - before) // 1024)
"""


def test_junk_elements_do_not_accumulate() -> None:
    """~25 MB of non-record elements (around and inside records): peak memory stays flat.

    libxml2 allocates outside Python's allocator (tracemalloc cannot see it), so
    a child process reports its peak RSS growth in MiB.
    """
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _MEMORY_PROBE, str(10 * 1024 * 1024)],
        capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parent.parent,
    ).stdout.split()
    assert out[:2] == ["2", "None"]
    assert int(out[2]) < 64, f"peak RSS grew by {out[2]} MiB"
