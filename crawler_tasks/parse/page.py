"""One document's analysis: links and robots signals (``html``), and the indexer's text
(``text``: main content, language, metadata). The parse sandbox runs this as a whole,
so both stay within the page's deadline and memory cap."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from crawler_tasks.parse.html import ParsedPage, parse_html
from crawler_tasks.parse.text import PageText, extract_text


@dataclass(slots=True)
class Analysis:
    parsed: ParsedPage
    text: PageText | None   # None in TEXT_MODE "body": the feed takes parse_html's body text


def analyse(body: bytes, url: str, html_options: dict[str, Any], text_mode: str, max_chars: int) -> Analysis:
    if text_mode == "body":
        return Analysis(parse_html(body, url, **html_options), None)
    parsed = parse_html(body, url, **{**html_options, "max_text_chars": 0})
    text = extract_text(body, url, main_content=True, full_text=text_mode == "full", max_chars=max_chars,
                        content_type=html_options.get("content_type"), headers=html_options.get("headers"))
    return Analysis(parsed, text)
