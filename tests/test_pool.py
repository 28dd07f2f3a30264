"""The exchange pool: threads follow the turns given, within the process's caps."""
from __future__ import annotations

import threading
import time

from crawler_tasks.fetch.pool import ExchangePool


def test_threads_follow_the_turns_in_flight_not_the_turns_given():
    pool = ExchangePool(max_exchanges=8, max_hosts=100, memory_bytes=2**30)
    done = threading.Semaphore(0)
    for _ in range(50):   # one short turn at a time: one thread serves them all
        pool.submit(done.release)
        assert done.acquire(timeout=5)
        time.sleep(0.002)
    assert pool.threads <= 2 and pool.peak <= 2
    gate = threading.Event()
    for _ in range(8):    # turns that overlap each take a thread
        pool.submit(gate.wait)
    assert pool.running == 8 and not pool.room() and pool.threads == 8
    gate.set()
    deadline = time.time() + 5
    while pool.running and time.time() < deadline:
        time.sleep(0.01)
    assert pool.running == 0 and pool.room()


def test_threads_beyond_the_turns_in_flight_idle_out_after_a_burst():
    """A burst starts 8 threads; then one turn at a time: the turns go to the thread idle the
    shortest time, so 7 of them idle out (with a shared queue every thread kept getting a turn
    now and then, and none ever did)."""
    pool = ExchangePool(max_exchanges=8, max_hosts=100, memory_bytes=2**30, idle_exit_s=0.3)
    gate = threading.Event()
    for _ in range(8):
        pool.submit(gate.wait)
    assert pool.threads == 8
    gate.set()
    done = threading.Semaphore(0)
    until = time.time() + 1.5
    while time.time() < until:
        pool.submit(done.release)
        assert done.acquire(timeout=5)
        time.sleep(0.01)
    assert pool.threads <= 2, pool.threads


def test_room_stops_at_the_memory_and_host_caps():
    pool = ExchangePool(max_exchanges=100, max_hosts=10, memory_bytes=10 * 2**20)
    pool.hold(7)
    assert pool.host_room() == 3
    pool.hold(5)
    assert pool.host_room() == 0
    assert pool.room()
    pool.keep_bytes(10 * 2**20)   # bodies held and not spooled fill the budget
    assert not pool.room()
    pool.keep_bytes(-10 * 2**20)
    assert pool.room()


def test_a_turn_that_raises_does_not_cost_its_thread():
    pool = ExchangePool(max_exchanges=4, max_hosts=10, memory_bytes=2**30)
    ran = threading.Event()

    def boom() -> None:
        raise RuntimeError("a bug in a turn")

    pool.submit(boom)
    pool.submit(ran.set)
    assert ran.wait(5)
    deadline = time.time() + 5
    while pool.running and time.time() < deadline:
        time.sleep(0.01)
    assert pool.running == 0
