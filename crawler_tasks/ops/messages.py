"""Bad input as a person can read it: quoted short, counted, never echoed whole.

A 10 MB seed line used to be printed in full (10.5 MB on stderr), and a binary seeds
file as 5,252 lines of mojibake. Whatever the input, a message quotes at most
``QUOTE_CHARS`` characters of it with its full length, and a list of complaints names
the first ``LISTED`` and counts the rest.
"""
from __future__ import annotations

QUOTE_CHARS = 200
LISTED = 10


def quote(text: str, limit: int = QUOTE_CHARS) -> str:
    """``'http://a.org/...'`` whole when short, else its first ``limit`` characters and
    its length: ``'http://aaaa'... (10,485,760 characters)``."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text):,} characters)"


def listed(lines: list[str], limit: int = LISTED) -> list[str]:
    """The first ``limit`` lines, then one that counts the others."""
    if len(lines) <= limit:
        return lines
    return lines[:limit] + [f"... and {len(lines) - limit:,} more"]
