"""Fetch stage: the head URL of each leased host, one connection per host.

For each lease: refuse private targets before anything is sent; check robots.txt (the
fetch of robots.txt itself uses the host's turn); download with the fetcher's limits;
write the exchange to WARC; compute the host's next contact ``te`` from the exchange
(politeness rules) and give the host back to the frontier. Bodies to parse go to the
batch's spool file; the pages (``FetchedPage``) go on to the parse stage.
"""
from __future__ import annotations

import random
import time
from concurrent.futures import as_completed
from urllib.parse import urlsplit

from crawler_tasks.fetch.http import FetchResult
from crawler_tasks.fetch.netsafety import AddressRefused, ResolveError
from crawler_tasks.fetch.politeness import FetchOutcome, HostState, crawl_delay_verdict, next_contact
from crawler_tasks.frontier import Entry, Lease
from crawler_tasks.ops.metrics import record_latencies
from crawler_tasks.output.spool import write_spool
from crawler_tasks.output.warc import payload_digest, warc_date
from crawler_tasks.parse.html import is_html
from crawler_tasks.parse.sitemaps import MAX_SITEMAP_BYTES
from crawler_tasks.records import NETWORK_ERRORS, RETRYABLE_ERRORS, Action, EntryKind, ErrorKind, FetchedPage
from crawler_tasks.robots.cache import RULES, UNREACHABLE, Check
from crawler_tasks.stages.worker import Counters, Worker, bump, log_once

# Response headers worth keeping in records (the parser and indexers use them).
KEEP_HEADERS = ("x-robots-tag", "link", "content-language", "last-modified", "etag")
MAX_SITEMAPS_PER_HOST = 20
PROBE_MARK = "soft404-probe"
# no request reached the host: its previous te (<= now) still holds
_NO_REQUEST = frozenset({ErrorKind.REFUSED, ErrorKind.BAD_URL, ErrorKind.URL_TOO_LONG})


def fetch_stage(w: Worker, leases: list[Lease], batch_id: str) -> list[FetchedPage]:
    """Fetch every leased host's head URL concurrently; returns the pages with an outcome
    (a lease spent on robots.txt or put back for later has none)."""
    renewed = [lease for lease in w.frontier.renew(leases) if lease is not None]
    counters: Counters = {}
    if len(renewed) < len(leases):
        bump(counters, "frontier/lease_lost", len(leases) - len(renewed))
    pages: list[FetchedPage] = []
    bodies: list[bytes] = []
    with_body: list[FetchedPage] = []
    if renewed:
        states = {host: _host_state(raw) for host, raw in w.frontier.host_states(renewed).items()}
        validators = _load_validators(w, renewed)
        futures = {w.pool.submit(_fetch_one, w, lease, states[lease.host], validators.get(lease.raw)): lease
                   for lease in renewed}
        for future in as_completed(futures):
            lease = futures[future]
            try:
                outcome = future.result()
            except Exception as exc:  # a bug must not cost the batch or the URL
                log_once(f"fetch/{type(exc).__name__}", "unexpected error fetching %s", lease.entry.url)
                bump(counters, f"error/{type(exc).__name__}")
                w.frontier.complete(lease, te=time.time() + w.settings.MIN_DELAY_S, action=Action.KEEP)
                continue
            if outcome is not None:
                page, body = outcome
                if body:
                    with_body.append(page)
                    bodies.append(body)
                pages.append(page)
    bump(counters, "fetch/batches")
    latencies = [p.fetch_ms / 1000 for p in pages if p.fetch_ms is not None]
    if latencies:
        record_latencies(w.control.client, w.settings.KEY_PREFIX, latencies)
    w.warc.flush()
    if bodies:
        for page, ref in zip(with_body, write_spool(w.settings, batch_id, bodies)):
            page.body = ref
    for page in pages:
        _count_page(page, counters)
    w.count(counters)
    return pages


def _count_page(page: FetchedPage, counters: Counters) -> None:
    if page.status is not None or page.error_kind in NETWORK_ERRORS:
        bump(counters, "fetch/pages")  # a request went out
    else:
        bump(counters, "fetch/skipped")
    if page.status is not None:
        bump(counters, f"fetch/status/{page.status}")
        bump(counters, "fetch/bytes", page.bytes or 0)
    if page.error_kind:
        bump(counters, f"fetch/error/{page.error_kind}")


