"""What a page of a URL shape added (dedup.evidence, pure): template, known text, new;
and when a shape's tally makes it a trap."""
from __future__ import annotations

import heapq
import random
import zlib

from crawler_tasks.dedup.evidence import (
    BOTTOM_K,
    MAX_CHARS,
    MIN_SHINGLES,
    RING,
    PageSketch,
    Ring,
    Tally,
    TextSketch,
    TrapBar,
    Yield,
    _bottom,
    page_yield,
)
from crawler_tasks.parse.page import analyse

WORDS = [a + b + c for a in "bcdfg" for b in "aeiou" for c in "klmnprst"]   # no digits: they fold
CHROME = "Home | Events | About us | Contact. The society meets on the first Monday of every month."


def words(seed: int | str, n: int) -> str:
    return " ".join(random.Random(str(seed)).sample(WORDS, n))


def judge_all(texts: list[str]) -> list[Yield]:
    ring = Ring()
    return [ring.judge(PageSketch.of(t))[0] for t in texts]


def test_same_page_with_another_number_is_template():
    got = judge_all([f"{CHROME} Events on 2026-05-{d:02d}: none." for d in range(1, 8)])
    assert got == [Yield.NEW] + [Yield.TEMPLATE] * 6


def test_short_distinct_pages_are_new():
    got = judge_all([f"Django 3.1.{k} release notes. Fixes {words(k, 2)}." for k in range(30)])
    assert got == [Yield.NEW] * 30


def test_page_made_of_its_neighbours_text_is_known():
    items = [words(f"item{i}", 12) for i in range(10)]
    pages = [" ".join(items[j] for j in range(10) if j != k) for k in range(10)]  # facets: all items but one
    got = judge_all(pages)
    assert got[0] == Yield.NEW and set(got[1:]) == {Yield.KNOWN_TEXT}


def test_long_distinct_pages_sharing_chrome_are_new():
    got = judge_all([f"{CHROME} {words(k, 60)} {CHROME}" for k in range(12)])
    assert got == [Yield.NEW] * 12


def test_ring_remembers_only_recent_pages_and_survives_its_text_form():
    ring = Ring()
    for k in range(RING + 3):
        ring.judge(PageSketch.of(words(k, 30)))
    again = Ring.load(ring.dump())
    assert len(again.sketches) == RING and again.sketches == ring.sketches
    assert again.judge(PageSketch.of(words(RING + 2, 30)))[0] == Yield.TEMPLATE  # recent: known
    assert again.judge(PageSketch.of(words(0, 30)))[0] == Yield.NEW              # fell out of the ring
    assert Ring.load("garbage;x:y;:1:zz").sketches == []


def test_marks_come_first_and_the_ring_still_learns():
    ring = Ring()
    sketch = PageSketch.of(words("a", 30))
    assert page_yield(duplicate=True, near_duplicate=False, soft_404=False, empty=False, ring=ring,
                      sketch=sketch) == Yield.DUPLICATE
    assert page_yield(duplicate=False, near_duplicate=False, soft_404=False, empty=False, ring=ring,
                      sketch=sketch) == Yield.TEMPLATE
    assert page_yield(duplicate=False, near_duplicate=False, soft_404=True, empty=False, ring=ring,
                      sketch=None) == Yield.SOFT_404
    assert page_yield(duplicate=False, near_duplicate=False, soft_404=False, empty=True, ring=ring,
                      sketch=PageSketch.of("")) == Yield.EMPTY
    assert page_yield(duplicate=False, near_duplicate=False, soft_404=False, empty=False, ring=ring,
                      sketch=None) == Yield.NEW


def test_same_chrome_with_new_links_is_new():
    """A pager whose items are links: one text on every page, new posts on each; a
    calendar's days link the same pages."""
    ring, nav = Ring(), ["/", "/about", "/contact"]
    pager = [page_yield(duplicate=n > 1, near_duplicate=False, soft_404=False, empty=False, ring=ring,
                        sketch=PageSketch.of("Posts, page 1 of 30", [*nav, *(f"/post/{n}{i}" for i in range(5))]))
             for n in range(1, 8)]
    assert pager == [Yield.NEW] * 7
    ring = Ring()
    days = [page_yield(duplicate=False, near_duplicate=False, soft_404=False, empty=False, ring=ring,
                       sketch=PageSketch.of(f"{CHROME} May {d}: no events", nav)) for d in range(1, 8)]
    assert days == [Yield.NEW] + [Yield.TEMPLATE] * 6
    sketch = PageSketch.of("x y z", ["/a", "/b"])
    assert PageSketch.load(sketch.dump()) == sketch


