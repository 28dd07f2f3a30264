"""Snapshots: exact round trips, refusal and replace, damaged files, two shard servers."""
from __future__ import annotations

import dataclasses
import gzip
import json
import os
import random
import time

import pytest
import redis

from crawler_tasks.connection import shard_url
from crawler_tasks.exceptions import CrawlerError
from crawler_tasks.frontier import Discovered, Frontier, Verdict
from crawler_tasks.keys import GlobalKeys, ShardKeys
from crawler_tasks.ops import snapshot as snap
from crawler_tasks.ops.embedded import EmbeddedRedis
from crawler_tasks.ops.restore import restore
from crawler_tasks.ops.snapshot import (
    SnapshotError,
    latest_snapshot,
    rotate,
    snapshot,
)


def raw(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, decode_responses=False)


def state(client: redis.Redis, prefix: str) -> dict[bytes, tuple[str, object]]:
    """Every key of a prefix with its exact value (the thing a round trip must keep)."""
    out: dict[bytes, tuple[str, object]] = {}
    for key in client.scan_iter(match=f"{prefix}:*", count=1000):
        t = client.type(key).decode()
        if t == "string":
            value: object = client.get(key)
        elif t == "list":
            value = client.lrange(key, 0, -1)
        elif t == "set":
            value = client.smembers(key)
        elif t == "zset":
            value = client.zrange(key, 0, -1, withscores=True)
        else:
            value = client.hgetall(key)
        out[key] = (t, value)
    return out


def wipe(client: redis.Redis, prefix: str) -> None:
    for key in list(client.scan_iter(match=f"{prefix}:*", count=1000)):
        client.delete(key)


def urls(n: int, hosts: int = 7) -> list[Discovered]:
    return [Discovered(url=f"http://h{i % hosts}.example/p/{i}", host=f"h{i % hosts}.example",
                       depth=i % 3, priority=i % 3) for i in range(n)]


def fill(settings, client: redis.Redis) -> None:
    """All five types, binary Bloom bits from the real frontier, a 200,000-entry list."""
    p = settings.KEY_PREFIX
    frontier = Frontier(settings)
    frontier.put_discovered(urls(300))
    frontier.put_discovered([Discovered(url="http://seed.example/", host="seed.example", force=True)])
    frontier.get_urls(0, 3, now=1000.0)  # some hosts leased: active/ready/lease/back queues exist
    frontier.get_urls(1, 3, now=1000.0)
    rnd = random.Random(7)
    big = [f"{p} {i} ünï {rnd.random()}" for i in range(200_000)]
    pipe = client.pipeline(transaction=False)
    for i in range(0, len(big), 10_000):
        pipe.rpush(f"{p}:{{s0}}:front:2", *big[i:i + 10_000])
    pipe.set(f"{p}:{{s1}}:bloom:7", bytes(range(256)) * 9000)  # > STRING_CHUNK: several parts
    pipe.set(f"{p}:{{g}}:empty", b"")
    pipe.hset(f"{p}:{{g}}:stats", mapping={"fetch/pages": 12, "fetch/status/200": 10})
    pipe.hset(f"{p}:{{g}}:bin", mapping={b"\xff\x00": b"\x80\x81", "k": "v"})
    pipe.zadd(f"{p}:{{g}}:inflight", {"b1": 1e12})
    pipe.zadd(f"{p}:{{g}}:z", {"a": 1.5, "b": float("inf"), "c": -0.1, "d": 1712345678.123456})
    pipe.sadd(f"{p}:{{f1}}:set", "x", "y", b"\xfe")
    pipe.set(f"{p}:{{g}}:ttl", "v", px=600_000)
    pipe.set(f"{p}x:other", "not ours")          # another prefix: never in the snapshot
    pipe.execute()


def test_round_trip_all_types(settings, tmp_path):
    client = raw(settings.REDIS_URL)
    fill(settings, client)
    before = state(client, settings.KEY_PREFIX)
    path = tmp_path / "s.jsonl.gz"
    info = snapshot(settings, path)
    assert info.keys == len(before)
    assert set(info.by_type) == {"string", "list", "set", "zset", "hash"}
    assert info.elements > 200_000
    with gzip.open(path, "rt") as fh:
        header = json.loads(fh.readline())
    assert header["format"] == "crawler-snapshot" and header["counts"]["keys"] == len(before)
    assert not list(tmp_path.glob(".*tmp"))

    wipe(client, settings.KEY_PREFIX)
    restored = restore(settings, path, keep_inflight=True)
    assert restored.keys == info.keys
    after = state(client, settings.KEY_PREFIX)
    assert after == before
    assert 0 < client.pttl(f"{settings.KEY_PREFIX}:{{g}}:ttl") <= 600_000
    assert client.get(f"{settings.KEY_PREFIX}x:other") == b"not ours"


