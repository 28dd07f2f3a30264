"""Bad input quoted short and counted (ops/messages.py)."""
from __future__ import annotations

from crawler_tasks.ops.messages import listed, quote


def test_quote_cuts_long_input_and_gives_its_length():
    assert quote("http://a.org/") == "'http://a.org/'"
    line = "x" * 10 * 2**20
    quoted = quote(line)
    assert len(quoted) < 260 and quoted.endswith("... (10,485,760 characters)")
    assert quote("\x00\x1b[2J" * 300).startswith("'\\x00\\x1b[2J")   # control characters escaped, never raw


def test_listed_names_the_first_and_counts_the_rest():
    assert listed(["a", "b"]) == ["a", "b"]
    lines = [str(i) for i in range(5252)]
    assert listed(lines) == [str(i) for i in range(10)] + ["... and 5,242 more"]
