"""The embedded redis-server: closed to strangers, no CONFIG, fast and clear failures;
the runner's startup check; waiting-host reasons; the progress line."""
from __future__ import annotations

import dataclasses
import io
import os
import sys
import time

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from crawler_tasks.exceptions import ConfigError
from crawler_tasks.frontier import Frontier
from crawler_tasks.ops.embedded import EmbeddedRedis, free_port
from crawler_tasks.ops.progress import StatusLine, eta_s, progress_line
from crawler_tasks.ops.waiting import WaitingHost, WaitReason, classify, short_error, waiting_hosts
from crawler_tasks.runtime.control import CrawlState
from crawler_tasks.runtime.maintenance import Progress


def test_relative_data_dir_from_another_folder_password_and_no_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with EmbeddedRedis("rel/redis", save="") as server:
        assert server.data_dir == tmp_path / "rel" / "redis"
        assert server.password and server.password in server.url
        ours = redis.Redis.from_url(server.url)
        ours.set("k", "v")
        stranger = redis.Redis(host="127.0.0.1", port=server.port, socket_timeout=2)
        with pytest.raises(redis.AuthenticationError):
            stranger.get("k")
        for command in (("CONFIG", "SET", "dir", "/tmp"), ("DEBUG", "SLEEP", "0"), ("SHUTDOWN",), ("MODULE", "LIST")):
            with pytest.raises(redis.ResponseError, match="unknown command"):
                ours.execute_command(*command)
        cmdline = open(f"/proc/{server.proc.pid}/cmdline", "rb").read().decode()
        assert server.password not in cmdline
        assert os.stat(server.data_dir).st_mode & 0o077 == 0
        assert os.stat(server.data_dir / "redis.conf").st_mode & 0o077 == 0


def test_stop_saves_and_restart_keeps_url(tmp_path):
    server = EmbeddedRedis(tmp_path / "r", save="60 1").start()
    url = server.url
    redis.Redis.from_url(url).set("k", "v")
    server.restart()  # SIGTERM saves the RDB; same port and password
    assert server.url == url and redis.Redis.from_url(url).get("k") == b"v"
    server.stop()
    assert (tmp_path / "r" / "dump.rdb").exists()


def test_fenced_restart_shuts_the_crawls_clients_out_until_the_repairs_are_done(tmp_path):
    server = EmbeddedRedis(tmp_path / "r", appendonly=True, save="").start()
    url = server.url
    redis.Redis.from_url(url).set("k", "before")
    with server.fenced() as fenced:
        assert fenced != url and server.port == redis.Redis.from_url(fenced).connection_pool.connection_kwargs["port"]
        with pytest.raises(redis.AuthenticationError):   # a worker reconnecting now is refused
            redis.Redis.from_url(url, retry=Retry(NoBackoff(), 0)).get("k")
        repairs = redis.Redis.from_url(fenced)
        assert repairs.get("k") == b"before"
        repairs.set("k", "repaired")
    assert server.url == url and redis.Redis.from_url(url).get("k") == b"repaired"
    server.stop()


def test_start_failure_is_quick_and_says_why(tmp_path):
    with socket_taken() as port:
        t0 = time.monotonic()
        with pytest.raises(ConfigError, match="Address already in use"):
            EmbeddedRedis(tmp_path / "r", port=port).start()
        assert time.monotonic() - t0 < 5
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="cannot create the Redis data folder"):
        EmbeddedRedis(tmp_path / "file" / "r").start()


class socket_taken:
    def __enter__(self) -> int:
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", free_port()))
        self.sock.listen()
        return self.sock.getsockname()[1]

    def __exit__(self, *exc: object) -> None:
        self.sock.close()


def test_child_that_dies_before_it_is_up_stops_the_crawl_with_its_log(settings, tmp_path):
    from crawler_tasks.ops.runner import Child, CrawlRunner, StartupError

    runner = CrawlRunner(settings, seeds=[], out=io.StringIO())
    (tmp_path / "logs").mkdir()
    runner.children = [Child("worker-fetch-0", [sys.executable, "-c", "print('ImportError: no module named x'); "
                                                "raise SystemExit(3)"], dict(os.environ), tmp_path / "logs" / "w.log")]
    t0 = time.monotonic()
    with pytest.raises(StartupError, match="(?s)worker-fetch-0 exited with code 3 before it was ready.*no module named x"):
        runner._watch()
    assert time.monotonic() - t0 < 5
    runner._shutdown()


