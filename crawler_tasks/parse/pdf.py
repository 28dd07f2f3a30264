"""PDF documents read as Tika reads them for Nutch: the PDF becomes a small XHTML page (its
title, language, paragraphs and links), and that page takes the one HTML analysis
(``parse.page.analyse``). So a PDF's text gets the same main-text rules, language detection,
fingerprint and simhash as any page, and nothing after the parse knows PDFs.

Library: PDFium (Chrome's PDF engine, C++) through pypdfium2, whose wheel ships the binary;
Apache-2.0 / BSD-3-Clause. On real Debian manuals (bench/pdf_cost.py) it reads 1.2-1.8 ms a
page, against 43-91 ms for pdfminer.six (pure Python) with the same words, and 20-26 ms for
pypdf, which glues words together. It joins words hyphenated across lines itself (U+FFFE
marks the hyphen it removed). It is imported on the first PDF: in the parse sandbox's
child, not in every worker (57 ms, 11 MB).

Bounds: the fetch caps the body (``MAX_BODY_BYTES``). A PDF cut there is lost: its
cross-reference table is at its end, and PDFium rebuilt none of the real PDFs cut at 60 %
(Nutch skips truncated documents too: ``parser.skip.truncated``). At most ``max_pages``
pages are read, the text stops at ``max_chars``, links at ``MAX_LINKS``. What PDFium does
inside one page (a content stream that inflates to gigabytes) nothing here can interrupt:
the parse sandbox's deadline and memory cap hold it (bench/pdf_cost.py measures bombs).

Text: lines that open or close most pages (running headers, footers: digits compared as
one), page numbers and table-of-contents lines (dot leaders) are dropped; a line shorter
than most of its page's lines ends a paragraph; a bullet or a short numbered line ("1.2.
Scope") starts one. The title is the document's Title unless that is empty or a file
name ("Microsoft Word - x.doc"), else the first line with letters.

Policy: never raises; a PDF that cannot be read (encrypted, broken) gives an empty page
whose ``error`` says why.
"""
from __future__ import annotations

import ctypes
import html
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from crawler_tasks.parse.budget import MAX_TEXT_CHARS

__all__ = ["AS_HTML_TYPE", "MAX_LINKS", "MAX_PAGES", "PDF_TYPE", "PdfText", "is_pdf", "read_pdf"]

PDF_TYPE = "application/pdf"   # what the feed says of a PDF, whatever type it came under
PDF_TYPES = frozenset({PDF_TYPE, "application/x-pdf", "application/acrobat"})
_SNIFFED_TYPES = frozenset({"", "application/octet-stream", "binary/octet-stream", "application/unknown",
                            "unknown/unknown", "application/download", "application/force-download", "*/*"})
AS_HTML_TYPE = "text/html; charset=utf-8"   # the type of the XHTML page a PDF becomes
MAX_PAGES = 500          # pages read from one PDF (PDF_MAX_PAGES)
MAX_LINKS = 1000         # URI links taken from one PDF
_MAX_TITLE_CHARS = 300
_MAX_ANCHOR_CHARS = 200
_EDGE_LINES = 2          # lines at each end of a page that may be a running header or footer
_SHORT_LINE = 0.75       # of the page's usual line length: a shorter line ends its paragraph
_BULLETS = ("•", "◦", "▪", "‣", "∙", "–", "- ", "* ")
_NUMBERED = re.compile(r"\d{1,3}(?:\.\d{1,3}){0,5}\.? \S")   # "1.2. What is this spec?"
_HYPHEN_MARKS = str.maketrans("", "", "\ufffe\x02")   # hyphens PDFium removed when it joined a word
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_DIGITS = re.compile(r"\d+")
_PAGE_NUMBER = re.compile(r"(?:\d{1,5}|[ivxlc]{1,7})")       # a line alone: a page's number
_LEADERS = re.compile(r"(?:\. ?){5}")                       # a table of contents' dot leaders
_FILE_TITLE = re.compile(r"(?i)^(microsoft \w+ - |untitled\b)|\.(docx?|pdf|tex|dvi|ps|rtf|odt|indd|qxd)$")


