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
"Posted by: ..." signatures, signatures with a time of day by three names or
more, or the mark parse.text leaves where it removed a comment section that its
class named: the heading that ended the article went with it).  Bad blocks inside that span stay: on the tune
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
from itertools import compress, count, filterfalse

__all__ = ["COMMENTS_MARK", "trim_boilerplate"]

# The line that parse.text leaves where it removed a comment section (by its class
# or id): the article ends before it, and it never reaches the output.  U+2063
# (invisible separator) keeps it from being any page's own text.
COMMENTS_MARK = "\u2063comments\u2063"

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
# A signature with a time of day ("Posted by Ann on May 2, 2008 11:14 AM", "# posted by
# Ann : 2:47 PM"). A blog's front page signs each of its posts so too, by one or
# two authors: these start comments only when at least _MIN_SIGNATURES names sign.
_STAMPED_RE = re.compile(
    r"\W{0,3}(?:posted|written|submitted) by (.{1,60}?)(?:\s+(?:on|at|@)\s|\s*[,:|@(]|\s*\d).*?\d{1,2}:\d\d.*", re.I
)
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


_BAD, _SHORT_BLOCK, _NEAR, _GOOD = _Kind  # plain names: an enum attribute costs 50 ns a lookup


def trim_boilerplate(text: str, link_texts: Collection[str]) -> str:
    """``text`` from its first to its last block that reads as prose.

    ``link_texts`` are the collapsed texts of the page's links: a block made
    mostly of one of them is link text.
    """
    lines = text.split("\n")
    blocks = list(compress(count(), map(str.strip, lines)))
    if len(blocks) < _MIN_BLOCKS:
        return _unmarked(text)
    # Whether the text is English changes only how long blocks are classed, and the few
    # blocks that bound the cut seldom care. The cut is made as if it were not; when each
    # long block that cut read is classed alike in English, the English cut reads the same
    # blocks the same way and is the same. Else the English cut is made too, and the
    # language sample (the most words counted here) read only when the two differ (8 of
    # 834 documentation pages, none of the bench's).
    facts = _Facts(lines, blocks, link_texts)
    plain, english = _Blocks(facts, False), _Blocks(facts, True)
    cut = _cut(plain)
    if any(english.kind(n) != plain.kind(n) for n in plain.long):
        english_cut = _cut(english)
        if cut != english_cut:
            stop, words = _stop_counts(text[:_LANG_SAMPLE_CHARS])
            if words > 0 and stop / words >= _ENGLISH_STOP_SHARE:
                cut = english_cut
    if cut is None:
        return _unmarked(text)  # nothing reads as prose: a list, a table, code; left as it is
    first, last = cut
    return _unmarked("\n".join(lines[blocks[first]: blocks[last] + 1]))


def _unmarked(text: str) -> str:
    if COMMENTS_MARK not in text:
        return text
    return "\n".join(line for line in text.split("\n") if line.strip() != COMMENTS_MARK)


def _cut(kinds: _Blocks) -> tuple[int, int] | None:
    """The first and last block kept, None when no block reads as prose."""
    n_blocks = len(kinds.facts.blocks)
    first = next((n for n in range(n_blocks) if kinds.smoothed(n) == _GOOD), None)
    if first is None:
        return None
    end = kinds.facts.comments_start(first)
    last = next(n for n in range(end - 1, first - 1, -1) if kinds.smoothed(n) == _GOOD)
    # Lines between the prose and the first link or comments marker stay (a
    # closing code sample, a table, a byline); that link is where the page's
    # own furniture starts.
    while last + 1 < end and not kinds.facts.of(last + 1)[1]:
        last += 1
    while first > 0 and not kinds.facts.of(first - 1)[1]:
        first -= 1
    return first, last


class _Facts:
    """What both languages' cuts read of the blocks, each worked out once when asked:
    a block's length (collapsed) and whether it is link text; where comments start."""

    __slots__ = ("_comments", "_facts", "_firsts", "_link_texts", "blocks", "lines")

    def __init__(self, lines: list[str], blocks: list[int], link_texts: Collection[str]) -> None:
        self.lines, self.blocks, self._link_texts = lines, blocks, link_texts
        self._facts: list[tuple[int, bool] | None] = [None] * len(blocks)
        self._comments: dict[int, int] = {}
        # a link text that is a block or its first words starts with the block's first word
        self._firsts = {text.partition(" ")[0] for text in link_texts}

    def of(self, n: int) -> tuple[int, bool]:
        """(length, is link text) of block ``n``."""
        fact = self._facts[n]
        if fact is None:
            line = self.lines[self.blocks[n]]
            block = line if _collapsed(line) else " ".join(line.split())
            length = len(block)
            linked = (block.partition(" ")[0] in self._firsts
                      and _link_chars(block, self._link_texts) > _LINK_SHARE_MAX * length)
            fact = self._facts[n] = (length, linked)
        return fact

    def comments_start(self, first: int) -> int:
        end = self._comments.get(first)
        if end is None:
            end = self._comments[first] = _comments_start(self.lines, self.blocks, first)
        return end


