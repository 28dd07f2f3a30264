"""The crawl's state as the fetch sessions of one process see it: read once a control
tick, whatever the number of sessions (each used to read it), in one round trip (state,
page groups in flight, pages fetched and hosts leased). The sessions tick on one grid
(``CONTROL_EVERY_S``) and the first of them on a tick reads for all, so the view a
session gets is from its tick, mostly a few ms old.

The page budget: a session that leases hosts takes them from the process's room
(``reserve``), counted against the last read plus what the process leased since.
A read is reused for that while what the crawl can do in its age cannot use up the
room left (about a page per leased host and delay, and a round of leases by every
other session); near the end of the budget every reservation reads afresh, as each session's leasing did before (sessions lease
hundreds of hosts at a time, and a view 0.25 s old let them lease past the budget).
"""
from __future__ import annotations

import threading
import time
import weakref

from crawler_tasks.runtime.control import Control, ControlView
from crawler_tasks.settings import Settings
from crawler_tasks.stages.worker import Worker

CONTROL_EVERY_S = 0.25   # the sessions' control grid: crawl state, page budget, room for more hosts
_RESERVE_FRESH_S = 0.05   # a reservation far from the budget's end reuses a read this old


class _CrawlView:
    __slots__ = ("lock", "at", "view", "leased", "since", "pending")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.at = float("-inf")
        self.view: ControlView | None = None
        self.leased = 0     # hosts leased over the crawl, as read
        self.since = 0      # hosts this process leased since that read
        self.pending = 0    # hosts reserved and not leased yet

    def _refresh(self, w: Worker, now: float) -> None:
        pipe = w.control.client.pipeline(transaction=False)
        read_view = w.control.queue_view(pipe)
        read_leased = w.frontier.queue_leased_hosts(pipe, w.control.client) if w.settings.MAX_PAGES else None
        replies = pipe.execute(raise_on_error=False)
        self.view = read_view(replies)
        self.leased = read_leased(replies) if read_leased is not None else 0
        self.since, self.at = 0, now

    def read(self, w: Worker, fresh: bool = False) -> tuple[ControlView, int]:
        """The view of this control tick (``fresh``: read now)."""
        with self.lock:
            now = time.monotonic()
            if fresh or self.view is None or now // CONTROL_EVERY_S != self.at // CONTROL_EVERY_S:
                self._refresh(w, now)
            assert self.view is not None
            return self.view, self.leased + self.since + self.pending

    def reserve(self, w: Worker, want: int) -> tuple[int, int, int]:
        """Up to ``want`` hosts to lease within the page budget: (granted, the budget's
        spare pages after them and hosts leased with them, as far as this process knows).
        The caller says then how many it leased (``leased_now``)."""
        s = w.settings
        with self.lock:
            now = time.monotonic()
            age = now - self.at
            if self.view is None or age >= _RESERVE_FRESH_S:
                self._refresh(w, now)
                age = 0.0
            assert self.view is not None
            leased = self.leased + self.since + self.pending
            spare = s.MAX_PAGES - self.view.pages - leased
            # since the read: at most about a page per leased host and delay, and hosts
            # leased by the other sessions, at most a round of leases each
            margin = (self.leased * (1 + age / max(s.MIN_DELAY_S, 0.01)) + _lease_round(s)) if age else 0
            if age and spare - want < margin:
                self._refresh(w, now)
                leased = self.leased + self.pending
                spare = s.MAX_PAGES - self.view.pages - leased
            granted = max(0, min(want, spare))
            self.pending += granted
            return granted, spare - granted, leased + granted

    def leased_now(self, granted: int, got: int) -> None:
        """``got`` of the ``granted`` hosts reserved were leased."""
        with self.lock:
            self.pending -= granted
            self.since += got


_views: weakref.WeakKeyDictionary[Control, _CrawlView] = weakref.WeakKeyDictionary()
_views_lock = threading.Lock()


def shared_view(w: Worker) -> _CrawlView:
    """The process's view of the crawl, shared by its sessions."""
    with _views_lock:
        shared = _views.get(w.control)
        if shared is None:
            shared = _views[w.control] = _CrawlView()
    return shared


def crawl_view(w: Worker, fresh: bool = False) -> tuple[ControlView, int]:
    """(the crawl's state, hosts leased over the crawl: 0 without a page budget)."""
    return shared_view(w).read(w, fresh)


def near_budget_end(s: Settings, spare: int | None) -> bool:
    """Whether the page budget's spare is within what the crawl can lease in a control
    tick unseen by a view of it."""
    return spare is not None and spare < _lease_round(s)


def _lease_round(s: Settings) -> int:
    """Hosts a round of leases by every session (or by wake) can take."""
    return s.MAX_FETCH_SESSIONS * max(s.FETCH_BATCH, s.WAKE_MAX_HOSTS)
