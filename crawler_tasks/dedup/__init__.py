"""Deduplication: URL-seen Bloom filter arithmetic and content fingerprints."""
from .bloom import BloomSpec
from .fingerprint import content_fingerprint, normalize_text

__all__ = ["BloomSpec", "content_fingerprint", "normalize_text"]
