"""Seeding: the operator's URLs into the frontier, through the same URL gate as every
discovered link (``stages.gate``), forced past the URL-seen test; the crawl is told it
has work (``Control.seeded``). Used by ``manage.py crawl`` and ``manage.py seed``."""
from __future__ import annotations

from typing import NamedTuple

from crawler_tasks.counters import Counters
from crawler_tasks.frontier import Frontier, Verdict
from crawler_tasks.frontier.reclaim import waiting_among
from crawler_tasks.ops.messages import quote
from crawler_tasks.runtime.control import Control
from crawler_tasks.settings import Settings
from crawler_tasks.stages.gate import UrlGate


class Seeded(NamedTuple):
    added: int
    rejected: list[str]   # a message per URL refused
    waiting: list[str]    # URLs already queued (or fetched and on their way to a record): left as they are


def seed_urls(settings: Settings, urls: list[str], frontier: Frontier | None = None) -> Seeded:
    """Pass seed URLs through the gate and force-add them (fetched again if fetched
    before: the operator asked), but for those still waiting in the frontier."""
    frontier = frontier or Frontier(settings)
    gate = UrlGate(settings)
    items, rejected = [], []
    for raw in urls:
        counters: Counters = {}
        item = gate.admit(raw, 0, counters, force=True)
        if item is None:
            reason = next(iter(counters), "filter/malformed").split("/", 1)[1]
            rejected.append(f"{quote(raw)}: " + ("not a crawlable http(s) URL" if reason == "malformed"
                                                 else f"filtered ({reason})"))
            continue
        items.append(item)
    waiting = waiting_among(frontier, {item.url for item in items})
    items = [item for item in items if item.url not in waiting]
    added = sum(v == Verdict.ENQUEUED for v in frontier.put_discovered(items)) if items else 0
    if added:   # after the add: the crawl starts (or a finish is cancelled) with its seeds queued
        Control(settings).seeded(added)
    return Seeded(added, rejected, sorted(waiting))
