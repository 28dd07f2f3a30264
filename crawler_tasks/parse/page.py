"""One document's analysis: links and robots signals (``html``), the indexer's text
(``text``: main content, language, metadata) and the text's fingerprints. The parse
sandbox runs this as a whole, so all of it stays within the page's deadline and memory
cap; the body is decoded and capped once for both parsers, the text's whitespace
collapsed once for its word count, fingerprint and simhash, and its head split into
words once for the simhash and the trap evidence's sketch (``dedup.evidence``), which
hash the same words."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from crawler_tasks.dedup.evidence import MAX_CHARS as SKETCH_CHARS
from crawler_tasks.dedup.evidence import TextSketch, head_words, text_sketch
from crawler_tasks.dedup.fingerprint import collapse_words_utf8, fingerprint_collapsed
from crawler_tasks.dedup.simhash import NearPrint, page_print, pair_keys
from crawler_tasks.parse.html import ParsedPage, parse_html, prepare_document
from crawler_tasks.parse.pdf import AS_HTML_TYPE, is_pdf, read_pdf
from crawler_tasks.parse.pdf import MAX_PAGES as PDF_MAX_PAGES
from crawler_tasks.parse.text import PageText, extract_text


@dataclass(slots=True)
class Analysis:
    parsed: ParsedPage
    text: PageText            # in TEXT_MODE "body" built from parse_html's body text
    fingerprint: str = ""     # of the text, case-folded and whitespace-collapsed ("": no text)
    simhash: int = 0
    simhash_words: int = 0    # distinct features behind the simhash (0: not computed)
    near: NearPrint | None = None   # the simhash with what the near-duplicate index checks (None: not computed)
    sketch: TextSketch | None = None   # the text's part of the trap evidence (None: not asked)


def analyse(body: bytes, url: str, html_options: dict[str, Any], text_mode: str, max_chars: int,
            simhash_max_chars: int = 0, sketch: bool = False, budget: bool = True,
            pdf_max_pages: int = PDF_MAX_PAGES) -> Analysis:
    """``simhash_max_chars`` > 0 also computes the simhash of that much collapsed text;
    ``sketch`` the text's sketch; ``budget=False`` skips the parse budget's caps. A PDF
    (``parse.pdf``) becomes an XHTML page of its first ``pdf_max_pages`` pages, analysed
    as any page, and its links a page of links; its ``parsed.limited`` names the PDF cap
    that bit, ``text.error`` why it could not be read."""
    if is_pdf(html_options.get("content_type"), body[:1024]):
        pdf, options = read_pdf(body, pdf_max_pages, max_chars), {**html_options, "content_type": AS_HTML_TYPE}
        result = analyse(pdf.as_html(), url, options, text_mode, max_chars, simhash_max_chars, sketch, budget)
        links = parse_html(pdf.links_html(), url, **options)
        result.parsed.links, result.parsed.too_long = links.links, links.too_long
        result.parsed.limited, result.text.error = pdf.limited, result.text.error or pdf.error
        return result
    caps = {name: html_options[name] for name in ("max_elements", "max_depth", "max_attrs") if name in html_options}
    doc = prepare_document(body, html_options.get("content_type"), **caps, budget=budget)
    if text_mode == "body":
        parsed = parse_html(doc, url, **html_options)
        flat, data, n_words = collapse_words_utf8(parsed.text)
        text = PageText(url=url, title=parsed.title, text=parsed.text, lang_declared=parsed.lang,
                        word_count=n_words)
    else:
        parsed = parse_html(doc, url, **{**html_options, "max_text_chars": 0})
        text = extract_text(doc, url, main_content=True, full_text=text_mode == "full", max_chars=max_chars,
                            content_type=html_options.get("content_type"), headers=html_options.get("headers"),
                            count_words=False)
        flat, data, text.word_count = collapse_words_utf8(text.text)
    # no text, no fingerprint: empty pages (a bomb cut to nothing, an image page, an app
    # shell) are not copies of one another, nor evidence that two URLs spell one page
    result = Analysis(parsed, text, fingerprint_collapsed(flat, data) if flat else "")
    shared = None   # the head's word CRCs, when they are the simhash's features too
    if sketch:
        words, crcs, spaced = head_words(flat)
        result.sketch = text_sketch(words, crcs)
        if spaced and simhash_max_chars == SKETCH_CHARS:
            shared = crcs
    if simhash_max_chars > 0:   # a page of links (an index) is also its anchor text
        result.near = page_print(flat, [link.text for link in parsed.links], text.title or parsed.title,
                                 simhash_max_chars, pair_keys(shared) if shared is not None else None)
        result.simhash, result.simhash_words = result.near.simhash, result.near.features
    return result
