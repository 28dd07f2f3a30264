"""Where the article starts and ends in an extracted main text.

resiliparse's main-content pass removes navigation by tag and class, but keeps
blocks around the article that look like prose to a tag walker: site banners
and "Print / Share" lines above it; teaser lists with summaries, "Comments are
closed", newsletter prompts, credits and copyright lines below it.  What tells
them apart is the text itself, an idea from jusText (Pomikálek 2011) and
trafilatura: real prose is long and full of function words ("the", "of",
"and"); boilerplate is short, link text, or a run of names.  Each block (one
line of the extracted text) is classed by its length, its share of stop words
and of link text; middling and short blocks then take the class of the blocks
around them (a headline or byline next to the article stays).  The text is cut
to the span from the first to the last good block, widened to the nearest
block of link text on each side (a closing code sample or table stays), and
ended where a comment section starts (a "12 Responses to ..." line, a run of
"Posted by: ..." signatures).  Bad blocks inside that span stay: on the tune
pages of bench/text_quality.py, dropping them cost more article text (link
directories, lists of names, code) than it removed.

Stop-word share is only used when the text has enough English function words
to be English (the list here is English); other texts are judged on length and
links alone.  Pure logic: strings in, strings out.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection
from enum import IntEnum

__all__ = ["trim_boilerplate"]

# Lengths in characters, chosen on the tune half of bench/text_quality.py's
# labelled pages (jusText's defaults are 70 and 200).
_SHORT = 70
_LONG = 150
_STOP_SHARE = 0.20  # a block with at least this share of stop words reads as prose
_STOP_SHARE_LOW = 0.12  # middling: prose if its neighbours are
_LINK_SHARE_MAX = 0.4  # more link text than this: navigation or a teaser
_ENGLISH_STOP_SHARE = 0.15  # the whole text's share below which it is not English
_MIN_BLOCKS = 3  # fewer blocks than this: nothing to compare, kept as is
_LANG_SAMPLE_CHARS = 20_000  # enough to tell English; a whole long page cost milliseconds

_WORD_RE = re.compile(r"\w+")
# On ASCII text \w+ words and lower() are a byte table away: A-Z folded to a-z, the
# other word characters kept, the rest made spaces, then split() (exact; ~5x faster
# than the regex, which was most of the trim's cost on long pages).
_WORD_BYTES = b"0123456789_abcdefghijklmnopqrstuvwxyz"
_ASCII_FOLD = bytes(
    c if c in _WORD_BYTES else c + 32 if 65 <= c <= 90 else 32 for c in range(256)
)
# Lines that open a comment section (a count, a closed notice, a prompt): the
# article ends before the first of them.  One that comes twice or more
# (counts aside) heads each item of a listing (a blog's front page), not the
# end.  Bare headings ("Comments", "Related stories", "Share this") are not
# used: documentation has "Comment" columns and mid-page "Related" notes.
_MARKER_MAX_CHARS = 80
_END_MARKER_RE = re.compile(
    r"[{(]?\s*\d+\s+(?:comments?|responses?|replies)\b.*|comments (?:are|have been) (?:now )?closed.*"
    r"|(?:leave|post|add|write|submit) (?:a |your )?(?:comment|reply)\b.{0,20}",
    re.I,
)
# A comment's signature line, with the colon that a byline does not have.
_SIGNATURE_RE = re.compile(r"(?:posted|written|submitted) by: .*|.{1,50} (?:says|said|wrote):", re.I)
_MIN_SIGNATURES = 3
_DIGITS_RE = re.compile(r"\d+")

# The most frequent English function words (articles, pronouns, auxiliaries,
# prepositions, conjunctions): common to any prose, rare in menus and credits.
_STOP_WORDS = frozenset(
    """a about above after again against all also am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have having he
    her here hers herself him himself his how i if in into is it its itself just me more most my myself no nor not
    now of off on once only or other our ours ourselves out over own same she should so some such than that the
    their theirs them themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself yourselves""".split()
)
_STOP_WORD_BYTES = frozenset(word.encode() for word in _STOP_WORDS)


class _Kind(IntEnum):
    BAD = 0
    SHORT = 1
    NEAR = 2
    GOOD = 3


def trim_boilerplate(text: str, link_texts: Collection[str]) -> str:
    """``text`` from its first to its last block that reads as prose.

    ``link_texts`` are the collapsed texts of the page's links: a block made
    mostly of one of them is link text.
    """
    lines = text.split("\n")
    blocks = [i for i, line in enumerate(lines) if line.strip()]
    if len(blocks) < _MIN_BLOCKS:
        return text
    counts: list[tuple[int, int] | None] = [None] * len(lines)   # each line's words counted once
    english = _sample_stop_share(lines, counts, _LANG_SAMPLE_CHARS) >= _ENGLISH_STOP_SHARE
    classed = [_classify(lines[i], i, counts, link_texts, english) for i in blocks]
    linked = [link for _, link in classed]
    kinds = _smooth([kind for kind, _ in classed])
    good = [n for n, kind in enumerate(kinds) if kind == _Kind.GOOD]
    if not good:
        return text  # nothing reads as prose: a list, a table, code; left as it is
    first, last = good[0], good[-1]
    end = _comments_start(lines, blocks, first)
    last = max((n for n in good if n < end), default=first)
    # Lines between the prose and the first link or comments marker stay (a
    # closing code sample, a table, a byline); that link is where the page's
    # own furniture starts.
    while last + 1 < end and not linked[last + 1]:
        last += 1
    while first > 0 and not linked[first - 1]:
        first -= 1
    return "\n".join(lines[blocks[first]: blocks[last] + 1])


def _comments_start(lines: list[str], blocks: list[int], first: int) -> int:
    """The block after ``first`` where a comment section starts: the first
    marker the page has once, or the first of ``_MIN_SIGNATURES`` comment
    signatures or more; ``len(blocks)`` when there is none."""
    markers = [n for n, i in enumerate(blocks) if n > first and _ends_article(lines[i])]
    seen = Counter(_marker_key(lines[blocks[n]]) for n in markers)
    unique = [n for n in markers if seen[_marker_key(lines[blocks[n]])] == 1]
    signed = [n for n, i in enumerate(blocks) if n > first and len(lines[i]) <= _MARKER_MAX_CHARS
              and _SIGNATURE_RE.fullmatch(lines[i].strip())]
    return min(unique[:1] + signed[:1] if len(signed) >= _MIN_SIGNATURES else unique[:1], default=len(blocks))


def _ends_article(line: str) -> bool:
    """A line that opens a comment section."""
    return len(line) <= _MARKER_MAX_CHARS and _END_MARKER_RE.fullmatch(line.strip()) is not None


def _marker_key(line: str) -> str:
    """Markers that differ only in their counts are the same heading."""
    return _DIGITS_RE.sub("#", " ".join(line.lower().split()))


def _classify(line: str, i: int, counts: list[tuple[int, int] | None], link_texts: Collection[str],
              english: bool) -> tuple[_Kind, bool]:
    """The block's kind, and whether it is link text (BAD for that reason)."""
    block = line if _collapsed(line) else " ".join(line.split())
    length = len(block)
    link = _link_chars(block, link_texts)
    if link > _LINK_SHARE_MAX * length:
        return _Kind.BAD, True
    if length < _SHORT:
        return _Kind.SHORT, False
    if not english:
        return (_Kind.GOOD if length >= _LONG else _Kind.NEAR), False
    # the line's words are the collapsed block's: whitespace is no word character
    stop, words = counts[i] or _stop_counts(line)
    share = stop / words if words else 0.0
    if share >= _STOP_SHARE:
        return (_Kind.GOOD if length >= _LONG else _Kind.NEAR), False
    if share >= _STOP_SHARE_LOW:
        return _Kind.NEAR, False
    return _Kind.BAD, False