def test_tally_verdict_needs_pages_and_ratio():
    t = Tally(14, {Yield.NEAR_DUPLICATE: 7, Yield.TEMPLATE: 5})
    bar = TrapBar(10, 0.7, walk_pages=6, facet_pages=30)
    assert t.verdict(bar) == "12 of the 14 pages of this shape added nothing new: 7 near-duplicate, 5 template"
    assert t.verdict(bar, facet=True) is None                  # a facet shape is weighed after 30
    assert t.verdict(TrapBar(15, 0.7)) is None                 # too few pages yet
    assert t.verdict(TrapBar(0, 0.7)) is None                  # off
    assert Tally(300, {Yield.NEAR_DUPLICATE: 13, Yield.KNOWN_TEXT: 4}, walks=300).verdict(bar) is None
    calendar = Tally(6, {Yield.TEMPLATE: 5})
    assert calendar.verdict(bar) is None                       # an ordinary shape: 10 pages first
    calendar.walks = 6
    assert calendar.verdict(bar) == "5 of the 6 pages of this shape added nothing new: 5 template"


def test_bottom_k_is_the_k_smallest_whatever_the_set():
    """The cut that finds the bottom k first never changes which k they are: a long text,
    a repetitive one (few distinct hashes) and skewed hashes (all in one corner of the
    range) alike."""
    rnd = random.Random(5)
    cases = [{rnd.getrandbits(64) - (1 << 63) for _ in range(n)} for n in (0, 5, 31, 32, 193, 800, 5000)]
    cases += [{rnd.getrandbits(32) for _ in range(n)} for n in (10, 300, 2000)]
    cases.append({-(1 << 63) + rnd.getrandbits(40) for _ in range(3000)})   # all below any cut
    cases.append({(1 << 62) + rnd.getrandbits(40) for _ in range(3000)})    # all above it
    for hashes in cases:
        for least, bits in ((-1 << 63, 64), (0, 32)):
            assert _bottom(hashes, least, bits) == frozenset(heapq.nsmallest(BOTTOM_K, hashes))
    text = " ".join(words(k, 60) for k in range(40))   # past MAX_CHARS
    ids = [zlib.crc32(w) for w in text[:MAX_CHARS].encode().split()]
    shingles = set(map(hash, zip(ids, ids[1:], ids[2:], ids[3:], strict=False)))
    sketch = PageSketch.of(text)
    assert sketch.shingles == frozenset(heapq.nsmallest(BOTTOM_K, shingles)) and sketch.n_shingles >= len(shingles)
    assert PageSketch.of("a b c d e f g h i j k").n_shingles == 8 >= MIN_SHINGLES     # few: distinct ones
    assert PageSketch.of("a b c d " * 3).n_shingles == 4 < MIN_SHINGLES                 # repeats count once
    assert PageSketch.load(sketch.dump()) == sketch


def test_the_sandbox_sketches_the_text_it_made():
    """``analyse(..., sketch=True)`` hands the parse worker its text's sketch: the one the
    text itself gives, with links joined later; no sketch unless asked."""
    body = ("<html><body><main><h1>Minutes</h1><p>" + words("minutes", 60) + "</p><p>"
            + words("more", 40) + " in 2026.</p></main></body></html>").encode()
    result = analyse(body, "http://a.test/m/1", {}, "main", 100_000, 12_000, True)
    assert result.sketch == TextSketch.of(result.text.text) and result.sketch.n_shingles >= MIN_SHINGLES
    assert PageSketch.joined(result.sketch, ["/a"]) == PageSketch.of(result.text.text, ["/a"])
    assert analyse(body, "http://a.test/m/1", {}, "main", 100_000, 12_000).sketch is None
