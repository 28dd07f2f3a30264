"""URL-seen Bloom filter arithmetic (pure; the bits live in Redis, see frontier/add.lua).

Sizing follows the textbook optimum: ``m = -n ln p / (ln 2)^2`` bits and
``k = (m / n) ln 2`` hashes, i.e. ~9.6 bits (1.2 bytes) per URL at 1 %; 1 billion URLs
at 1 % cost ~1.2 GB. Redis strings hold at most 2^32 bits, so a filter is split into
segments of at most 2^31 bits and a URL picks its segment by hash. Positions use
Kirsch-Mitzenmacher double hashing, ``(h1 + i*h2) mod m`` with two 31-bit halves of
one BLAKE2b digest; the Lua side (frontier/add.lua) derives the k positions from
(h1, h2) itself, so a URL costs two script arguments instead of k, and all the
arithmetic stays exact in Lua's doubles (< 2^53).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from hashlib import blake2b

MAX_SEGMENT_BITS = 1 << 31
# Fingerprints per intset bucket at the expected number of URLs: Redis keeps a set of
# integers as a sorted array (4 bytes a 32-bit member, binary search) up to
# set-max-intset-entries, which the crawl raises to INTSET_ENTRIES (8x the mean).
BUCKET_URLS = 256
INTSET_ENTRIES = 2048


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

    def hashes_of(self, item: str) -> tuple[int, int, int]:
        """(segment index, h1, h2): what add.lua needs to derive the k positions."""
        digest = blake2b(item.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        h1 = int.from_bytes(digest[0:4], "little") & 0x7FFFFFFF
        h2 = (int.from_bytes(digest[4:8], "little") & 0x7FFFFFFF) | 1
        segment = int.from_bytes(digest[8:16], "little") % self.segments
        return segment, h1, h2

    def positions(self, item: str) -> tuple[int, list[int]]:
        """(segment index, k bit offsets inside that segment), as add.lua computes them."""
        segment, h1, h2 = self.hashes_of(item)
        m = self.segment_bits
        return segment, [(h1 + i * h2) % m for i in range(self.hashes)]

    @property
    def bytes(self) -> int:
        return (self.bits + 7) // 8

    def false_positive_rate(self, bits_set: int) -> float:
        """Estimated current false-positive rate from the fill ratio (fill^k)."""
        return (bits_set / self.bits) ** self.hashes if self.bits else 1.0

    def expected_losses(self, bits_set: int) -> float:
        """New URLs the filter has taken for seen so far, estimated from its fill alone.

        A false positive drops a new URL without a trace, so the count cannot be read off;
        it is the false-positive rate integrated over the insertions that made the fill.
        After x distinct URLs the fill is u = 1 - exp(-k x / m) and a new URL is lost with
        probability u^k; with dx = m du / (k (1 - u)) the integral to the fill U is
        (m / k) (-ln(1 - U) - sum_{j=1..k} U^j / j): the tail of ln's series past the k-th
        term, so it is ~U^(k+1) (m / (k (k + 1))) while the filter is young."""
        if not self.bits or bits_set <= 0:
            return 0.0
        fill = min(bits_set / self.bits, 1 - 1e-12)
        k = self.hashes
        tail = -math.log1p(-fill) - sum(fill ** j / j for j in range(1, k + 1))
        return max(0.0, self.bits / k * tail)


@dataclass(frozen=True, slots=True)
class FingerprintSpec:
    """The exact URL-seen test (``URL_SEEN=exact``), Mercator's: a fingerprint of each URL,
    not the URL. A 64-bit BLAKE2b of the URL is cut into a bucket (its top ``bucket_bits``)
    and a signed 32-bit member, kept in the bucket's Redis set: an intset, 4 bytes a URL.
    Two URLs are confused only when all ``bucket_bits + 32`` bits agree, so a crawl of n
    URLs loses about n^2 / 2^(bits + 1) of them: ~0.2 at 10^7 URLs a shard (47 bits)."""

    bucket_bits: int

    @classmethod
    def for_capacity(cls, expected: int) -> "FingerprintSpec":
        return cls(min(32, max(0, math.ceil(math.log2(max(1, expected) / BUCKET_URLS)))))

    @property
    def buckets(self) -> int:
        return 1 << self.bucket_bits

    @property
    def bits(self) -> int:
        return self.bucket_bits + 32

    def of(self, item: str) -> tuple[int, int]:
        """(bucket, member) of one URL."""
        value = int.from_bytes(blake2b(item.encode("utf-8", "surrogatepass"), digest_size=8,
                                       person=b"url-seen").digest(), "big")
        bucket = value >> (64 - self.bucket_bits) if self.bucket_bits else 0
        return bucket, ((value >> (32 - self.bucket_bits)) & 0xFFFFFFFF) - (1 << 31)

    def expected_losses(self, stored: int) -> float:
        """New URLs taken for seen because their fingerprint was already stored."""
        return math.ldexp(float(stored) ** 2, -(self.bits + 1))

