"""The crawl's state as the fetch sessions of one process see it: read once a control
tick, whatever the number of sessions (each used to read it). The sessions tick
together, so the view a session gets is a few ms old."""
from __future__ import annotations

import threading
import time
import weakref

from crawler_tasks.runtime.control import Control, ControlView
from crawler_tasks.stages.worker import Worker

_FRESH_S = 0.125   # half the sessions' control tick


class _CrawlView:
    __slots__ = ("lock", "at", "view", "leased")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.at = float("-inf")
        self.view: ControlView | None = None
        self.leased = 0

    def read(self, w: Worker) -> tuple[ControlView, int]:
        with self.lock:
            now = time.monotonic()
            if self.view is None or now - self.at >= _FRESH_S:
                self.view = w.control.view()
                self.leased = w.frontier.leased_hosts() if w.settings.MAX_PAGES else 0
                self.at = now
            return self.view, self.leased


_views: weakref.WeakKeyDictionary[Control, _CrawlView] = weakref.WeakKeyDictionary()
_views_lock = threading.Lock()


def crawl_view(w: Worker) -> tuple[ControlView, int]:
    """(the crawl's state, hosts leased over the crawl: 0 without a page budget)."""
    with _views_lock:
        shared = _views.get(w.control)
        if shared is None:
            shared = _views[w.control] = _CrawlView()
    return shared.read(w)