def _host_state(raw: dict[str, str]) -> HostState:
    try:
        return HostState.from_fields(raw) if raw else HostState()
    except ValueError:  # a corrupt hash must not stop the host forever
        return HostState()


def _load_validators(w: Worker, leases: list[Lease]) -> dict[str, dict[str, str]]:
    """Conditional-GET headers (continuous mode) for the leased URLs, by lease entry."""
    if not w.settings.CONTINUOUS:
        return {}
    out: dict[str, dict[str, str]] = {}
    by_shard: dict[int, list[Lease]] = {}
    for lease in leases:
        by_shard.setdefault(lease.shard, []).append(lease)
    for shard, group in by_shard.items():
        headers = w.recrawler.conditional_headers(shard, [lease.entry.url for lease in group])
        out.update({lease.raw: h for lease, h in zip(group, headers) if h})
    return out


def _release(w: Worker, lease: Lease, state: HostState, res: FetchResult | None, action: Action) -> None:
    """Compute the host's next contact from this exchange and give the host back."""
    if res is None or (res.status is None and res.error_kind in _NO_REQUEST):
        w.frontier.complete(lease, te=time.time(), action=action)
        return
    failed = res.status is None or res.status >= 500 or res.status == 429
    outcome = FetchOutcome(end=res.ended, duration_s=res.duration_s, status=res.status,
                           retry_after=res.header("retry-after"), failed=failed)
    te, new_state, _reason = next_contact(w.policy, state, outcome)
    w.frontier.complete(lease, te=te, action=action, host_state=new_state.to_fields())


def _fetch_one(w: Worker, lease: Lease, state: HostState,
               validators: dict[str, str] | None = None) -> tuple[FetchedPage, bytes] | None:
    """Fetch one leased host's head URL: (page, body to parse or b"") or None when the
    lease was used for robots.txt or the URL goes back to the queue."""
    s = w.settings
    entry = lease.entry
    ip = None
    try:  # refuse private targets before anything, robots.txt included, is sent
        ip = w.fetcher.check_host(urlsplit(entry.url).hostname or "")
    except AddressRefused as exc:
        _release(w, lease, state, None, Action.DONE)
        return _page(entry, None, error_kind=ErrorKind.REFUSED, error=exc.reason), b""
    except ResolveError:
        pass  # the fetch below records the DNS failure and the retry policy applies
    if s.PER_IP_POLITENESS and ip:
        free_at = w.frontier.claim_ip(ip)
        if free_at:  # another host on this address was contacted too recently
            w.frontier.complete(lease, te=free_at, action=Action.KEEP)
            return None
        try:
            return _fetch_checked(w, lease, state, entry, validators)
        finally:  # the address waits as long as the host just contacted
            w.frontier.release_ip(ip, w.frontier.host_te(lease.shard, lease.host) or time.time())
    return _fetch_checked(w, lease, state, entry, validators)


