"""robots.txt in a host turn, and what follows a host's first contact.

robots.txt is checked just before each fetch (RFC 9309); when the cached copy is
missing or stale, fetching it is the turn's request (each redirect hop paced at the
host's delay). ``first_contact`` runs right after a host's robots.txt was read.
"""
from __future__ import annotations

import time
from urllib.parse import urlsplit

from crawler_tasks.counters import Counters
from crawler_tasks.fetch.http import FetchResult
from crawler_tasks.fetch.politeness import FetchOutcome, HostState, crawl_delay_verdict, next_contact
from crawler_tasks.frontier import Entry, Lease
from crawler_tasks.output.warc import warc_digest
from crawler_tasks.records import Action, EntryKind, ErrorKind, FetchedPage
from crawler_tasks.robots.cache import RULES, UNREACHABLE, Check
from crawler_tasks.stages.fetch.context import TurnContext
from crawler_tasks.stages.fetch.outcome import Turn, aborted, after_exchange, page_of
from crawler_tasks.stages.worker import Worker

MAX_SITEMAPS_PER_HOST = 20


def robots_step(ctx: TurnContext, lease: Lease, state: HostState, entry: Entry, not_before: float) -> Turn | None:
    """The turn's robots.txt: it ends the turn when it fetched robots.txt (that was the
    turn's request), when the URL is disallowed, or while robots.txt is unreachable
    (disallow all for now: the URL waits for the next attempt). None: allowed, go on."""
    w, s = ctx.w, ctx.w.settings
    if not w.obeys_robots(lease.host):
        return None
    policy = w.policy_for(lease.host)
    answer = w.robots.check(w.frontier, w.fetcher, entry.url, w.robots_agent, cancel=ctx.halt,
                            not_before=not_before,
                            before_hop=lambda prev: _pace_hop(ctx, lease.host, state, prev))
    if answer.exchange is not None:  # this turn went to robots.txt
        res = answer.exchange
        if res.error_kind == ErrorKind.ABORTED:
            return aborted(policy, state)
        ctx.bump(f"robots/{answer.entry.kind}", 1)
        if res.status:
            ctx.bump(f"robots/status/{res.status}", 1)
        if answer.entry.kind == RULES:
            state.crawl_delay_s, skip = crawl_delay_verdict(policy, answer.entry.rules.crawl_delay(w.robots_agent))
            if skip:
                return Turn(time.time() + policy.park_s, Action.KEEP, last=True)
        turn = after_exchange(policy, state, res, Action.KEEP)
        if res.status is not None:   # robots.txt is archived like any exchange
            turn.exchange, turn.digest = res, warc_digest(res.body)
        if answer.entry.kind == UNREACHABLE and answer.entry.error_kind == ErrorKind.TLS:
            turn.action, turn.page = Action.DONE, _tls_failed(ctx, entry, answer.entry.error)
        elif answer.entry.kind == UNREACHABLE:  # the host's URLs wait for the next attempt
            turn.te, turn.last = max(turn.te, answer.entry.expires), True
        else:
            sitemaps = answer.entry.rules.sitemaps if answer.entry.kind == RULES else []
            first_contact(w, lease, urlsplit(entry.url).scheme, sitemaps)
        return turn
    if answer.check == Check.UNREACHABLE and answer.entry.error_kind == ErrorKind.TLS:
        return Turn(time.time(), Action.DONE, _tls_failed(ctx, entry, answer.entry.error))
    if answer.check == Check.UNREACHABLE:
        return Turn(max(answer.entry.expires, time.time() + s.MIN_DELAY_S), Action.KEEP, last=True)
    if answer.check == Check.DISALLOWED:
        return Turn(time.time(), Action.DONE,
                    page_of(entry, s.node_name, None, error_kind=ErrorKind.ROBOTS, error="disallowed by robots.txt"))
    return None


def _tls_failed(ctx: TurnContext, entry: Entry, error: str | None) -> FetchedPage:
    """The record of a URL whose host's robots.txt failed TLS (an expired certificate, one
    for another name, an unknown CA): every URL of the host would fail the same way, so
    each gets the reason at once instead of waiting for robots.txt as after a 5xx."""
    return page_of(entry, ctx.w.settings.node_name, None, error_kind=ErrorKind.TLS,
                   error=f"{error or 'TLS failure'} (robots.txt)")


def _pace_hop(ctx: TurnContext, host: str, state: HostState, previous: FetchResult) -> None:
    """Before a robots.txt redirect hop: the previous hop into WARC, the host's delay
    after it, and a fresh lease (a chain of slow hops must not outlive it)."""
    if previous.status is not None:
        ctx.w.warc.write_exchange(previous)
    te, _, _ = next_contact(ctx.w.policy_for(host), state, FetchOutcome(
        end=previous.ended, duration_s=previous.duration_s, status=previous.status, retry_after=None,
        failed=False))
    ctx.stop.wait(max(0.0, min(te - time.time(), ctx.w.settings.HOLD_HORIZON_S)))
    ctx.renew(host)


def first_contact(w: Worker, lease: Lease, scheme: str, sitemaps: list[str]) -> None:
    """Right after a host's robots.txt: queue the sitemaps it names. ``/sitemap.xml`` is
    guessed only when it names none and the host is worth it: at least
    ``SITEMAP_GUESS_MIN_URLS`` of its URLs queued already (a host with a few pages gains
    nothing from a sitemap but a 404 against its politeness budget; sites with a
    sitemap mostly name it in robots.txt, as the sitemaps protocol advises)."""
    s = w.settings
    if not s.USE_SITEMAPS:
        return
    base = f"{scheme}://{lease.host}"
    urls = list(sitemaps)
    if not urls and s.PROBE_SITEMAP_XML and w.frontier.enqueued_for(lease.host) >= s.SITEMAP_GUESS_MIN_URLS:
        urls.append(base + "/sitemap.xml")
    counters: Counters = {}
    items = []
    for raw in urls[:MAX_SITEMAPS_PER_HOST]:
        item = w.gate.admit(raw, 0, counters, base=base + "/", check_depth=False, priority=0, kind=EntryKind.SITEMAP)
        if item is not None:
            items.append(item)
    w.count(counters)
    if items:
        w.frontier.put_discovered(items)