def is_pdf(content_type: str | None, head: bytes) -> bool:
    """A PDF by its declared type, or by its ``%PDF-`` header when the type says nothing
    (missing, octet-stream): a declared HTML or text type is never second-guessed."""
    mime = (content_type or "").split(";", 1)[0].strip().lower()
    if mime in PDF_TYPES:
        return True
    return mime in _SNIFFED_TYPES and b"%PDF-" in bytes(head[:1024])


@dataclass(slots=True)
class PdfText:
    """What was read of one PDF. ``pages`` is the document's page count, ``pages_read``
    those read: fewer when the text filled ``max_chars`` first, or when the document has
    more than ``max_pages`` (then ``limited`` is "pdf_max_pages")."""

    title: str = ""
    lang: str | None = None
    paragraphs: list[list[str]] = field(default_factory=list)   # per page read
    links: list[tuple[str, str]] = field(default_factory=list)  # URI, the text under it
    pages: int = 0
    pages_read: int = 0
    chars: int = 0
    limited: str | None = None
    error: str | None = None

    def as_html(self) -> bytes:
        """The XHTML page the analysis reads: UTF-8, the paragraphs in one ``<div>`` (a
        ``<div>`` a page would make the main-text rules pick one page), no links: a
        link's text is text of the page, which the main-text rules would take for a
        link block (``links_html`` has them)."""
        esc = html.escape
        parts = ["<!DOCTYPE html><html", f' lang="{esc(self.lang)}"' if self.lang else "",
                 f'><head><meta charset="utf-8"><title>{esc(self.title)}</title></head><body><div class="document">']
        parts.extend(f"<p>{esc(p)}</p>" for page in self.paragraphs for p in page)
        parts.append("</div></body></html>")
        return "".join(parts).encode("utf-8", "replace")

    def links_html(self) -> bytes:
        """The links as a page of ``<a>`` elements, for the HTML parser's link rules."""
        esc = html.escape
        return "".join(['<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>',
                        *(f'<a href="{esc(uri)}">{esc(text)}</a>\n' for uri, text in self.links),
                        "</body></html>"]).encode("utf-8", "replace")


def read_pdf(body: bytes, max_pages: int = MAX_PAGES, max_chars: int = MAX_TEXT_CHARS,
             max_links: int = MAX_LINKS) -> PdfText:
    """Title, language, paragraphs and links of the first pages of a PDF; never raises."""
    out = PdfText()
    try:
        _read(body, max(1, max_pages), max(1, max_chars), max(0, max_links), out)
    except Exception as exc:  # noqa: BLE001 - a broken or hostile PDF is that URL's error
        cut = "" if b"%%EOF" in bytes(body[-2048:]) else " (the file is cut before its end: over the body cap?)"
        out.error = f"pdf: {type(exc).__name__}: {exc}{cut}"[:500]
    return out


def _read(body: bytes, max_pages: int, max_chars: int, max_links: int, out: PdfText) -> None:
    import pypdfium2 as pdfium  # here: only the sandbox's child loads PDFium

    doc = pdfium.PdfDocument(bytes(body))
    try:
        out.pages = len(doc)
        pages: list[list[str]] = []
        for index in range(min(out.pages, max_pages)):
            if out.chars >= max_chars:   # as a long HTML page's: the text is cut, the page whole
                break
            page = doc[index]
            try:
                textpage = page.get_textpage()
                try:
                    room = max_chars - out.chars + 1   # a page of millions of glyphs is read in part
                    lines = _lines(textpage.get_text_range(0, min(textpage.count_chars(), room)))
                    if len(out.links) < max_links:
                        out.links += _links(pdfium, doc, page, textpage, max_links - len(out.links))
                finally:
                    textpage.close()
            finally:
                page.close()
            pages.append(lines)
            out.chars += sum(len(line) + 1 for line in lines)
        else:
            if out.pages > max_pages:
                out.limited = "pdf_max_pages"
        out.pages_read = len(pages)
        _drop_running_lines(pages)
        out.paragraphs = [_paragraphs(lines) for lines in pages]
        out.title = _title(doc.get_metadata_value("Title"), pages)
        out.lang = _catalog_lang(pdfium, doc)
    finally:
        doc.close()


