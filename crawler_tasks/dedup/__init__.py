"""Deduplication: URL-seen Bloom filter arithmetic and content fingerprints."""
from crawler_tasks.dedup.fingerprint import content_fingerprint, normalize_text
from crawler_tasks.frontier.bloom import BloomSpec

__all__ = ["BloomSpec", "content_fingerprint", "normalize_text"]
