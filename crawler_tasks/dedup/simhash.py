"""64-bit simhash of page text (pure), for near-duplicate detection.

Charikar's simhash as used by Manku, Jain and Das Sarma (2007): every feature of
the text gets a 64-bit hash; bit ``j`` of the simhash is set when more than half
of the features have bit ``j`` set (the sign of the +-1 column sum). Similar
feature sets give fingerprints a few bits apart; near-duplicates are pages within
Hamming distance 3, found by :mod:`.nearindex`.

Choices, each measured with ``bench/dedup_bench.py`` and the property tests:

- **Features: the distinct word pairs** (2-shingles: each pair of neighbouring words,
  counted once) of the lower-cased text, after **folding digits to 0**, so pages that
  differ only in dates, clocks, counters or prices share all features. Single words
  were the features until issue 38: pages drawing on one small vocabulary (listings,
  forum posts, a 4,000-word synthetic web) share most of their words, so unrelated
  pages sat only ~23 bits apart (~28 on the real documentation sites) and a 3-bit
  threshold over millions of pairs caught the tail (1,659 of 8,000 distinct pages
  flagged). Word pairs are rarely shared by unrelated texts, whatever the vocabulary:
  unrelated pages sit ~31.5 bits apart on both (``dedup_bench.py --scale``). A changed
  word changes two features instead of one, which a 3-bit threshold still absorbs
  (the property tests). Counting each pair once keeps frequent pairs ("of the") from
  dominating.
- **A page that is its links** (an index, a table of contents, an archive) also has
  the word pairs of its links' anchor text as features (``simhash64_of_words``'s
  ``more``): its main text is a template shared by its siblings (the Python docs'
  ``genindex-D`` and ``genindex-E``), its links are what it holds. The parse stage
  decides which pages (``parse.page``: anchor text at least half the main text).
- **Cost is kept at C level**: split + one ``zlib.crc32`` per word (shared with the
  trap sketch), the pairs as 64-bit keys ``crc(w1) << 32 | crc(w2)`` built by ``map``
  and deduplicated by ``set``, then all keys are hashed at once with big integers
  used as SIMD lanes: each 32-bit half goes into a 96-bit lane, one multiplication
  by a 64-bit odd constant per half mixes every lane, and bits 16..79 of the XOR of
  the two products (the well-mixed middle; each bit is set for half of the keys,
  checked in tests) are the key's 64-bit hash. Two keys that share a word differ by
  the other word's mixed hash, so their bits stay independent. The per-bit counts
  are ``int.bit_count`` over byte columns. No per-word Python bytecode runs.
- **Numbers in the title name the page**: digits are folded in the text, but the
  numbers of a page's title (a release, a chapter, a year) are hashed and XORed into
  its fingerprint (``title_mark``): Django's release notes 1.3.5 and 1.4.3 have one
  text but for the version, and are two pages. Pages whose titles carry the same
  numbers (or none: a mirror, a print version, a repost) keep their distance; pages
  whose titles' numbers differ land ~32 bits apart. A calendar's days, one template
  with another date, are still judged by the trap evidence (``dedup.evidence``).
- Text that is mostly unspaced (CJK, Thai) falls back to character trigrams, so
  one edited sentence does not replace the page's only feature.
- **The index gets a second opinion** (``page_print`` -> ``NearPrint``): a short page's
  copy with a line more lands 6-10 bits away, since the new word pairs flip more bits
  than its ~100 features outvote; no feature weighting changes that (the distance
  follows the angle between the feature sets), and a threshold that wide alone would
  match unrelated pages by chance at scale and one template's index pages, 6 bits
  apart. So the index goes that far only on a second fingerprint that must agree too,
  ``check`` (a second simhash of the same features, XOR a simhash of the anchor text,
  XOR a hash of the title), and it probes the buckets of the page's FRAGILE_BITS least
  confident bits flipped. The second hash multiplies the lanes the first one made:
  ``page_print`` costs ~1.3 x ``page_simhash`` (0.23 -> 0.31 ms a synthetic page of the
  ``--scale`` web, 0.61 -> 0.78 ms a 60 kB page with 50 links: ``dedup_bench.py``).

The fingerprint's format is ``VERSION`` 2: simhashes of version 1 (single words; in
feeds, snapshots and the DUST evidence of crawls before issue 38) are not comparable
with these (unrelated by ~32 bits: a page of an old snapshot is never found as the
near-duplicate of its new fetch, nor wrongly matched).

Empty text hashes to 0. Hashes are stable across processes, machines and runs
(CRC-32 and integer arithmetic; never Python's randomized ``hash``).
"""
from __future__ import annotations

