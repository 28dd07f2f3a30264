"""Node identity and crawls sharing a broker (issue 28 items 2 and 6): a second machine
under a node name another one holds is refused at worker start, and the task messages
of two crawls (two KEY_PREFIXes) on one broker never meet."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from kombu import Connection, Exchange, Queue

from crawler_tasks.broker import broker_options
from crawler_tasks.exceptions import ConfigError
from crawler_tasks.keys import GlobalKeys
from crawler_tasks.queues import CONTROL_QUEUE, fetch_queue
from crawler_tasks.runtime.nodes import NodeClaim, node_id

ROOT = Path(__file__).resolve().parent.parent


def test_node_id_is_made_once_per_folder(tmp_path):
    first = node_id(tmp_path / "a")
    assert first == node_id(tmp_path / "a") and len(first) == 32
    assert node_id(tmp_path / "b") != first


def test_a_second_machine_under_a_held_name_is_refused_until_the_claim_lapses(settings, tmp_path, rclient):
    a = dataclasses.replace(settings, NODE_NAME="n1", OUT_DIR=str(tmp_path / "a"), NODE_TTL_S=3)
    b = dataclasses.replace(a, OUT_DIR=str(tmp_path / "b"))
    NodeClaim(a).claim()
    NodeClaim(a).claim()      # another worker of the same machine (same folder): the same id
    with pytest.raises(ConfigError, match="held by another machine"):
        NodeClaim(b).claim()
    NodeClaim(dataclasses.replace(b, NODE_NAME="n2")).claim()
    key = GlobalKeys(a.KEY_PREFIX).node("n1")
    assert 0 < rclient.pttl(key) <= 3000
    rclient.pexpire(key, 1)   # machine a's workers gone for NODE_TTL_S
    time.sleep(0.01)
    NodeClaim(b).claim()
    assert rclient.get(key) == node_id(b.OUT_DIR)


def _worker(s, queue: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")}, **s.to_env(),
           "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "celery", "-A", "crawler_tasks", "worker", "-Q", queue,
                             "-P", "solo", "--without-gossip", "--without-mingle", "--without-heartbeat",
                             "-n", f"w{time.monotonic_ns()}@%h", "-l", "INFO"],
                            cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)


def test_a_worker_of_another_machine_under_the_same_name_exits_loudly(settings, tmp_path, rclient):
    a = dataclasses.replace(settings, NODE_NAME="dup", OUT_DIR=str(tmp_path / "a"), NODE_TTL_S=30)
    b = dataclasses.replace(a, OUT_DIR=str(tmp_path / "b"))
    first = _worker(a, "crawl.parse.dup", tmp_path / "a.log")
    try:
        key = GlobalKeys(a.KEY_PREFIX).node("dup")
        deadline = time.time() + 60
        while rclient.get(key) is None and time.time() < deadline and first.poll() is None:
            time.sleep(0.1)
        assert rclient.get(key) == node_id(a.OUT_DIR), (tmp_path / "a.log").read_text()[-2000:]
        second = _worker(b, "crawl.fetch.0", tmp_path / "b.log")
        code = second.wait(timeout=60)
        log = (tmp_path / "b.log").read_text()
        assert code != 0 and "held by another machine" in log, log[-2000:]
        assert first.poll() is None          # the holder goes on
        control = _worker(b, "crawl.control", tmp_path / "c.log")   # claims nothing
        time.sleep(4)
        assert control.poll() is None, (tmp_path / "c.log").read_text()[-2000:]
        control.terminate()
        control.wait(timeout=30)
    finally:
        first.terminate()
        first.wait(timeout=30)


def test_two_crawls_on_one_broker_keep_their_tasks_apart(settings, redis_url):
    url = redis_url.rsplit("/", 1)[0] + "/3"
    one, two = settings, dataclasses.replace(settings, KEY_PREFIX=settings.KEY_PREFIX + "b")
    names = [CONTROL_QUEUE, fetch_queue(0)]
    try:
        for s in (one, two):
            with Connection(url, transport_options=broker_options(s)) as conn:
                producer = conn.Producer()
                for n in names:
                    q = Queue(n, Exchange(n), routing_key=n)
                    producer.publish({"crawl": s.KEY_PREFIX, "q": n}, exchange=q.exchange, routing_key=n,
                                     declare=[q])
        for s in (one, two):
            with Connection(url, transport_options=broker_options(s)) as conn:
                for n in names:
                    got = Queue(n, Exchange(n), routing_key=n)(conn.channel()).get(no_ack=True)
                    assert got is not None and got.payload == {"crawl": s.KEY_PREFIX, "q": n}
                    assert Queue(n, Exchange(n), routing_key=n)(conn.channel()).get(no_ack=True) is None
        keys = redis.Redis.from_url(url).keys("*")
        assert keys and all(k.decode().startswith((f"{one.KEY_PREFIX}/", f"{two.KEY_PREFIX}/")) for k in keys)
    finally:
        redis.Redis.from_url(url).flushdb()


def lost_node_setup(settings, tmp_path):
    """Two nodes' sessions each renew the leases of their hosts; a's claim then lapses."""
    from crawler_tasks.frontier import Discovered, Frontier

    a = dataclasses.replace(settings, NODE_NAME="na", OUT_DIR=str(tmp_path / "a"), LEASE_S=120)
    b = dataclasses.replace(a, NODE_NAME="nb", OUT_DIR=str(tmp_path / "b"))
    fa, fb = Frontier(a), Frontier(b)
    hosts = [f"h{i}.test" for i in range(8)]
    fa.put_discovered([Discovered(f"http://{h}/", h) for h in hosts])
    leases = [lease for s in range(a.SHARDS) for lease in fa.get_urls(s, 50)]
    assert len(leases) == len(hosts)
    held_a = [x for x in fa.renew(leases[:5]) if x]
    held_b = [x for x in fb.renew(leases[5:]) if x]
    assert len(held_a) == 5 and len(held_b) == 3
    NodeClaim(a).claim()
    NodeClaim(b).claim()
    return a, b, held_a, held_b


def test_a_lost_nodes_leases_are_handed_over_at_once(settings, tmp_path, rclient):
    from crawler_tasks.frontier import Frontier
    from crawler_tasks.runtime.control import Control
    from crawler_tasks.runtime.maintenance import run_maintenance

    a, b, held_a, held_b = lost_node_setup(settings, tmp_path)
    control = Control(a)
    control.start()
    for shard, session, node in ((0, "sa", "na"), (1, "sb", "nb"), (1, "sc", "na")):
        control.begin_session(shard, session, time.time() + 600)
        control.own_session(shard, session, node)
    control.end_session(1, "sc")
    for group, node in (("ga", "na"), ("gb", "nb"), ("gp", "na")):
        control.begin_batches([group], time.time() + 600, node)
    assert control.claim_group("gp", "nb")     # parsed, and nb's enqueue worker took it
    run_maintenance(a)
    assert control.sessions_by_shard() == {0: 1, 1: 1}
    assert all(Frontier(a).get_urls(s, 50) == [] for s in range(a.SHARDS))   # both alive: nothing moves
    rclient.delete(GlobalKeys(a.KEY_PREFIX).node("na"))                        # a's claim lapsed
    run_maintenance(a)
    again = {lease.host for s in range(a.SHARDS) for lease in Frontier(b).get_urls(s, 50)}
    assert again == {lease.host for lease in held_a}
    assert Control(a).stats()["frontier/node_lost_hosts"] == 5
    assert control.sessions_by_shard() == {1: 1}                  # a's session slot is free at once
    assert control.client.hgetall(control.keys.session_owner) == {"1/sb": "nb"}
    assert set(control.client.zrange(control.keys.inflight, 0, -1)) == {"gb", "gp"}
    assert control.client.hgetall(control.keys.group_owner) == {"gb": "nb", "gp": "nb"}
    assert not control.claim_group("ga", "na")                    # given up: its pages are fetched again
    assert all(x is None for x in Frontier(a).renew(held_a))     # a's sessions, if alive, stop those hosts
    assert all(x is not None for x in Frontier(b).renew(held_b))
    run_maintenance(a)                                            # once: the name is forgotten
    assert Control(a).stats()["frontier/node_lost"] == 1


def test_a_lost_nodes_held_host_comes_back_at_its_next_contact(settings, tmp_path, rclient):
    """A host its session held between requests (lease = te + LEASE_S, not renewed since)
    goes back to the ready heap at te, not at once."""
    from crawler_tasks.frontier import Discovered, Frontier
    from crawler_tasks.keys import ShardKeys
    from crawler_tasks.runtime.nodes import hand_over_lost

    a = dataclasses.replace(settings, NODE_NAME="ha", OUT_DIR=str(tmp_path / "a"), LEASE_S=120)
    f = Frontier(a)
    f.put_discovered([Discovered(f"http://held.test/{k}", "held.test") for k in range(2)])
    shard = f.shard_of("held.test")
    (lease,) = f.get_urls(shard, 5)
    (lease,) = [x for x in f.renew([lease]) if x]
    NodeClaim(a).claim()
    now = time.time()
    done = f.finish(lease, te=now + 30, hold_until=now + 30 + a.LEASE_S)
    assert done.held is not None
    rclient.delete(GlobalKeys(a.KEY_PREFIX).node("ha"))
    assert hand_over_lost(a, f, now) == {"ha": (1, 0)}
    assert abs(rclient.zscore(ShardKeys(a.KEY_PREFIX, shard).ready, "held.test") - (now + 30)) < 0.01
