"""A held host's name: looked up before its turn without a thread, and kept with the host.

A session looks a host's name up when it takes the host, not when its turn comes: the
lookup is an entry of the process's resolver (``fetch/dns.py``), whose answer puts the
host in the session's heap. So a thousand hosts leased in the first second cost a
thousand pending queries, and a name that never answers costs its timer, not a thread.
The answer is written to the host's state with its next turn (``HostState.address``), so
whichever process leases the host next uses it until its TTL has passed: one lookup per
name per TTL for the whole crawl.

A name that does not resolve costs no request. NXDOMAIN (the resolver confirms it with a
second query) and NODATA end the host's URLs one by one in records of kind ``dns``, and
the verdict is kept for the answer's negative TTL (RFC 2308). A name no server answers
for (timeouts, SERVFAIL) is looked up again DNS_RETRIES times, DNS_RETRY_BASE_S x 2^n
later (the host waits in the frontier meanwhile); then its URLs get such records too, and
the name rests DNS_DEAD_S before it is looked up again. With the defaults a name that
never answers has its records 8 s after its first lookup: a crawl's end waits for no more
than that. A record of a dead name is no page of the budget: nothing was sent.
"""
from __future__ import annotations

import time
from dataclasses import replace

from crawler_tasks.fetch.dns import Answer, AnswerKind
from crawler_tasks.fetch.politeness import HostState
from crawler_tasks.frontier import Entry
from crawler_tasks.records import Action, ErrorKind
from crawler_tasks.settings import Settings
from crawler_tasks.stages.fetch.outcome import Turn, page_of
from crawler_tasks.stages.worker import Worker


def name_of(host: str) -> str:
    """The name in a frontier host key (``host[:port]``, IPv6 in brackets)."""
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host[1:]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def known(w: Worker, host: str, state: HostState, now: float) -> Answer | None:
    """The host's answer without a query: pinned (a literal, RESOLVE, /etc/hosts), kept in
    its state (handed to the resolver's cache for the turn's fetch), or cached by this
    process; None: it must be looked up."""
    name = name_of(host)
    pinned = w.fetcher.pinned(name)
    if pinned is not None:
        return Answer(name, AnswerKind.OK, (pinned,), 0.0, "", 0)
    if state.address_until > now:
        if state.dns_error:
            return Answer(name, AnswerKind.NXDOMAIN, (), state.address_until - now, state.dns_error, 0)
        if state.address:
            answer = Answer(name, AnswerKind.OK, (state.address,), state.address_until - now, "", 0)
            w.fetcher.resolver.remember(answer, state.address_until)
            return answer
    return w.fetcher.resolver.cached(name, now)


def with_answer(state: HostState, answer: Answer, now: float) -> HostState:
    """The host's state once a lookup answered OK (what its next turn writes)."""
    if answer.kind != AnswerKind.OK or not answer.queries:   # pinned or kept: nothing new
        return state
    return replace(state, address=answer.addresses[0], address_until=now + answer.ttl_s, dns_error="",
                   dns_failures=0)


def dns_turn(w: Worker, host: str, entry: Entry, state: HostState, answer: Answer) -> Turn:
    """The turn of a host whose name did not resolve: its head URL's record, or (a server
    did not answer, retries left) the host back to the frontier until the next lookup."""
    s, now = w.settings, time.time()
    if answer.kind == AnswerKind.TEMPORARY:
        failures = state.dns_failures + 1
        if failures <= s.DNS_RETRIES:
            later = replace(state, dns_failures=failures)
            return Turn(now + retry_in(s, failures), Action.KEEP, state=later, last=True)
        reason = f"{answer.reason} (gave up after {failures} lookups)"
        state = replace(state, address="", address_until=now + s.DNS_DEAD_S, dns_error=reason, dns_failures=0)
    elif answer.queries:   # a fresh NXDOMAIN or NODATA: kept for its negative TTL
        state = replace(state, address="", address_until=now + answer.ttl_s, dns_error=answer.reason,
                        dns_failures=0)
    page = page_of(entry, s.node_name, None, error_kind=ErrorKind.DNS,
                   error=f"{name_of(host)}: {state.dns_error or answer.reason}")
    return Turn(now, Action.DONE, page, state=state)


def retry_in(s: Settings, failures: int) -> float:
    """Seconds until the next lookup after ``failures`` in a row (1, 2, ...)."""
    return float(s.DNS_RETRY_BASE_S * 2 ** (failures - 1))