import re
import sys
import zlib
from array import array
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from hashlib import blake2b
from itertools import islice, repeat
from operator import add, lshift, or_

from crawler_tasks.dedup.fingerprint import lower_utf8

BITS = 64
VERSION = 2                      # 1: single words; 2: word pairs (+ anchor text of link pages)
_MIX = 0x9E3779B97F4A7C15        # odd 64-bit multipliers: the low and the high half of a key
_MIX_HIGH = 0xC2B2AE3D27D4EB4F
_CHECK_MIX = (0xD6E8FEB86659FD93, 0xA0761D6478BD642F)   # the check's own hashes: of the features,
_LINKS_MIX = (0xE7037ED1A0B428DB, 0x8EBC6AF09C88C6E3)   # and of the anchor text (``NearPrint``)
# bits nearest their flip, probed flipped by the index (``NearPrint``); near-duplicate groups
# flagged whole at 10^5 pages: 0.91 with none, 0.966 with 4, 0.982 with 8, 0.987 with 12
FRAGILE_BITS = 8
LANE = 12                        # bytes a key half: a 32-bit value times a 64-bit constant fits in 96 bits
_U32 = next(code for code in "IL" if array(code).itemsize == 4)
_FIRST_BYTE = 2                  # hash = bytes 2..9 (bits 16..79) of each lane
_FOLD = bytes.maketrans(b"123456789", b"000000000")
_FOLD_STR = str.maketrans("123456789", "000000000")
_UNSPACED = 24                   # mean bytes per token above which text counts as unspaced
_BIT_MASKS: dict[int, list[int]] = {}
_NUMBER = re.compile(r"\d+")
# anchor text at least this share of the main text: a page of links (0.5 made pages near
# it flip with a mirror's added menu: 55 of 62 mirrors of real pages found, 59 at 1.0)
LINK_PAGE_SHARE = 1.0


def words_of(text: str) -> tuple[list[bytes], bool]:
    """The text's words, lower-cased with digits folded, and whether the text is spaced
    (pairs of its words are its features; else character trigrams are)."""
    data = lower_utf8(text).translate(_FOLD)
    words = data.split()
    return words, not (words and len(data) > _UNSPACED * len(words))


def _trigrams(text: str) -> set[bytes]:
    s = "".join(text.lower().split()).translate(_FOLD_STR)
    if len(s) < 3:
        return {s.encode("utf-8", "surrogatepass")} if s else set()
    grams = set(map(add, map(add, s, s[1:]), s[2:]))
    return set(map(str.encode, grams, repeat("utf-8"), repeat("surrogatepass")))


def link_page_text(anchors: Iterable[str], text_chars: int, max_chars: int) -> str:
    """The anchor text a page's fingerprint takes beside its main text ("" for most pages):
    its links' anchor texts, one a line, up to ``max_chars``, when they hold at least
    LINK_PAGE_SHARE of its ``text_chars`` characters of main text (an index, a table of
    contents, an archive: the page is its links). Other pages keep to their text: a
    site's navigation, shared by its pages, would pull unrelated pages together. A page
    without text has no fingerprint at all (``parse.page``), links or not."""
    texts = list(anchors)
    if not text_chars or not texts or sum(map(len, texts)) < LINK_PAGE_SHARE * text_chars:
        return ""
    return "\n".join(texts)[:max_chars]


def pair_keys(crcs: Sequence[int]) -> set[int]:
    """The distinct pairs of neighbouring words, from the words' CRC-32s, as 64-bit keys
    ``crc(w1) << 32 | crc(w2)``; a text of one word is its word (the key ``crc(w)``)."""
    if len(crcs) < 2:
        return set(crcs)
    return set(map(or_, map(lshift, crcs, repeat(32)), islice(crcs, 1, None)))


def keys_of(text: str) -> set[int]:
    """The distinct feature keys of a text (see the module doc): word pairs of a spaced
    text, the CRC-32s of the character trigrams of an unspaced one."""
    words, spaced = words_of(text)
    if not spaced:
        return set(map(zlib.crc32, _trigrams(text)))
    return pair_keys(list(map(zlib.crc32, words)))


