"""Counters a stage gathers for one batch: slash paths (``fetch/status/200``) -> increments,
added to the crawl's counters in one round trip (``runtime.control.Control.count``)."""
from __future__ import annotations

Counters = dict[str, int]


def bump(counters: Counters, name: str, n: int = 1) -> None:
    counters[name] = counters.get(name, 0) + n
