"""When a URL shape is a trap: content evidence only (pure, no Redis).

A URL shape (``dust.shape``: ``/releases/#.#.#.html``) says where endless URLs *could*
come from; it never says that they do. Django's release notes walk a number from
``3.1.9`` to ``3.1.10`` and are 253 distinct pages; a calendar walks the same way and
repeats one empty month. So each fetched page of a shape is judged by what it added
(``Yield``), and a shape becomes a trap only when most of its pages added nothing:

==================  ============================================================
``duplicate``       same text as a page we have (exact fingerprint)
``near-duplicate``  simhash within 3 bits of a page we have
``soft-404``        the host's answer to a path that does not exist
``empty``           no text at all
``template``        its text, digits folded, is that of a recent page of its shape
                    (``month 5`` / ``month 6``: the same page with another number)
``known text``      at least KNOWN_SHARE of its shingles are in the shape's recent
                    pages (a facet page listing items its siblings list)
``new``             anything else: a real page, however short; or a page that added
                    nothing but links to new URLs (``new_links``)
==================  ============================================================

A page whose text adds nothing still adds something when it links URLs its shape's
recent pages did not: a pager whose items are links has one text of chrome on every
page and new posts on each. Only links out of the page's own shapes count (a
calendar's link to its next month is the walk itself), nor those of shapes that are
traps already or whose pages so far added nothing (``Tally.poor``: a calendar day
linking its own "add an event" URL).

``Tally.verdict`` names the trap and its evidence (``12 of the 14 pages of this shape
added nothing new: 7 template, 5 near-duplicate``) once a shape has the pages its
``TrapBar`` asks for and ``ratio`` of them added nothing; a shape with distinct pages
never does, however many there are and whatever their URLs look like. The URLs only
say how early to look: a shape whose pages link a number step (a calendar) is weighed
after a handful of pages.

The recent pages of a shape are a ring of RING sketches (``PageSketch``): a page's
template key (hash of its digit-folded text) and the bottom-k hashes of its 4-word
shingles (of its first MAX_CHARS characters) (Broder's containment estimate: the share of a page's bottom-k found in its
neighbours' bottom-k). A page with fewer than MIN_SHINGLES shingles is judged by its
template key alone: a short real page is ``new`` unless its text repeats.
"""
from __future__ import annotations

import heapq
import zlib
from collections import OrderedDict
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from hashlib import blake2b
from itertools import repeat
from typing import TypeVar

from crawler_tasks.dedup.simhash import words_of

RING = 8              # recent pages of a shape its new pages are compared with
BOTTOM_K = 32         # shingle hashes kept per page
MIN_SHINGLES = 8      # fewer: the containment estimate is noise, only the template key counts
KNOWN_SHARE = 0.8     # of a page's kept shingles found in the ring: known text
POOR_PAGES = 3        # pages of a shape before links to it stop counting when they added nothing
MAX_CHARS = 12_000    # of a page's text read for its sketch (its head decides, as for simhash)
PREFILTER = 3         # x BOTTOM_K: hashes expected below the cut that finds the bottom k (``_bottom``)


class Yield(StrEnum):
    """What a fetched page added to what the crawl has."""

    NEW = "new"
    DUPLICATE = "duplicate"
    NEAR_DUPLICATE = "near-duplicate"
    SOFT_404 = "soft-404"
    EMPTY = "empty"
    TEMPLATE = "template"
    KNOWN_TEXT = "known text"



def _bottom(hashes: Collection[int], least: int, bits: int) -> frozenset[int]:
    """The BOTTOM_K smallest distinct values of ``hashes``, which spread evenly over
    ``bits`` bits from ``least`` (tuple hashes, CRC-32s). They are looked for first below
    a cut that PREFILTER x BOTTOM_K of them are expected to pass (a set of all, then
    heapq's pass over it, cost twice as much); if too few pass (a short or repetitive
    text), among all."""
    n = len(hashes)
    if n > 2 * PREFILTER * BOTTOM_K:
        cut = least + (PREFILTER * BOTTOM_K << bits) // n
        low = {h for h in hashes if h < cut}
        if len(low) >= BOTTOM_K:
            return frozenset(sorted(low)[:BOTTOM_K])
    return frozenset(heapq.nsmallest(BOTTOM_K, set(hashes)))


