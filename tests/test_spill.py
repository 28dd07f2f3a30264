"""Front queues past their bound spill to disk and come back: memory stays bounded and
no URL is lost or duplicated."""
from __future__ import annotations

import dataclasses
import gzip
from collections import Counter

from crawler_tasks.connection import global_client
from crawler_tasks.frontier import Discovered, Entry, Frontier
from crawler_tasks.frontier.spill import Spiller, list_chunks, read_entries, write_chunk
from crawler_tasks.keys import GlobalKeys
from crawler_tasks.runtime.control import Control
from crawler_tasks.runtime.maintenance import run_maintenance


def test_spill_and_read_back_lose_nothing(settings, tmp_path):
    s = dataclasses.replace(settings, SHARDS=1, FRONT_SPILL_AT=100, FRONT_REFILL_AT=50, MAX_ACTIVE_HOSTS=5,
                            OUT_DIR=str(tmp_path))
    frontier = Frontier(s)
    spiller = Spiller(s, frontier)
    urls = [f"http://h{i % 40}.test/p{i}" for i in range(1000)]
    frontier.put_discovered([Discovered(url=u, host=u.split("/")[2]) for u in urls])
    out, _ = spiller.run(chunk=200)
    assert out == 900                    # one run brings the queue down to its bound, chunk by chunk
    assert spiller.run(chunk=200)[0] == 0
    sizes = frontier.sizes(0)
    client = frontier.client(0)
    assert client.llen(frontier.keys(0).front(0)) <= 100          # memory bounded
    assert sizes["spilled"] == 900 and sizes["front"] == 1000      # still counted as queued
    assert len(list((tmp_path / "spill").rglob("*.gz"))) == 5

    fetched = []
    now = 1000.0
    for _ in range(5000):
        spiller.run(chunk=200)
        leases = frontier.get_urls(0, 100, now=now)
        for lease in leases:
            fetched.append(lease.entry.url)
            frontier.complete(lease, te=now)
        if not leases and frontier.sizes(0)["front"] + frontier.sizes(0)["back"] == 0:
            break
        now += 1
    assert Counter(fetched) == Counter(urls)
    assert not list((tmp_path / "spill").rglob("*.gz"))


def test_a_crash_between_staging_and_file_loses_nothing(settings, tmp_path):
    s = dataclasses.replace(settings, SHARDS=1, FRONT_SPILL_AT=10, FRONT_REFILL_AT=0, OUT_DIR=str(tmp_path))
    frontier = Frontier(s)
    frontier.put_discovered([Discovered(url=f"http://a.test/{i}", host="a.test") for i in range(30)])
    k = frontier.keys(0)
    # the script staged a chunk, then the maintenance process died before writing it
    assert frontier.run_script(0, "spill", [k.front(0), k.spill_staging(0), k.spilled], [10, 20]) == 20
    Spiller(s, frontier).run()  # the next maintenance run writes the staged chunk
    assert frontier.client(0).llen(k.spill_staging(0)) == 0
    assert frontier.sizes(0)["spilled"] == 20 and len(list((tmp_path / "spill").rglob("*.gz"))) == 1


def test_a_crash_between_file_and_staging_delete_writes_no_second_file(settings, tmp_path):
    s = dataclasses.replace(settings, SHARDS=1, FRONT_SPILL_AT=10, FRONT_REFILL_AT=0, OUT_DIR=str(tmp_path))
    frontier = Frontier(s)
    frontier.put_discovered([Discovered(url=f"http://a.test/{i}", host="a.test") for i in range(30)])
    k = frontier.keys(0)
    client = frontier.client(0)
    assert frontier.run_script(0, "spill", [k.front(0), k.spill_staging(0), k.spilled], [10, 20]) == 20
    write_chunk(tmp_path / "spill" / "s0" / "l0", 1, client.lrange(k.spill_staging(0), 0, -1))  # then died
    Spiller(s, frontier).run()
    assert client.llen(k.spill_staging(0)) == 0
    assert [p.name for p in (tmp_path / "spill").rglob("*.gz")] == ["000000000001-20.gz"]
    assert frontier.sizes(0)["spilled"] == 20


def test_hot_host_queue_is_capped_and_refilled_from_disk(settings, tmp_path):
    s = dataclasses.replace(settings, SHARDS=1, HOST_QUEUE_CAP=50, FRONT_SPILL_AT=0, OUT_DIR=str(tmp_path))
    frontier = Frontier(s)
    spiller = Spiller(s, frontier)
    urls = [f"http://hot.test/p{i}" for i in range(400)] + [f"http://cold{i}.test/" for i in range(10)]
    frontier.put_discovered([Discovered(url=u, host=u.split("/")[2]) for u in urls])
    frontier.get_urls(0, 0, now=1.0)  # refill only
    k = frontier.keys(0)
    client = frontier.client(0)
    assert client.llen(k.queue("hot.test")) == 50
    spiller.run(chunk=1000)
    assert client.llen(k.overflow) == 0 and frontier.sizes(0)["spilled"] == 350
    assert len(list((tmp_path / "spill").rglob("*.gz"))) == 1

    fetched = []
    now = 10.0
    for _ in range(3000):
        spiller.run(chunk=1000)
        leases = frontier.get_urls(0, 100, now=now)
        for lease in leases:
            fetched.append(lease.entry.url)
            frontier.complete(lease, te=now)
        assert client.llen(k.queue("hot.test")) <= 50 + 50  # the cap, plus one read-back
        sizes = frontier.sizes(0)
        if not leases and sizes["front"] + sizes["back"] == 0:
            break
        now += 1
    assert Counter(fetched) == Counter(urls)


