"""Front queues past their bound spill to disk and come back: memory stays bounded and
no URL is lost or duplicated."""
from __future__ import annotations

import dataclasses
from collections import Counter

from crawler_tasks.frontier import Discovered, Frontier
from crawler_tasks.frontier.spill import Spiller


def test_spill_and_read_back_lose_nothing(settings, tmp_path):
    s = dataclasses.replace(settings, SHARDS=1, FRONT_SPILL_AT=100, FRONT_REFILL_AT=50, MAX_ACTIVE_HOSTS=5,
                            OUT_DIR=str(tmp_path))
    frontier = Frontier(s)
    spiller = Spiller(s, frontier)
    urls = [f"http://h{i % 40}.test/p{i}" for i in range(1000)]
    frontier.put_discovered([Discovered(url=u, host=u.split("/")[2]) for u in urls])
    out, _ = spiller.run(chunk=200)
    assert out == 200
    while spiller.run(chunk=200)[0]:
        pass
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
    s = dataclasses.replace(settings, SHARDS=1, FRONT_SPILL_AT=100, OUT_DIR=str(tmp_path))
    frontier = Frontier(s)
    urls = [f"http://h{i % 50}.test/p{i}" for i in range(20_100)]
    for i in range(0, len(urls), 5000):
        frontier.put_discovered([Discovered(url=u, host=u.split("/")[2]) for u in urls[i:i + 5000]])
    spilled, _ = Spiller(s, frontier).run()  # default chunk: 10,000 entries in one script call
    assert spilled == 10_000
