"""64-bit simhash of page text (pure), for near-duplicate detection.

Why this design (Charikar's simhash as used by Manku, Jain, Das Sarma 2007):

- **Features are the distinct lower-cased words of the text** (word 1-shingles,
  set semantics), each weighted by a fixed function of the word: 2 for words of
  four or more characters without digits, 1 for short words and for tokens with a
  digit. Short words are mostly function words shared by unrelated pages of one
  language; digit tokens are the volatile part of near-duplicates (dates, clocks,
  counters, prices). A weight that depends only on the word can be baked into a
  per-process cache, which is what makes the hash cheap.
- Multi-word shingles were measured and rejected for this stage: nearly every
  3-shingle of a page is new, so each costs a hash plus a 64-column update in
  Python (~0.3 µs, ~3 ms for a 9,000-word page), against ~0.1 µs per distinct
  word here. Order-sensitive similarity is what the MinHash report (4-word
  shingles, :mod:`.minhash`) is for.
- Bit columns are summed with Python big integers used as 65 lanes of 16 bits:
  a word's cached vector has ``w`` in lane ``j`` when bit ``j`` of its BLAKE2b-64
  hash is set, and ``w`` in lane 64 (the total weight). The sum over the page's
  distinct words is one ``sum()``; bit ``j`` of the simhash is set when lane
  ``j`` holds more than half of the total weight (a positive +-1 sum).
- Text that is mostly unspaced (CJK, long tokens) falls back to character
  trigrams, so one edited sentence does not replace the only feature.

Empty text hashes to 0. Hashes are stable across processes and machines
(BLAKE2b, never Python's randomized ``hash``).
"""
from __future__ import annotations

import sys
from array import array
from hashlib import blake2b

BITS = 64
LANE = 16                       # bits per lane; lane 64 carries the total weight
_LANE_MASK = (1 << LANE) - 1
_WEIGHT_SHIFT = BITS * LANE
_MAX_WEIGHT = 2
_CHUNK = _LANE_MASK // _MAX_WEIGHT   # features summed at once without lane overflow
_CACHE_MAX = 1 << 18            # distinct words kept (~60 MB worst case); cleared when full
_LONG_TOKEN = 16                # mean token length above which text counts as unspaced

# _SPREAD[k][v]: the lane vector of byte value v at byte position k of a hash.
_SPREAD: list[list[int]] = [
    [sum(1 << (LANE * (8 * k + b)) for b in range(8) if v >> b & 1) for v in range(256)]
    for k in range(8)
]

_cache: dict[str, int] = {}
_HEX = "0123456789abcdefABCDEF"


def _vector(word: str) -> int:
    """Lane vector of one feature: its hash bits spread into lanes, times its weight."""
    d = blake2b(word.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    s = _SPREAD
    spread = (s[0][d[0]] + s[1][d[1]] + s[2][d[2]] + s[3][d[3]]
              + s[4][d[4]] + s[5][d[5]] + s[6][d[6]] + s[7][d[7]])
    if len(word) >= 4 and not any(c.isdigit() for c in word):
        w = 2
    else:
        w = 1
    return w * (spread + (1 << _WEIGHT_SHIFT))


def _vectors(features: list[str]) -> list[int]:
    vecs = list(map(_cache.get, features))
    if None in vecs:
        if len(_cache) + len(features) > _CACHE_MAX:
            _cache.clear()
        for i, v in enumerate(vecs):
            if v is None:
                vecs[i] = _cache[features[i]] = _vector(features[i])
    return vecs  # type: ignore[return-value]


def _features(text: str) -> list[str]:
    words = text.lower().split()
    if words and len(text) > _LONG_TOKEN * len(words):
        joined = "".join(words)
        return list({joined[i:i + 3] for i in range(max(1, len(joined) - 2))})
    return list(set(words))


def simhash64(text: str) -> int:
    """Simhash of the text's distinct words (see the module doc); 0 for no words."""
    features = _features(text)
    if not features:
        return 0
    vecs = _vectors(features)
    counts = [0] * (BITS + 1)
    for start in range(0, len(vecs), _CHUNK):
        acc = sum(vecs[start:start + _CHUNK])
        lanes = array("H", acc.to_bytes((BITS + 1) * 2, sys.byteorder))
        counts = [a + b for a, b in zip(counts, lanes)] if start else lanes.tolist()
    half = counts[BITS] / 2
    out = 0
    for j in range(BITS):
        if counts[j] > half:
            out |= 1 << j
    return out


def hamming(a: int, b: int) -> int:
    """Number of differing bits of two 64-bit fingerprints."""
    return (a ^ b).bit_count()


def to_hex(h: int) -> str:
    """16 lower-case hex digits (JSON-safe, fixed width, sorts like the number)."""
    return f"{h:016x}"


def from_hex(s: str) -> int:
    """Inverse of :func:`to_hex`; rejects anything but 1-16 hex digits."""
    if not 0 < len(s) <= 16 or s.strip(_HEX):
        raise ValueError(f"not a 64-bit hex fingerprint: {s!r}")
    return int(s, 16)


def clear_cache() -> None:
    """Forget cached word vectors (tests, benchmarks of the cold path)."""
    _cache.clear()