def _hexes(hashes: frozenset[int]) -> str:
    return ".".join(map("{:x}".format, sorted(hashes)))


def _unhex(text: str) -> frozenset[int]:
    return frozenset(map(int, filter(None, text.split(".")), repeat(16)))


@dataclass(frozen=True, slots=True)
class TextSketch:
    """The text's part of a page's sketch (``PageSketch``)."""

    template: str
    shingles: frozenset[int]
    n_shingles: int

    @classmethod
    def of(cls, text: str) -> "TextSketch":
        words, crcs, _ = head_words(text)
        return text_sketch(words, crcs)


def head_words(text: str) -> tuple[list[bytes], list[int], bool]:
    """The words of the text's first MAX_CHARS characters (``simhash.words_of``: lower-cased,
    digits folded), their CRC-32s, and whether the text is spaced (then those words are
    also its simhash's features)."""
    words, spaced = words_of(text[:MAX_CHARS])
    return words, list(map(zlib.crc32, words)), spaced


def text_sketch(words: list[bytes], crcs: list[int]) -> TextSketch:
    """The sketch of a text's first MAX_CHARS characters from their words (lower-cased,
    digits folded: ``simhash.words_of``) and the words' CRC-32s, which the simhash shares.
    A shingle is hashed as the tuple of its words' CRCs (as ``minhash`` does: tuples of
    ints hash alike in every process of one Python version, in C; a sketch stored by
    another version only makes pages look new)."""
    template = blake2b(b" ".join(words), digest_size=6).hexdigest()
    hashes = list(map(hash, zip(crcs, crcs[1:], crcs[2:], crcs[3:], strict=False)))
    bottom = _bottom(hashes, -1 << 63, 64)
    return TextSketch(template, bottom, len(bottom) if len(bottom) < BOTTOM_K else len(hashes))


EMPTY_TEXT = text_sketch([], [])


@dataclass(frozen=True, slots=True)
class PageSketch:
    """A page reduced to what the ring keeps: its template key, the bottom-k hashes of
    its shingles and of the links that count (``links``: out of its shapes and of trap
    shapes). ``n_shingles`` is how many distinct shingles it had when fewer than
    BOTTOM_K, else how many it had (repeats counted: the ring only asks whether there
    are MIN_SHINGLES, and a set of them all was a sixth of the sketch's time)."""

    template: str
    shingles: frozenset[int]
    n_shingles: int
    links: frozenset[int] = frozenset()

    @classmethod
    def of(cls, text: str, links: Iterable[str] = ()) -> "PageSketch":
        return cls.joined(TextSketch.of(text), links)

    @classmethod
    def joined(cls, text: "TextSketch", links: Iterable[str] = ()) -> "PageSketch":
        """The page's sketch from its text's (made where the text is: the parse sandbox)
        and its links (known once they are normalized: the parse worker)."""
        linked = {zlib.crc32(link.encode("utf-8", "surrogatepass")) for link in links}
        return cls(text.template, text.shingles, text.n_shingles, _bottom(linked, 0, 32))

    def dump(self) -> str:
        text = _recall(_TEXTS, self)
        if text is None:
            text = _remember(_TEXTS, self,
                             f"{self.template}:{self.n_shingles}:{_hexes(self.shingles)}:{_hexes(self.links)}")
            _remember(_SKETCHES, text, self)   # the next group of its host reads it back
        return text

    @classmethod
    def load(cls, text: str) -> "PageSketch | None":
        """The sketch ``dump`` wrote, None for anything else (a damaged entry is ignored)."""
        sketch = _recall(_SKETCHES, text)
        if sketch is None:
            try:
                template, n, hashes, links = text.split(":")
                sketch = cls(template, _unhex(hashes), int(n), _unhex(links))
            except ValueError:
                return None
            _remember(_SKETCHES, text, sketch)
            _remember(_TEXTS, sketch, text)
        return sketch


# A shape's ring is read and written back whole by each page group of its host: its
# sketches' texts are parsed and made once per process, not once per group, the least
# recently used going first (a memo emptied when full missed half its lookups on the
# 100-host bench). A sketch and its text take ~7.5 kB here: 4,096 of each made a parse
# worker 25-30 MiB larger.
MEMO = 1024
_SKETCHES: OrderedDict[str, PageSketch] = OrderedDict()
_TEXTS: OrderedDict[PageSketch, str] = OrderedDict()
K = TypeVar("K")
V = TypeVar("V")