def _collapsed(line: str) -> bool:
    """Whether ``" ".join(line.split())`` is the line itself (tested for the common
    case only: printable ASCII, whose one whitespace character is the space)."""
    return line.isascii() and line.isprintable() and "  " not in line and line[:1] != " " and line[-1:] != " "


def _sample_stop_share(lines: list[str], counts: list[tuple[int, int] | None], max_chars: int) -> float:
    """The stop-word share of the text's first ``max_chars`` characters, line by line
    (no word spans a newline), so a line with a non-ASCII character costs the regex
    for itself only; whole lines' counts are kept in ``counts``."""
    stop = words = 0
    left = max_chars
    for i, line in enumerate(lines):
        if left <= 0:
            break
        if len(line) <= left:
            line_stop, line_words = counts[i] = _stop_counts(line)
        else:
            line_stop, line_words = _stop_counts(line[:left])
        stop, words, left = stop + line_stop, words + line_words, left - len(line) - 1
    return stop / words if words else 0.0


def _stop_counts(text: str) -> tuple[int, int]:
    """Stop words and words (\\w+, case-folded) in ``text``."""
    if text.isascii():
        ascii_words = text.encode().translate(_ASCII_FOLD).split()
        return sum(map(_STOP_WORD_BYTES.__contains__, ascii_words)), len(ascii_words)
    words = _WORD_RE.findall(text.lower())
    return sum(map(_STOP_WORDS.__contains__, words)), len(words)


def _link_chars(block: str, link_texts: Collection[str]) -> int:
    """Characters of link text the block starts with or is (a teaser headline,
    a "Read more" link); links inside a sentence are not counted."""
    if block in link_texts:
        return len(block)
    head = block.split(" ", 3)
    for n in (3, 2, 1):
        prefix = " ".join(head[:n])
        if prefix in link_texts:
            return len(prefix)
    return 0


def _smooth(kinds: list[_Kind]) -> list[_Kind]:
    """Middling blocks (NEAR) become GOOD next to a GOOD block, else BAD; then
    runs of SHORT blocks become GOOD when both sides are GOOD (or one side is
    GOOD and the other the text's edge), else BAD."""
    n = len(kinds)
    out = list(kinds)
    for i, kind in enumerate(kinds):
        if kind == _Kind.NEAR:
            near_good = _neighbour(kinds, i, -1) == _Kind.GOOD or _neighbour(kinds, i, 1) == _Kind.GOOD
            out[i] = _Kind.GOOD if near_good else _Kind.BAD
    i = 0
    while i < n:
        if out[i] != _Kind.SHORT:
            i += 1
            continue
        j = i
        while j < n and out[j] == _Kind.SHORT:
            j += 1
        before = out[i - 1] if i > 0 else None
        after = out[j] if j < n else None
        good = _Kind.GOOD in (before, after) and _Kind.BAD not in (before, after)
        for k in range(i, j):
            out[k] = _Kind.GOOD if good else _Kind.BAD
        i = j
    return out


def _neighbour(kinds: list[_Kind], i: int, step: int) -> _Kind | None:
    """The nearest block in that direction that is not SHORT."""
    i += step
    while 0 <= i < len(kinds):
        if kinds[i] != _Kind.SHORT:
            return kinds[i]
        i += step
    return None