def test_classify_reasons():
    now = 1000.0
    assert classify({"kind": "unreachable", "error": "DNS lookup failed for 'x.invalid': [Errno -2]"}, {}, now) \
        == (WaitReason.ROBOTS, "DNS lookup failed")
    assert classify({"kind": "unreachable", "status": "503"}, {}, now) == (WaitReason.ROBOTS, "answered 503")
    assert classify({"kind": "rules"}, {"parked_until": "2000", "consecutive_failures": "8"}, now)[0] == WaitReason.PARKED
    assert classify({}, {"consecutive_failures": "2"}, now) == (WaitReason.BACKOFF, "2 failure(s) in a row")
    assert classify({}, {"crawl_delay_s": "30.0"}, now) == (WaitReason.DELAY, "Crawl-delay 30 s")
    assert classify({}, {"consecutive_failures": "junk"}, now)[0] == WaitReason.DELAY
    assert short_error("HTTPConnection(host='127.0.0.9', port=1): Failed to establish a new connection: "
                       "[Errno 111] Connection refused") == "connection refused"
    assert len(short_error("x" * 500)) == 100


def test_waiting_hosts_reads_the_heap(settings):
    f = Frontier(settings)
    now = time.time()
    for host, te in (("dead.test", now + 600), ("slow.test", now + 50), ("ready.test", now - 1)):
        shard = f.shard_of(host)
        k, c = f.keys(shard), f.client(shard)
        c.zadd(k.ready, {host: te})
        c.rpush(k.queue(host), "u1", "u2")
    f.save_robots("dead.test", {"kind": "unreachable", "error": "connection refused", "expires": now + 600})
    found = {h.host: h for h in waiting_hosts(f, now=now)}
    assert set(found) == {"dead.test", "slow.test"}
    assert found["dead.test"].reason == WaitReason.ROBOTS and found["dead.test"].queued == 2
    assert 599 <= found["dead.test"].wait_s <= 600
    window = waiting_hosts(f, now=now, min_te=now + 590, max_te=now + 610)
    assert [h.host for h in window] == ["dead.test"]


def test_summary_explains_every_queued_url():
    from crawler_tasks.ops.runner import summarize_waiting

    p = Progress(at=0, state=CrawlState.FINISHED, reason="", stats={},
                 shards=[{"front": 2, "back": 3, "leased_hosts": 0, "active_hosts": 1}], inflight=0)
    waiting = [WaitingHost("dead.test", 3, 300, WaitReason.ROBOTS, "DNS lookup failed"),
               WaitingHost("busy.test", 1, 0.2, WaitReason.DELAY, "")]
    lines = summarize_waiting(p, waiting, "max pages (5) reached")
    assert lines[0] == "hosts unreachable: 1 (dead.test: DNS lookup failed; next try in 300 s)"
    assert "not fetched: 3 URL(s) of 1 host(s) waiting for robots.txt (next in 300 s)" in lines
    # a host between two requests when the limit struck: the limit, not its delay, kept its URL
    assert "not fetched: 2 URL(s) the crawl stopped first (max pages (5) reached)" in lines
    assert not any("politeness" in line for line in lines)
    ongoing = summarize_waiting(p, waiting, "frontier exhausted")
    assert "not fetched: 1 URL(s) of 1 host(s) politeness delay (next in 0 s)" in ongoing


def test_eta_and_progress_line():
    assert eta_s(50, 10.0, 5.0, 100, 0) == 5.0
    assert eta_s(50, 10.0, 5.0, 100, 8.0) == 3.0
    assert eta_s(0, 0.0, 5.0, 100, 0) is None and eta_s(10, 1.0, 5.0, 0, 0) is None
    p = Progress(at=0, state=CrawlState.RUNNING, reason="", stats={"fetch/pages": 50, "records/error/dns": 2,
                                                                    "records/error/robots": 7},
                 shards=[{"front": 1, "back": 2, "leased_hosts": 3, "active_hosts": 4}], inflight=1, fetching=1)
    line = progress_line(p, 65, 10.0, 5.0, unreachable=2)
    # leased hosts apart from exchanges in flight, robots.txt exclusions apart from errors
    assert line == ("running  1:05  pages 50  10.0/s  queued 3  hosts active 4 leased 3 fetching 1  errors 2  "
                    "robots-excluded 7  unreachable 2  ETA 0:05")
    assert progress_line(p, 1, 0.0, None, bounded=True).endswith("robots-excluded 7  ETA ?")
    idle = progress_line(dataclasses.replace(p, fetching=0), 1, 0.0, None)
    assert "leased 3  errors" in idle and "fetching" not in idle   # held hosts are not being fetched


