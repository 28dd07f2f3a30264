"""Wake: start fetch sessions for shards with ready hosts.

A fetch session (stages/fetch/session.py) keeps itself fed once running: it paces its hosts at
their delays and leases more ready hosts of its shard as it has room. Wake only starts
sessions: up to MAX_FETCH_SESSIONS over the crawl, each shard its fair share of them, so
that no shard waits behind another's long sessions. The ``MAX_PAGES`` budget holds here
as in the sessions: pages fetched plus hosts leased never exceed it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from crawler_tasks.frontier import Frontier, Lease
from crawler_tasks.output.spool import new_batch_id
from crawler_tasks.runtime.control import Control, CrawlState
from crawler_tasks.runtime.livejob import live
from crawler_tasks.settings import Settings


@dataclass(frozen=True, slots=True)
class SessionStart:
    """A new fetch session: its shard, id and first leased hosts."""

    shard: int
    session_id: str
    leases: list[Lease]


# Fewest hosts a session is cut to when ready hosts are spread over free session slots.
MIN_SESSION_HOSTS = 4


def plan_wake(settings: Settings, frontier: Frontier, now: float | None = None) -> list[SessionStart]:
    """Lease ready hosts for new fetch sessions, within the session and page budgets."""
    settings = live(settings)   # the live job's page budget (manage.py job apply)
    now = time.time() if now is None else now
    control = Control(settings)
    view = control.view()
    if view.state != CrawlState.RUNNING or view.inflight > settings.MAX_INFLIGHT_BATCHES:
        return []
    running = control.sessions_by_shard()
    free = settings.MAX_FETCH_SESSIONS - sum(running.values())
    per_shard = -(-settings.MAX_FETCH_SESSIONS // settings.SHARDS)
    budget = None
    if settings.MAX_PAGES:
        budget = settings.MAX_PAGES - view.pages - frontier.leased_hosts()
        if budget <= 0:
            return []
    starts: list[SessionStart] = []
    shards = list(range(settings.SHARDS))
    start = int(now * 4) % len(shards)
    for shard in shards[start:] + shards[:start]:   # no shard always goes first
        slots = min(free - len(starts), per_shard - running.get(shard, 0))
        max_hosts = min(max(0, slots) * settings.FETCH_BATCH, settings.WAKE_MAX_HOSTS)
        if budget is not None:
            max_hosts = min(max_hosts, budget)
        leases = frontier.get_urls(shard, max_hosts, now=now)  # max_hosts 0 still refills
        if not leases:
            continue
        if budget is not None:
            budget -= len(leases)
        # as few sessions as the cap allows, but spread over the free slots while each
        # keeps MIN_SESSION_HOSTS: two sessions of 20 hosts went to the first -c 4 worker
        # up and left the other nodes idle (issue 28); of even size (not 32 + 1)
        n = max(-(-len(leases) // settings.FETCH_BATCH), min(max(1, slots), len(leases) // MIN_SESSION_HOSTS))
        size = -(-len(leases) // n)
        for i in range(0, len(leases), size):
            session = SessionStart(shard, new_batch_id(), leases[i:i + size])
            control.begin_session(shard, session.session_id, now + settings.batch_timeout_s)
            # its hosts go back at once should the process that takes it die before renewing them
            frontier.own_leases(shard, [lease.host for lease in session.leases],
                                control.session(shard, session.session_id))
            starts.append(session)
    return starts
