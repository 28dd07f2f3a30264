"""PDFs: read by crawler_tasks/parse/pdf.py into the one page analysis, bounded in the parse
sandbox, fetched and fed by a real crawl. PDFs are written by tests/pdfs.py; real ones come
from the pinned corpus (tests/realpages.py: two vendored, the rest from installed packages)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from crawler_tasks.parse.page import analyse
from crawler_tasks.parse.pdf import is_pdf, read_pdf
from crawler_tasks.parse.sandbox import ParseFailed, ParseSandbox
from crawler_tasks.stages import parse as stage
from tests import pdfs
from tests.realpages import VENDORED_PDFS, pdf_documents
from testweb import HostSpec, TestWeb

ROOT = Path(__file__).resolve().parent.parent
PARAGRAPH = ("Reports, papers and manuals are often published as documents of this kind, and a crawler that "
             "skips them misses what many sites hold. ")
TEXT_LINES = textwrap.wrap(PARAGRAPH, 80)
OTHERS = ["Nutch indexes such documents through Tika, which turns each of them into a page of text that the "
          "indexer reads as it reads any other page. ",
          "A bomb is a small file that costs a reader far more than its size: pages without end, streams that "
          "inflate a thousandfold, objects nested deeper than any stack. ",
          "Language detection, the exact fingerprint and the simhash read the text of a document as they read the "
          "main text of a page, so copies are found whatever format they came in. "]


def lines_of(text: str, width: int = 80) -> list[str]:
    return textwrap.wrap(text, width)


def analysis(body: bytes, content_type: str | None = "application/pdf", mode: str = "main", **kwargs):
    return analyse(body, "http://docs.test/a/report.pdf", {"content_type": content_type}, mode, 100_000, 12_000,
                   True, **kwargs)


@pytest.mark.parametrize(("content_type", "head", "expected"), [
    ("application/pdf", b"", True),                      # declared: the type wins
    ("Application/PDF; name=x.pdf", b"junk", True),
    ("application/x-pdf", b"%PDF-1.4", True),
    ("application/octet-stream", b"%PDF-1.7\n", True),   # sniffed when the type says nothing
    (None, b"%PDF-1.4", True),
    ("", b"\r\n%PDF-1.3", True),                         # junk before the header, as readers accept
    ("text/html", b"%PDF-1.4", False),                   # a declared page type is never second-guessed
    ("text/plain", b"%PDF-1.4", False),
    ("application/octet-stream", b"PK\x03\x04", False),
    (None, b"<!doctype html>", False),
])
def test_a_pdf_is_known_by_its_type_or_its_magic(content_type, head, expected):
    assert is_pdf(content_type, head) is expected


def test_text_title_language_and_links_of_a_pdf():
    pages = [["Annual Report on Crawling", *TEXT_LINES, "Example Org - page 1"],
             ["Chapter 2", *lines_of(OTHERS[0]), "Read more at our site", "Example Org - page 2"],
             ["Chapter 3", *lines_of(OTHERS[1]), "Example Org - page 3"]]
    body = pdfs.make_pdf(pages, title="The Crawling Report", lang="en-GB",
                         links=[(1, "https://example.org/more", len(lines_of(OTHERS[0])) + 1),
                                (2, "mailto:x@example.org", 0)])
    pdf = read_pdf(body)
    assert (pdf.pages, pdf.pages_read, pdf.limited, pdf.error) == (3, 3, None, None)
    assert pdf.title == "The Crawling Report" and pdf.lang == "en-GB"
    assert pdf.links == [("https://example.org/more", "Read more at our site")]   # http(s) only, with its text
    lines = [p for page in pdf.paragraphs for p in page]
    assert not [p for p in lines if p.startswith("Example Org - page")]   # the running footer is dropped
    assert "Chapter 2" in lines and PARAGRAPH.strip() in lines           # lines joined into paragraphs
    assert OTHERS[1].strip() in lines

    result = analysis(body)
    assert result.parsed.title == "The Crawling Report"
    assert result.text.lang == "en" and result.text.lang_declared == "en-gb"
    assert [link.url for link in result.parsed.links] == ["https://example.org/more"]
    assert result.fingerprint and result.text.word_count > 60 and "Chapter 3" in result.text.text


def test_a_pdf_gets_the_fingerprint_and_simhash_of_the_same_text_as_html():
    """One analysis: the PDF's paragraphs as a page's <p> give the same fingerprint and simhash."""
    paragraphs = [f"{a}{b}" for a in [PARAGRAPH, *OTHERS] for b in OTHERS if a != b]
    body = pdfs.make_pdf([lines_of(p, 90) for p in paragraphs], title="Same")
    html = ("<!DOCTYPE html><html><head><title>Same</title></head><body>"
            + "".join(f"<p>{p.strip()}</p>" for p in paragraphs) + "</body></html>").encode()
    from_pdf = analysis(body, "application/octet-stream")   # sniffed
    from_html = analyse(html, "http://docs.test/a/report.html", {"content_type": "text/html"}, "main", 100_000,
                        12_000, True)
    assert from_pdf.fingerprint == from_html.fingerprint != ""
    assert (from_pdf.simhash, from_pdf.simhash_words) == (from_html.simhash, from_html.simhash_words)
    assert from_pdf.simhash_words > 20


def test_a_title_that_is_a_file_name_gives_way_to_the_first_line():
    body = pdfs.make_pdf([["Quarterly Results", *TEXT_LINES]], title="Microsoft Word - results_final.docx")
    assert read_pdf(body).title == "Quarterly Results"
    assert read_pdf(pdfs.make_pdf([["  ", "12", "Plain Title Line", *TEXT_LINES]])).title == "Plain Title Line"


def test_pages_and_characters_are_capped():
    many = pdfs.many_pages(40)
    pdf = read_pdf(many, max_pages=10)
    assert (pdf.pages, pdf.pages_read, pdf.limited) == (40, 10, "pdf_max_pages")
    assert analysis(many, pdf_max_pages=10).parsed.limited == "pdf_max_pages"
    long = pdfs.many_pages(200, 40)
    pdf = read_pdf(long, max_pages=500, max_chars=5000)
    assert pdf.limited is None and 5000 <= pdf.chars < 5000 + 4000 and pdf.pages_read < 10


@pytest.mark.parametrize("body", [b"%PDF-1.4\n garbage", b"%PDF-", b"", pdfs.make_pdf([TEXT_LINES])[:600]])
def test_a_broken_pdf_is_an_error_on_an_empty_page_never_an_exception(body):
    result = analysis(body)
    assert result.text.error and result.text.error.startswith("pdf: ")
    assert result.fingerprint == "" and result.parsed.links == []


def test_a_pdf_cut_at_the_body_cap_says_so():
    whole = pdfs.make_pdf([TEXT_LINES] * 4)
    assert "cut before its end" in (read_pdf(whole[: len(whole) // 2]).error or "")


# --- the real corpus ---------------------------------------------------------------------

def test_real_pdfs_give_their_text_title_and_language():
    docs = pdf_documents()
    assert [name for name, _ in docs[:2]] == list(VENDORED_PDFS)
    read = 0
    for name, body in docs:
        result = analysis(body)
        if len(body) > pdfs.MAX_BODY:   # the crawler would cut it: checked on its own below
            continue
        assert result.text.error is None, name
        assert result.text.lang == "en" and result.text.lang_confidence > 0.5, (name, result.text.lang)
        assert result.text.word_count > 3000 and result.fingerprint and result.simhash_words > 500, name
        assert result.parsed.title and len(result.parsed.title) < 100, name
        read += 1
    assert read >= 2
    print(f"real PDFs read: {read} of {len(docs)}")


def test_a_real_pdf_over_the_body_cap_is_an_error_not_a_crash():
    over = [(name, body) for name, body in pdf_documents() if len(body) > pdfs.MAX_BODY]
    if not over:
        pytest.skip("no installed real PDF over 1 MiB (valgrind's manual: apt-get install valgrind)")
    for name, body in over:
        result = analysis(body[: pdfs.MAX_BODY])
        assert "cut before its end" in (result.text.error or ""), name


# --- bombs in the sandbox ----------------------------------------------------------------

@pytest.fixture
def sandbox():
    box = ParseSandbox(timeout_s=5.0, memory_mb=768)
    yield box
    box.close()


@pytest.mark.parametrize("name", sorted(pdfs.BOMBS))
def test_a_pdf_bomb_is_bounded_and_the_next_page_parses(sandbox, name):
    body = pdfs.BOMBS[name]()
    assert len(body) <= pdfs.MAX_BODY
    args = ({"content_type": "application/pdf"}, "main", 100_000, 12_000, True)
    try:
        result = stage._sandboxed(sandbox, body, "http://docs.test/bomb.pdf", args, lambda c: None, pdf=True,
                                  pdf_max_pages=500)
    except ParseFailed as exc:   # the deadline or the memory cap stopped it: the stage records that
        assert name.startswith("flate"), exc
    else:
        assert result.parsed.limited == "pdf_max_pages" or result.text.error or result.text.word_count < 30_000
    after = sandbox.analyse(pdfs.make_pdf([TEXT_LINES], title="After"), "http://docs.test/next.pdf", *args)
    assert after.parsed.title == "After" and after.fingerprint


# --- a real crawl ------------------------------------------------------------------------

def _crawl(out: Path, seeds: list[str], env_extra: dict[str, str]) -> subprocess.CompletedProcess:
    """The real PDFs link to real sites: the crawl keeps to loopback (no DNS question leaves it)."""
    env_extra = {"CRAWLER_INCLUDE_PATTERNS": r"^https?://127\.", **env_extra}
    cmd = [sys.executable, str(ROOT / "manage.py"), "crawl", *seeds, "--out", str(out), "--allow-private",
           "--min-delay", "0.05", "--user-agent", "testbot/1.0 (+http://127.0.0.1/bot)"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")} | env_extra
    return subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=ROOT, env=env)


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for path in sorted(path.parent.glob(path.name)) for line in path.read_text().splitlines()]


def test_a_crawl_fetches_real_pdfs_and_feeds_their_text_and_a_bomb_gets_a_record(tmp_path):
    """Real Celery workers, an embedded Redis, the parse sandbox: PDFs linked as .pdf and one
    served as octet-stream under another name reach the feed with their text and
    ``content_type``; a bomb gets its record and the crawl ends by itself."""
    real = [(name, body) for name, body in pdf_documents() if len(body) <= pdfs.MAX_BODY]
    routes: dict[str, tuple[int, dict[str, str], bytes]] = {}
    for i, (_, body) in enumerate(real):
        path = f"/docs/{i}.pdf" if i % 2 == 0 else f"/download?id={i}"   # some under a name that says nothing
        ctype = "application/pdf" if i % 2 == 0 else "application/octet-stream"
        routes[path] = (200, {"Content-Type": ctype}, body)
    routes["/docs/bomb.pdf"] = (200, {"Content-Type": "application/pdf"}, pdfs.flate_bomb())
    routes["/docs/pages.pdf"] = (200, {"Content-Type": "application/pdf"}, pdfs.many_pages())
    with TestWeb(n_hosts=1, pages_per_host=3, seed=5, mean_page_bytes=3000,
                 host_specs={0: HostSpec(extra_routes=routes)}) as web:
        out = tmp_path / "out"
        proc = _crawl(out, web.seeds(), {"CRAWLER_PARSE_TIMEOUT_S": "4", "CRAWLER_PARSE_MEMORY_MB": "768"})
        assert proc.returncode == 0, proc.stderr[-3000:]
        origin = web.seeds()[0].rstrip("/")
    records = {r["url"]: r for r in _lines(out / "pages.jsonl")}
    feed = {r["url"]: r for r in _lines(out / "feed*.jsonl")}
    for i, (name, _) in enumerate(real):
        path = f"/docs/{i}.pdf" if i % 2 == 0 else f"/download?id={i}"
        url = origin + path
        assert records[url]["status"] == 200, (name, records.get(url))
        assert url in feed, (name, records[url])
        item = feed[url]
        assert item["content_type"] == "application/pdf", name      # the octet-stream ones too
        assert item["lang"]["detected"] == "en" and item["word_count"] > 3000 and item["title"], name
    assert any("fonts.conf" in item["text"] for item in feed.values())
    bomb = records[origin + "/docs/bomb.pdf"]
    assert bomb["status"] == 200 and bomb["error_kind"] == "parse_limit", bomb
    pages = records[origin + "/docs/pages.pdf"]
    assert pages["status"] == 200 and "pdf_max_pages" in (pages.get("error") or ""), pages
    assert [r for r in records.values() if "127." not in r["url"]] == []   # the PDFs' links stayed out
    assert any(item["outlinks"] for url, item in feed.items() if "pdf" in str(item["content_type"]))
    html_pages = [r for r in feed.values() if r["content_type"] and r["content_type"].startswith("text/html")]
    assert html_pages   # the HTML pages keep their own type
    print(f"real PDFs in the feed: {len(real)}; words: {[feed[u]['word_count'] for u in feed if 'pdf' in str(feed[u]['content_type'])]}")
