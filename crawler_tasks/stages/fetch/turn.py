"""A host turn: one request's worth of work for a held host, as a chain of steps.

a dead name (``names.py``: no request) -> refuse (a private target, before anything is sent) -> learned rules (a queued URL that
a rule learned since spells as a page already seen, or as a trap) -> robots.txt (which
may take the turn itself, ``robots_step.py``) -> request -> render (``render_step.py``).
Each step either ends the turn with a ``Turn`` or returns None to hand on to the next.
A turn runs on one of the exchange pool's threads; it never sleeps out a delay (the
session gives it the host only once its ``te`` has passed), except robots.txt redirect
hops and a rendering browser's requests, each paced at the host's delay.
"""
from __future__ import annotations

import random
import time
from urllib.parse import urlsplit

from crawler_tasks.counters import Counters
from crawler_tasks.dedup.rules import RuleDrop
from crawler_tasks.fetch.dns import Answer, AnswerKind
from crawler_tasks.fetch.netsafety import AddressRefused, ResolveError, literal_address
from crawler_tasks.fetch.politeness import HostState, request_gap
from crawler_tasks.frontier import Discovered, Entry, Lease, Verdict
from crawler_tasks.output.warc import warc_digest
from crawler_tasks.parse.html import is_html
from crawler_tasks.parse.pdf import is_pdf
from crawler_tasks.parse.sitemaps import MAX_SITEMAP_BYTES
from crawler_tasks.records import Action, EntryKind, ErrorKind
from crawler_tasks.stages.fetch.context import TurnContext
from crawler_tasks.stages.fetch.names import dns_turn, name_of
from crawler_tasks.stages.fetch.outcome import Turn, aborted, after_exchange, page_of, retry_action
from crawler_tasks.stages.fetch.render_step import maybe_render
from crawler_tasks.stages.fetch.robots_step import robots_step

_CLAIM_JITTER_S = 0.1   # hosts that lost an address to another process do not all come back at once


def take_turn(ctx: TurnContext, lease: Lease, state: HostState, not_before: float,
              answer: Answer | None = None) -> Turn:
    """The host's turn, due at ``not_before`` (epoch s: nothing reaches the host before);
    ``answer``: its name's lookup, which the session made before (``names.py``)."""
    w, s = ctx.w, ctx.w.settings
    entry = lease.entry
    if answer is not None and answer.kind != AnswerKind.OK:
        return dns_turn(w, lease.host, entry, state, answer)
    ip = None
    try:  # refuse private targets before anything, robots.txt included, is sent
        ip = w.fetcher.check_host(urlsplit(entry.url).hostname or "")
    except AddressRefused as exc:
        page = page_of(entry, s.node_name, None, error_kind=ErrorKind.REFUSED, error=exc.reason)
        return Turn(time.time(), Action.DONE, page)
    except ResolveError:
        pass  # the request below records the DNS failure and the retry policy applies
    if not (s.PER_IP_POLITENESS and ip and literal_address(name_of(lease.host)) is None):
        # an IP literal names its own server; names that share an address share its gap
        return _checked_turn(ctx, lease, state, entry, not_before)
    free_at = w.frontier.claim_ip(ip)   # the session's address gate served this process; now the others
    if free_at > 0:  # another host on this address was contacted too recently
        return Turn(free_at + random.uniform(0, _CLAIM_JITTER_S), Action.KEEP)
    if free_at < 0:  # another process's turn holds it: its end is unknown
        return Turn(time.time() + max(request_gap(w.policy_for(lease.host), state), _CLAIM_JITTER_S) * random.uniform(1, 2),
                    Action.KEEP)
    turn = Turn(time.time(), Action.KEEP, last=True)
    try:
        turn = _checked_turn(ctx, lease, state, entry, not_before)
        return turn
    finally:  # the address waits as long as the host just contacted
        w.frontier.release_ip(ip, turn.te)


def _checked_turn(ctx: TurnContext, lease: Lease, state: HostState, entry: Entry, not_before: float) -> Turn:
    for step in (_job_scope_step, _learned_rules_step, robots_step):
        turn = step(ctx, lease, state, entry, not_before)
        if turn is not None:
            return turn
    return _request_step(ctx, lease, state, entry, not_before)