def test_restore_under_another_prefix_drops_inflight(settings, tmp_path):
    client = raw(settings.REDIS_URL)
    Frontier(settings).put_discovered(urls(20))
    client.zadd(GlobalKeys(settings.KEY_PREFIX).inflight, {"batch": 1e12})
    before = state(client, settings.KEY_PREFIX)
    path = tmp_path / "s.jsonl.gz"
    snapshot(settings, path)
    other = dataclasses.replace(settings, KEY_PREFIX=settings.KEY_PREFIX + "copy")
    restore(other, path)
    after = state(client, other.KEY_PREFIX)
    renamed = {other.KEY_PREFIX.encode() + k[len(settings.KEY_PREFIX):]: v for k, v in before.items()
               if not k.endswith(b":inflight")}
    assert after == renamed


def test_chunked_sets_zsets_hashes(settings, tmp_path, monkeypatch):
    monkeypatch.setattr(snap, "CHUNK", 500)
    monkeypatch.setattr(snap, "STRING_CHUNK", 1000)
    client = raw(settings.REDIS_URL)
    p = settings.KEY_PREFIX
    client.sadd(f"{p}:{{g}}:bigset", *[f"m{i}" for i in range(2_345)])
    client.zadd(f"{p}:{{g}}:bigz", {f"m{i}": i / 7 for i in range(2_345)})
    client.hset(f"{p}:{{f0}}:fp", mapping={f"f{i}": f"http://x/{i}" for i in range(2_345)})
    client.rpush(f"{p}:{{s0}}:front:0", *[f"e{i}" for i in range(2_345)])
    client.set(f"{p}:{{s0}}:bloom:0", os.urandom(4_321))
    before = state(client, p)
    info = snapshot(settings, tmp_path / "c.jsonl.gz")
    assert info.records > 20
    wipe(client, p)
    restore(settings, tmp_path / "c.jsonl.gz")
    assert state(client, p) == before


def test_restore_refuses_existing_keys_unless_replace(settings, tmp_path):
    client = raw(settings.REDIS_URL)
    Frontier(settings).put_discovered(urls(50))
    before = state(client, settings.KEY_PREFIX)
    path = tmp_path / "s.jsonl.gz"
    snapshot(settings, path)
    with pytest.raises(SnapshotError, match="replace"):
        restore(settings, path)
    client.set(f"{settings.KEY_PREFIX}:{{g}}:extra", "x")
    client.rpush(ShardKeys(settings.KEY_PREFIX, 0).front(0), "h.example 0 0 0 http://h.example/new")
    restore(settings, path, replace=True)
    assert state(client, settings.KEY_PREFIX) == before