def _recall(memo: OrderedDict[K, V], key: K) -> V | None:
    value = memo.get(key)
    if value is not None:
        memo.move_to_end(key)
    return value


def _remember(memo: OrderedDict[K, V], key: K, value: V) -> V:
    memo[key] = value
    if len(memo) > MEMO:
        memo.popitem(last=False)
    return value


@dataclass(slots=True)
class Ring:
    """The last RING sketches of one shape, newest last."""

    sketches: list[PageSketch] = field(default_factory=list)

    @classmethod
    def load(cls, text: str | None) -> "Ring":
        loaded = (PageSketch.load(part) for part in (text or "").split(";") if part)
        return cls([s for s in loaded if s is not None][-RING:])

    def dump(self) -> str:
        return ";".join(s.dump() for s in self.sketches[-RING:])

    def judge(self, sketch: PageSketch) -> tuple[Yield, bool]:
        """(``template``, ``known text`` or ``new`` against the ring, whether the page
        links URLs the ring's pages did not), then add the page."""
        verdict = Yield.NEW
        if any(s.template == sketch.template for s in self.sketches):
            verdict = Yield.TEMPLATE
        elif sketch.n_shingles >= MIN_SHINGLES and self.sketches:
            seen = frozenset().union(*(s.shingles for s in self.sketches))
            if len(sketch.shingles & seen) >= KNOWN_SHARE * len(sketch.shingles):
                verdict = Yield.KNOWN_TEXT
        linked = frozenset().union(*(s.links for s in self.sketches))
        new_links = bool(self.sketches) and len(sketch.links - linked) > (1 - KNOWN_SHARE) * len(sketch.links)
        self.sketches = [*self.sketches, sketch][-RING:]
        return verdict, new_links


def page_yield(*, duplicate: bool, near_duplicate: bool, soft_404: bool, empty: bool,
               ring: Ring, sketch: PageSketch | None) -> Yield:
    """What one fetched page of a shape added; ``sketch`` None: its text and links are
    unknown here (judged by the record's marks alone). The ring learns the page either
    way."""
    in_ring, new_links = ring.judge(sketch) if sketch is not None else (Yield.NEW, False)
    if soft_404:
        return Yield.SOFT_404
    if new_links:
        return Yield.NEW
    if duplicate:
        return Yield.DUPLICATE
    if near_duplicate:
        return Yield.NEAR_DUPLICATE
    if empty:
        return Yield.EMPTY
    return in_ring


@dataclass(frozen=True, slots=True)
class TrapBar:
    """When a shape's evidence is weighed (settings TRAP_*): after ``pages`` fetched
    pages (0: never), ``walk_pages`` for a shape whose pages link a number step and
    ``facet_pages`` for parameter combinations (0: as any shape); a trap when
    ``ratio`` of them added nothing."""

    pages: int
    ratio: float
    walk_pages: int = 0
    facet_pages: int = 0

    def min_pages(self, *, facet: bool, walking: bool) -> int:
        if not self.pages:
            return 0
        return (self.facet_pages if facet else self.walk_pages if walking else 0) or self.pages


@dataclass(slots=True)
class Tally:
    """A shape's pages by yield (the counts stored per shape)."""

    pages: int = 0
    low: dict[Yield, int] = field(default_factory=dict)
    walks: int = 0       # pages that link a number step of their shape

    @property
    def added_nothing(self) -> int:
        return sum(self.low.values())

    def poor(self, ratio: float) -> bool:
        """Whether the shape's pages so far added nothing (POOR_PAGES of them at least):
        links to it do not make a page worth its fetch, before it is a trap too."""
        return self.pages >= POOR_PAGES and self.added_nothing >= ratio * self.pages

    def verdict(self, bar: TrapBar, facet: bool = False) -> str | None:
        """The trap's evidence in words, or None while the shape is not a trap."""
        min_pages = bar.min_pages(facet=facet, walking=self.walks > 0)
        if not min_pages or self.pages < min_pages or self.added_nothing < bar.ratio * self.pages:
            return None
        kinds = ", ".join(f"{n} {y}" for y, n in sorted(self.low.items(), key=lambda kv: (-kv[1], kv[0])) if n)
        return f"{self.added_nothing} of the {self.pages} pages of this shape added nothing new: {kinds}"