def _job_scope_step(ctx: TurnContext, lease: Lease, state: HostState, entry: Entry,
                    not_before: float) -> Turn | None:
    """A queued URL that a job applied since it was queued (``manage.py job apply``) takes
    out of scope: its record says so, and it is not fetched. Seeds and redirect hops are
    the operator's and the server's: the gate let them in as such. None: go on."""
    w = ctx.w
    if not w.refresh() or entry.depth == 0 or entry.hops:
        return None
    reason = w.gate.filter.reason(entry.url, entry.depth, check_extension=entry.kind != EntryKind.SITEMAP)
    if reason is None:
        return None
    ctx.bump(f"filter/{reason}/queued", 1)
    page = page_of(entry, w.settings.node_name, None, error_kind=ErrorKind.FILTERED,
                   error=f"not fetched: out of the crawl's scope since job version {w.job_version} ({reason})")
    return Turn(time.time(), Action.DONE, page)


def _learned_rules_step(ctx: TurnContext, lease: Lease, state: HostState, entry: Entry,
                        not_before: float) -> Turn | None:
    """A queued URL no longer worth its request: since it was queued its host's rules
    learned that it spells a page already seen, or its URL shape became a trap (the gate
    applies both to new URLs; this catches those queued before). None: go on."""
    rules = ctx.w.rules
    if rules is None or entry.kind != EntryKind.PAGE or entry.hops or entry.depth == 0:
        return None
    counters: Counters = {}
    drops: list[RuleDrop] = []   # the rule and its evidence, for the record
    spelled = rules.judge(entry.url, lease.host, counters, entry.depth, drops)
    if spelled is None:
        ctx.bump("filter/trap_shape/queued", 1)
        why = (drops[-1].reason if drops else "its URL shape is a trap on this host") + " (learned after it was queued)"
    elif spelled == entry.url:
        return None
    else:   # the rule is confirmed: fetch the host's own spelling instead (if not seen yet)
        queued = ctx.w.frontier.put_discovered([Discovered(url=spelled, host=lease.host, depth=entry.depth)])
        ctx.bump("dust/dropped_queued", 1)
        why = (f"a variant of {spelled} by this host's learned URL rules"
               + (" (queued in its place)" if queued[0] == Verdict.ENQUEUED else ""))
    page = page_of(entry, ctx.w.settings.node_name, None, error_kind=ErrorKind.FILTERED, error=why)
    return Turn(time.time(), Action.DONE, page)


def _request_step(ctx: TurnContext, lease: Lease, state: HostState, entry: Entry, not_before: float) -> Turn:
    """The request itself (conditional when we hold validators), then its page."""
    w, s = ctx.w, ctx.w.settings
    url = entry.url
    policy = w.policy_for(lease.host)
    gap = request_gap(policy, state)
    headers = w.site_headers(lease.host)   # a job's per-site headers (Accept-Language ...)
    if entry.kind == EntryKind.SITEMAP:
        res = w.fetcher.fetch(url, extra_headers=headers or None, max_body_bytes=MAX_SITEMAP_BYTES,
                              max_decoded_bytes=MAX_SITEMAP_BYTES, cancel=ctx.halt, gap_s=gap, not_before=not_before)
    else:
        validators = w.recrawler.conditional_headers(lease.shard, [url])[0] if s.CONTINUOUS else None
        res = w.fetcher.fetch(url, extra_headers={**headers, **(validators or {})} or None, cancel=ctx.halt,
                              gap_s=gap, not_before=not_before)
    if res.error_kind == ErrorKind.ABORTED:
        return aborted(policy, state)
    action = retry_action(res, entry.tries, s.MAX_RETRIES)
    turn = after_exchange(policy, state, res, action)
    if res.status is not None:   # archived once the turn is finished
        turn.exchange, turn.digest = res, warc_digest(res.body)
    if action == Action.RETRY:
        return turn
    turn.page = page_of(entry, s.node_name, res)
    ok = res.status is not None and 200 <= res.status < 300
    if ok and (entry.kind == EntryKind.SITEMAP or is_html(res.content_type, res.content[:512])
               or is_pdf(res.content_type, res.content[:1024])):
        turn.body = res.content
        if entry.kind == EntryKind.PAGE:
            maybe_render(ctx, lease, state, res, turn)
    return turn
