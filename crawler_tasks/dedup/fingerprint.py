"""Exact content fingerprints (pure).

The fingerprint is a 64-bit BLAKE2b hash of the page text after case folding and
whitespace collapsing, so pages differing only in markup or spacing collide on
purpose. It is written as 16 hex digits (JSON-safe, sortable).
"""
from __future__ import annotations

from hashlib import blake2b


def normalize_text(text: str) -> str:
    return " ".join(text.lower().split())


def fingerprint_collapsed(text: str) -> str:
    """content_fingerprint for text whose whitespace is already collapsed (parser
    output): skips the split/join, which costs ~1 ms on a 60 KB page."""
    return blake2b(text.lower().encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def content_fingerprint(text: str) -> str:
    data = normalize_text(text).encode("utf-8", "surrogatepass")
    return blake2b(data, digest_size=8).hexdigest()
