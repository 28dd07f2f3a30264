"""Fetch stage: a fetch session holds leased hosts of one shard and paces each at its delay.

One fetch task is one session. Each held host has a thread that takes turns: refuse a
private target before anything is sent; check robots.txt (fetching robots.txt itself uses
the host's turn, and each of its redirect hops waits out the host's delay); download
within the fetcher's limits; compute the host's next contact ``te`` (politeness rules)
and finish the turn in the frontier (on the same round trip as the payload's revisit
test and the page budget's count), which either gives the host back or, when its next
turn is near (``HOLD_HORIZON_S``), keeps it leased to this session so the thread sleeps
until ``te`` and goes on: a host's pace is its delay, not the Beat cadence; then write
the exchange to WARC. The frontier's lease (renewed while work runs) stays the authority: one
connection per host, a lost lease ends the host's thread before any further request.

Finished pages never wait for the others: every ``PARSE_GROUP_S`` (or
``PARSE_GROUP_PAGES`` pages) the session writes their bodies to a spool file and hands
the group to parse. A session with room leases more ready hosts of its shard itself;
it ends after ``SESSION_MAX_S``, when the crawl stops, or when it has nothing to do.
"""
from __future__ import annotations

import logging
import queue
import random
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from crawler_tasks.counters import Counters, bump
from crawler_tasks.fetch.http import Cancel, FetchResult
from crawler_tasks.fetch.netsafety import AddressRefused, ResolveError
from crawler_tasks.fetch.politeness import FetchOutcome, HostState, crawl_delay_verdict, next_contact, request_gap
from crawler_tasks.frontier import ENQUEUED, Completion, Discovered, Entry, Lease
from crawler_tasks.ops.control import Control, ControlView, CrawlState
from crawler_tasks.ops.metrics import record_latencies
from crawler_tasks.output.spool import new_batch_id, write_spool
from crawler_tasks.output.warc import warc_date, warc_digest
from crawler_tasks.parse.html import is_html
from crawler_tasks.parse.sitemaps import MAX_SITEMAP_BYTES
from crawler_tasks.records import NETWORK_ERRORS, RETRYABLE_ERRORS, Action, EntryKind, ErrorKind, FetchedPage
from crawler_tasks.robots.cache import RULES, UNREACHABLE, Check
from crawler_tasks.stages.worker import Worker, log_once

log = logging.getLogger(__name__)

# Response headers worth keeping in records (the parser and indexers use them).
KEEP_HEADERS = ("x-robots-tag", "link", "content-language", "last-modified", "etag")
MAX_SITEMAPS_PER_HOST = 20
PROBE_MARK = "soft404-probe"
# no request reached the host: the te its thread was woken for still holds
_NO_REQUEST = frozenset({ErrorKind.REFUSED, ErrorKind.BAD_URL, ErrorKind.URL_TOO_LONG})
_TICK_S = 0.1             # the session's loop: results, groups, control checks
_EARLY_S = 0.002          # a held host's thread wakes this much before te and prepares its
                          # turn (~0.4 ms) while the request itself waits for te (fetch's not_before)
_SLACK_S = 0.001          # and goes this much after te: te runs from our read of the answer's last
                          # byte, which a busy server may stamp as its end a little later (a
                          # threaded Python server measured gaps up to 3 ms short of the delay)
_CONTROL_EVERY_S = 0.25   # crawl state, page budget, room for more hosts
_DRY_POLL_S = 0.5         # after a host ran dry, ready hosts are looked for every tick this long,
_DRY_TICK_S = 0.02        # on a shorter tick: the host's links come back from parse in ~20 ms,
                          # and the end of a crawl is seen as soon
_IDLE_END_S = 0.5         # a session with no host and nothing ready for this long ends (at once
                          # when no host of its shard is ready that soon: the end of a crawl is
                          # not delayed)

Emit = Callable[[list[FetchedPage], str], None]


class _CrawlView:
    """The crawl's state and hosts leased as last read by a session of this process:
    read once a control tick, whatever the number of sessions (each used to read it).
    The sessions tick together, so the view a session gets is a few ms old."""

    __slots__ = ("lock", "at", "view", "leased")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.at = float("-inf")
        self.view: ControlView | None = None
        self.leased = 0

    def read(self, w: Worker) -> tuple[ControlView, int]:
        with self.lock:
            now = time.monotonic()
            if self.view is None or now - self.at >= _CONTROL_EVERY_S / 2:
                self.view = w.control.view()
                self.leased = w.frontier.leased_hosts() if w.settings.MAX_PAGES else 0
                self.at = now
            return self.view, self.leased


