"""64-bit simhash of page text (pure), for near-duplicate detection.

Charikar's simhash as used by Manku, Jain and Das Sarma (2007): every feature of
the text gets a 64-bit hash; bit ``j`` of the simhash is set when more than half
of the features have bit ``j`` set (the sign of the +-1 column sum). Similar
feature sets give fingerprints a few bits apart; near-duplicates are pages within
Hamming distance 3, found by :mod:`.nearindex`.

Choices, each measured with ``bench/dedup_bench.py`` and the property tests:

- **Features: the distinct words** of the lower-cased text (word 1-shingles, each
  counted once), after **folding digits to 0**, so pages that differ only in
  dates, clocks, counters or prices share all features. Counting each distinct
  word once keeps function words from dominating (raw term frequency made
  unrelated pages correlate); length-based weights changed nothing measurable.
  Multi-word shingles cost one hash per word position (nearly all are distinct)
  for no gain at this stage; order-sensitive similarity is what the MinHash report
  (4-word shingles, :mod:`.minhash`) is for.
- **Cost is kept at C level**: split + ``set`` (the floor of any word-based
  feature), one ``zlib.crc32`` per distinct word (a stable 32-bit hash), then all
  words are processed at once with big integers used as SIMD lanes: the CRCs go
  into 96-bit lanes, one multiplication by a 64-bit odd constant mixes every
  lane, and bits 16..79 of each product (the well-mixed middle; each bit is set
  for half of the words, checked in tests) are the word's 64-bit hash.
  The per-bit counts are ``int.bit_count`` over byte columns. No per-word Python
  bytecode runs, and no word cache is kept (a cache was slower: memory-bound).
- Text that is mostly unspaced (CJK, Thai) falls back to character trigrams, so
  one edited sentence does not replace the page's only feature.

Empty text hashes to 0. Hashes are stable across processes, machines and runs
(CRC-32 and integer arithmetic; never Python's randomized ``hash``).
"""
from __future__ import annotations

import sys
import zlib
from array import array
from collections.abc import Collection
from itertools import repeat
from operator import add

from crawler_tasks.dedup.fingerprint import lower_utf8

BITS = 64
_MIX = 0x9E3779B97F4A7C15        # odd 64-bit multiplier (2^64 / golden ratio)
LANE = 12                        # bytes a feature: a 32-bit CRC times _MIX fits in 96 bits
_U32 = next(code for code in "IL" if array(code).itemsize == 4)
_FIRST_BYTE = 2                  # hash = bytes 2..9 (bits 16..79) of each lane
_FOLD = bytes.maketrans(b"123456789", b"000000000")
_FOLD_STR = str.maketrans("123456789", "000000000")
_UNSPACED = 24                   # mean bytes per token above which text counts as unspaced
_BIT_MASKS: dict[int, list[int]] = {}


def words_of(text: str) -> tuple[list[bytes], bool]:
    """The text's words, lower-cased with digits folded, and whether the text is spaced
    (its words are its features; else character trigrams are)."""
    data = lower_utf8(text).translate(_FOLD)
    words = data.split()
    return words, not (words and len(data) > _UNSPACED * len(words))


def features(text: str) -> set[bytes]:
    """The distinct features of a text, as UTF-8 bytes (see the module doc)."""
    words, spaced = words_of(text)
    if not spaced:
        s = "".join(text.lower().split()).translate(_FOLD_STR)
        if len(s) < 3:
            return {s.encode("utf-8", "surrogatepass")}
        grams = set(map(add, map(add, s, s[1:]), s[2:]))
        return set(map(str.encode, grams, repeat("utf-8"), repeat("surrogatepass")))
    return set(words)


def feature_hashes(feats: Collection[bytes]) -> bytes:
    """64-bit hashes of the features, as ``len(feats)`` lanes of ``LANE`` bytes whose
    bytes 2..9 are the little-endian hash (all features mixed by one multiplication)."""
    return _mixed(array(_U32, map(zlib.crc32, feats)))


def _mixed(crcs: array[int]) -> bytes:
    n = len(crcs)
    lanes = array(_U32, bytes(LANE * n))
    lanes[::LANE // 4] = crcs
    if sys.byteorder == "big":  # pragma: no cover - the lanes are read as little-endian
        lanes.byteswap()
    return (int.from_bytes(lanes, "little") * _MIX).to_bytes(LANE * n, "little")


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
    """Simhash of the text's distinct words (see the module doc); 0 for no words."""
    return simhash64_with_count(text)[0]


def simhash64_with_count(text: str) -> tuple[int, int]:
    """(simhash, number of distinct features). Few features make a weak fingerprint:
    pages of a few words collide easily, so callers may skip indexing them."""
    feats = features(text)
    return _simhash(feature_hashes(feats), len(feats))


def simhash64_of_words(crcs: Collection[int]) -> tuple[int, int]:
    """``simhash64_with_count`` of a spaced text from its words' CRC-32s (``words_of``),
    which the trap sketch hashes too: one split and one CRC a word serve both. Two words
    of one page with one CRC count as one feature (about one page in 10^4)."""
    distinct = array(_U32, set(crcs))
    return _simhash(_mixed(distinct), len(distinct))


def _simhash(lanes: bytes, n: int) -> tuple[int, int]:
    if not n:
        return 0, 0
    counts = bit_counts(lanes, n)
    return sum(1 << j for j, c in enumerate(counts) if 2 * c > n), n


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
