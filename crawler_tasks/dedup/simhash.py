"""64-bit simhash of page text (pure), for near-duplicate detection.

Charikar's simhash as used by Manku, Jain and Das Sarma (2007): every feature of
the text has a 64-bit hash; bit ``j`` of the simhash is set when the features
whose hash has bit ``j`` set carry more than half of the total weight. Similar
feature sets give fingerprints a few bits apart; near-duplicates are pages within
Hamming distance 3 (:mod:`.nearindex` finds them).

Feature choice (measured, see ``bench/dedup_bench.py``):

- **Features are the distinct words** of the lower-cased text (word 1-shingles,
  set semantics) with **digits folded to 0** first, so pages that differ only in
  dates, clocks, counters or prices get the same features. Weight: 2 for words of
  four or more bytes without digits, 1 for short words (mostly function words that
  unrelated pages of one language share) and for number-like tokens. The weight
  depends only on the word, so it is baked into a per-process cache.
- Multi-word shingles were rejected for this per-page stage: nearly every 3-word
  shingle of a page is new, so each needs its own hash and 64-column update,
  several times the cost of this scheme, whose floor is splitting the text into
  words. Order-sensitive similarity is the job of the MinHash report
  (4-word shingles, :mod:`.minhash`).
- The 64 columns are summed with big integers used as SIMD lanes: a word's cached
  vector holds its weight ``w`` in 16-bit lane ``j`` when bit ``j`` of its
  BLAKE2b-64 hash is set, and ``w`` in lane 64 (the total). One ``sum()`` over the
  page's distinct words yields all 64 column weights.
- Text that is mostly unspaced (CJK, Thai) falls back to character trigrams, so
  one edited sentence does not replace the page's only feature.

Empty text hashes to 0. Hashes are stable across processes and machines
(BLAKE2b, never Python's randomized ``hash``).
"""
from __future__ import annotations

import sys
from array import array
from hashlib import blake2b

BITS = 64
LANE = 16                         # bits per lane; lane 64 carries the total weight
_WEIGHT_LANE = 1 << (BITS * LANE)
_MAX_WEIGHT = 2
_CHUNK = ((1 << LANE) - 1) // _MAX_WEIGHT   # features summed at once without lane overflow
_CACHE_MAX = 1 << 17              # cached words (~170 B each); the cache is cleared when full
_UNSPACED = 24                    # mean bytes per token above which text counts as unspaced
_FOLD = bytes.maketrans(b"123456789", b"000000000")

# _SPREAD[k][v]: lane vector of byte value v at byte position k of a hash.
_SPREAD: list[list[int]] = [
    [sum(1 << (LANE * (8 * k + b)) for b in range(8) if v >> b & 1) for v in range(256)]
    for k in range(8)
]

_cache: dict[bytes, int] = {}


def _vector(feature: bytes) -> int:
    """Weighted lane vector of one feature (its hash bits spread into lanes + total lane)."""
    d = blake2b(feature, digest_size=8).digest()
    s = _SPREAD
    spread = (s[0][d[0]] + s[1][d[1]] + s[2][d[2]] + s[3][d[3]]
              + s[4][d[4]] + s[5][d[5]] + s[6][d[6]] + s[7][d[7]])
    weight = 2 if len(feature) >= 4 and b"0" not in feature else 1
    return weight * (spread + _WEIGHT_LANE)


def _features(text: str) -> set[bytes]:
    data = text.lower().encode("utf-8", "surrogatepass").translate(_FOLD)
    words = data.split()
    if words and len(data) > _UNSPACED * len(words):
        joined = "".join(text.lower().split()).translate({ord(c): "0" for c in "123456789"})
        return {joined[i:i + 3].encode("utf-8", "surrogatepass") for i in range(max(1, len(joined) - 2))}
    return set(words)


def _fill(features: set[bytes]) -> None:
    missing = features.difference(_cache)
    if missing:
        if len(_cache) + len(missing) > _CACHE_MAX:
            _cache.clear()
            missing = features
        for f in missing:
            _cache[f] = _vector(f)


def simhash64(text: str) -> int:
    """Simhash of the text's distinct words (see the module doc); 0 for no words."""
    features = _features(text)
    if not features:
        return 0
    _fill(features)
    get = _cache.__getitem__
    if len(features) <= _CHUNK:
        counts = _lanes(sum(map(get, features)))
    else:  # a huge text: sum in chunks so no lane overflows
        items = list(features)
        counts = [0] * (BITS + 1)
        for start in range(0, len(items), _CHUNK):
            part = _lanes(sum(map(get, items[start:start + _CHUNK])))
            counts = [a + b for a, b in zip(counts, part)]
    half = counts[BITS] / 2
    return sum(1 << j for j in range(BITS) if counts[j] > half)


def _lanes(acc: int) -> list[int]:
    lanes = array("H", acc.to_bytes((BITS + 1) * LANE // 8, "little"))
    if sys.byteorder == "big":  # pragma: no cover
        lanes.byteswap()
    return lanes.tolist()


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


def clear_cache() -> None:
    """Forget cached word vectors (tests; benchmarks of the cold path)."""
    _cache.clear()