def test_status_line_plain_every_10_s_and_redrawn_in_a_terminal():
    plain = io.StringIO()
    status = StatusLine(plain)
    for t in (0.0, 3.0, 9.9, 10.0, 15.0):
        status.update(f"line {t}", t)
    status.say("message")
    assert plain.getvalue() == "line 0.0\nline 10.0\nmessage\n"

    master, slave = os.openpty()
    with open(slave, "w") as tty:
        status = StatusLine(tty)
        assert status.tty
        status.update("first", 0.0)
        status.update("second", 1.0)
        status.say("hello")
        status.close()
    chunks = []
    while True:   # one read may return only part of what the closed side wrote
        try:
            chunk = os.read(master, 4096)
        except OSError:   # EIO: the other side is closed and nothing is left
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    out = b"".join(chunks).decode()
    # redrawn in place; a message goes above the line, which is drawn again below it
    assert out == "\r\x1b[2Kfirst\r\x1b[2Ksecond\r\x1b[2Khello\r\nsecond\r\n"


def test_unblock_consumers_ends_a_blocking_pop_as_a_timeout(redis_url, rclient):
    """What a stopping worker's channel waits for (its BRPOP) answers at once."""
    import threading

    from crawler_tasks.connection import unblock_consumers

    got: list[object] = []
    popper = redis.Redis.from_url(redis_url, socket_timeout=60)
    mine = popper.client_id()
    waiter = threading.Thread(target=lambda: got.append(popper.brpop(["unblock-test-empty"], timeout=30)))
    waiter.start()

    def blocked() -> bool:
        return any(int(c["id"]) == mine and "b" in c["flags"] for c in rclient.client_list())

    try:
        for _ in range(200):   # until the pop is blocked in the server
            if blocked():
                break
            time.sleep(0.01)
        assert blocked()
        assert unblock_consumers(redis_url) >= 1   # (other tests' clients may be blocked too)
        waiter.join(10)
        assert not waiter.is_alive() and got == [None]   # nil: a timeout, nothing popped
        assert not blocked()
        assert unblock_consumers("amqp://guest@127.0.0.1//") == -1
        assert unblock_consumers(f"redis://127.0.0.1:{free_port()}/0") == -1
    finally:
        rclient.lpush("unblock-test-empty", "x")   # never leave the thread blocked
        waiter.join(5)
        rclient.delete("unblock-test-empty")
        popper.close()


def test_stage_messages_a_crash_left_unacknowledged_are_queued_again(redis_url):
    """After a restart from the append-only file, parse and dedup messages taken before
    it and never acknowledged go back to their queues; a fetch session's stays."""
    from kombu import Connection, Exchange, Queue

    from crawler_tasks.broker import broker_options
    from crawler_tasks.celery import requeue_unacked
    from crawler_tasks.settings import get_settings

    url = redis_url.rsplit("/", 1)[0] + "/2"
    names = ["crawl.parse.t", "crawl.dedup", "crawl.fetch.0"]
    with Connection(url, transport_options=broker_options(get_settings())) as conn:
        queues = [Queue(n, Exchange(n), routing_key=n) for n in names]
        producer = conn.Producer()
        for q in queues:
            producer.publish({"q": q.name}, exchange=q.exchange, routing_key=q.name, declare=[q])
        channel = conn.channel()
        taken = [q(channel).get(no_ack=False) for q in queues]   # consumed, never acked
        assert [m.payload["q"] for m in taken] == names
        late = Queue("crawl.parse.t", Exchange("crawl.parse.t"), routing_key="crawl.parse.t")
        producer.publish({"q": "late"}, exchange=late.exchange, routing_key=late.name, declare=[late])
        restart = time.time()
        time.sleep(0.01)
        assert late(channel).get(no_ack=False).payload == {"q": "late"}   # taken after the restart
        try:
            assert requeue_unacked(url, {"crawl.parse.t", "crawl.dedup"}, restart) == 2
            again = {n: Queue(n, Exchange(n), routing_key=n)(conn.channel()).get(no_ack=True) for n in names}
            assert again["crawl.parse.t"].payload == {"q": "crawl.parse.t"}
            assert again["crawl.dedup"].payload == {"q": "crawl.dedup"}
            assert again["crawl.fetch.0"] is None   # still with the session that took it
            assert requeue_unacked(url, {"crawl.parse.t", "crawl.dedup"}, restart) == 0
        finally:
            redis.Redis.from_url(url).flushdb()


def test_a_folder_saved_without_aof_is_resumed_with_it(tmp_path):
    """redis-server 6.2 with appendonly on loads nothing from an RDB-only folder: the RDB
    is written out as the append-only file first, so a crawl made with AOF off resumes."""
    import redis as redis_lib

    from crawler_tasks.ops.embedded import AOF_FILE, EmbeddedRedis

    with EmbeddedRedis(tmp_path / "redis", appendonly=False) as old:
        redis_lib.Redis.from_url(old.url).set("crawl:x", "kept")
    assert not (tmp_path / "redis" / AOF_FILE).exists()
    with EmbeddedRedis(tmp_path / "redis", appendonly=True) as new:
        assert redis_lib.Redis.from_url(new.url).get("crawl:x") == b"kept"
    assert (tmp_path / "redis" / AOF_FILE).exists() and new.save_error == ""
