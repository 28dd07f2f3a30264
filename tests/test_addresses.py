"""The process's address gate: names on one address take turns, each after the last one's rest."""
from __future__ import annotations

import math
import threading

from crawler_tasks.fetch.addresses import MAX_ADDRESSES, AddressGate


def test_one_host_at_a_time_then_the_rest_then_the_next():
    gate = AddressGate()
    assert gate.take("10.0.0.1", "a.test", now=100.0) == (0.0, None)
    assert gate.take("10.0.0.1", "b.test", now=100.5) == (math.inf, None)   # a's turn holds it
    assert gate.take("10.0.0.2", "c.test", now=100.5) == (0.0, None)        # another address is free
    gate.give("10.0.0.1", 102.0)
    assert gate.take("10.0.0.1", "b.test", now=101.0) == (102.0, None)      # resting: b waits for 102
    assert gate.take("10.0.0.1", "b.test", now=102.0) == (0.0, "a.test")    # b goes; a's connection must close
    gate.give("10.0.0.1", 103.0)
    assert gate.take("10.0.0.1", "b.test", now=103.0) == (0.0, None)        # the same host again: its own connection


def test_only_one_of_many_threads_wins_a_free_address():
    gate = AddressGate()
    wins: list[str] = []
    barrier = threading.Barrier(16)

    def contend(i: int) -> None:
        barrier.wait()
        if gate.take("10.0.0.9", f"h{i}.test", now=5.0)[0] == 0.0:
            wins.append(f"h{i}.test")

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1


def test_resting_addresses_are_forgotten_past_the_bound_and_held_ones_kept():
    gate = AddressGate()
    gate.take("192.0.2.1", "held.test", now=0.0)   # never given back: held
    for i in range(MAX_ADDRESSES):
        address = f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}"
        gate.take(address, "x.test", now=1.0)
        gate.give(address, 2.0)
    assert gate.take("192.0.2.2", "new.test", now=3.0) == (0.0, None)   # the bound: rested ones forgotten
    assert gate.take("192.0.2.1", "other.test", now=3.0) == (math.inf, None)
