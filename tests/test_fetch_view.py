"""The fetch sessions' shared view of the crawl (stages/fetch/view.py) against a real
Redis: one read for the process's sessions, and leases within the page budget."""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

from crawler_tasks.frontier import Frontier
from crawler_tasks.runtime.control import Control
from crawler_tasks.stages.fetch.view import _CrawlView


def worker(settings, max_pages: int) -> SimpleNamespace:
    s = dataclasses.replace(settings, MAX_PAGES=max_pages, MIN_DELAY_S=1.0, SHARDS=2)
    return SimpleNamespace(settings=s, control=Control(s), frontier=Frontier(s))


def lease_hosts(w, rclient, n: int, start: int = 0) -> None:
    """``n`` hosts leased, spread over the shards (as lease.lua records them)."""
    for i in range(start, start + n):
        shard = i % w.settings.SHARDS
        rclient.zadd(w.frontier.keys(shard).lease, {f"h{i}.test": 1e12})


def test_one_read_gives_state_pages_and_hosts_leased_over_every_shard(settings, rclient):
    w = worker(settings, 1000)
    w.control.count({"fetch/pages": 7})
    lease_hosts(w, rclient, 5)
    view, leased = _CrawlView().read(w)
    assert (view.pages, view.inflight, leased) == (7, 0, 5)


def test_reservations_stay_within_the_budget_and_count_what_was_leased(settings, rclient):
    w = worker(settings, 300)
    w.control.count({"fetch/pages": 100})
    lease_hosts(w, rclient, 20)
    shared = _CrawlView()
    granted, spare, leased = shared.reserve(w, 256)
    assert (granted, spare, leased) == (180, 0, 200)
    assert shared.reserve(w, 10)[0] == 0            # the first reservation is not leased yet
    lease_hosts(w, rclient, 150, start=20)          # 150 of the 180 found a ready host
    shared.leased_now(180, 150)
    assert shared.reserve(w, 100)[0] == 30          # the rest is free again, no more
    shared.leased_now(30, 0)
    w.control.count({"fetch/pages": 25})            # pages fetched meanwhile: read afresh near the end
    assert shared.reserve(w, 100)[0] == 5


def test_far_from_the_budget_the_sessions_share_one_read(settings, rclient):
    w = worker(settings, 100_000)
    shared = _CrawlView()
    shared.reserve(w, 256)
    read_at = shared.at
    shared.leased_now(256, 256)
    granted, _, leased = shared.reserve(w, 256)     # another session, the same tick
    assert shared.at == read_at and granted == 256 and leased == 512
