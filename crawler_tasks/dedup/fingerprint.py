"""Exact content fingerprints (pure).

The fingerprint is a 64-bit BLAKE2b hash of the page text after case folding and
whitespace collapsing, so pages differing only in markup or spacing collide on
purpose. It is written as 16 hex digits (JSON-safe, sortable).
"""
from __future__ import annotations

from hashlib import blake2b


def normalize_text(text: str) -> str:
    return " ".join(text.lower().split())


def content_fingerprint(text: str) -> str:
    data = normalize_text(text).encode("utf-8", "surrogatepass")
    return blake2b(data, digest_size=8).hexdigest()
