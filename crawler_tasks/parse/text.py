"""Main text and page metadata for the indexer feed.

The whole ``<body>`` text that :func:`crawler_tasks.parse.html.parse_html`
returns carries navigation, sidebars, tables of contents and footers: on
documentation pages a quarter of its words are boilerplate.  This module
returns the main content instead, measured on human-labelled pages against
trafilatura and resiliparse by ``bench/text_quality.py``:

1. resiliparse parses the page once; metadata come from that tree (title,
   description, dates from meta tags, microdata and JSON-LD, declared
   language, headings);
2. blocks whose class or id names them as furniture that reads like prose
   (comment sections, share, social and newsletter boxes, "related" teasers,
   promotions, tool bars, footers, side rails, modal dialogs, and small
   blocks of post metadata: bylines, categories, tags) are removed from it,
   unless they hold much of the page's text or are a document's own sections
   named after their headings; a comment section leaves a mark where the
   article ends.  Then link-dense lists and tables (menus, tables of
   contents, "Prev / Next" bars, index pages) go; resiliparse's main-content
   heuristics miss many of both;
3. what is left is shielded from resiliparse's own rules where they are blind
   to text: lists that read as prose (it drops every ``<ul>`` with a fifth of
   link text, and near the top of the body, and with it a ``<ul>`` that old
   pages use to indent a quotation), embedded quotations and furniture-named
   blocks that hold the page's text (it drops them by class);
4. resiliparse extracts the main content of what is left from that same
   tree (no serialization and second parse), keeping block breaks (one
   line per block, a blank line between paragraphs), figures with their
   captions and the fallback text of objects, but not images' alt texts; the
   whole text when its class rules left almost nothing;
5. :mod:`crawler_tasks.parse.boilerplate` cuts that text to the article
   (banners above it, teasers and comments below it go), judging each line
   by its length, stop words and link text;
6. resiliparse's n-gram profiles guess the language of the main text.

Error policy: :func:`extract_text` never raises.  Input is cut at
``MAX_INPUT_BYTES``; on a failure the returned :class:`PageText` is empty
and its ``error`` says why, so the caller can record it for that URL.
Pure logic: no network, no I/O, no Redis.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.html import DocumentNode, ElementNode, HTMLTree
from resiliparse.parse.lang import detect_fast

from crawler_tasks.parse.boilerplate import COMMENTS_MARK, trim_boilerplate
from crawler_tasks.parse.budget import MAX_ATTRS, MAX_DEPTH, MAX_ELEMENTS, MAX_TEXT_CHARS, apply_budget, needs_budget
from crawler_tasks.parse.encoding import decode_html
from crawler_tasks.parse.html import Document

__all__ = ["MAX_INPUT_BYTES", "PageText", "extract_text"]

# Bodies are capped by the fetcher (MAX_BODY_BYTES, 1 MiB by default); this
# is the parser's own bound, so a caller that forgets the cap cannot make one
# page cost seconds or hundreds of megabytes.
MAX_INPUT_BYTES = 2 * 1024 * 1024

_MAX_TITLE_CHARS = 1000
_MAX_DESCRIPTION_CHARS = 2000
_MAX_HEADINGS = 64
_MAX_HEADING_CHARS = 300
_MAX_LANG_TAG_CHARS = 35  # BCP 47 tags longer than this exist only in theory
# JSON-LD is untrusted and sometimes huge (whole product catalogues): only the
# first few blocks, each bounded, and a bounded walk through each.
_MAX_JSONLD_BLOCKS = 8
_MAX_JSONLD_CHARS = 200_000
_MAX_JSONLD_NODES = 2_000
_MAX_JSONLD_DEPTH = 8
# detect_fast reads this much text; more costs time and changes nothing.
_LANG_SAMPLE_CHARS = 4000
# detect_fast's out-of-place rank at or above which it is guessing (its
# documented cutoff); confidence falls linearly from 1 at rank 0 to 0 there.
_LANG_RANK_CUTOFF = 1200
_LANG_MIN_LETTERS = 20  # below this any guess is noise

# A list or table whose visible text is mostly link text is navigation: a
# menu, a table of contents, a "Prev / Next" bar, an index of pages.  0.7 and
# the minimum of two links were chosen on bench/text_quality.py.
_LINK_DENSITY_MAX = 0.7
_LINK_DENSE_MIN_LINKS = 2
_LINK_SAMPLE = 64  # a block of n >= 128 links is judged on every (n // 64)-th one
_MAX_LINK_TEXTS = 2000  # ~3 us each; lines of links past the 2000th are judged without them
# resiliparse's main content shorter than this, and than a tenth of the whole
# text, is a miss (its class rules dropped the article's container).
_MAIN_MIN_CHARS = 400
_MAIN_MIN_SHARE_INV = 10
# Class and id names of page furniture that is neither link-dense nor known to
# resiliparse's rules: comment sections, share and social boxes, newsletter and
# subscription prompts, "related" teasers, promotions, sponsors, tool bars,
# pop-ups, footers (resiliparse knows some of these names, not all their forms).
# Learnt from what trafilatura and Readability discard, kept where it helped on the
# tune half of bench/text_quality.py; each stem's look-alikes that name content
# ("commentary", "shared", "subscript", "toolsets") are excluded.
_FURNITURE_STEMS = ("comment", "related", "shar", "social", "newsletter", "subscri", "sponsor", "tool", "popup",
                    "promo", "foot", "rail", "modal", "meta", "info", "tag", "categor")
# "foot" alone or "footer...", "rail" (a news site's side column: "right-rail") and "modal"
# (cookie and log-in dialogs), not "football", "trail", "modality".  The post's metadata
# ("post-meta", "entry-info", "article-tags", "metadata": bylines, dates, categories) is
# furniture too, but only in small blocks (``_META_MAX_CHARS``): some themes give those
# names to the article's wrapper.
_FURNITURE_RE = re.compile(
    r"(?:[a-z0-9]+[-_])?(?:(comment(?!ary)|related|shar(?=e(?!d)|ing)|social|newsletter|subscri(?=be|ption)"
    r"|sponsor|tool(?=s(?![a-z])|bar)|popup|promo|foot(?=er|(?![a-z]))|rail(?![a-z])|modal(?![a-z]))"
    r"|(?:post|entry|article|story|content)[-_]?(?:meta|info|tags?|category)(?![a-z])|meta[-_]?data(?![a-z]))"
)
_META = "meta"  # the kind of a match of the last two alternatives
_META_MAX_CHARS = 200
_NEVER_ARTICLE = frozenset({"foot", "comment", _META})
_FURNITURE_SELECTOR = ", ".join(f"[class*={stem} i], [id*={stem} i]" for stem in _FURNITURE_STEMS)
_TAXONOMY = ("category-", "tag-", "author-")
_SLUG_SEPARATORS = 3
# Not blocks of furniture: the page, headings, and inline elements (a "12 comments"
# link stays, for the trim to read).
_NOT_BLOCKS = frozenset({"html", "body", "main", "h1", "h2", "h3", "h4", "h5", "h6", "a", "span", "small", "em",
                         "strong", "b", "i", "font", "abbr", "time", "img", "input", "label", "button"})
_SLUG_RE = re.compile(r"[^a-z0-9]+")
_ANCHORS_BEFORE_HEADING = 4
_FURNITURE_MAX_SHARE = 0.6
_FURNITURE_ALONE_SHARE = 0.3
_FURNITURE_ALIKE = 3
_COMMENTS_MIN_CHARS = 100  # a comment section, not a "12 comments" link near the headline
# Bounds: the first 1,000 elements found (~3 us each; 99 % of the bench's pages have
# fewer than 700), and text measured up to 3 times the page's (nested candidates that
# are kept are each measured: 400 nested blocks cost 60 ms without it).
_MAX_FURNITURE_NODES = 1000
_FURNITURE_TEXT_BUDGET = 3
_LIST_SAMPLE = 20  # items of a list read to tell a teaser list from a prose one
# A list with more link text than this is navigation, even where _drop_link_dense did not
# measure it (nested in a layout table): "Schedules: <a>A.F.C.</a> | <a>N.F.C.</a>".
_PROSE_LIST_LINK_MAX = 0.5
# ... unless most of its items have this many words of their own besides their links: a
# changelog's "gero <a>removed the windowtype attribute</a> from dialogs" is prose.
_PROSE_ITEM_OWN_WORDS = 3
# Images and their areas have no text but alt texts, which labelled main texts leave out, and
# media players none but a "no support" notice: skipped.  resiliparse's own switch for alt
# texts skips far more: figures with their captions, and the fallback content of an
# <object>, which is what a browser without the plugin shows (all of them, for Flash).
_SKIPPED_MEDIA = ["img", "area", "video", "audio"]
_HIDING_CLASS_RE = re.compile(r"hidden|invisible|display-none|collapsed", re.I)
_WORD_CHAR_RE = re.compile(r"\w")
_LINK_BLOCK_SELECTOR = ":is(ul, ol, dl, table):not(:is(ul, ol, dl, table) *)"  # outermost ones
# A <title> in the body (a misplaced one, or one a template printed twice) is metadata too.
_HIDDEN_TAGS = frozenset({"script", "style", "noscript", "template", "iframe", "noembed", "noframes", "svg", "math",
                          "title"})
_HEADING_TAGS = frozenset({"h1", "h2", "h3"})
_ALL_HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})
_META_TAGS = frozenset({"title", "meta", "script"})  # and [itemprop]
_TREE_SELECTOR = ", ".join(sorted(_HIDDEN_TAGS | _HEADING_TAGS | _META_TAGS)) + ", [itemprop]"

_PUBLISHED_META = frozenset({"article:published_time", "datepublished", "dc.date.issued", "dcterms.created"})
_MODIFIED_META = frozenset({"article:modified_time", "og:updated_time", "datemodified", "dcterms.modified"})
_DESCRIPTION_META = ("description", "og:description", "twitter:description")
# Permalink anchors that documentation generators append to headings (Sphinx,
# MkDocs: "¶"; others "#", "§", "🔗"); the main text does not keep them.
_PERMALINK_MARKS = " ¶#§🔗\uf0c1"
# a literal prefix: re scans for it at C speed (``\n{3,}`` tries every position, 20x slower)
_BLANK_LINES_RE = re.compile(r"\n\n\n+")
_LANG_TAG_RE = re.compile(r"[A-Za-z]{1,8}(?:-[A-Za-z0-9]{1,8})*")


@dataclass(slots=True)
class PageText:
    """What the indexer feed needs from one HTML page.

    ``text`` is the main content (or the whole text when the caller asked for
    no main-content extraction): one line per block, a blank line between
    paragraphs, headings on their own lines.  ``full_text`` is the whole
    visible text, only when asked for, else None.  ``lang`` is the language
    detected from ``text`` (ISO 639-1, None when the text is too short or
    unknown) with ``lang_confidence`` in [0, 1]; ``lang_declared`` is what the
    page claims (``<html lang>``, else ``Content-Language``), lower-cased.
    Dates are ISO 8601 strings as the page states them (UTC when it gave an
    offset), None when absent or unreadable.  ``error`` is set when
    extraction failed; the other fields are then empty.
    """

    url: str
    title: str = ""
    text: str = ""
    full_text: str | None = None
    description: str = ""
    headings: list[str] = field(default_factory=list)
    lang: str | None = None
    lang_confidence: float = 0.0
    lang_declared: str | None = None
    published: str | None = None
    modified: str | None = None
    word_count: int = 0
    truncated: bool = False
    error: str | None = None


def extract_text(
    html: bytes | str | Document,
    url: str,
    *,
    main_content: bool = True,
    full_text: bool = False,
    max_chars: int = MAX_TEXT_CHARS,
    content_type: str | None = None,
    headers: Mapping[str, str] | None = None,
    count_words: bool = True,
) -> PageText:
    """Main text, title, description, headings, language and dates of one page.

    ``main_content=False`` makes ``text`` the whole visible text (cheaper);
    ``full_text=True`` adds the whole text beside the main one (the operator's
    ``TEXT_MODE=full``).  ``max_chars`` caps each text.  ``content_type`` and
    ``headers`` give the charset and ``Content-Language``; a :class:`Document`
    (``parse.html.prepare_document``) was decoded and capped already.  ``count_words=False``
    leaves ``word_count`` 0 for a caller that splits the text anyway.  Never raises.
    """
    page_url = url if isinstance(url, str) else ""
    try:
        return _extract(html, page_url, main_content, full_text, max(0, int(max_chars)), content_type, headers,
                        count_words)
    except Exception as exc:  # noqa: BLE001 - never raises; the caller records the error
        return PageText(url=page_url, error=f"{type(exc).__name__}: {exc}"[:500])


def _extract(
    html: bytes | str | Document,
    url: str,
    main_content: bool,
    want_full: bool,
    max_chars: int,
    content_type: str | None,
    headers: Mapping[str, str] | None,
    count_words: bool,
) -> PageText:
    truncated = False
    doc: bytes | str
    if isinstance(html, Document):
        doc = html.data
        if len(doc) > MAX_INPUT_BYTES:
            doc, truncated = doc[:MAX_INPUT_BYTES], True
    elif isinstance(html, str):
        doc = html
        if len(doc) > MAX_INPUT_BYTES:
            doc, truncated = doc[:MAX_INPUT_BYTES], True
    elif isinstance(html, (bytes, bytearray, memoryview)):
        data = bytes(html)
        if len(data) > MAX_INPUT_BYTES:
            data, truncated = data[:MAX_INPUT_BYTES], True
        doc = decode_html(data, content_type)[0]
    else:
        return PageText(url=url, error=f"TypeError: HTML must be bytes or str, not {type(html).__name__}")
    if not isinstance(html, Document) and needs_budget(doc):
        doc = apply_budget(doc, MAX_ELEMENTS, MAX_DEPTH, MAX_ATTRS)[0]
    tree = _parse(doc)
    root = tree.document
    if root is None:
        return PageText(url=url, truncated=truncated, error="HTMLParserException: no document")
    # One query for metadata, hidden elements and headings: a resiliparse query
    # walks the whole tree, at about twice lexbor's (selectolax's) cost.
    # .values() and .item(): iterating or indexing a resiliparse node list
    # rebuilds it at every step (2,000 links: 8 s instead of 3 ms).
    nodes = root.query_selector_all(_TREE_SELECTOR).values()
    page = PageText(url=url, truncated=truncated)
    _read_metadata(root, nodes, page)
    if not page.lang_declared:
        page.lang_declared = _lang_tag(_header(headers, "content-language"))

    hidden, visible = _split_hidden(nodes)
    for node in hidden:
        node.decompose()
    headings = [
        _collapse(h.text or "").rstrip(_PERMALINK_MARKS)[:_MAX_HEADING_CHARS]
        for h in [n for n in visible if n.tag in _HEADING_TAGS][: 4 * _MAX_HEADINGS]
    ]
    if not page.title:
        page.title = next((h for h in headings if h), "")[:_MAX_TITLE_CHARS]

    whole = ""
    if want_full or not main_content:
        whole = _tidy(extract_plain_text(tree, preserve_formatting=True, list_bullets=False), max_chars)
        if want_full:
            page.full_text = whole
    if main_content:
        _drop_furniture(tree)
        _drop_link_dense(tree)
        _shield_content(tree)
        page.text = trim_boilerplate(_main_text(tree, max_chars), _link_texts(tree))
    else:
        page.text = whole
    # Headings the main text lost were in menus or sidebars.
    page.headings = [h for h in dict.fromkeys(headings) if h and h in page.text][:_MAX_HEADINGS]
    if count_words:
        page.word_count = len(page.text.split())
    page.lang, page.lang_confidence = _detect_lang(page.text)
    return page


def _parse(doc: bytes | str) -> HTMLTree:
    """One resiliparse tree of a decoded page.  Bytes are UTF-8 (``Document``):
    decoded here with U+FFFD for stray bytes, as a browser does, because
    resiliparse reads bytes that are not valid UTF-8 in another charset (one
    bad byte turned a whole page into mojibake).  Lone surrogates, which
    resiliparse cannot encode, are dropped."""
    if isinstance(doc, bytes):
        doc = doc.decode("utf-8", "replace")
    try:
        return HTMLTree.parse(doc)
    except UnicodeEncodeError:
        return HTMLTree.parse(doc.encode("utf-8", "ignore").decode("utf-8"))


def _split_hidden(nodes: list[ElementNode]) -> tuple[list[ElementNode], list[ElementNode]]:
    """The outermost hidden elements, and the nodes outside them (in document
    order, a node inside a hidden element follows the outermost one)."""
    hidden: list[ElementNode] = []
    visible: list[ElementNode] = []
    outer: ElementNode | None = None
    for node in nodes:
        if outer is not None and outer.contains(node):
            continue
        if node.tag in _HIDDEN_TAGS:
            outer = node
            hidden.append(node)
        else:
            visible.append(node)
    return hidden, visible


def _tidy(text: str, max_chars: int) -> str:
    """Strip each line, at most one blank line in a row, cap the length; no-break
    spaces become spaces (indexers and the headings test expect plain ones)."""
    text = "\n".join(line.strip() for line in text[: 2 * max_chars].replace("\xa0", " ").splitlines())
    return _BLANK_LINES_RE.sub("\n\n", text).strip()[:max_chars].rstrip()


def _drop_link_dense(tree: HTMLTree) -> None:
    """Remove outermost lists and tables whose text is mostly link text.

    Only outermost candidates are measured (the selector skips nested ones),
    so each character is counted once.  resiliparse builds each node object
    at ~3 us, so links are read one by one until they pass the bound, and a
    block of 2 x ``_LINK_SAMPLE`` links or more (an index, a whole table of
    contents: 30,000 links) is judged on an even sample of about
    ``_LINK_SAMPLE`` of them.
    """
    body = tree.body
    if body is None:
        return
    dense = [block for block in body.query_selector_all(_LINK_BLOCK_SELECTOR).values() if _link_dense(block)]
    for block in dense:  # after the walk, so that it never reads a removed node
        block.decompose()


def _link_dense(block: ElementNode, share: float = _LINK_DENSITY_MAX) -> bool:
    """Whether more than ``share`` of the block's visible text is link text."""
    links = block.query_selector_all("a[href]")
    n = len(links)
    if n < _LINK_DENSE_MIN_LINKS:
        return False
    step = max(1, n // _LINK_SAMPLE)
    bound = share * _visible_chars(block.text or "") / step
    link_chars = 0
    for link in map(links.item, range(0, n, step)):
        link_chars += _visible_chars(link.text or "") if link is not None else 0
        if link_chars > bound:
            return True
    return False


def _shield_content(tree: HTMLTree) -> None:
    """Keep resiliparse's tag and class rules off the lists and quotations that are left.

    Its rules drop every ``<ul>`` near the top of the body or with more than a
    fifth of link text, which takes an article's lists with them ("gero
    <a>removed the windowtype attribute</a> from dialogs"), and blocks by class
    alone, which takes embedded quotations (``<blockquote class="twitter-tweet">``).
    A ``<ul>`` of items is renamed ``<ol>`` (the text is the same: no bullets
    or numbers are written) unless more than half of its first ``_LIST_SAMPLE``
    items begin with a link (teaser and "related" lists lead with their
    headlines) or it is link-dense (one nested in a layout table was not
    measured by ``_drop_link_dense``) and its items are not prose (most have
    fewer than ``_PROSE_ITEM_OWN_WORDS`` words besides their links).  A ``<ul>``
    without items (an indent, which old pages put around quotations) is renamed
    too unless it is link-dense: an indent around a column of links.  What is
    not renamed stays resiliparse's to judge.  A ``<blockquote>`` loses its
    class unless the class hides it.
    """
    body = tree.body
    if body is None:
        return
    for quote in body.query_selector_all("blockquote[class]").values():
        if not _HIDING_CLASS_RE.search(quote.getattr("class") or ""):
            quote.delattr("class")
    for ul in body.query_selector_all("ul").values():
        items = _list_items(ul)
        if ul.query_selector("a[href]") is not None and (
                2 * sum(map(_led_by_link, items)) > len(items) or (_link_dense(ul, _PROSE_LIST_LINK_MAX) and (
                    not items or 2 * sum(map(_has_own_words, items)) <= len(items)))):
            continue
        ol = tree.create_element("ol")
        parent = ul.parent
        if ol is None or parent is None:
            continue
        while (child := ul.first_child) is not None:
            ol.append_child(child)
        parent.insert_before(ol, ul)
        ul.decompose()


def _list_items(ul: ElementNode) -> list[ElementNode]:
    """The first ``_LIST_SAMPLE`` ``<li>`` children of a list."""
    items: list[ElementNode] = []
    child = ul.first_element_child
    while child is not None and len(items) < _LIST_SAMPLE:
        if child.tag == "li":
            items.append(child)
        child = child.next_element_sibling
    return items


def _has_own_words(item: ElementNode) -> bool:
    """Whether the item has ``_PROSE_ITEM_OWN_WORDS`` words outside its links."""
    words = _count_words(item.text or "")
    for link in item.query_selector_all("a[href]").values():
        words -= _count_words(link.text or "")
        if words < _PROSE_ITEM_OWN_WORDS:
            return False
    return words >= _PROSE_ITEM_OWN_WORDS


def _count_words(text: str) -> int:
    return sum(1 for word in text.split() if _WORD_CHAR_RE.search(word))


def _led_by_link(item: ElementNode) -> bool:
    """Whether the item's text begins with the text of its first link (bullets
    and other non-word characters before it aside)."""
    link = item.query_selector("a[href]")
    label = _collapse(link.text or "") if link is not None else ""
    if not label:
        return False
    text = _collapse(item.text or "")
    at = text.find(label)
    return at >= 0 and not _WORD_CHAR_RE.search(text, 0, at)


def _drop_furniture(tree: HTMLTree) -> None:
    """Remove blocks whose class or id names them as furniture (``_FURNITURE_RE``).

    One C-speed query finds the elements whose attributes contain a stem; each
    is then judged on its names, one by one, within the bounds above.  A block is kept when it holds
    more than ``_FURNITURE_MAX_SHARE`` of the page's text (it is the page), or
    more than ``_FURNITURE_ALONE_SHARE`` unless two more blocks are named alike
    (a list of comments is long; one big "share" block is the article in a
    container a theme named badly); such a block loses its class and id, or
    resiliparse's own class rules, which do not weigh text, drop it whole
    (footers and comment sections excepted: their names are never the
    article's).  Post metadata goes only up to ``_META_MAX_CHARS``.  A comment section of some length leaves
    :data:`~crawler_tasks.parse.boilerplate.COMMENTS_MARK` in its place: the
    comment headings ("12 Responses", "Leave a reply") that told the trim where
    the article ends went with it.
    """
    body = tree.body
    if body is None:
        return
    found = body.query_selector_all(_FURNITURE_SELECTOR)
    named = [(node, kind) for node in map(found.item, range(min(len(found), _MAX_FURNITURE_NODES)))
             if node is not None and node.tag not in _NOT_BLOCKS and (kind := _furniture(node))]
    if not named:
        return
    total = max(1, _visible_chars(body.text or ""))
    alike = Counter(kind for _, kind in named)
    drop: list[tuple[ElementNode, str, int]] = []
    unname: list[ElementNode] = []
    budget = _FURNITURE_TEXT_BUDGET * total
    for node, kind in named:
        if drop and drop[-1][0].contains(node):
            continue
        chars = _visible_chars(node.text or "")
        budget -= chars
        if budget < 0:
            break
        if kind == _META and chars > _META_MAX_CHARS:
            continue
        if chars > _FURNITURE_MAX_SHARE * total or (
                alike[kind] < _FURNITURE_ALIKE and chars > _FURNITURE_ALONE_SHARE * total):
            if kind not in _NEVER_ARTICLE:
                unname.append(node)
            continue
        drop.append((node, kind, chars))
    for node in unname:
        node.delattr("class")
        node.delattr("id")
    for node, kind, chars in drop:  # after the walk, so that it never reads a removed node
        if kind == "comment" and chars >= _COMMENTS_MIN_CHARS:
            _mark_comments(tree, node)
        node.decompose()


def _mark_comments(tree: HTMLTree, node: ElementNode) -> None:
    """Puts a ``<p>`` with the mark before the comment section: a paragraph of its
    own, as resiliparse drops some containers by their tag (aside, footer, nav) and
    a list item alone, whatever they hold."""
    at = node.parent if node.tag == "li" else node
    mark = tree.create_element("p")
    if at is None or at.parent is None or mark is None:
        return
    mark.text = COMMENTS_MARK
    at.parent.insert_before(mark, at)


def _furniture(node: ElementNode) -> str | None:
    """The furniture stem that one of the element's class names or its id starts
    with (after at most one word: "post-comments"), else None.  Names with a dot
    (code anchors), with three separators or more (slugs of headings: "sharing-
    with-a-team") and taxonomy names ("category-social") name content."""
    for name in f"{node.getattr('class') or ''} {node.getattr('id') or ''}".lower().split():
        if "." in name or name.count("-") + name.count("_") >= _SLUG_SEPARATORS or name.startswith(_TAXONOMY):
            continue
        match = _FURNITURE_RE.match(name)
        if match:
            return None if _heading_anchor(node) else match.group(1) or _META
    return None


def _heading_anchor(node: ElementNode) -> bool:
    """Whether the element is a section of a document, named (in its id) after
    the heading it starts with, as documentation generators name them ("2.1.3.
    Comments": "comments", "Cookie objects": "cookie-objects"); empty anchors
    before the heading are skipped."""
    child = node.first_element_child
    for _ in range(_ANCHORS_BEFORE_HEADING):
        if child is None or child.tag in _ALL_HEADINGS or (child.text or "").strip():
            break
        child = child.next_element_sibling
    if child is None or child.tag not in _ALL_HEADINGS:
        return False
    heading = _SLUG_RE.sub("-", (child.text or "").lower()).strip("-")
    name = _SLUG_RE.sub("-", (node.getattr("id") or "").lower()).strip("-")
    return bool(heading and name) and (heading.endswith(name) or name.endswith(heading))


def _main_text(tree: HTMLTree, max_chars: int) -> str:
    """resiliparse's main content; the whole text when that kept almost nothing
    of a page that has text (its class rules matched the article's container).
    Figures and their captions stay, images go (``_SKIPPED_MEDIA``)."""
    main = _tidy(
        extract_plain_text(
            tree, preserve_formatting=True, main_content=True, list_bullets=False, comments=False,
            skip_elements=_SKIPPED_MEDIA,
        ),
        max_chars,
    )
    if len(main) < _MAIN_MIN_CHARS:
        whole = _tidy(extract_plain_text(tree, preserve_formatting=True, list_bullets=False,
                                         skip_elements=_SKIPPED_MEDIA), max_chars)
        if len(whole) > _MAIN_MIN_SHARE_INV * max(len(main), 1):
            return whole
    return main


def _link_texts(tree: HTMLTree) -> set[str]:
    """Collapsed texts of the first ``_MAX_LINK_TEXTS`` links of the body."""
    body = tree.body
    if body is None:
        return set()
    links = body.query_selector_all("a[href]")
    texts = {_collapse(link.text or "") for link in map(links.item, range(min(len(links), _MAX_LINK_TEXTS)))
             if link is not None}
    texts.discard("")
    return texts


def _visible_chars(text: str) -> int:
    return len(text) - text.count(" ") - text.count("\n") - text.count("\t") - text.count("\r")


# ---------------------------------------------------------------------------
# Metadata
# ---------------------------------------------------------------------------


def _read_metadata(doc: DocumentNode, nodes: list[ElementNode], page: PageText) -> None:
    """From the document element and, in ``nodes``, the title, meta, script
    and ``[itemprop]`` elements (the others are skipped)."""
    root = doc.document_element
    if root is not None and root.tag == "html":
        page.lang_declared = _lang_tag(root.getattr("lang") or root.getattr("xml:lang"))
    metas: dict[str, str] = {}
    jsonld: list[str] = []
    title = ""
    for node in nodes:
        tag = node.tag
        attr = node.getattr
        if tag not in _META_TAGS and not node.hasattr("itemprop"):
            continue
        if tag == "title":
            if not title:
                title = _collapse(node.text or "")
            continue
        if tag == "script":
            if (attr("type") or "").strip().lower() == "application/ld+json" and len(jsonld) < _MAX_JSONLD_BLOCKS:
                jsonld.append((node.text or "")[:_MAX_JSONLD_CHARS])
            continue
        if tag == "meta":
            key = attr("property") or attr("name") or attr("itemprop") or attr("http-equiv")
            value = attr("content")
        else:  # microdata: <time itemprop=datePublished datetime=...>, <span itemprop=...>text</span>
            key = attr("itemprop")
            value = attr("datetime") or attr("content") or (node.text or "")[:100]
        if key and value:
            metas.setdefault(key.strip().lower(), value.strip())
    page.title = title[:_MAX_TITLE_CHARS]
    page.description = next(
        (_collapse(metas[k])[:_MAX_DESCRIPTION_CHARS] for k in _DESCRIPTION_META if metas.get(k)), ""
    )
    if not page.lang_declared:
        page.lang_declared = _lang_tag(metas.get("content-language"))
    ld_published, ld_modified = _jsonld_dates(jsonld)
    page.published = _first_date([metas.get(k) for k in _PUBLISHED_META] + [ld_published])
    page.modified = _first_date([metas.get(k) for k in _MODIFIED_META] + [ld_modified])


def _jsonld_dates(blocks: list[str]) -> tuple[str | None, str | None]:
    """datePublished / dateModified of the first JSON-LD object that has them."""
    published = modified = None
    for raw in blocks:
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):
            continue
        for obj in _walk(data):
            p, m = obj.get("datePublished"), obj.get("dateModified")
            if published is None and isinstance(p, str):
                published = p
            if modified is None and isinstance(m, str):
                modified = m
            if published is not None and modified is not None:
                return published, modified
    return published, modified