def _fetch_checked(w: Worker, lease: Lease, state: HostState, entry: Entry,
                   validators: dict[str, str] | None) -> tuple[FetchedPage, bytes] | None:
    s = w.settings
    url = entry.url
    if s.OBEY_ROBOTS:
        answer = w.robots.check(w.frontier, w.fetcher, url, s.robots_agent)
        if answer.exchange is not None:  # this turn went to robots.txt
            res = answer.exchange
            w.count({f"robots/{answer.entry.kind}": 1, **({f"robots/status/{res.status}": 1} if res.status else {})})
            if answer.entry.kind == RULES:
                state.crawl_delay_s, skip = crawl_delay_verdict(w.policy, answer.entry.rules.crawl_delay(s.robots_agent))
                if skip:
                    w.frontier.complete(lease, te=time.time() + w.policy.park_s, action=Action.KEEP)
                    return None
            if answer.entry.kind != UNREACHABLE:
                sitemaps = answer.entry.rules.sitemaps if answer.entry.kind == RULES else []
                _first_contact(w, lease, urlsplit(url).scheme, sitemaps)
            _release(w, lease, state, res, Action.KEEP)
            return None
        if answer.check == Check.UNREACHABLE:
            # disallow all for now; the URL waits for the next robots.txt attempt
            w.frontier.complete(lease, te=max(answer.entry.expires, time.time() + s.MIN_DELAY_S), action=Action.KEEP)
            return None
        if answer.check == Check.DISALLOWED:
            _release(w, lease, state, None, Action.DONE)
            return _page(entry, None, error_kind=ErrorKind.ROBOTS, error="disallowed by robots.txt"), b""
    if entry.kind == EntryKind.SITEMAP:
        res = w.fetcher.fetch(url, max_body_bytes=MAX_SITEMAP_BYTES, max_decoded_bytes=MAX_SITEMAP_BYTES)
    else:
        res = w.fetcher.fetch(url, extra_headers=validators)
    retryable = res.error_kind in RETRYABLE_ERRORS or (res.status is not None and (res.status >= 500 or res.status == 429))
    action = Action.RETRY if retryable and entry.tries < s.MAX_RETRIES else Action.DONE
    record_id = None
    if res.status is not None:
        try:
            record_id = w.warc.write_exchange(res, _earlier_capture(w, res))
        except (ValueError, UnicodeError):  # warcio on odd headers: record the URL, keep going
            log_once("warc", "cannot write WARC record for %s", url)
    _release(w, lease, state, res, action)
    if action == Action.RETRY:
        return None
    page = _page(entry, res)
    page.warc_id = record_id
    ok = res.status is not None and 200 <= res.status < 300
    parseable = ok and (entry.kind == EntryKind.SITEMAP or is_html(res.content_type, res.content[:512]))
    return page, res.content if parseable else b""


def _earlier_capture(w: Worker, res: FetchResult) -> tuple[str, str] | None:
    if not w.settings.WARC_DEDUP_REVISITS or res.status != 200 or not res.body or res.truncated:
        return None
    return w.content.earlier_capture(res.url, payload_digest(res.body), warc_date(res.started))


def _first_contact(w: Worker, lease: Lease, scheme: str, sitemaps: list[str]) -> None:
    """Right after a host's robots.txt: queue its sitemaps, and put a soft-404 probe
    (a random path) at the head of its queue so it is the host's first page fetch."""
    s = w.settings
    base = f"{scheme}://{lease.host}"
    items = []
    if s.USE_SITEMAPS:
        urls = list(sitemaps) + ([base + "/sitemap.xml"] if s.PROBE_SITEMAP_XML else [])
        counters: Counters = {}
        for raw in urls[:MAX_SITEMAPS_PER_HOST]:
            item = w.gate.admit(raw, 0, counters, base=base + "/", check_depth=False, priority=0,
                                kind=EntryKind.SITEMAP)
            if item is not None:
                items.append(item)
        w.count(counters)
    if items:
        w.frontier.put_discovered(items)
    if s.SOFT404_PROBE:
        probe = Entry(f"{base}/{random.getrandbits(64):016x}-{PROBE_MARK}.html", depth=0, kind=EntryKind.PROBE)
        w.frontier.add_head(lease.shard, lease.host, probe)


def _page(entry: Entry, res: FetchResult | None, *, error_kind: str | None = None,
          error: str | None = None) -> FetchedPage:
    page = FetchedPage(url=entry.url, depth=entry.depth, hops=entry.hops, kind=entry.kind,
                       error_kind=error_kind, error=error)
    if res is None:
        page.fetched_at = warc_date(time.time())
        return page
    page.final_url, page.status, page.content_type = res.url, res.status, res.content_type
    page.bytes, page.fetched_at = len(res.content), warc_date(res.started)
    page.fetch_ms, page.ip, page.truncated = round(res.duration_s * 1000, 1), res.ip, res.truncated or False
    page.error_kind, page.error = res.error_kind, res.error
    page.headers = {name: value for name, value in ((n, res.header(n)) for n in KEEP_HEADERS) if value is not None}
    page.location = res.location
    return page
