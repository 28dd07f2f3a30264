"""A running crawl's job, changed live (``manage.py job apply``).

What can change while a crawl runs is what its workers read afresh for each URL: the
scope (domains, include/exclude patterns, depth, extensions), the per-site rules and the
job's delay, and the limits maintenance and wake check (pages, seconds). Everything
else (shards, text mode, the frontier's budgets, ...) is fixed by the processes that
started with it, and ``job apply`` refuses a change to it with the reason.

The applied values live in one global hash (``<prefix>:{g}:job``: ``version`` and
``values``, JSON); each process reads it at most every POLL_S seconds and overlays it on
the settings it started with, so a change reaches every process of every node within
seconds, and a restarted worker starts from the last applied job.
"""
from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

from crawler_tasks.connection import global_client
from crawler_tasks.keys import GlobalKeys
from crawler_tasks.settings import Settings

LIVE = ("ALLOWED_DOMAINS", "BLOCKED_DOMAINS", "INCLUDE_PATTERNS", "EXCLUDE_PATTERNS", "MAX_DEPTH",
        "SKIP_EXTENSIONS", "SITES", "MIN_DELAY_S", "MAX_PAGES", "MAX_SECONDS")
POLL_S = 2.0


def _key(settings: Settings) -> str:
    return GlobalKeys(settings.KEY_PREFIX).job


def publish(settings: Settings, values: dict[str, Any]) -> int:
    """Apply live values on top of those applied before; returns the new version. The
    read and the write are one optimistic transaction: two applies at once both land."""
    key = _key(settings)

    def merge(pipe: Any) -> None:
        old = pipe.hget(key, "values")
        merged = {**(json.loads(old) if isinstance(old, str) else {}), **values}
        pipe.multi()
        pipe.hset(key, "values", json.dumps(merged))
        pipe.hincrby(key, "version", 1)

    replies: list[Any] = global_client(settings).transaction(merge, key)  # type: ignore[assignment]
    return int(replies[1])


def read(settings: Settings) -> tuple[int, dict[str, Any]]:
    """(version, values) of the applied job; (0, {}) before any."""
    version, values = global_client(settings).hmget(_key(settings), ["version", "values"])
    return int(version or 0), (json.loads(values) if isinstance(values, str) else {})


def overlay(settings: Settings, values: dict[str, Any]) -> Settings:
    """The settings with the live values in place (lists back to tuples)."""
    known: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items() if k in LIVE}
    return dataclasses.replace(settings, **known) if known else settings


class LiveSettings:
    """One process's view of the live job: the settings it started with, the applied
    values overlaid, read at most every POLL_S (a read that fails keeps the last)."""

    def __init__(self, base: Settings) -> None:
        self.base = base
        self.settings = base
        self.version = 0
        self._next = 0.0

    def get(self) -> tuple[Settings, int]:
        now = time.monotonic()
        if now >= self._next:
            self._next = now + POLL_S
            try:
                version, values = read(self.base)
            except Exception:  # noqa: BLE001 - Redis away: the last job holds until it is back
                return self.settings, self.version
            if version != self.version:
                self.settings, self.version = overlay(self.base, values), version
        return self.settings, self.version


_views: dict[str, LiveSettings] = {}


def live(settings: Settings) -> Settings:
    """``settings`` with the applied job's live values (one view per crawl prefix)."""
    view = _views.get(settings.KEY_PREFIX)
    if view is None or view.base is not settings and view.base != settings:
        view = _views[settings.KEY_PREFIX] = LiveSettings(settings)
    return view.get()[0]
