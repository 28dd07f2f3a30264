"""Per-address politeness inside one fetch process: host names that share an address
(shared hosting) take turns at it, one connection at a time, each after the last one's delay.

Why in the process first: a hundred names on one address, all due at the moment it frees,
would each spend a thread and two round trips on the frontier's claim (``ipclaim.lua``)
for one of them to win. Here a due host whose address is taken or resting stays in its
session's heap until the address frees (a heap entry, no thread, no round trip); the
frontier's claim still guards the address against other processes and nodes, and then
mostly succeeds. The last host served on an address is kept, so that the next one closes
the connection the fetcher keeps to it: the server sees one connection from the crawl.

Pure and thread-safe; the clock is the caller's (epoch seconds).
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass

MAX_ADDRESSES = 65_536   # past this, addresses that rest no more are forgotten


@dataclass(slots=True)
class _Address:
    free_at: float   # epoch s; inf while a host's turn holds it
    host: str        # the host served last


class AddressGate:
    """Which host may contact an address now, for one process's sessions."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._addresses: dict[str, _Address] = {}

    def take(self, address: str, host: str, now: float) -> tuple[float, str | None]:
        """(0.0, the other host served last or None) when ``host`` may contact ``address``
        now, which it then holds until ``give``; else (when it frees, or inf while held)."""
        with self._lock:
            slot = self._addresses.get(address)
            if slot is not None and slot.free_at > now:
                return slot.free_at, None
            if slot is None:
                if len(self._addresses) >= MAX_ADDRESSES:
                    self._forget(now)
                self._addresses[address] = _Address(math.inf, host)
                return 0.0, None
            previous, slot.free_at, slot.host = slot.host, math.inf, host
            return 0.0, previous if previous != host else None

    def give(self, address: str, free_at: float) -> None:
        """The turn at ``address`` is over: it rests until ``free_at``."""
        with self._lock:
            slot = self._addresses.get(address)
            if slot is not None:
                slot.free_at = free_at

    def _forget(self, now: float) -> None:
        for address in [a for a, slot in self._addresses.items() if slot.free_at <= now]:
            del self._addresses[address]
