"""The exchange pool: the threads of a fetch worker process that run host turns.

A held host that waits out its delay is an entry in its session's heap; it gets a
thread only once its ``te`` has passed, for the length of one turn. So the threads in
use follow Little's law by themselves: turns due per second x time per turn. A thread
is started when a turn is due and none is free, and ends after ``IDLE_EXIT_S`` without
work; a turn goes to the thread idle the shortest time, so the others do idle out.
Growth stops at the operator's caps, shared by the process's sessions:
``FETCH_MAX_EXCHANGES`` turns in flight (threads and sockets), ``FETCH_MAX_HOSTS`` hosts
held, and ``FETCH_MEMORY_MB`` of page bodies held (fetched and not yet spooled, plus
the turns in flight at the mean body size). A session asks ``room`` before it gives a
due host to the pool; a due host that finds no room waits in its heap (its gap only
grows), and parse back-pressure and a crawl pause hold it there the same way.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from crawler_tasks.settings import Settings

log = logging.getLogger(__name__)

IDLE_EXIT_S = 5.0     # a thread without a turn for this long ends
_MEAN_BODY_START = 64 * 1024


class _Slot:
    """An exchange thread's mailbox: the turn handed to it, and the signal that one was."""

    __slots__ = ("job", "ready")

    def __init__(self, job: Callable[[], None]) -> None:
        self.job: Callable[[], None] | None = job
        self.ready = threading.Event()


class ExchangePool:
    def __init__(self, max_exchanges: int, max_hosts: int, memory_bytes: int, idle_exit_s: float = IDLE_EXIT_S) -> None:
        self.max_exchanges, self.max_hosts, self.memory_bytes = max_exchanges, max_hosts, memory_bytes
        self.idle_exit_s = idle_exit_s
        self._lock = threading.Lock()
        # idle threads, the one idle the shortest time last: a turn goes to it, so the threads
        # beyond what the turns in flight need idle out (a shared queue kept every thread of
        # the crawl's opening burst alive: 523 of them, ~0.25 MiB each, at 150 turns in flight)
        self._idle: list[_Slot] = []
        self.threads = 0        # started and not ended
        self.running = 0        # turns given and not finished
        self.peak = 0           # most turns in flight at once
        self.held_hosts = 0     # hosts held by the process's sessions
        self.held_bytes = 0     # bodies fetched and not yet spooled
        self.mean_body = float(_MEAN_BODY_START)

    @classmethod
    def for_settings(cls, s: Settings) -> "ExchangePool":
        return cls(s.FETCH_MAX_EXCHANGES, s.FETCH_MAX_HOSTS, s.FETCH_MEMORY_MB * 2**20)

    def room(self) -> bool:
        """Whether one more turn may start now (exchanges and memory)."""
        return (self.running < self.max_exchanges
                and self.held_bytes + (self.running + 1) * self.mean_body <= self.memory_bytes)

    def host_room(self) -> int:
        """How many more hosts the process's sessions may hold."""
        return max(0, self.max_hosts - self.held_hosts)

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` on the thread idle the shortest time (a new one when none is)."""
        with self._lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
            slot = self._idle.pop() if self._idle else None
            if slot is None:
                self.threads += 1
        if slot is None:
            threading.Thread(target=self._serve, args=(_Slot(job),), name="fetch-exchange", daemon=True).start()
        else:
            slot.job = job
            slot.ready.set()

    def hold(self, hosts: int) -> None:
        with self._lock:
            self.held_hosts += hosts

    def keep_bytes(self, n: int) -> None:
        """Bodies fetched (n > 0) or spooled (n < 0); a fetched body also updates the mean."""
        with self._lock:
            self.held_bytes += n
            if n > 0:
                self.mean_body += (n - self.mean_body) / 32

    def _serve(self, slot: _Slot) -> None:
        while True:
            job, slot.job = slot.job, None
            try:
                if job is not None:
                    job()
            except Exception:  # noqa: BLE001 - the job logs its own errors; the thread stays
                log.exception("a fetch turn raised")
            finally:
                slot.ready.clear()
                with self._lock:
                    self.running -= 1
                    self._idle.append(slot)
            if slot.ready.wait(self.idle_exit_s):
                continue
            with self._lock:
                if slot in self._idle:   # still idle: no turn was handed to it meanwhile
                    self._idle.remove(slot)
                    self.threads -= 1
                    return
            slot.ready.wait()   # a turn was handed to it as it timed out: it is on its way