def _lines(text: str) -> list[str]:
    """The page's lines, but page numbers and table-of-contents lines (the index is the
    document's navigation, as a menu is a page's, and the language detector reads the
    text's start)."""
    text = _CONTROL.sub("", text.translate(_HYPHEN_MARKS))
    lines = (" ".join(raw.split()) for raw in text.splitlines())
    return [line for line in lines if line and not _PAGE_NUMBER.fullmatch(line) and not _LEADERS.search(line)]


def _drop_running_lines(pages: list[list[str]]) -> None:
    """Drop the lines that open or close at least half the pages (3 at least)."""
    if len(pages) < 3:
        return
    seen: Counter[str] = Counter()
    for lines in pages:
        seen.update({_DIGITS.sub("#", line) for line in lines[:_EDGE_LINES] + lines[-_EDGE_LINES:]})
    floor = max(3, len(pages) // 2)
    running = {key for key, n in seen.items() if n >= floor}
    if not running:
        return
    for lines in pages:
        n = len(lines)
        edges = set(range(min(_EDGE_LINES, n))) | set(range(max(0, n - _EDGE_LINES), n))
        lines[:] = [line for i, line in enumerate(lines) if i not in edges or _DIGITS.sub("#", line) not in running]


def _paragraphs(lines: list[str]) -> list[str]:
    if not lines:
        return []
    usual = sorted(len(line) for line in lines)[(len(lines) * 4) // 5]
    paragraphs: list[str] = []
    current: list[str] = []
    for line in lines:
        if current and (line.startswith(_BULLETS) or (len(line) < _SHORT_LINE * usual and _NUMBERED.match(line))):
            paragraphs.append(" ".join(current))
            current = []
        current.append(line)
        if len(line) < _SHORT_LINE * usual:
            paragraphs.append(" ".join(current))
            current = []
    if current:
        paragraphs.append(" ".join(current))
    return paragraphs


def _title(declared: str | None, pages: list[list[str]]) -> str:
    title = " ".join((declared or "").split())
    if title and not _FILE_TITLE.search(title):
        return title[:_MAX_TITLE_CHARS]
    for lines in pages[:2]:
        for line in lines[:8]:
            if sum(ch.isalpha() for ch in line) >= 3:
                return line[:_MAX_TITLE_CHARS]
    return title[:_MAX_TITLE_CHARS]


def _links(pdfium: Any, doc: Any, page: Any, textpage: Any, room: int) -> list[tuple[str, str]]:
    """The page's URI link annotations (at most ``room``), each with the text under it."""
    raw = pdfium.raw
    links: list[tuple[str, str]] = []
    pos, link = ctypes.c_int(0), raw.FPDF_LINK()
    for _ in range(4 * room):   # annotations that are not URI links count too: bounded
        if len(links) >= room or not raw.FPDFLink_Enumerate(page.raw, ctypes.byref(pos), ctypes.byref(link)):
            break
        action = raw.FPDFLink_GetAction(link)
        if not action or raw.FPDFAction_GetType(action) != raw.PDFACTION_URI:
            continue
        size = raw.FPDFAction_GetURIPath(doc.raw, action, None, 0)
        if not 1 < size <= 8192:
            continue
        buf = ctypes.create_string_buffer(size)
        raw.FPDFAction_GetURIPath(doc.raw, action, buf, size)
        uri = buf.value.decode("latin-1").strip()
        if not uri.lower().startswith(("http://", "https://")):   # mailto:, javascript:, junk
            continue
        rect = raw.FS_RECTF()
        anchor = ""
        if raw.FPDFLink_GetAnnotRect(link, ctypes.byref(rect)):
            anchor = " ".join(_lines(textpage.get_text_bounded(rect.left, rect.bottom, rect.right, rect.top)))
        links.append((uri, anchor[:_MAX_ANCHOR_CHARS]))
    return links


def _catalog_lang(pdfium: Any, doc: Any) -> str | None:
    """The document catalog's /Lang (a BCP 47 tag), as a page's ``<html lang>``."""
    raw = pdfium.raw
    size = raw.FPDFCatalog_GetLanguage(doc.raw, None, 0)
    if not 2 < size <= 128:
        return None
    buf = (ctypes.c_ushort * (size // 2))()
    raw.FPDFCatalog_GetLanguage(doc.raw, buf, size)
    lang = bytes(buf).decode("utf-16-le", "replace").rstrip("\x00").strip()
    return lang or None
