"""The fetch session: one fetch task, holding leased hosts of one shard.

A held host waiting out its delay is an entry in the session's heap by ``te``, not a
thread: when its ``te`` has passed the loop gives it to the process's exchange pool
(``fetch/pool.py``) for one turn (``turn.py``), then takes it back (its next turn is near,
``HOLD_HORIZON_S``) or lets it go (the frontier has it again). The loop also hands
finished pages to parse in groups (every ``PARSE_GROUP_S`` or ``PARSE_GROUP_PAGES``
pages, their bodies in a spool file), renews the leases of every held host in one round
trip per shard, leases more ready hosts while the pool has room, and holds due hosts
while parse is behind (back-pressure) or the crawl is not running. A host taken is looked
up first (``names.py``: a pending query, no thread) and joins the heap with its answer;
a due host whose address another name holds or rests waits for it in the heap
(``fetch/addresses.py``).

The crawl's state: RUNNING goes on; any other state starts no new turn and gives the
held hosts back, while turns in flight finish normally (a pause); STOPPING and FINISHED
also cut the exchanges in flight (their URLs stay queued). The session ends after
``SESSION_MAX_S``, when the crawl is not running, or when it has nothing to do.
"""
from __future__ import annotations

import functools
import heapq
import itertools
import logging
import math
import queue
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from crawler_tasks.counters import Counters, bump
from crawler_tasks.fetch.dns import Answer, AnswerKind
from crawler_tasks.fetch.http import Cancel
from crawler_tasks.fetch.netsafety import literal_address
from crawler_tasks.fetch.politeness import HostState, request_gap
from crawler_tasks.frontier import Lease
from crawler_tasks.records import Action, Capture
from crawler_tasks.runtime.control import CrawlState
from crawler_tasks.runtime.malloc import trim
from crawler_tasks.stages.fetch.context import TurnContext
from crawler_tasks.stages.fetch.finish import End, archive_turn, finish_turn
from crawler_tasks.stages.fetch.groups import Group, Taken, flush_group
from crawler_tasks.stages.fetch.names import known, name_of, with_answer
from crawler_tasks.stages.fetch.outcome import Turn
from crawler_tasks.stages.fetch.turn import take_turn
from crawler_tasks.stages.fetch.view import CONTROL_EVERY_S, crawl_view, near_budget_end, shared_view
from crawler_tasks.stages.worker import Worker, log_once

log = logging.getLogger(__name__)

_TICK_S = 0.1             # the loop's longest sleep: results, groups, control checks
_EARLY_S = 0.002          # a due host goes to the pool this much before te and prepares its
                          # turn while the request itself waits for te (fetch's not_before)
_SLACK_S = 0.001          # and goes this much after te: a busy server may stamp its answer's end a
                          # little after our read of its last byte (a threaded Python server: 3 ms)
_OVERDUE_S = 0.1          # a held host waiting this long past its te: no more hosts are leased
_DRY_POLL_S = 0.5         # after a host ran dry, ready hosts are looked for every tick this long,
_DRY_TICK_S = 0.02        # on a shorter tick: its links come back from parse in ~20 ms (so does the end)
_DRY_FLUSH_S = 0.1        # a group that holds a dry host's page goes to parse once this old: at once,
                          # groups of hosts that run dry at every turn (a young site) averaged 15 pages,
                          # and a group costs ~9 ms of CPU whatever its size (two tasks, spool, round trips)
_IDLE_END_S = 0.5         # a session with no host and nothing ready this long ends (at once if none is soon)
_ADDRESS_POLL_S = 0.05   # a host whose address another name's turn holds looks again this much later
_CANCELLING = frozenset({CrawlState.STOPPING, CrawlState.FINISHED})   # cut the exchanges in flight

Emit = Callable[[list[Capture], str], None]


@dataclass(slots=True)
class Held:
    """A host held by the session: its lease, politeness state and next turn."""

    lease: Lease
    state: HostState
    not_before: float   # epoch s: its next request goes then, not a moment before
    answer: Answer | None = None   # its name's lookup (names.py), once in
    named: bool = False            # ``state`` holds an address its turns have not written yet
    address: str | None = None     # the address its turn holds (fetch/addresses.py), while in a turn


@dataclass(slots=True)
class _Done:
    """A finished turn, for the loop: its page, and the host if the session keeps it."""

    host: str
    taken: Taken | None = None
    parked: str | None = None
    held: Held | None = None   # None: the host left the session
    dry: bool = False


def fetch_stage(w: Worker, shard: int, leases: list[Lease], session_id: str, emit: Emit) -> int:
    """Run one fetch session; ``emit(pages, group_id)`` hands each group to parse.
    Returns the number of pages handed on."""
    return FetchSession(w, shard, session_id, emit).run(leases)