def feature_hashes(keys: Collection[int], mix: tuple[int, int] = (_MIX, _MIX_HIGH)) -> bytes:
    """64-bit hashes of the 64-bit keys, as ``len(keys)`` lanes of ``LANE`` bytes whose
    bytes 2..9 are the little-endian hash (each half of every key mixed by one
    multiplication, the two products XORed); ``mix`` picks the hash function."""
    return _mixed(_key_lanes(keys), len(keys), mix)


def _key_lanes(keys: Collection[int]) -> tuple[int, int]:
    """The keys' low and high 32-bit halves, each in a lane of its own big integer: one
    multiplication of each integer hashes every key (``_mixed``), for any multipliers."""
    halves = array(_U32, array("Q", keys).tobytes())
    if sys.byteorder == "big":  # pragma: no cover - the halves are read as little-endian
        halves.byteswap()
    return _lanes(halves[0::2]), _lanes(halves[1::2])


def _mixed(lanes: tuple[int, int], n: int, mix: tuple[int, int]) -> bytes:
    return ((lanes[0] * mix[0]) ^ (lanes[1] * mix[1])).to_bytes(LANE * n, "little")


def _lanes(values: array[int]) -> int:
    lanes = array(_U32, bytes(LANE * len(values)))
    lanes[::LANE // 4] = values
    if sys.byteorder == "big":  # pragma: no cover - the lanes are read as little-endian
        lanes.byteswap()
    return int.from_bytes(lanes, "little")


def _masks(n: int) -> list[int]:
    """Ints with bit b set in every byte (b = 0..7), at least n bytes long. ``&`` costs
    the shorter operand's length, so one mask per power of two serves every n."""
    size = 1 << max(n - 1, 0).bit_length()
    masks = _BIT_MASKS.get(size)
    if masks is None:
        masks = _BIT_MASKS[size] = [int.from_bytes(bytes([1 << b]) * size, "little") for b in range(8)]
    return masks


def bit_counts(lanes: bytes, n: int) -> list[int]:
    """For each of the 64 hash bits, how many of the n features have it set."""
    masks = _masks(n)
    counts: list[int] = []
    for k in range(_FIRST_BYTE, _FIRST_BYTE + 8):
        column = int.from_bytes(lanes[k:LANE * n:LANE], "little")
        counts.extend((column & m).bit_count() for m in masks)
    return counts


def simhash64(text: str) -> int:
    """Simhash of the text's distinct word pairs (see the module doc); 0 for no words."""
    return simhash64_with_count(text)[0]


def simhash64_with_count(text: str, more: Iterable[str] = ()) -> tuple[int, int]:
    """(simhash, number of distinct features) of the text and of each text of ``more``
    (a link page's anchor texts, their pairs taken within each). Few features make a
    weak fingerprint: pages of a few words collide easily, so callers may skip
    indexing them."""
    keys = keys_of(text)
    for extra in more:
        keys |= keys_of(extra)
    return simhash_of_keys(keys)


def simhash64_of_words(crcs: Sequence[int], *more: Sequence[int]) -> tuple[int, int]:
    """``simhash64_with_count`` of spaced texts from their words' CRC-32s (``words_of``),
    which the trap sketch hashes too: one split and one CRC a word serve both."""
    keys = pair_keys(crcs)
    for extra in more:
        keys |= pair_keys(extra)
    return simhash_of_keys(keys)


def simhash_of_keys(keys: Collection[int]) -> tuple[int, int]:
    """(simhash, len(keys)) of distinct 64-bit feature keys; (0, 0) for none."""
    n = len(keys)
    if not n:
        return 0, 0
    return _signs(bit_counts(feature_hashes(keys), n), n), n


def _signs(counts: list[int], n: int) -> int:
    """The simhash of n features from its bits' counts: bit j set when most features set it."""
    return sum(1 << j for j, c in enumerate(counts) if 2 * c > n)


def page_simhash(text: str, anchors: Iterable[str], title: str, max_chars: int,
                 keys: set[int] | None = None) -> tuple[int, int]:
    """(simhash, distinct features) of a page as the crawl fingerprints it: the word pairs
    of the first ``max_chars`` characters of its text (``keys``, when the caller has them
    from the words it hashed for the trap sketch), those of its anchor texts if it is a
    page of links (``link_page_text``), the numbers of its title (``title_mark``)."""
    if keys is None:
        keys = keys_of(text[:max_chars])
    links = link_page_text(anchors, len(text), max_chars)
    h, n = simhash_of_keys(keys | keys_of(links) if links else keys)
    return (h ^ title_mark(title) if n else 0), n


@dataclass(frozen=True, slots=True)
class NearPrint:
    """What the near-duplicate index (``nearindex``) knows of a page: its simhash, and
    what lets it look further for the copies of short pages.

    ``check`` is a second opinion, asked only of candidates further away than the
    simhash threshold: the XOR of a second simhash of the same features (other hash
    functions: an unrelated page that a wide radius lets in by chance is ~32 bits away
    on it), a simhash of the anchor text of all the page's links, and a hash of its
    title. Two checks are close only when all three agree: the text, the links (what
    the text of one template cannot tell apart: the Python docs' ``genindex-Y`` and
    ``genindex-Z`` differ by one letter of text and by all their entries) and the
    title (the man pages of ``git diff-tree`` and ``git diff-index`` share 97 % of
    their text). ``fragile`` marks the FRAGILE_BITS bits whose column sums were
    nearest zero: the bits a few added words flip first, which the index probes
    flipped."""

    simhash: int       # as ``page_simhash``: what records, feeds and the index's buckets hold
    features: int      # distinct features behind it (0: no text, no fingerprint)
    check: int = 0
    fragile: int = 0


def page_print(text: str, anchors: Iterable[str], title: str, max_chars: int,
               keys: set[int] | None = None) -> NearPrint:
    """``page_simhash`` of the page with its ``NearPrint``'s check and fragile bits."""
    if keys is None:
        keys = keys_of(text[:max_chars])
    anchors = list(anchors)
    anchor_text = "\n".join(anchors)[:max_chars]
    anchor_keys = keys_of(anchor_text) if anchor_text else set()
    if anchor_keys and link_page_text(anchors, len(text), max_chars):
        keys = keys | anchor_keys
    n = len(keys)
    if not n:
        return NearPrint(0, 0)
    lanes = _key_lanes(keys)
    counts = bit_counts(_mixed(lanes, n, (_MIX, _MIX_HIGH)), n)
    margins = [abs(2 * c - n) for c in counts]
    nearest = sorted(range(BITS), key=margins.__getitem__)[:FRAGILE_BITS]
    links = 0
    if anchor_keys:
        links = _signs(bit_counts(feature_hashes(anchor_keys, _LINKS_MIX), len(anchor_keys)), len(anchor_keys))
    check = _signs(bit_counts(_mixed(lanes, n, _CHECK_MIX), n), n) ^ links ^ title_name(title)
    return NearPrint(_signs(counts, n) ^ title_mark(title), n, check, sum(1 << j for j in nearest))


def title_mark(title: str) -> int:
    """A 64-bit mark of the numbers of a page's title, XORed into its simhash (0: none)."""
    numbers = _NUMBER.findall(title)
    if not numbers:
        return 0
    return int.from_bytes(blake2b(" ".join(numbers).encode(), digest_size=8).digest(), "little")


def title_name(title: str) -> int:
    """A 64-bit hash of the whole title, case-folded and whitespace-collapsed (0: none)."""
    name = " ".join(title.lower().split())
    return int.from_bytes(blake2b(name.encode("utf-8", "surrogatepass"), digest_size=8,
                                  person=b"title").digest(), "little") if name else 0


def hamming(a: int, b: int) -> int:
    """Number of differing bits of two 64-bit fingerprints."""
    return (a ^ b).bit_count()


def to_hex(h: int) -> str:
    """16 lower-case hex digits (JSON-safe, fixed width, sorts like the number)."""
    return f"{h:016x}"


_HEX = "0123456789abcdefABCDEF"


def from_hex(s: str) -> int:
    """Inverse of :func:`to_hex`; rejects anything but 1-16 hex digits."""
    if not 0 < len(s) <= 16 or s.strip(_HEX):
        raise ValueError(f"not a 64-bit hex fingerprint: {s!r}")
    return int(s, 16)