_views: weakref.WeakKeyDictionary[Control, _CrawlView] = weakref.WeakKeyDictionary()
_views_lock = threading.Lock()


def _crawl_view(w: Worker) -> tuple[ControlView, int]:
    with _views_lock:
        shared = _views.get(w.control)
        if shared is None:
            shared = _views[w.control] = _CrawlView()
    return shared.read(w)


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


@dataclass(slots=True)
class _End:
    """How a turn ended in the frontier."""

    done: Completion | None            # None: the lease was lost before
    parked: str | None = None          # the fetched entry, parked until its page is handed on
    spent: bool = False                # the page budget is spent with this page
    earlier: tuple[str, str] | None = None   # an earlier capture of the same payload (url, date)
    dry: bool = False                  # held on, but the host had no URL left: it waits for parse


@dataclass(slots=True)
class _Group:
    pages: list[FetchedPage] = field(default_factory=list)
    bodies: list[tuple[FetchedPage, bytes]] = field(default_factory=list)
    parked: list[str] = field(default_factory=list)   # their frontier entries, acked once handed on
    since: float = 0.0


def fetch_stage(w: Worker, shard: int, leases: list[Lease], batch_id: str, emit: Emit) -> int:
    """Run one fetch session; ``emit(pages, group_id)`` hands each group to parse.
    Returns the number of pages handed on."""
    return FetchSession(w, shard, batch_id, emit).run(leases)