class FetchSession:
    def __init__(self, w: Worker, shard: int, session_id: str, emit: Emit) -> None:
        self.w, self.shard, self.session_id, self.emit = w, shard, session_id, emit
        self.pool = w.exchanges
        self.started = time.monotonic()
        # sessions started together must not end together: each one's end stops its turns
        # until those in flight are over, and hands its hosts to a new session
        self.max_s = w.settings.SESSION_MAX_S * random.uniform(0.75, 1.25)
        self.stop = threading.Event()       # no new turn; held hosts go back
        self.halt = Cancel()                # the crawl stops: exchanges in flight end now, URLs stay queued
        self.lock = threading.Lock()        # counters, hosts in flight
        self.heap: list[tuple[float, int, str]] = []   # (te, seq, host) of hosts waiting their turn
        self.waiting: dict[str, Held] = {}  # hosts in the heap (the loop's own)
        self.flying: dict[str, Held] = {}   # hosts in a turn
        self.again: dict[str, Held] = {}    # hosts leased anew while their last turn ends: they wait for it
        self.resolving: dict[str, Held] = {}   # hosts whose names are being looked up (no thread)
        self.resolved: queue.SimpleQueue[tuple[str, Answer]] = queue.SimpleQueue()   # from the resolver
        self.seq = itertools.count()
        self.done: queue.SimpleQueue[_Done] = queue.SimpleQueue()
        self.wake = threading.Event()       # a turn finished
        self.counters: Counters = {}
        self.spare: int | None = None       # pages the budget still allows, as last read (None: no budget)
        self.flowing = True                 # parse keeps up
        self.reported: set[str] = set()     # hosts in a turn, as last told to the progress line
        self.renew_every = max(1.0, w.settings.LEASE_S / 4)
        self.ctx = TurnContext(w, self.halt, self.stop, self._bump, self._renew_one)

    @property
    def held(self) -> int:
        return len(self.waiting) + len(self.flying) + len(self.again) + len(self.resolving)

    # -- the loop ---------------------------------------------------------------------
    def run(self, leases: list[Lease]) -> int:
        try:
            return self._loop(leases)
        except BaseException:
            self.stop.set()
            self.halt.set()   # no turn goes on fetching for a session that is gone
            self._give_back_waiting()
            raise

    def _loop(self, leases: list[Lease]) -> int:
        w, s = self.w, self.w.settings
        self._take(leases)
        group, handed = Group(), 0
        next_control = next_renew = time.monotonic()
        idle_since = None if self.held else time.monotonic()
        dry_group = False   # the group holds a page of a host that ran dry
        poll_until = 0.0   # until then, look for ready hosts every tick (not only on the grid)
        while True:
            self.wake.wait(self._sleep(poll_until))
            self.wake.clear()
            dry = False
            while True:
                try:
                    item = self.done.get_nowait()
                except queue.Empty:
                    break
                dry |= item.dry
                self._arrived(item, group)
                if len(group.pages) >= s.PARSE_GROUP_PAGES:
                    handed += self._flush(group)
                    group = Group()
            self._named()
            now = time.monotonic()
            if dry:   # its next URLs may be in pages not yet handed on: their links come back soon
                poll_until = now + _DRY_POLL_S
                dry_group = True
            age = now - group.since
            if group.pages and ((dry_group and age >= _DRY_FLUSH_S) or age >= s.PARSE_GROUP_S or not self.held):
                handed += self._flush(group)
                group, dry_group = Group(), False
            if now >= next_renew:
                self._renew()
                next_renew = now + self.renew_every
            on_grid, polling = now >= next_control, now < poll_until
            if on_grid:
                # on a grid shared by the sessions of this process: they read one fresh view
                next_control = (now // CONTROL_EVERY_S + 1) * CONTROL_EVERY_S
                self._check_control()
            if self.stop.is_set():
                self._give_back_waiting()
            elif (on_grid or polling) and self.flowing:
                self._lease_more()
            self._dispatch()
            if on_grid or (polling and not self.held):
                if self.held:
                    idle_since = None
                elif not (polling and w.control.view().inflight) and self._nothing_ready_soon():
                    break   # idle, nothing of the shard ready soon nor on its way: no reason to linger
                elif idle_since is None:
                    idle_since = now
            if not self.held and (self.stop.is_set() or (idle_since is not None and now - idle_since >= _IDLE_END_S)):
                break
        if group.pages:
            handed += self._flush(group)
        with self.lock:
            counters, self.counters = self.counters, {}
        for name, n in w.fetcher.dns_counts().items():
            bump(counters, f"dns/{name}", n)
        bump(counters, "fetch/sessions")
        w.count(counters)
        w.control.end_session(self.shard, self.session_id)
        self.reported = w.control.report_exchanges(self.session_id, set(), self.reported, 0.0)
        return handed

    def _sleep(self, poll_until: float) -> float:
        """Until the next due host (when it may go), or the tick."""
        tick = _DRY_TICK_S if time.monotonic() < poll_until else _TICK_S
        if self.heap and self.flowing and not self.stop.is_set() and self.pool.room():
            return max(0.0, min(tick, self.heap[0][0] - _EARLY_S - time.time()))
        return tick

    def _arrived(self, item: _Done, group: Group) -> None:
        with self.lock:
            self.flying.pop(item.host, None)
        if item.taken is not None:
            group.add(item.taken, item.parked)
            self.pool.keep_bytes(len(item.taken.body))
        again = self.again.pop(item.host, None)
        held = item.held or again
        if held is None:
            self.pool.hold(-1)
            self.w.fetcher.release(item.host)   # whoever takes the host next opens its own connection
            return
        if item.held is None:   # the turn let the host go and the session has leased it again
            self.pool.hold(-1)
        if self.stop.is_set():
            self.pool.hold(-1)
            self.w.frontier.give_back([(held.lease, held.not_before)])
            self.w.fetcher.release(item.host)
        else:
            self._admit(item.host, held)

    def _admit(self, host: str, held: Held) -> None:
        """Into the heap once the host's name has an answer: at once when one is known
        (pinned, kept in its state, cached), else when the resolver calls back."""
        answer = known(self.w, host, held.state, time.time())
        if answer is None:
            self.resolving[host] = held
            answer = self.w.fetcher.resolver.lookup(name_of(host), functools.partial(self._looked_up, host))
            if answer is None:
                return
            del self.resolving[host]
        held.answer = answer
        self._wait(host, held)

    def _looked_up(self, host: str, answer: Answer) -> None:
        """On the resolver's thread: only queue."""
        self.resolved.put((host, answer))
        self.wake.set()

    def _named(self) -> None:
        """Hosts whose lookups answered join the heap (their turn records a dead name)."""
        while True:
            try:
                host, answer = self.resolved.get_nowait()
            except queue.Empty:
                return
            held = self.resolving.pop(host, None)
            if held is None:   # given back meanwhile
                continue
            if answer.kind == AnswerKind.OK:
                now = time.time()
                held.state, held.named = with_answer(held.state, answer, now), True
                self.w.warc.write_dns(answer.host, answer.addresses, answer.ttl_s, now)   # as Heritrix does
            held.answer = answer
            self._wait(host, held)

    def _wait(self, host: str, held: Held) -> None:
        self.waiting[host] = held
        heapq.heappush(self.heap, (held.not_before, next(self.seq), host))

    def _dispatch(self) -> None:
        """Give every due host to the pool while it has room; a host whose address another
        name holds or rests waits for it in the heap."""
        if self.stop.is_set() or not self.flowing:
            return
        now = time.time()
        due = now + _EARLY_S
        while self.heap and self.heap[0][0] <= due and self.pool.room():
            _, _, host = heapq.heappop(self.heap)
            held = self.waiting.pop(host)
            held.address = self._address(host, held)
            if held.address is not None:
                free_at, previous = self.w.addresses.take(held.address, host, now)
                if free_at:
                    held.not_before = max(held.not_before, due + _SLACK_S,
                                          free_at if free_at < math.inf else now + _ADDRESS_POLL_S)
                    held.address = None
                    self._wait(host, held)
                    continue
                if previous is not None:   # one connection to the address: not the last name's
                    self.w.fetcher.release(previous)
            with self.lock:
                self.flying[host] = held
            self.pool.submit(functools.partial(self._turn, host, held))

    def _address(self, host: str, held: Held) -> str | None:
        """The address whose turns the host shares (per-address politeness): a name's."""
        answer = held.answer
        if not (self.w.settings.PER_IP_POLITENESS and answer is not None and answer.kind == AnswerKind.OK):
            return None
        return None if literal_address(name_of(host)) is not None else answer.addresses[0]

    def _nothing_ready_soon(self) -> bool:
        """Whether no host of the shard becomes ready within ``_IDLE_END_S`` (hosts that wait
        for robots.txt or a long delay do not keep an idle session, nor the crawl's end)."""
        wait = self.w.frontier.next_ready_in(self.shard)
        return wait is None or wait > _IDLE_END_S

    def _lease_more(self) -> None:
        """Lease ready hosts while the pool has room for them and, with a page budget,
        the budget too: lease.lua holds it where it can (``budget_in_scripts``), else the
        process's sessions take their hosts from its room (``view.py``), each leased host
        fetching a page. Not while a held host waits past
        its time: the pool is busy, and hosts leased now would only queue before held
        hosts' next pages (each new host's turn is its robots.txt; at 5,000 hosts, pages
        waited for every host's robots.txt) and away from other fetch processes."""
        s, w = self.w.settings, self.w
        room = min(max(s.FETCH_BATCH, s.WAKE_MAX_HOSTS), self.pool.host_room())
        if room <= 0 or (self.heap and self.heap[0][0] < time.time() - _OVERDUE_S):
            return
        if self.spare is None or w.frontier.budget_in_scripts:   # no budget, or lease.lua holds it
            if self.spare is None or self.spare > 0:
                self._take(w.frontier.get_urls(self.shard, room, owner=w.frontier.owner), own=True)
            return
        shared = shared_view(w)
        granted, self.spare, _ = shared.reserve(w, room)
        if not granted:
            return
        leases: list[Lease] = []
        try:
            leases = w.frontier.get_urls(self.shard, granted, owner=w.frontier.owner)
        finally:
            shared.leased_now(granted, len(leases))
        self._take(leases, own=True)

    def _check_control(self) -> None:
        s = self.w.settings
        trim()   # the process's free heap pages back to the system, every few seconds
        view, leased = crawl_view(self.w)
        with self.lock:
            flying = set(self.flying)
        self.reported = self.w.control.report_exchanges(self.session_id, flying, self.reported,
                                                        time.time() + s.TOTAL_TIMEOUT_S)
        if view.state in _CANCELLING:
            self.halt.set()   # a trickling server must not hold the crawl's end for its deadline
        if view.state != CrawlState.RUNNING or time.monotonic() - self.started >= self.max_s:
            self.stop.set()
            return
        # parse is behind: hosts wait (leases kept) and no new host is taken, so fetched
        # pages never pile up in spool files faster than parse can take them
        self.flowing = view.inflight <= s.MAX_INFLIGHT_BATCHES
        if s.MAX_PAGES:
            self.spare = s.MAX_PAGES - view.pages - leased

    # -- hosts ------------------------------------------------------------------------
    def _take(self, leases: list[Lease], *, own: bool = False) -> None:
        """Hold leased hosts. Those wake leased for the session are renewed first (in the
        process's name, and the session may start late); ``own``: just leased by this
        process, with a full lease in its name already (one round trip less)."""
        if not leases:
            return
        renewed = leases if own else [lease for lease in self.w.frontier.renew(leases) if lease is not None]
        if len(renewed) < len(leases):
            self._bump("frontier/lease_lost", len(leases) - len(renewed))
        states = self.w.frontier.host_states(renewed)
        self.pool.hold(len(renewed))
        with self.lock:
            flying = set(self.flying)
        # due now, behind hosts due since earlier: as te 0, thousands of new hosts leased
        # during a crawl's first seconds held every host's page back until each had
        # fetched its robots.txt (5,000 hosts: the first page at 7.6 s, parse idle)
        now = time.time()
        for lease in renewed:
            held = Held(lease, _host_state(states.get(lease.host, {})), now)
            if lease.host in flying:
                self.again[lease.host] = held
            else:
                self._admit(lease.host, held)

    def _renew(self) -> None:
        """Extend the lease of every waiting host (and every host being looked up) in one
        round trip per shard (a host in a turn renews its own when the turn is long); a lost
        lease drops its host."""
        hosts = [(host, table) for table in (self.waiting, self.resolving) for host in table]
        if not hosts:
            return
        waiting = len(self.waiting)
        for (host, table), new in zip(hosts, self.w.frontier.renew([t[h].lease for h, t in hosts]), strict=True):
            if new is None:
                table.pop(host)
                self.pool.hold(-1)
                self._bump("frontier/lease_lost")
            else:
                table[host].lease = new
        if len(self.waiting) < waiting:
            self.heap = [item for item in self.heap if item[2] in self.waiting]
            heapq.heapify(self.heap)

    def _renew_one(self, host: str) -> None:
        with self.lock:
            held = self.flying.get(host)
        if held is not None:
            (new,) = self.w.frontier.renew([held.lease])
            if new is not None:
                held.lease = new

    def _give_back_waiting(self) -> None:
        """Every waiting host (or being looked up) back to the frontier at its next contact, at once."""
        if not (self.waiting or self.resolving):
            return
        held = list(self.waiting.items()) + list(self.resolving.items())
        self.waiting, self.heap, self.resolving = {}, [], {}
        self.pool.hold(-len(held))
        self.w.frontier.give_back([(h.lease, h.not_before) for _, h in held])
        for host, _ in held:
            self.w.fetcher.release(host)

    def _flush(self, group: Group) -> int:
        with self.lock:
            counters, self.counters = self.counters, {}
        for name, n in self.w.fetcher.dns_counts().items():
            bump(counters, f"dns/{name}", n)
        self.pool.keep_bytes(-group.body_bytes)
        return flush_group(self.w, self.shard, group, counters, self.emit)

    def _bump(self, name: str, n: int = 1) -> None:
        with self.lock:
            bump(self.counters, name, n)

    # -- one turn, on a pool thread -----------------------------------------------------
    def _turn(self, host: str, held: Held) -> None:
        """One turn of a held host, then the host back to the loop (or out of the session)."""
        w = self.w
        done = _Done(host)
        free_at = 0.0   # when the host's address may be contacted again
        try:
            if _lease_left(held.lease) < w.settings.TOTAL_TIMEOUT_S + 1.0:
                self._renew_one(host)   # the loop renews waiting hosts only: the exchange must fit
            try:
                turn = take_turn(self.ctx, held.lease, held.state, held.not_before, held.answer)
            except Exception:  # noqa: BLE001 - a bug must not cost the session or the URL
                log_once("fetch/turn", "unexpected error fetching %s", held.lease.entry.url)
                self._bump("error/turn")
                turn = Turn(time.time() + w.settings.MIN_DELAY_S, Action.KEEP, last=True)
            # a turn that sent nothing (a URL filtered, disallowed, refused) says te = now,
            # which may be just before the te it was due at: that one still holds
            turn.te = max(turn.te, held.not_before)
            free_at = turn.te
            if turn.state is None and held.named:   # the name's new address is written with this turn
                turn.state = held.state
            if turn.state is not None:
                held.state, held.named = turn.state, False
            end = self._finish(held, turn)
            record_id = archive_turn(w, turn, end)
            if not end.done.ok:
                self._bump("frontier/lease_lost")
            if turn.page is not None:
                location = turn.exchange.location if turn.exchange is not None else None
                done.taken, done.parked = Taken(turn.page, turn.body, record_id, location), end.parked
            if end.done.held is not None and end.spent:   # the page budget is spent: no next turn
                w.frontier.give_back([(end.done.held, turn.te)])
            elif end.done.held is not None:
                held.lease, held.not_before = end.done.held, turn.te + _SLACK_S
                done.held = held
            done.dry = end.dry
        except Exception:  # noqa: BLE001 - finishing failed (a Redis error, a full disk)
            # give the host back, or at least stop holding it, so that it is not stuck
            # with this session until the session and then the lease run out
            log_once("fetch/finish", "could not finish a turn of %s", host)
            self._bump("error/finish")
            try:
                w.frontier.give_back([(held.lease, time.time() + request_gap(w.policy_for(host), held.state))])
            except Exception:  # noqa: BLE001 - the lease is dropped already; it expires
                log_once("fetch/give_back", "could not give back %s; its lease expires", host)
        finally:   # the loop takes the host out of ``flying``: it is held until then
            if held.address is not None:
                self.w.addresses.give(held.address, free_at or time.time())
            self.done.put(done)
            self.wake.set()

    def _finish(self, held: Held, turn: Turn) -> End:
        hold_until = 0.0 if turn.last else self._hold_until(turn.te)
        # where the frontier's script cannot hold the budget: hosts leased as the process
        # counts them (with what its other sessions leased since), read afresh near the
        # budget's end (wake and other processes lease too)
        s, w = self.w.settings, self.w
        leased = 0
        if s.MAX_PAGES and not w.frontier.budget_in_scripts:
            leased = crawl_view(w, near_budget_end(s, self.spare))[1]
        return finish_turn(w, held.lease, turn, hold_until, leased)

    def _hold_until(self, te: float) -> float:
        s = self.w.settings
        if self.stop.is_set() or (self.spare is not None and self.spare < 0) or te - time.time() > s.HOLD_HORIZON_S:
            return 0.0
        return te + s.LEASE_S


def _lease_left(lease: Lease) -> float:
    """Seconds until the lease runs out (its token is its deadline)."""
    try:
        return float(lease.token) - time.time()
    except ValueError:
        return 0.0


def _host_state(raw: dict[str, str]) -> HostState:
    try:
        return HostState.from_fields(raw) if raw else HostState()
    except ValueError:  # a corrupt hash must not stop the host forever
        return HostState()
