"""After a crash, outputs and crawl state agree (ops/reconcile.py, frontier/reclaim.py):
the dead crawl's leases and hand-offs come back at once, recorded URLs leave the queues,
a torn last line is cut, uncommitted feed lines move aside."""
from __future__ import annotations

import dataclasses
import json
import os
import time

import orjson

from crawler_tasks.frontier import Discovered, Frontier
from crawler_tasks.frontier.reclaim import forget, give_back, queue_heads
from crawler_tasks.ops.reconcile import _move_uncommitted_feed, cut_torn_line, reconcile, recorded_among
from crawler_tasks.records import Action


def _line(url: str) -> bytes:
    return json.dumps({"url": url, "status": 200}).encode() + b"\n"


def _record_line(record) -> bytes:
    return orjson.dumps(record.output()) + b"\n"


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


def test_a_stage_task_killed_after_it_wrote_writes_nothing_twice_when_run_again(settings, tmp_path):
    """manage.py killed (issue 24's 9 duplicate records and 7 duplicate feed lines) after
    an enqueue task appended its group's records, or a parse task wrote its feed lines and
    handed its pages on, and before either acknowledged its message: the resume leaves
    out what they wrote (the torn record's half is kept), drops a message left empty,
    ends a dropped enqueue message's group, and each record is then written once."""
    from collections import Counter

    import redis
    from kombu import Connection, Exchange, Queue

    from crawler_tasks import tasks
    from crawler_tasks.broker import broker_options
    from crawler_tasks.celery import app
    from crawler_tasks.output.spool import spool_path
    from crawler_tasks.queues import ENQUEUE_QUEUE, OLD_ENQUEUE_QUEUE, parse_queue
    from crawler_tasks.records import Capture, FetchedPage, PageRecord, record_from_message, to_message
    from crawler_tasks.runtime.control import Control
    from crawler_tasks.stages.enqueue import enqueue_stage
    from crawler_tasks.stages.worker import Worker

    broker = settings.REDIS_URL.rsplit("/", 1)[0] + "/3"
    s = dataclasses.replace(settings, SHARDS=1, OUT_DIR=str(tmp_path), BROKER_URL=broker)
    parse_q = parse_queue(s.node_name)
    groups = {name: f"{i + 1:x}-1-0000abcd" for i, name in enumerate(["torn", "written", "handed", "fresh"])}

    def recs(host: str, n: int) -> list[PageRecord]:
        return [PageRecord(FetchedPage(url=f"http://{host}.test/{i}", status=200, fetched_at="2026-12-03T09:00:00Z"))
                for i in range(n)]

    torn, written, handed = recs("a", 3), recs("d", 1), recs("b", 2)
    lines = [_record_line(r) for r in torn + written]
    # the torn group's last record was half written: step 1 cuts it
    (tmp_path / "pages.jsonl").write_bytes(lines[0] + lines[1] + lines[3] + lines[2][:20])
    feed = _line("http://b.test/0") + _line("http://b.test/1")   # the handed-on parse task's feed lines
    (tmp_path / "feed.jsonl").write_bytes(feed)
    (tmp_path / "spool").mkdir()
    open(spool_path(s, groups["handed"]), "wb").close()
    Control(s).begin_batches(groups.values(), time.time() + 600)
    try:
        with Connection(broker, transport_options=broker_options(s)) as conn:   # the workers' key prefix
            producer = app.amqp.Producer(conn)

            def send(task, items, group: str) -> None:
                task.apply_async(([to_message(x) for x in items], group), producer=producer,
                                 queue=parse_q if task is tasks.parse else ENQUEUE_QUEUE if task is tasks.enqueue else OLD_ENQUEUE_QUEUE)

            def take(queue: str):
                return Queue(queue, Exchange(queue), routing_key=queue)(conn.channel()).get(no_ack=False)

            send(tasks.enqueue, torn, groups["torn"])
            send(tasks.enqueue_old_name, written, groups["written"])   # left by a crawl before 0.2
            assert take(ENQUEUE_QUEUE) and take(OLD_ENQUEUE_QUEUE)   # both taken, never acknowledged
            send(tasks.parse, [Capture(FetchedPage(url=r.page.url)) for r in handed], groups["handed"])
            send(tasks.parse, [Capture(FetchedPage(url="http://c.test/0"))], groups["fresh"])
            assert take(parse_q) and take(parse_q)
            send(tasks.enqueue, handed, groups["handed"])        # the handed-on parse task's hand-off

            done = reconcile(s, tmp_path)
            assert (done.requeued, done.written_tasks, done.written_items) == (2, 2, 2 + 1 + 2)
            assert "2 interrupted task(s) already written dropped" in done.summary()
            queued = {q: [] for q in (ENQUEUE_QUEUE, OLD_ENQUEUE_QUEUE, parse_q)}
            for q in queued:
                while (message := take(q)) is not None:
                    message.ack()
                    queued[q].append(message.payload[0])
        assert [[m["url"] for m in items] for items, _ in queued[parse_q]] == [["http://c.test/0"]]
        assert queued[OLD_ENQUEUE_QUEUE] == []   # the old queue's message was written: dropped
        assert sorted((group, [m["url"] for m in items]) for items, group in queued[ENQUEUE_QUEUE]) == [
            (groups["torn"], ["http://a.test/2"]), (groups["handed"], ["http://b.test/0", "http://b.test/1"])]
        inflight = set(redis.Redis.from_url(s.REDIS_URL, decode_responses=True).zrange(
            Control(s).keys.inflight, 0, -1))
        assert inflight == {groups["torn"], groups["handed"], groups["fresh"]}   # "written" ended here
        assert not os.path.exists(spool_path(s, groups["handed"]))
        assert (tmp_path / "feed.jsonl").read_bytes() == feed   # committed: on its way to pages.jsonl

        worker = Worker.create(s)
        for items, group in queued[ENQUEUE_QUEUE]:   # the enqueue tasks run again
            enqueue_stage(worker, [record_from_message(m) for m in items], group)
        urls = Counter(orjson.loads(line)["url"] for line in (tmp_path / "pages.jsonl").read_bytes().splitlines())
        assert urls == Counter(r.page.url for r in torn + written + handed)   # each once
        assert set(redis.Redis.from_url(s.REDIS_URL, decode_responses=True).zrange(
            Control(s).keys.inflight, 0, -1)) == {groups["fresh"]}
    finally:
        redis.Redis.from_url(broker).flushdb()


