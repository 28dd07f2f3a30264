"""URL-seen Bloom filter arithmetic (pure; the bits live in Redis, see frontier/add.lua).

Sizing follows the textbook optimum: ``m = -n ln p / (ln 2)^2`` bits and
``k = (m / n) ln 2`` hashes, i.e. ~9.6 bits (1.2 bytes) per URL at 1 %; 1 billion URLs
at 1 % cost ~1.2 GB. Redis strings hold at most 2^32 bits, so a filter is split into
segments of at most 2^31 bits and a URL picks its segment by hash. Positions use
Kirsch-Mitzenmacher double hashing over one 128-bit BLAKE2b digest.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from hashlib import blake2b

MAX_SEGMENT_BITS = 1 << 31


@dataclass(frozen=True, slots=True)
class BloomSpec:
    bits: int          # total bits over all segments
    hashes: int        # k
    segments: int
    segment_bits: int

    @classmethod
    def for_capacity(cls, expected: int, error_rate: float) -> "BloomSpec":
        expected = max(1, expected)
        bits = max(64, math.ceil(-expected * math.log(error_rate) / (math.log(2) ** 2)))
        hashes = max(1, round(bits / expected * math.log(2)))
        segments = max(1, math.ceil(bits / MAX_SEGMENT_BITS))
        segment_bits = math.ceil(bits / segments)
        return cls(segments * segment_bits, hashes, segments, segment_bits)

    def positions(self, item: str) -> tuple[int, list[int]]:
        """(segment index, k bit offsets inside that segment) for one item."""
        digest = blake2b(item.encode("utf-8", "surrogatepass"), digest_size=24).digest()
        h1 = int.from_bytes(digest[0:8], "little")
        h2 = int.from_bytes(digest[8:16], "little") | 1
        segment = int.from_bytes(digest[16:24], "little") % self.segments
        m = self.segment_bits
        return segment, [(h1 + i * h2) % m for i in range(self.hashes)]

    @property
    def bytes(self) -> int:
        return (self.bits + 7) // 8

    def false_positive_rate(self, bits_set: int) -> float:
        """Estimated current false-positive rate from the fill ratio (fill^k)."""
        return (bits_set / self.bits) ** self.hashes if self.bits else 1.0