def test_spilling_a_chunk_larger_than_luas_unpack_limit(settings, tmp_path):
    s = dataclasses.replace(settings, SHARDS=1, FRONT_SPILL_AT=100, FRONT_REFILL_AT=0, OUT_DIR=str(tmp_path))
    frontier = Frontier(s)
    urls = [f"http://h{i % 50}.test/p{i}" for i in range(20_100)]
    for i in range(0, len(urls), 5000):
        frontier.put_discovered([Discovered(url=u, host=u.split("/")[2]) for u in urls[i:i + 5000]])
    spilled, _ = Spiller(s, frontier).run()  # default chunk: 10,000 entries in one script call
    assert spilled == 20_000
    assert sorted(f.count for f in list_chunks(tmp_path / "spill" / "s0" / "l0")) == [10_000, 10_000]


# --- crash safety and damaged files ---------------------------------------------------

def _entries(urls: list[str]) -> list[str]:
    return [Entry(u).encode() for u in urls]


def _gz(lines: list[str]) -> bytes:
    return gzip.compress(("\n".join(lines) + "\n").encode())


def test_read_entries_recovers_what_precedes_the_damage(tmp_path):
    lines = _entries([f"http://a.test/{i}" for i in range(2000)])
    first, second = _gz(lines[:1000]), _gz(lines[1000:])
    path = tmp_path / "f.gz"
    path.write_bytes(first + second)
    assert read_entries(path) == (lines, True)
    path.write_bytes(first + second[: len(second) // 2])           # torn mid-member
    got, intact = read_entries(path)
    assert not intact and lines[:1000] == got[:1000] and got == lines[: len(got)] and len(got) < 2000
    middle = len(first) // 2
    path.write_bytes(first[:middle] + bytes(b ^ 0xFF for b in first[middle:middle + 50]) + first[middle + 50:])
    got, intact = read_entries(path)                                  # corrupt bytes
    assert not intact and got == lines[: len(got)]
    path.write_bytes(b"not gzip at all\n")
    assert read_entries(path) == ([], False)
    path.write_bytes(_gz(lines[:3] + ["garbage without fields"]))
    assert read_entries(path) == (lines[:3], False)
    assert read_entries(tmp_path / "missing.gz") == ([], False)


def test_crash_leftovers_are_cleared_and_the_larger_file_of_a_seq_wins(tmp_path):
    write_chunk(tmp_path, 1, ["a"] * 5)
    write_chunk(tmp_path, 1, ["a"] * 8)          # a replacement whose old file was not yet removed
    write_chunk(tmp_path, 2, ["b"] * 3)
    (tmp_path / "000000000003-9.tmp").write_bytes(b"half written")
    chunks = list_chunks(tmp_path)
    assert [(c.seq, c.count) for c in chunks] == [(1, 8), (2, 3)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["000000000001-8.gz", "000000000002-3.gz"]


def _drain(s, frontier, urls_expected_max: int, now: float = 10.0) -> list[str]:
    """Maintenance, lease, complete until the frontier is empty; maintenance never raises."""
    fetched = []
    for _ in range(2 * urls_expected_max):
        run_maintenance(s, frontier, now=now)
        leases = frontier.get_urls(0, 100, now=now)
        for lease in leases:
            fetched.append(lease.entry.url)
            frontier.complete(lease, te=now)
        sizes = frontier.sizes(0)
        if not leases and sizes["front"] + sizes["back"] == 0:
            break
        now += 1
    else:
        raise AssertionError(f"the frontier did not drain: {frontier.sizes(0)}")
    return fetched


def _stats(s) -> dict[str, int]:
    return {k: int(v) for k, v in global_client(s).hgetall(GlobalKeys(s.KEY_PREFIX).stats).items()}


def test_a_torn_append_of_the_old_layout_does_not_stop_maintenance(settings, tmp_path):
    # The old code appended a gzip member per group to h/<hash>.gz, then counted it; a
    # crash mid-append left a torn member (its URLs still in the overflow list, uncounted)
    # and every later maintenance run raised EOFError.
    s = dataclasses.replace(settings, SHARDS=1, HOST_QUEUE_CAP=50, FRONT_SPILL_AT=0, OUT_DIR=str(tmp_path))
    frontier = Frontier(s)
    spiller = Spiller(s, frontier)
    urls = [f"http://hot.test/p{i}" for i in range(60)]
    counted, torn = _entries(urls[:30]), _entries(urls[30:])
    legacy = spiller._host_dir(0, "hot.test").with_suffix(".gz")
    legacy.parent.mkdir(parents=True)
    member = _gz(torn)
    legacy.write_bytes(_gz(counted) + member[: len(member) // 2])
    k = frontier.keys(0)
    client = frontier.client(0)
    client.sadd(k.spilled_hosts, "hot.test")
    client.rpush(k.overflow, *torn)
    client.set(k.spilled, 30)
    client.set(k.queued, 60)

    fetched = _drain(s, frontier, 60)
    assert sorted(fetched) == sorted(urls)                 # the intact URLs came back, none lost
    assert frontier.sizes(0)["spilled"] == 0               # the counters agree with the files
    assert _stats(s)["spill/error/unreadable"] == 1        # counted once, not once per run
    assert "spill/error/lost" not in _stats(s)
    assert legacy.with_name(legacy.name + ".damaged").exists()
    assert not list((tmp_path / "spill").rglob("*.gz"))
    Control(s).start()   # maintenance decides for a started crawl only
    assert run_maintenance(s, frontier, now=1e6).state == "finished"  # the stop decision works again


def test_a_damaged_host_chunk_gives_back_its_intact_entries_and_counts_the_rest(settings, tmp_path):
    s = dataclasses.replace(settings, SHARDS=1, HOST_QUEUE_CAP=50, FRONT_SPILL_AT=0, OUT_DIR=str(tmp_path))
    frontier = Frontier(s)
    urls = [f"http://hot.test/p{i}" for i in range(400)]
    frontier.put_discovered([Discovered(url=u, host="hot.test") for u in urls])
    frontier.get_urls(0, 0, now=1.0)              # refill: 50 in the back queue, 350 overflow
    Spiller(s, frontier).run_hosts()
    [chunk] = list((tmp_path / "spill").rglob("*.gz"))
    assert chunk.name == "000000000001-350.gz"
    data = chunk.read_bytes()
    chunk.write_bytes(data[: len(data) // 2])

    fetched = _drain(s, frontier, 400)
    stats = _stats(s)
    assert stats["spill/error/unreadable"] == 1
    lost = stats["spill/error/lost"]
    assert 0 < lost < 350
    assert fetched == urls[: 400 - lost]          # every intact entry, in order, none twice
    assert frontier.sizes(0)["spilled"] == 0
    Control(s).start()   # maintenance decides for a started crawl only
    assert run_maintenance(s, frontier, now=1e6).state == "finished"


def test_a_damaged_front_spill_file_gives_back_its_intact_entries(settings, tmp_path):
    s = dataclasses.replace(settings, SHARDS=1, FRONT_SPILL_AT=100, FRONT_REFILL_AT=50, OUT_DIR=str(tmp_path))
    frontier = Frontier(s)
    spiller = Spiller(s, frontier)
    urls = [f"http://h{i % 40}.test/p{i}" for i in range(1000)]
    frontier.put_discovered([Discovered(url=u, host=u.split("/")[2]) for u in urls])
    while spiller.run(chunk=200)[0]:
        pass
    oldest = sorted((tmp_path / "spill").rglob("*.gz"))[0]
    assert oldest.name == "000000000001-200.gz"
    data = oldest.read_bytes()
    oldest.write_bytes(data[:100] + b"\0" * 50 + data[150:])

    fetched = _drain(s, frontier, 1000)
    lost = _stats(s)["spill/error/lost"]
    assert _stats(s)["spill/error/unreadable"] == 1 and 0 < lost <= 200
    assert len(fetched) == len(set(fetched)) == 1000 - lost and set(fetched) <= set(urls)
    Control(s).start()   # maintenance decides for a started crawl only
    assert run_maintenance(s, frontier, now=1e6).state == "finished"


def test_small_groups_of_a_host_share_one_file(settings, tmp_path):
    s = dataclasses.replace(settings, SHARDS=1, HOST_QUEUE_CAP=50, FRONT_SPILL_AT=0, OUT_DIR=str(tmp_path))
    frontier = Frontier(s)
    spiller = Spiller(s, frontier)
    k = frontier.keys(0)
    client = frontier.client(0)
    client.rpush(k.queue("hot.test"), *_entries([f"http://hot.test/q{i}" for i in range(40)]))  # no room
    urls = [f"http://hot.test/p{i}" for i in range(30)]
    for i in range(0, 30, 10):
        client.rpush(k.overflow, *_entries(urls[i:i + 10]))
        spiller.run_hosts()
    [only] = list((tmp_path / "spill").rglob("*.gz"))
    assert only.name == "000000000001-30.gz"
    assert read_entries(only) == (_entries(urls), True)
