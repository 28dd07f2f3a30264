"""The outcome of a host turn: what was decided, the page record it makes, and the one
failure rule (what counts as a failed exchange for politeness, what is worth a retry)
with its counters.

A turn's steps (``turn.py``) each end in a ``Turn`` or hand on to the next step; the
session finishes the turn in the frontier and hands its page on. Nothing here talks to
Redis.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from crawler_tasks.counters import Counters, bump
from crawler_tasks.fetch.http import FetchResult
from crawler_tasks.fetch.politeness import FetchOutcome, HostState, PolitenessPolicy, next_contact, request_gap
from crawler_tasks.frontier import Entry
from crawler_tasks.output.warc import warc_date
from crawler_tasks.records import NETWORK_ERRORS, RETRYABLE_ERRORS, Action, ErrorKind, FetchedPage

# Response headers worth keeping in records (the parser and indexers use them).
KEEP_HEADERS = ("x-robots-tag", "link", "content-language", "last-modified", "etag")
# no request reached the host: the te its turn was due at still holds
_NO_REQUEST = frozenset({ErrorKind.REFUSED, ErrorKind.BAD_URL, ErrorKind.URL_TOO_LONG})


@dataclass(slots=True)
class Turn:
    """What one turn of a host decided: its next contact and what to do with its head URL."""

    te: float
    action: Action
    page: FetchedPage | None = None
    body: bytes = b""
    state: HostState | None = None   # the host's new politeness state (None: unchanged)
    last: bool = False               # give the host back whatever its next te
    exchange: FetchResult | None = None   # stored in WARC once the turn is finished
    digest: str = ""                      # the exchange's payload digest
    conversion: tuple[bytes, str] | None = None   # rendered DOM and its date: a conversion record


def failed(res: FetchResult) -> bool:
    """The host did not answer well: no answer, a 5xx or a 429. Politeness backs off
    after it; a retry is worth it when the cause may pass (``retry_action``)."""
    return res.status is None or res.status >= 500 or res.status == 429


def retry_action(res: FetchResult, tries: int, max_retries: int) -> Action:
    """RETRY a failure that may pass (a network error of a retryable kind, a 5xx, a 429)
    while the URL has tries left; DONE otherwise."""
    retryable = res.error_kind in RETRYABLE_ERRORS or (res.status is not None and failed(res))
    return Action.RETRY if retryable and tries < max_retries else Action.DONE


def after_exchange(policy: PolitenessPolicy, state: HostState, res: FetchResult, action: Action) -> Turn:
    """The host's next contact after this exchange (politeness rules)."""
    if res.status is None and res.error_kind in _NO_REQUEST:
        return Turn(time.time(), action)
    outcome = FetchOutcome(end=res.ended, duration_s=res.duration_s, status=res.status,
                           retry_after=res.header("retry-after"), failed=failed(res))
    te, new_state, _reason = next_contact(policy, state, outcome)
    return Turn(te, action, state=new_state)


def aborted(policy: PolitenessPolicy, state: HostState) -> Turn:
    """The crawl stopped during this turn's exchange: no record, the URL stays at the
    head of its host's queue (no try spent), the host waits its delay as after any request."""
    return Turn(time.time() + request_gap(policy, state), Action.KEEP, last=True)


def requested(page: FetchedPage) -> bool:
    """Whether a request for the page went out (else it was refused or skipped before)."""
    return page.status is not None or page.error_kind in NETWORK_ERRORS


def count_page(page: FetchedPage, counters: Counters, *, pages_counted: bool = False) -> None:
    """A group's counters; ``fetch/pages`` was counted per page already with a page budget."""
    if requested(page):
        if not pages_counted:
            bump(counters, "fetch/pages")
    else:
        bump(counters, "fetch/skipped")
    if page.status is not None:
        bump(counters, f"fetch/status/{page.status}")
        bump(counters, "fetch/bytes", page.bytes or 0)
    if page.error_kind:
        bump(counters, f"fetch/error/{page.error_kind}")


def page_of(entry: Entry, node: str, res: FetchResult | None, *, error_kind: ErrorKind | None = None,
            error: str | None = None) -> FetchedPage:
    """The turn's record: the exchange's answer, or why there was none; ``node`` fetched it."""
    page = FetchedPage(url=entry.url, depth=entry.depth, hops=entry.hops, kind=entry.kind,
                       error_kind=error_kind, error=error, node=node)
    if res is None:
        page.fetched_at = warc_date(time.time())
        return page
    page.final_url, page.status, page.content_type = res.url, res.status, res.content_type
    page.bytes, page.fetched_at = len(res.content), warc_date(res.started)
    page.fetch_ms, page.ip, page.truncated = round(res.duration_s * 1000, 1), res.ip, res.truncated or False
    page.error_kind, page.error = res.error_kind, res.error
    page.headers = {name: value for name, value in ((n, res.header(n)) for n in KEEP_HEADERS) if value is not None}
    return page