def _walk(data: Any) -> Iterator[dict[str, Any]]:
    """Dicts of a parsed JSON value, breadth first, bounded in count and depth."""
    queue: list[tuple[Any, int]] = [(data, 0)]
    for n, (value, depth) in enumerate(queue):
        if n >= _MAX_JSONLD_NODES:
            return
        if isinstance(value, dict):
            yield value
            children: Any = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth < _MAX_JSONLD_DEPTH:
            queue.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


def _first_date(candidates: list[str | None]) -> str | None:
    for raw in candidates:
        if raw:
            parsed = _parse_date(raw)
            if parsed is not None:
                return parsed
    return None


def _parse_date(raw: str) -> str | None:
    """ISO 8601 (what the standards ask for) or RFC 2822 (what some CMSs write)."""
    raw = raw.strip()[:64]
    when: datetime | None = None
    try:
        when = datetime.fromisoformat(raw)
    except ValueError:
        try:
            when = parsedate_to_datetime(raw)
        except (TypeError, ValueError, IndexError):
            return None
    if when.tzinfo is not None:
        when = when.astimezone(UTC)
        return when.isoformat().replace("+00:00", "Z")
    return when.isoformat()


def _lang_tag(raw: str | None) -> str | None:
    """A declared language as a lower-case BCP 47 tag, or None if it is not one."""
    if not raw:
        return None
    tag = raw.split(",", 1)[0].strip().replace("_", "-").lower()
    if len(tag) > _MAX_LANG_TAG_CHARS or not _LANG_TAG_RE.fullmatch(tag):
        return None
    return tag


def _header(headers: Mapping[str, str] | None, name: str) -> str | None:
    if headers:
        for key, value in headers.items():
            if isinstance(key, str) and isinstance(value, str) and key.strip().lower() == name:
                return value
    return None


def _detect_lang(text: str) -> tuple[str | None, float]:
    sample = text[:_LANG_SAMPLE_CHARS]
    if sum(map(str.isalpha, sample[:400])) < _LANG_MIN_LETTERS:
        return None, 0.0
    lang, rank = detect_fast(sample, cutoff=_LANG_RANK_CUTOFF)
    if lang == "unknown":
        return None, 0.0
    return lang, round(max(0.0, 1.0 - rank / _LANG_RANK_CUTOFF), 3)


def _collapse(text: str) -> str:
    return " ".join(text.split())