def test_a_stage_message_the_broker_lost_is_sent_again_from_its_kept_copy(settings, tmp_path):
    """kombu's Redis transport pops a message, then records it as taken in a second
    write; a Redis that begins refusing writes (disk full) between the two loses it
    (CI: 6 URLs never recorded). Each stage message is kept on the node's disk until its
    batch's records are written: the resume sends again those no queue holds, without
    the items already recorded, and drops a kept copy left with none."""
    import redis
    from kombu import Connection, Exchange, Queue

    from crawler_tasks.broker import broker_options
    from crawler_tasks.output.spool import keep_message, kept_messages
    from crawler_tasks.queues import ENQUEUE_QUEUE, parse_queue
    from crawler_tasks.records import FetchedPage, PageRecord, to_message

    broker = settings.REDIS_URL.rsplit("/", 1)[0] + "/3"
    s = dataclasses.replace(settings, SHARDS=1, OUT_DIR=str(tmp_path), BROKER_URL=broker)
    recs = [PageRecord(FetchedPage(url=f"http://a.test/{i}", status=200, fetched_at="2026-12-03T09:00:00Z"))
            for i in range(3)]
    (tmp_path / "pages.jsonl").write_bytes(_record_line(recs[0]))   # a record another run wrote
    keep_message(s, "1-1-0000abcd", "dedup", [to_message(r) for r in recs])
    keep_message(s, "2-1-0000abcd", "parse", [to_message(FetchedPage(url="http://b.test/0"))])
    keep_message(s, "3-1-0000abcd", "dedup", [to_message(recs[0])])   # all recorded: done
    keep_message(s, "4-1-0000abcd", "parse", [to_message(FetchedPage(url="http://c.test/new"))])
    f = Frontier(s)
    for url in ["http://a.test/1", "http://a.test/2", "http://b.test/0"]:   # seen, fetched: not queued
        segment, positions = f.bloom.positions(url)
        for pos in positions:
            f.client(0).setbit(f.keys(0).bloom(segment), pos, 1)
    try:
        done = reconcile(s, tmp_path)
        assert done.resent == 2 and "2 task(s) the broker lost sent again" in done.summary()
        # a URL the frontier does not know (found after a restored checkpoint) is found and fetched again
        assert done.refetched == 1 and "1 page(s) of lost tasks left to be fetched again" in done.summary()
        with Connection(broker, transport_options=broker_options(s)) as conn:
            def drain(queue: str) -> list:
                got, q = [], Queue(queue, Exchange(queue), routing_key=queue)(conn.channel())
                while (message := q.get(no_ack=True)) is not None:
                    got.append(message.payload[0])
                return got

            assert [(batch, [m["url"] for m in items]) for items, batch in drain(ENQUEUE_QUEUE)] == [
                ("1-1-0000abcd", ["http://a.test/1", "http://a.test/2"])]
            assert [(batch, [m["url"] for m in items]) for items, batch in drain(parse_queue(s.node_name))] == [
                ("2-1-0000abcd", ["http://b.test/0"])]
        assert set(kept_messages(s)) == {"1-1-0000abcd", "2-1-0000abcd"}   # until their records are written
    finally:
        redis.Redis.from_url(broker).flushdb()


def test_after_a_redis_restart_urls_recorded_or_handed_on_leave_the_queues(settings, tmp_path):
    """A redis-server killed while a busy disk held its fsync lost the last turns of a
    session: their URLs are back at the head of their host's queue while their pages are
    recorded, or on their way (a kept stage message). They leave; the others stay."""
    from crawler_tasks.ops.reconcile import forget_recorded
    from crawler_tasks.output.spool import keep_message
    from crawler_tasks.records import FetchedPage, to_message

    s = dataclasses.replace(settings, SHARDS=1, OUT_DIR=str(tmp_path))
    f = Frontier(s)
    f.put_discovered([Discovered(url=f"http://a.test/{i}", host="a.test") for i in range(4)])
    f.get_urls(0, 0, now=time.time())   # into the back queue, nothing leased
    (tmp_path / "pages.jsonl").write_bytes(_line("http://a.test/0"))
    keep_message(s, "1-1-0000abcd", "parse", [to_message(FetchedPage(url="http://a.test/1"))])
    assert forget_recorded(s, tmp_path) == 2
    assert [e.url for e in f.host_queue(0, "a.test")] == ["http://a.test/2", "http://a.test/3"]
    assert forget_recorded(s, tmp_path) == 0
