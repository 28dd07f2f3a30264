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
from crawler_tasks.dedup.simhash import simhash64_of_words, simhash64_with_count
from crawler_tasks.parse.html import ParsedPage, parse_html, prepare_document
from crawler_tasks.parse.text import PageText, extract_text


@dataclass(slots=True)
class Analysis:
    parsed: ParsedPage
    text: PageText            # in TEXT_MODE "body" built from parse_html's body text
    fingerprint: str = ""     # of the text, case-folded and whitespace-collapsed ("": no text)
    simhash: int = 0
    simhash_words: int = 0    # distinct features behind the simhash (0: not computed)
    sketch: TextSketch | None = None   # the text's part of the trap evidence (None: not asked)


def analyse(body: bytes, url: str, html_options: dict[str, Any], text_mode: str, max_chars: int,
            simhash_max_chars: int = 0, sketch: bool = False, budget: bool = True) -> Analysis:
    """``simhash_max_chars`` > 0 also computes the simhash of that much collapsed text;
    ``sketch`` the text's sketch; ``budget=False`` skips the parse budget's caps."""
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
    if simhash_max_chars > 0:
        result.simhash, result.simhash_words = (simhash64_of_words(shared) if shared is not None
                                                else simhash64_with_count(flat[:simhash_max_chars]))
    return result
