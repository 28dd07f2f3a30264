"""After a crash, outputs and crawl state agree (ops/reconcile.py, frontier/reclaim.py):
the dead crawl's leases and hand-offs come back at once, recorded URLs leave the queues,
a torn last line is cut, uncommitted feed lines move aside."""
from __future__ import annotations

import dataclasses
import json
import time

from crawler_tasks.frontier import Discovered, Frontier
from crawler_tasks.frontier.reclaim import forget, give_back, queue_heads
from crawler_tasks.ops.reconcile import _move_uncommitted_feed, cut_torn_line, reconcile, recorded_among
from crawler_tasks.records import Action


def _line(url: str) -> bytes:
    return json.dumps({"url": url, "status": 200}).encode() + b"\n"


def test_cut_torn_line(tmp_path):
    path = tmp_path / "pages.jsonl"
    assert cut_torn_line(path) == 0   # no file
    path.write_bytes(_line("http://a.test/1") + b'{"url": "http://a.te')
    assert cut_torn_line(path) == len(b'{"url": "http://a.te')
    assert path.read_bytes() == _line("http://a.test/1")
    assert cut_torn_line(path) == 0
    path.write_bytes(b"no newline at all")
    assert cut_torn_line(path) == len(b"no newline at all") and path.read_bytes() == b""


def test_dead_sessions_leases_and_handoffs_come_back_at_once(settings):
    s = dataclasses.replace(settings, SHARDS=1)
    f = Frontier(s)
    f.put_discovered([Discovered(url=f"http://{h}.test/{i}", host=f"{h}.test") for h in "ab" for i in range(3)])
    now = time.time()
    leases = f.get_urls(0, 10, lease_s=600, now=now)
    assert {lease.host for lease in leases} == {"a.test", "b.test"}
    a = next(lease for lease in leases if lease.host == "a.test")
    # a's first page fetched, parked for parse (its worker dies before handing it on), a held on
    held = f.finish(a, te=now, action=Action.DONE, hold_until=now + 600, handoff_until=now + 600).held
    assert held is not None and f.get_urls(0, 10, now=now + 1) == []   # both still leased
    assert give_back(f, 0, now + 1) == (2, 1)
    assert {lease.host for lease in f.get_urls(0, 10, now=now + 1)} == {"a.test", "b.test"}
    assert [e.url for e in f.host_queue(0, "a.test")] == [f"http://a.test/{i}" for i in range(3)]
    assert f.queued(0) == 6


def test_recorded_urls_are_forgotten_and_an_emptied_host_leaves(settings):
    s = dataclasses.replace(settings, SHARDS=1)
    f = Frontier(s)
    f.put_discovered([Discovered(url="http://a.test/1", host="a.test"), Discovered(url="http://b.test/1", host="b.test"),
                      Discovered(url="http://b.test/2", host="b.test")])
    f.get_urls(0, 0, now=time.time())   # refill the back queues, lease nothing
    heads = queue_heads(f, 0)
    assert set(heads) == {"a.test", "b.test"}
    assert forget(f, 0, "a.test", heads["a.test"]) == 1
    assert forget(f, 0, "b.test", heads["b.test"][:1]) == 1
    assert f.queued(0) == 1 and f.host_queue(0, "a.test") == []
    assert set(queue_heads(f, 0)) == {"b.test"}
    leases = f.get_urls(0, 10, now=time.time() + 1)
    assert [lease.entry.url for lease in leases] == ["http://b.test/2"]


def test_reconcile_forgets_what_pages_jsonl_holds(settings, tmp_path):
    s = dataclasses.replace(settings, SHARDS=1, OUT_DIR=str(tmp_path))
    f = Frontier(s)
    f.put_discovered([Discovered(url=f"http://a.test/{i}", host="a.test") for i in range(3)])
    lease = f.get_urls(0, 1, lease_s=600)[0]
    # the worker wrote the page's record, then died before completing its lease
    (tmp_path / "pages.jsonl").write_bytes(_line(lease.entry.url) + b'{"url": "http://a.test/torn')
    done = reconcile(s, tmp_path)
    assert (done.leases, done.forgotten, done.torn_bytes) == (1, 1, len(b'{"url": "http://a.test/torn'))
    assert [e.url for e in f.host_queue(0, "a.test")] == ["http://a.test/1", "http://a.test/2"]
    assert "1 host lease(s) reclaimed" in done.summary()


def test_uncommitted_feed_lines_move_aside(tmp_path):
    pages, feed = tmp_path / "pages.jsonl", tmp_path / "feed.jsonl"
    pages.write_bytes(_line("http://a.test/recorded"))
    feed.write_bytes(_line("http://a.test/recorded") + _line("http://a.test/handed-on") + _line("http://a.test/lost"))
    assert recorded_among(pages, ["http://a.test/recorded", "http://a.test/lost"]) == {"http://a.test/recorded"}
    assert _move_uncommitted_feed(feed, pages, {"http://a.test/handed-on"}) == 1
    assert feed.read_bytes() == _line("http://a.test/recorded") + _line("http://a.test/handed-on")
    assert (tmp_path / "feed.jsonl.uncommitted").read_bytes() == _line("http://a.test/lost")
    assert _move_uncommitted_feed(feed, pages, {"http://a.test/handed-on"}) == 0


def test_a_torn_warc_record_is_cut_from_each_process_last_file(tmp_path):
    import gzip

    from crawler_tasks.ops.reconcile import cut_torn_warc

    warc = tmp_path / "warc"
    warc.mkdir()
    records = [gzip.compress(f"WARC/1.1 record {i}\r\n".encode() * 50) for i in range(3)]
    older = warc / "crawl-20260101000000-vm-41-00001.warc.gz"
    last = warc / "crawl-20260101000100-vm-41-00002.warc.gz"
    other = warc / "crawl-20260101000000-vm-42-00001.warc.gz"
    older.write_bytes(records[0] + records[1][:20])      # not the last of its process: left alone
    last.write_bytes(records[0] + records[1] + records[2][: len(records[2]) // 2])
    other.write_bytes(records[0] + records[1])
    assert cut_torn_warc(warc) == len(records[2]) // 2
    assert last.read_bytes() == records[0] + records[1]
    assert other.read_bytes() == records[0] + records[1]
    assert older.stat().st_size == len(records[0]) + 20
    with gzip.open(last) as f:
        assert f.read().count(b"record 1") == 50


def test_unseen_and_queued_among(settings):
    from crawler_tasks.frontier.reclaim import queued_among, unseen_among

    f = Frontier(settings)
    known = [f"http://a.test:8080/{i}" for i in range(50)]
    f.put_discovered([Discovered(url=u, host="a.test:8080") for u in known])
    new = {f"http://b.test/{i}" for i in range(50)}
    assert unseen_among(f, set(known) | new) == new
    shard = f.shard_of("a.test:8080")
    assert queued_among(f, shard, set(known[:3]) | new) == set(known[:3])


def test_once_written_waits_for_redis_instead_of_retrying_the_task():
    import pytest
    import redis

    from crawler_tasks.output.jsonl import once_written

    calls = []

    def flaky() -> None:
        calls.append(1)
        if len(calls) < 3:
            raise redis.ConnectionError("restarting")

    once_written(flaky)
    assert len(calls) == 3
    with pytest.raises(redis.ConnectionError):
        once_written(lambda: (_ for _ in ()).throw(redis.ConnectionError("down")), wait_s=0.0)
    with pytest.raises(ValueError):   # not a Redis outage: raised at once
        once_written(lambda: int("x"))
