"""Recrawl interval arithmetic (pure)."""
from __future__ import annotations

import dataclasses

from crawler_tasks.frontier.recrawl import History, next_visit, revisit_level
from crawler_tasks.settings import Settings

S = dataclasses.replace(Settings(), RECRAWL_INITIAL_S=100.0, RECRAWL_MIN_S=10.0, RECRAWL_MAX_S=1000.0)


def test_first_visit_then_changed_then_unchanged():
    h, changed = next_visit(S, History(), 200, "fp1", '"e1"', "Mon, 01 Jan 2026 00:00:00 GMT")
    assert (h.interval_s, changed, h.visits, h.etag) == (100.0, False, 1, '"e1"')
    h2, changed = next_visit(S, h, 200, "fp2", None, None)
    assert changed and h2.interval_s == 50.0 and h2.changes == 1
    h3, changed = next_visit(S, h2, 304, None, None, None)
    assert not changed and h3.interval_s == 75.0 and h3.fingerprint == "fp2"


def test_bounds_and_304_keeps_validators():
    h = History("e", "lm", "fp", 900.0, 5, 0)
    h2, _ = next_visit(S, h, 304, None, None, None)
    assert h2.interval_s == 1000.0 and h2.etag == "e" and h2.last_modified == "lm"
    fast = History("", "", "a", 12.0, 5, 4)
    h3, _ = next_visit(S, fast, 200, "b", None, None)
    assert h3.interval_s == 10.0


def test_roundtrip_and_damaged_history():
    h = History('"x"', "lm", "abcd", 123.0, 3, 1)
    assert History.decode(h.encode()) == h
    assert History.decode("garbage") == History()


def test_level_blends_change_rate_with_quality():
    changing = History("", "", "fp", 10.0, 5, 4)
    assert revisit_level(S, changing, indexable=True) == 0
    assert revisit_level(S, changing, indexable=False) == S.PRIORITY_LEVELS - 1  # fast-changing junk
    assert revisit_level(S, History("", "", "fp", 10.0, 5, 0), indexable=True) == 1