def test_damaged_files_raise_clear_errors(settings, tmp_path):
    client = raw(settings.REDIS_URL)
    Frontier(settings).put_discovered(urls(2_000, hosts=300))
    before = state(client, settings.KEY_PREFIX)
    good = tmp_path / "good.jsonl.gz"
    snapshot(settings, good)
    data = good.read_bytes()

    truncated = tmp_path / "truncated.jsonl.gz"
    truncated.write_bytes(data[: len(data) * 2 // 3])
    garbage = tmp_path / "garbage.jsonl.gz"
    garbage.write_bytes(b"this is not gzip at all")
    flipped = tmp_path / "flipped.jsonl.gz"
    flipped.write_bytes(data[:-40] + bytes(b ^ 0x55 for b in data[-40:-8]) + data[-8:])
    lines = gzip.decompress(data).decode().splitlines(keepends=True)
    short = tmp_path / "short.jsonl.gz"
    short.write_bytes(gzip.compress("".join(lines[:-1]).encode()))   # a whole record missing
    badjson = tmp_path / "badjson.jsonl.gz"
    badjson.write_bytes(gzip.compress("".join(lines[:2] + ['{"key": \n'] + lines[3:]).encode()))
    empty = tmp_path / "empty.jsonl.gz"
    empty.write_bytes(gzip.compress(b""))

    for path in (truncated, garbage, flipped, short, badjson, empty, tmp_path / "missing.jsonl.gz"):
        with pytest.raises(SnapshotError) as err:
            restore(settings, path, replace=True)
        assert isinstance(err.value, ValueError) and isinstance(err.value, CrawlerError)
        assert str(path) in str(err.value)
    assert state(client, settings.KEY_PREFIX) == before  # nothing was deleted


def test_restore_refuses_other_shard_layout(settings, tmp_path):
    Frontier(settings).put_discovered(urls(10))
    path = tmp_path / "s.jsonl.gz"
    snapshot(settings, path)
    other = dataclasses.replace(settings, KEY_PREFIX=settings.KEY_PREFIX + "b", SHARDS=3)
    with pytest.raises(SnapshotError, match="SHARDS"):
        restore(other, path)


def test_two_shard_servers_routed_by_hash_tag(settings, tmp_path):
    second = EmbeddedRedis(tmp_path / "r2", save="").start()
    try:
        s = dataclasses.replace(settings, SHARDS=6, REDIS_SHARD_URLS=(settings.REDIS_URL, second.url))
        homes = {shard_url(s, i) for i in range(s.SHARDS)}
        assert homes == {settings.REDIS_URL, second.url}
        frontier = Frontier(s)
        frontier.put_discovered(urls(400, hosts=40))
        raw(settings.REDIS_URL).hset(GlobalKeys(s.KEY_PREFIX).stats, "fetch/pages", 3)
        a, b = raw(settings.REDIS_URL), raw(second.url)
        before = {**state(a, s.KEY_PREFIX), **state(b, s.KEY_PREFIX)}
        assert state(b, s.KEY_PREFIX) and state(a, s.KEY_PREFIX)
        path = tmp_path / "two.jsonl.gz"
        info = snapshot(s, path)
        assert info.keys == len(before)

        # restore with the servers swapped: every shard key must land on its new home
        wipe(a, s.KEY_PREFIX)
        wipe(b, s.KEY_PREFIX)
        swapped = dataclasses.replace(s, REDIS_SHARD_URLS=(second.url, settings.REDIS_URL))
        restore(swapped, path)
        assert {**state(a, s.KEY_PREFIX), **state(b, s.KEY_PREFIX)} == before
        for shard in range(s.SHARDS):
            home = raw(shard_url(swapped, shard))
            assert home.llen(ShardKeys(s.KEY_PREFIX, shard).front(0)) + \
                home.llen(ShardKeys(s.KEY_PREFIX, shard).front(1)) > 0
        assert a.hget(GlobalKeys(s.KEY_PREFIX).stats, "fetch/pages") == b"3"   # globals: main Redis
    finally:
        second.stop()


def test_leases_restored_as_is_and_no_url_lost(settings, tmp_path):
    frontier = Frontier(settings)
    items = urls(60, hosts=12)
    frontier.put_discovered(items)
    leases = [lease for s in range(settings.SHARDS) for lease in frontier.get_urls(s, 5, now=1000.0)]
    assert leases
    # a torn table as a live snapshot can see it: one active host lost its ready entry
    k = ShardKeys(settings.KEY_PREFIX, leases[0].shard)
    client = raw(settings.REDIS_URL)
    stuck = client.zrange(k.ready, 0, 0)
    if stuck:
        client.zrem(k.ready, stuck[0])
    path = tmp_path / "s.jsonl.gz"
    snapshot(settings, path)
    info = restore(settings, path, replace=True)
    if stuck:
        assert info.repaired.get("unscheduled_hosts") == 1
    for lease in leases:   # leases are back as they were
        assert client.zscore(ShardKeys(settings.KEY_PREFIX, lease.shard).lease, lease.host) is not None
    # past the leases (taken at 1000.0) and the repair's wall-clock te
    assert sorted(drain_after_restore(frontier, settings.SHARDS, time.time() + 1)) == sorted(d.url for d in items)


def drain_after_restore(frontier: Frontier, shards: int, now: float) -> list[str]:
    """Every URL the restored frontier leases, once its leases expired (as maintenance
    expires them)."""
    for s in range(shards):
        frontier.expire(s, now=now)
    fetched = []
    for _ in range(1000):
        got = [lease for s in range(shards) for lease in frontier.get_urls(s, 100, now=now)]
        if not got:
            break
        for lease in got:
            fetched.append(lease.entry.url)
            frontier.complete(lease, te=now)
    return fetched


def test_a_url_a_live_snapshot_caught_twice_is_fetched_once(settings, tmp_path):
    """Read while the crawl runs, a snapshot can hold a URL in a front queue and in its
    host's back queue (it moved on between the two reads), or in a back queue and parked
    (fetched meanwhile). Restored, each URL is leased once."""
    from crawler_tasks.records import Action

    s = dataclasses.replace(settings, SHARDS=1)
    frontier = Frontier(s)
    items = [Discovered(url=f"http://torn{i % 3}.test/{i}", host=f"torn{i % 3}.test") for i in range(12)]
    frontier.put_discovered(items)
    now = time.time()
    leases = frontier.get_urls(0, 3, now=now)   # moves URLs on to back queues
    k = ShardKeys(s.KEY_PREFIX, 0)
    client = raw(s.REDIS_URL)
    parked = leases[0]
    assert frontier.finish(parked, te=now, action=Action.DONE, handoff_until=now + 60).ok
    client.lpush(k.queue(parked.host), parked.raw)   # read before it was parked
    back = client.lrange(k.queue(leases[1].host), 0, -1)
    client.rpush(k.front(0), back[-1])                # read before it moved on
    path = tmp_path / "torn.jsonl.gz"
    snapshot(s, path)
    info = restore(s, path, replace=True)
    assert info.repaired.get("front_copies_dropped") == 1, info.repaired
    assert sorted(drain_after_restore(frontier, 1, time.time() + 1000)) == sorted(d.url for d in items)


def test_latest_and_rotate(tmp_path):
    assert latest_snapshot(tmp_path) is None
    paths = [snap.new_snapshot_path(tmp_path, now=1_700_000_000 + i * 61.5) for i in range(5)]
    for p in paths:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x")
    (paths[0].parent / ".snapshot-x.jsonl.gz.1.tmp").write_bytes(b"partial")
    assert paths[0].name.startswith("snapshot-20231114T")
    assert latest_snapshot(tmp_path) == paths[-1]
    removed = rotate(tmp_path, keep=3)
    assert removed == paths[:2]
    assert snap.list_snapshots(tmp_path) == paths[2:]
    assert (paths[0].parent / ".snapshot-x.jsonl.gz.1.tmp").exists()   # young temp file kept


def test_checkpoint_writes_into_out_dir(settings):
    Frontier(settings).put_discovered(urls(5))
    info = snap.checkpoint(settings, keep=2)
    assert info is not None and info.path == latest_snapshot(settings.OUT_DIR)
    assert snap.maybe_checkpoint(settings, interval_s=3600) is None
    assert snap.maybe_checkpoint(settings, interval_s=0) is None


def test_a_snapshot_taken_before_the_stage_layout_restores_and_leases(settings):
    """tests/data holds a checkpoint written by the code before the rooms were laid out
    (same key schema): it must restore, and its queued URLs must lease and decode."""
    from pathlib import Path

    from crawler_tasks.records import EntryKind

    s = dataclasses.replace(settings, KEY_PREFIX="compat", SHARDS=2, BLOOM_EXPECTED_URLS=10_000)
    path = Path(__file__).parent / "data" / "snapshot-v1-before-stage-layout.jsonl.gz"
    info = restore(s, path, replace=True)
    assert info.keys == 17
    frontier = Frontier(s)
    assert sum(frontier.sizes(shard)["front"] + frontier.sizes(shard)["back"] for shard in range(2)) == 4
    leased = {}
    for shard in range(2):
        for lease in frontier.get_urls(shard, 10, now=time.time() + 60):
            leased[lease.host] = lease.entry
    assert set(leased) <= {"a.test", "b.test", "c.test"} and len(leased) >= 2
    queued = {e.url: e for h in ("a.test", "b.test", "c.test") for e in frontier.host_info(h).queue}
    assert queued["http://a.test/sitemap.xml"].kind is EntryKind.SITEMAP
    assert any(frontier.host_info(h).politeness == {"failures": "0"} for h in ("a.test", "b.test", "c.test"))
    # the Bloom filter came back too: a seed is still "seen"
    assert frontier.put_discovered([Discovered(url="http://b.test/x", host="b.test")]) == [0]


def test_exact_url_seen_survives_a_snapshot_and_must_match(settings, tmp_path):
    """URL_SEEN=exact: the fingerprint buckets and their count are restored with the rest
    (a restored crawl knows every URL it had seen), and a Bloom-mode crawl refuses them."""
    s = dataclasses.replace(settings, URL_SEEN="exact", BLOOM_EXPECTED_URLS=100_000)
    frontier = Frontier(s)
    frontier.put_discovered(urls(300))
    path = tmp_path / "s.jsonl.gz"
    snapshot(s, path)
    wipe(raw(s.REDIS_URL), s.KEY_PREFIX)
    assert frontier.bloom_fill().fingerprints == 0
    restore(s, path)
    assert frontier.bloom_fill().fingerprints == 300
    assert set(frontier.put_discovered(urls(300))) == {Verdict.SEEN}
    with pytest.raises(SnapshotError, match="URL_SEEN"):
        restore(dataclasses.replace(s, KEY_PREFIX=s.KEY_PREFIX + "b", URL_SEEN="bloom"), path)