class _Blocks:
    """Each block's kind, worked out when asked.  Only the first and the last
    prose blocks bound the cut, so the blocks from each end to those (and the
    neighbours that smoothing reads) are classed; the article between them,
    most of a page's words, is never counted.  ``long`` lists the blocks classed
    by their length alone (not English), which English would class by their words.

    Smoothing: a middling block (NEAR) becomes GOOD next to a GOOD block (the
    nearest block that is not SHORT, on either side), else BAD; a run of SHORT
    blocks becomes GOOD when both sides are GOOD (or one side is GOOD and the
    other the text's edge), else BAD."""

    __slots__ = ("_english", "_final", "_kinds", "facts", "long")

    def __init__(self, facts: _Facts, english: bool) -> None:
        self.facts, self._english = facts, english
        self._kinds: list[_Kind | None] = [None] * len(facts.blocks)
        self._final: list[_Kind | None] = [None] * len(facts.blocks)
        self.long: list[int] = []

    def kind(self, n: int) -> _Kind:
        """Block ``n``'s kind before smoothing."""
        kind = self._kinds[n]
        if kind is None:
            kind = self._kinds[n] = self._classify(n)
        return kind

    def _classify(self, n: int) -> _Kind:
        length, linked = self.facts.of(n)
        if linked:
            return _BAD
        if length < _SHORT:
            return _SHORT_BLOCK
        if not self._english:
            self.long.append(n)
            return _GOOD if length >= _LONG else _NEAR
        # the line's words are the collapsed block's: whitespace is no word character
        stop, words = _stop_counts(self.facts.lines[self.facts.blocks[n]])
        share = stop / words if words else 0.0
        if share >= _STOP_SHARE:
            return _GOOD if length >= _LONG else _NEAR
        return _NEAR if share >= _STOP_SHARE_LOW else _BAD

    def smoothed(self, n: int) -> _Kind:
        """Block ``n``'s kind after smoothing: GOOD or BAD."""
        final = self._final[n]
        if final is not None:
            return final
        kind = self.kind(n)
        n_blocks = len(self._kinds)
        if kind == _NEAR:
            near_good = self._neighbour(n, -1) == _GOOD or self._neighbour(n, 1) == _GOOD
            final = _GOOD if near_good else _BAD
        elif kind == _SHORT_BLOCK:
            i, j = n, n + 1
            while i > 0 and self.kind(i - 1) == _SHORT_BLOCK:
                i -= 1
            while j < n_blocks and self.kind(j) == _SHORT_BLOCK:
                j += 1
            sides = (self.smoothed(i - 1) if i > 0 else None, self.smoothed(j) if j < n_blocks else None)
            final = _GOOD if _GOOD in sides and _BAD not in sides else _BAD
            self._final[i:j] = [final] * (j - i)   # the whole run at once: no run is walked twice
        else:
            final = kind
        self._final[n] = final
        return final

    def _neighbour(self, n: int, step: int) -> _Kind | None:
        """The nearest block in that direction that is not SHORT, before smoothing."""
        kinds = self._kinds
        n += step
        while 0 <= n < len(kinds):
            kind = kinds[n]
            if kind is None:
                kind = self.kind(n)
            if kind != _SHORT_BLOCK:
                return kind
            n += step
        return None


def _comments_start(lines: list[str], blocks: list[int], first: int) -> int:
    """The block after ``first`` where a comment section starts: the first
    marker the page has once, the first ``COMMENTS_MARK``, the first of
    ``_MIN_SIGNATURES`` comment signatures or more, or the first of stamped
    signatures by ``_MIN_SIGNATURES`` names or more; ``len(blocks)`` when there
    is none."""
    short = [(n, lines[i].strip()) for n, i in enumerate(blocks[first + 1:], first + 1)
             if len(lines[i]) <= _MARKER_MAX_CHARS]
    markers = [(n, line) for n, line in short if _may_end_article(line) and _END_MARKER_RE.fullmatch(line)]
    seen = Counter(_marker_key(line) for _, line in markers)
    unique = [n for n, line in markers if seen[_marker_key(line)] == 1]
    signed = [n for n, line in short if ":" in line and _SIGNATURE_RE.fullmatch(line)]
    ends = unique[:1] + [n for n, line in short if line == COMMENTS_MARK][:1]
    stamped = [(n, m[1].lower()) for n, line in short if ":" in line and (m := _STAMPED_RE.fullmatch(line))]
    if len({name for _, name in stamped}) >= _MIN_SIGNATURES:
        ends.append(stamped[0][0])
    return min(ends + signed[:1] if len(signed) >= _MIN_SIGNATURES else ends, default=len(blocks))


def _may_end_article(line: str) -> bool:
    """What every match of ``_END_MARKER_RE`` contains, tested first (a fullmatch a short
    line cost more): no letter of these has another case that ``re.I`` matches ("s" has
    "ſ", hence "pon" for "response")."""
    low = line.lower()
    return "comment" in low or "pon" in low or "repl" in low


def _marker_key(line: str) -> str:
    """Markers that differ only in their counts are the same heading."""
    return _DIGITS_RE.sub("#", " ".join(line.lower().split()))


def _collapsed(line: str) -> bool:
    """Whether ``" ".join(line.split())`` is the line itself (tested for the common
    case only: printable ASCII, whose one whitespace character is the space)."""
    return line.isascii() and line.isprintable() and "  " not in line and line[:1] != " " and line[-1:] != " "


def _stop_counts(text: str) -> tuple[int, int]:
    """Stop words and words (\\w+, case-folded) in ``text``.  Words never span a
    newline, so the whole text is counted with the byte table, and its lines with
    a non-ASCII character (whose letters the table does not know) again with the
    regex, in place of their byte-table counts."""
    stop, words = _ascii_counts(text)
    if not text.isascii():
        for line in filterfalse(str.isascii, text.split("\n")):
            line_stop, line_words = _ascii_counts(line)
            found = _WORD_RE.findall(line.lower())
            stop += sum(map(_STOP_WORDS.__contains__, found)) - line_stop
            words += len(found) - line_words
    return stop, words


def _ascii_counts(text: str) -> tuple[int, int]:
    """Stop words and words of ``text`` by the byte table (exact for ASCII text)."""
    folded = text.encode("utf-8", "surrogatepass").translate(_ASCII_FOLD).split()
    return sum(map(_STOP_WORD_BYTES.__contains__, folded)), len(folded)


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