class FetchSession:
    def __init__(self, w: Worker, shard: int, batch_id: str, emit: Emit) -> None:
        self.w, self.shard, self.batch_id, self.emit = w, shard, batch_id, emit
        s = w.settings
        self.started = time.monotonic()
        self.stop = threading.Event()       # no more holds; sleeping hosts give up now
        self.halt = Cancel()                # the crawl stops: exchanges in flight end now, URLs stay queued
        self.lock = threading.Lock()         # leases and counters
        self.leases: dict[str, Lease] = {}   # the current token of every held host
        self.results: queue.Queue[tuple[FetchedPage, bytes, str | None] | None] = queue.Queue()
        self.counters: Counters = {}
        self.threads = 0
        self.spare: int | None = None         # pages the budget still allows, as last read (None: no budget)
        # set while parse keeps up (and once the session stops): held hosts wait on it
        # without waking every tick, and are released at once when it is set
        self.flowing = threading.Event()
        self.flowing.set()
        self.dry = threading.Event()         # a held host ran out of URLs: hand on the group at once
        self.leased = 0                      # hosts leased over the crawl, as last read
        self.renew_every = max(1.0, s.LEASE_S / 4)

    # -- the session loop -------------------------------------------------------------
    def run(self, leases: list[Lease]) -> int:
        try:
            return self._loop(leases)
        except BaseException:
            self._stop()   # no host thread goes on fetching for a session that is gone
            raise

    def _loop(self, leases: list[Lease]) -> int:
        w, s = self.w, self.w.settings
        self._start(leases)
        group, handed = _Group(), 0
        next_control = next_renew = time.monotonic()
        idle_since = time.monotonic() if not self.threads else None
        poll_until = 0.0   # until then, look for ready hosts every tick (not only on the grid)
        while True:
            # a tick's results at once: a wake-up per page (each put) cost a context switch;
            # a host that ran dry wakes the loop at once (its last page is in the results)
            dry = self.dry.wait(_DRY_TICK_S if time.monotonic() < poll_until else _TICK_S)
            self.dry.clear()
            for item in self._arrived():
                if item is None:
                    self.threads -= 1
                    continue
                page, body, parked = item
                if not group.pages:
                    group.since = time.monotonic()
                group.pages.append(page)
                if body:
                    group.bodies.append((page, body))
                if parked is not None:
                    group.parked.append(parked)
                if len(group.pages) >= s.PARSE_GROUP_PAGES:
                    handed += self._flush(group)
                    group = _Group()
            now = time.monotonic()
            if dry:   # its next URLs may be in pages not yet handed on: their links come back soon
                poll_until = now + _DRY_POLL_S
            if group.pages and (dry or now - group.since >= s.PARSE_GROUP_S or not self.threads):
                handed += self._flush(group)
                group = _Group()
            if now >= next_renew:
                self._renew()
                next_renew = now + self.renew_every
            on_grid, polling = now >= next_control, now < poll_until
            if on_grid:
                # on a grid shared by the sessions of this process: they read one fresh view
                next_control = (now // _CONTROL_EVERY_S + 1) * _CONTROL_EVERY_S
                self._check_control()
            if (on_grid or polling) and not self.stop.is_set() and self.flowing.is_set() and self.threads < s.FETCH_BATCH:
                self._start(w.frontier.get_urls(self.shard, self._room()))
            if on_grid or (polling and not self.threads):
                if self.threads:
                    idle_since = None
                elif not (polling and w.control.view().inflight) and self._nothing_ready_soon():
                    break   # idle, nothing of the shard ready soon nor on its way: no reason to linger
                elif idle_since is None:
                    idle_since = now
            if not self.threads and (self.stop.is_set() or (idle_since is not None and now - idle_since >= _IDLE_END_S)):
                break
        if group.pages:
            handed += self._flush(group)
        with self.lock:
            counters, self.counters = self.counters, {}
        bump(counters, "fetch/sessions")
        w.count(counters)
        w.control.end_session(self.shard, self.batch_id)
        return handed

    def _nothing_ready_soon(self) -> bool:
        """Whether no host of the shard becomes ready within ``_IDLE_END_S`` (hosts that wait
        for robots.txt or a long delay do not keep an idle session, nor the crawl's end)."""
        wait = self.w.frontier.next_ready_in(self.shard)
        return wait is None or wait > _IDLE_END_S

    def _arrived(self) -> list[tuple[FetchedPage, bytes, str | None] | None]:
        items = []
        while True:
            try:
                items.append(self.results.get_nowait())
            except queue.Empty:
                return items

    def _room(self) -> int:
        """How many more hosts to lease now (0 when the page budget is spent)."""
        room = self.w.settings.FETCH_BATCH - self.threads
        return max(0, room if self.spare is None else min(room, self.spare))

    def _check_control(self) -> None:
        s = self.w.settings
        view, leased = _crawl_view(self.w)
        if view.state != CrawlState.RUNNING:
            self.halt.set()   # a trickling server must not hold the crawl's end for its deadline
        if view.state != CrawlState.RUNNING or time.monotonic() - self.started >= s.SESSION_MAX_S:
            self._stop()
            return
        # parse is behind: hosts wait (leases kept) and no new host is taken, so fetched
        # pages never pile up in spool files faster than parse can take them
        if view.inflight > s.MAX_INFLIGHT_BATCHES:
            self.flowing.clear()
        else:
            self.flowing.set()
        if s.MAX_PAGES:
            self.leased = leased
            self.spare = s.MAX_PAGES - view.pages - self.leased

    def _stop(self) -> None:
        self.stop.set()
        self.flowing.set()   # hosts waiting for parse give up too

    def _start(self, leases: list[Lease]) -> None:
        if not leases:
            return
        renewed = [lease for lease in self.w.frontier.renew(leases) if lease is not None]
        if len(renewed) < len(leases):
            self._bump("frontier/lease_lost", len(leases) - len(renewed))
        states = self.w.frontier.host_states(renewed)
        for lease in renewed:
            with self.lock:
                self.leases[lease.host] = lease
            self.threads += 1
            threading.Thread(target=self._host, args=(lease.host, _host_state(states.get(lease.host, {}))),
                             name=f"fetch-{lease.host}", daemon=True).start()

    def _renew(self) -> None:
        """Extend the lease of every held host (a robots.txt chain or a slow exchange
        must not outlive it); a lost lease stops its host before any further request."""
        with self.lock:
            held = list(self.leases.values())
            if not held:
                return
            for lease, new in zip(held, self.w.frontier.renew(held), strict=True):
                if new is None:
                    self.leases.pop(lease.host, None)
                else:
                    self.leases[lease.host] = new

    def _flush(self, group: _Group) -> int:
        w = self.w
        group_id = new_batch_id()
        if group.bodies:
            refs = write_spool(w.settings, group_id, [body for _, body in group.bodies])
            for (page, _), ref in zip(group.bodies, refs, strict=True):
                page.body = ref
        w.warc.flush()
        latencies = [p.fetch_ms / 1000 for p in group.pages if p.fetch_ms is not None]
        if latencies:
            record_latencies(w.control.client, w.settings.KEY_PREFIX, latencies)
        with self.lock:
            counters, self.counters = self.counters, {}
        for page in group.pages:
            _count_page(page, counters, pages_counted=bool(w.settings.MAX_PAGES))
        w.control.begin_batches([group_id], time.time() + w.settings.batch_timeout_s)
        w.count(counters)
        self.emit(group.pages, group_id)
        w.frontier.ack(self.shard, group.parked)   # handed on: the fetched URLs leave the frontier
        return len(group.pages)

    def _bump(self, name: str, n: int = 1) -> None:
        with self.lock:
            bump(self.counters, name, n)

    # -- one host ---------------------------------------------------------------------
    def _host(self, host: str, state: HostState) -> None:
        """Turns of one host until it is given back (its only connection is this thread)."""
        w = self.w
        not_before = 0.0   # the host's te (and slack): its next request goes then, not a moment before
        try:
            while True:
                with self.lock:
                    lease = self.leases.get(host)
                if lease is None:   # lost: another worker may hold it now
                    return
                try:
                    turn = self._turn(lease, state, not_before)
                except Exception as exc:  # noqa: BLE001 - a bug must not cost the session or the URL
                    log_once(f"fetch/{type(exc).__name__}", "unexpected error fetching %s", lease.entry.url)
                    self._bump(f"error/{type(exc).__name__}")
                    turn = Turn(time.time() + w.settings.MIN_DELAY_S, Action.KEEP, last=True)
                # a turn that sent nothing (a URL filtered, disallowed, refused) says te = now,
                # which may be just before the te it was woken for: that one still holds
                turn.te = max(turn.te, not_before)
                if turn.state is not None:
                    state = turn.state
                end = self._finish(host, turn)
                record_id = self._archive(turn, end.earlier)
                if end.done is None:   # lost: another worker may hold it now
                    return
                if not end.done.ok:
                    self._bump("frontier/lease_lost")
                if turn.page is not None:
                    turn.page.warc_id = record_id
                    self.results.put((turn.page, turn.body, end.parked))
                if end.done.held is None:
                    if end.dry:
                        self.dry.set()
                    return
                if end.spent:   # the page budget is spent: no next turn
                    self._give_back(host, turn.te)
                    return
                if self.stop.wait(max(0.0, turn.te - _EARLY_S - time.time())) or not self._wait_for_parse():
                    self._give_back(host, turn.te)
                    return
                not_before = turn.te + _SLACK_S
        finally:
            # still held only when finishing a turn raised (a Redis error, a full disk): give
            # the host back, or at least stop renewing its lease, so that it is not stuck
            # with this session until the session and then the lease run out
            try:
                self._give_back(host, time.time() + request_gap(w.policy, state))
            except Exception:  # noqa: BLE001 - the lease is dropped already; it expires
                log_once("fetch/give_back", "could not give back %s; its lease expires", host)
            w.fetcher.release(host)   # whoever takes the host next opens its own connection
            self.results.put(None)

    def _wait_for_parse(self) -> bool:
        """While parse is behind, a held host waits (its lease is renewed meanwhile);
        False when the session stops first."""
        self.flowing.wait()
        return not self.stop.is_set()

    def _finish(self, host: str, turn: Turn) -> _End:
        """End a turn in the frontier, with the exchange's revisit test and the page
        budget's count: one round trip where the shard and the crawl's counters share a
        server (the common case), the count first otherwise. On one round trip the count
        cannot decide the hold, so a held host is given back after it when the budget is
        spent (``_End.spent``)."""
        w, s = self.w, self.w.settings
        res = turn.exchange
        date = warc_date(res.started) if res is not None else ""
        capture = bool(s.WARC_DEDUP_REVISITS and res is not None and res.status == 200 and res.body
                       and not res.truncated)
        # counted at once, so that no session holds a host past the budget
        count = bool(s.MAX_PAGES) and turn.page is not None and _requested(turn.page)
        # a fetched URL stays parked in the frontier until its page is handed on
        park = turn.action == Action.DONE and turn.page is not None
        fields = turn.state.to_fields() if turn.state is not None else None
        with self.lock:
            lease = self.leases.get(host)
            if lease is None:
                return _End(None)
            one_trip = w.frontier.same_server(lease.shard, w.control.client)
            park_until = time.time() + s.LEASE_S if park else 0.0
            pipe = w.control.client.pipeline(transaction=False)
            if capture:
                assert res is not None
                w.content.queue_capture(pipe, res.url, turn.digest, date)
            if count:
                w.control.queue_count_page(pipe)
            read = None
            hold_until = 0.0 if turn.last else self._hold_until(turn.te)
            if one_trip:
                read = w.frontier.queue_finish(pipe, lease, turn.te, turn.action, fields, hold_until, park_until)
            replies = pipe.execute(raise_on_error=False) if len(pipe) else []
            for reply in replies[:2 * capture + count]:
                if isinstance(reply, Exception):
                    raise reply
            spent = count and int(replies[2 * capture]) + self.leased > s.MAX_PAGES
            if read is not None:
                done = read(replies[-1])
            else:
                hold_until = 0.0 if spent else hold_until
                done = w.frontier.finish(lease, turn.te, turn.action, fields, hold_until, park_until)
            if done.held is not None:
                self.leases[host] = done.held
            else:
                self.leases.pop(host, None)
        earlier = w.content.earlier_of(replies, res.url, date) if capture and res is not None else None
        return _End(done, lease.raw if park and done.ok else None, spent, earlier,
                    dry=bool(hold_until) and done.ok and done.held is None)

    def _archive(self, turn: Turn, earlier: tuple[str, str] | None) -> str | None:
        """The turn's exchange (and the DOM its page rendered to) in WARC, once the turn
        is finished; the response's record id."""
        res = turn.exchange
        if res is None:
            return None
        record_id = self.w.warc.write_exchange(res, earlier, turn.digest)
        if turn.conversion is not None:
            self.w.warc.write_conversion(res.url, record_id, *turn.conversion)
        return record_id

    def _hold_until(self, te: float) -> float:
        s = self.w.settings
        if self.stop.is_set() or (self.spare is not None and self.spare < 0) or te - time.time() > s.HOLD_HORIZON_S:
            return 0.0
        return te + s.LEASE_S

    def _give_back(self, host: str, te: float) -> None:
        with self.lock:
            lease = self.leases.pop(host, None)
            if lease is not None:
                self.w.frontier.complete(lease, te=te, action=Action.KEEP)

    def _turn(self, lease: Lease, state: HostState, not_before: float) -> Turn:
        """One request's worth of work for a held host (or the decision to wait)."""
        w, s = self.w, self.w.settings
        entry = lease.entry
        ip = None
        try:  # refuse private targets before anything, robots.txt included, is sent
            ip = w.fetcher.check_host(urlsplit(entry.url).hostname or "")
        except AddressRefused as exc:
            return Turn(time.time(), Action.DONE, _page(entry, None, error_kind=ErrorKind.REFUSED, error=exc.reason))
        except ResolveError:
            pass  # the fetch below records the DNS failure and the retry policy applies
        if not (s.PER_IP_POLITENESS and ip):
            return self._checked_turn(lease, state, entry, not_before)
        free_at = w.frontier.claim_ip(ip)
        if free_at:  # another host on this address was contacted too recently
            return Turn(free_at, Action.KEEP)
        turn = Turn(time.time(), Action.KEEP, last=True)
        try:
            turn = self._checked_turn(lease, state, entry, not_before)
            return turn
        finally:  # the address waits as long as the host just contacted
            w.frontier.release_ip(ip, turn.te)

    def _checked_turn(self, lease: Lease, state: HostState, entry: Entry, not_before: float) -> Turn:
        w, s = self.w, self.w.settings
        url = entry.url
        dropped = self._learned_since_queued(lease, entry)
        if dropped is not None:
            return Turn(time.time(), Action.DONE, _page(entry, None, error_kind=ErrorKind.FILTERED, error=dropped))
        if s.OBEY_ROBOTS:
            answer = w.robots.check(w.frontier, w.fetcher, url, s.robots_agent, cancel=self.halt,
                                    not_before=not_before,
                                    before_hop=lambda prev: self._pace_hop(lease.host, state, prev))
            if answer.exchange is not None:  # this turn went to robots.txt
                res = answer.exchange
                if res.error_kind == ErrorKind.ABORTED:
                    return self._aborted(state)
                self._bump(f"robots/{answer.entry.kind}")
                if res.status:
                    self._bump(f"robots/status/{res.status}")
                if answer.entry.kind == RULES:
                    state.crawl_delay_s, skip = crawl_delay_verdict(
                        w.policy, answer.entry.rules.crawl_delay(s.robots_agent))
                    if skip:
                        return Turn(time.time() + w.policy.park_s, Action.KEEP, last=True)
                turn = self._decide(state, res, Action.KEEP)
                if res.status is not None:   # robots.txt is archived like any exchange
                    turn.exchange, turn.digest = res, warc_digest(res.body)
                if answer.entry.kind == UNREACHABLE:  # the host's URLs wait for the next attempt
                    turn.te, turn.last = max(turn.te, answer.entry.expires), True
                else:
                    sitemaps = answer.entry.rules.sitemaps if answer.entry.kind == RULES else []
                    first_contact(self.w, lease, urlsplit(url).scheme, sitemaps)
                return turn
            if answer.check == Check.UNREACHABLE:
                # disallow all for now; the URL waits for the next robots.txt attempt
                return Turn(max(answer.entry.expires, time.time() + s.MIN_DELAY_S), Action.KEEP, last=True)
            if answer.check == Check.DISALLOWED:
                page = _page(entry, None, error_kind=ErrorKind.ROBOTS, error="disallowed by robots.txt")
                return Turn(time.time(), Action.DONE, page)
        validators = w.recrawler.conditional_headers(lease.shard, [url])[0] if s.CONTINUOUS else None
        gap = request_gap(w.policy, state)
        if entry.kind == EntryKind.SITEMAP:
            res = w.fetcher.fetch(url, max_body_bytes=MAX_SITEMAP_BYTES, max_decoded_bytes=MAX_SITEMAP_BYTES,
                                  cancel=self.halt, gap_s=gap, not_before=not_before)
        else:
            res = w.fetcher.fetch(url, extra_headers=validators or None, cancel=self.halt, gap_s=gap,
                                  not_before=not_before)
        if res.error_kind == ErrorKind.ABORTED:
            return self._aborted(state)
        retryable = res.error_kind in RETRYABLE_ERRORS or (
            res.status is not None and (res.status >= 500 or res.status == 429))
        action = Action.RETRY if retryable and entry.tries < s.MAX_RETRIES else Action.DONE
        turn = self._decide(state, res, action)
        if res.status is not None:   # archived once the turn is finished (``_archive``)
            turn.exchange, turn.digest = res, warc_digest(res.body)
        if action == Action.RETRY:
            return turn
        turn.page = _page(entry, res)
        ok = res.status is not None and 200 <= res.status < 300
        if ok and (entry.kind == EntryKind.SITEMAP or is_html(res.content_type, res.content[:512])):
            turn.body = res.content
            if entry.kind == EntryKind.PAGE:
                self._maybe_render(lease, state, res, turn)
        return turn

    def _maybe_render(self, lease: Lease, state: HostState, res: FetchResult, turn: Turn) -> None:
        """An app shell (or a host the operator named) is rendered in the browser, within
        this host's turn: the browser's every request is one of this host's requests."""
        w = self.w
        why = w.render.reason(lease.host, res.content_type, res.content)
        pool = w.render.pool() if why else None
        if pool is None or turn.page is None:
            return
        last = [res.ended]

        def fetch(url: str, kind: str) -> FetchResult | None:
            return self._browser_fetch(lease, state, last, url)

        rendered = pool.render(res.url, fetch=fetch, document=res)
        self._bump("render/pages")
        self._bump("render/requests", rendered.fetched)
        if rendered.error or not rendered.html:
            self._bump(f"render/error/{(rendered.error or 'empty').split(':')[0]}")
            return
        html = rendered.html.encode("utf-8")
        turn.conversion = (html, warc_date(time.time()))
        turn.body, turn.page.rendered = html, why
        # the host's next contact follows its last request, the browser's included
        turn.te = max(turn.te, last[0] + request_gap(w.policy, state))

    def _browser_fetch(self, lease: Lease, state: HostState, last: list[float], url: str) -> FetchResult | None:
        """A request of the browser: same host only, robots.txt obeyed, the host's delay
        kept, through the crawler's fetcher (address checks, limits) and into WARC."""
        w, s = self.w, self.w.settings
        if urlsplit(url).netloc.lower() != lease.host or self.stop.is_set():
            return None
        if s.OBEY_ROBOTS:
            entry = w.robots.get(w.frontier, lease.host)
            if entry is None or not entry.rules.is_allowed(url, s.robots_agent):
                self._bump("render/refused/robots")
                return None
        gap = request_gap(w.policy, state)
        wait = last[0] + gap - time.time()
        if wait > 0 and self.stop.wait(wait):
            return None
        self._renew()
        res = w.fetcher.fetch(url, cancel=self.halt, gap_s=gap)
        last[0] = res.ended or time.time()
        if res.error_kind == ErrorKind.ABORTED:
            return None
        if res.status is not None:
            w.warc.write_exchange(res, None)
        return res

    def _learned_since_queued(self, lease: Lease, entry: Entry) -> str | None:
        """Why a queued URL is no longer worth its request: since it was queued its host's
        rules learned that it spells a page already seen, or its URL shape became a trap
        (the gate applies both to new URLs; this catches those queued before). None: fetch."""
        rules = self.w.rules
        if rules is None or entry.kind != EntryKind.PAGE or entry.hops or entry.depth == 0:
            return None
        counters: Counters = {}
        spelled = rules.rewrite(entry.url, lease.host, counters)
        if spelled is None:
            self._bump("filter/trap_shape/queued")
            return "its URL shape is a trap on this host (learned after it was queued)"
        if spelled == entry.url:
            return None
        # the rule is confirmed: fetch the host's own spelling instead (if not seen yet)
        queued = self.w.frontier.put_discovered([Discovered(url=spelled, host=lease.host, depth=entry.depth)])
        self._bump("dust/dropped_queued")
        return (f"a variant of {spelled} by this host's learned URL rules"
                + (" (queued in its place)" if queued[0] == ENQUEUED else ""))

    def _aborted(self, state: HostState) -> Turn:
        """The crawl stopped during this turn's exchange: no record, the URL stays at the
        head of its host's queue (no try spent), the host waits its delay as after any request."""
        return Turn(time.time() + request_gap(self.w.policy, state), Action.KEEP, last=True)

    def _decide(self, state: HostState, res: FetchResult, action: Action) -> Turn:
        """The host's next contact after this exchange (politeness rules)."""
        if res.status is None and res.error_kind in _NO_REQUEST:
            return Turn(time.time(), action)
        failed = res.status is None or res.status >= 500 or res.status == 429
        outcome = FetchOutcome(end=res.ended, duration_s=res.duration_s, status=res.status,
                               retry_after=res.header("retry-after"), failed=failed)
        te, new_state, _reason = next_contact(self.w.policy, state, outcome)
        return Turn(te, action, state=new_state)

    def _pace_hop(self, host: str, state: HostState, previous: FetchResult) -> None:
        """Before a robots.txt redirect hop: the previous hop into WARC, the host's delay
        after it, and a fresh lease (a chain of slow hops must not outlive it)."""
        if previous.status is not None:
            self.w.warc.write_exchange(previous)
        te, _, _ = next_contact(self.w.policy, state, FetchOutcome(
            end=previous.ended, duration_s=previous.duration_s, status=previous.status, retry_after=None,
            failed=False))
        self.stop.wait(max(0.0, min(te - time.time(), self.w.settings.HOLD_HORIZON_S)))
        self._renew()


def first_contact(w: Worker, lease: Lease, scheme: str, sitemaps: list[str]) -> None:
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


def _requested(page: FetchedPage) -> bool:
    """Whether a request for the page went out (else it was refused or skipped before)."""
    return page.status is not None or page.error_kind in NETWORK_ERRORS


def _count_page(page: FetchedPage, counters: Counters, *, pages_counted: bool = False) -> None:
    """A group's counters; ``fetch/pages`` was counted per page already with a page budget."""
    if _requested(page):
        if not pages_counted:
            bump(counters, "fetch/pages")
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
