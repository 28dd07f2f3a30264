"""Permuted-blocks simhash index in Redis: exact for d <= 3, bounded work per page."""
from __future__ import annotations

import random

import pytest

from crawler_tasks.dedup.nearindex import NearDupIndex
from crawler_tasks.dedup.simhash import hamming


def flip(rng: random.Random, h: int, bits: int) -> int:
    for b in rng.sample(range(64), bits):
        h ^= 1 << b
    return h


def brute_force(indexed: dict[str, int], url: str, h: int) -> int | None:
    """Smallest distance to an indexed page (other URL) if <= 3."""
    best = min((hamming(h, g) for u, g in indexed.items() if u != url), default=None)
    return best if best is not None and best <= 3 else None


@pytest.mark.parametrize("parts", [1, 3])
def test_finds_every_pair_within_3_bits_and_none_beyond(rclient, settings, parts):
    rng = random.Random(parts)
    index = NearDupIndex(rclient, settings.KEY_PREFIX, parts=parts)
    bases = [rng.getrandbits(64) for _ in range(400)]
    # clusters of close fingerprints too, so some candidates share 2-3 blocks
    bases += [flip(rng, bases[i], rng.randint(4, 8)) for i in range(40)]
    items = [(f"http://b/{i}", h) for i, h in enumerate(bases)]
    for i, h in enumerate(bases[:300]):
        for k in range(2):
            items.append((f"http://v/{i}/{k}", flip(rng, h, rng.randint(1, 6))))
    rng.shuffle(items)
    indexed: dict[str, int] = {}
    found = within = 0
    for start in range(0, len(items), 50):
        batch = items[start:start + 50]
        results = index.check_and_add_distances(batch)
        for (url, h), result in zip(batch, results):
            expected = brute_force(indexed, url, h)
            if expected is None:
                assert result is None, (url, result)
            else:
                assert result is not None, (url, expected)
                match_url, d = result
                assert d == expected == hamming(h, indexed[match_url])
                found += 1
            indexed[url] = h
            within += expected is not None
    assert found == within > 250  # the generated pairs were really exercised
    assert index.stats()["pages"] == len(items)
    assert index.stats()["entries"] == 4 * len(items)


def test_batch_is_checked_in_order(rclient, settings):
    index = NearDupIndex(rclient, settings.KEY_PREFIX)
    h = 0x0123456789ABCDEF
    near = h ^ 0b101 ^ (1 << 63)
    assert index.check_and_add([("u1", h), ("u2", near), ("u3", h ^ 0xF0)]) == [None, "u1", None]
    assert index.check_and_add([("u4", h ^ 1)]) == ["u1"]  # closest of u1 (1 bit), u2 (2 bits)


def test_same_url_never_matches_itself(rclient, settings):
    index = NearDupIndex(rclient, settings.KEY_PREFIX)
    assert index.check_and_add([("a", 12345)]) == [None]
    assert index.check_and_add([("a", 12345), ("a", 12344)]) == [None, None]
    assert index.check_and_add([("b", 12344)]) == ["a"]


def test_key_layout(rclient, settings):
    p = settings.KEY_PREFIX
    NearDupIndex(rclient, p).check_and_add([("u", 0x0001_0002_0003_ABCD)])
    keys = set(rclient.keys(f"{p}:*"))
    assert keys == {f"{p}:{{n0}}:sim:0:0001", f"{p}:{{n0}}:sim:1:0002", f"{p}:{{n0}}:sim:2:0003",
                    f"{p}:{{n0}}:sim:3:abcd", f"{p}:{{n0}}:sim:stats"}
    assert rclient.hgetall(f"{p}:{{n0}}:sim:3:abcd") == {"000100020003abcd": "u"}
    index = NearDupIndex(rclient, p + "x", parts=4)
    index.check_and_add([(f"u{i}", random.Random(i).getrandbits(64)) for i in range(50)])
    tags = {k.split(":")[1] for k in rclient.keys(f"{p}x:*")}
    assert tags == {"{n0}", "{n1}", "{n2}", "{n3}"}


def test_no_scan_of_the_index(rclient, settings):
    """Work per check is a few bucket reads, not proportional to the index size."""
    rng = random.Random(7)
    index = NearDupIndex(rclient, settings.KEY_PREFIX)
    for _ in range(10):
        index.check_and_add([(f"u{rng.random()}", rng.getrandbits(64)) for _ in range(500)])
    before = index.stats()
    queries = [(f"q{i}", rng.getrandbits(64)) for i in range(200)]
    index.check_and_add(queries)
    after = index.stats()
    assert after["probes"] - before["probes"] == 4 * len(queries)   # four buckets each
    # 5,000 pages in 4 x 65,536 buckets: ~0.3 candidates per query (a scan: 5,000)
    assert after["compared"] - before["compared"] < len(queries)


def test_hot_bucket_is_capped(rclient, settings):
    rng = random.Random(8)
    index = NearDupIndex(rclient, settings.KEY_PREFIX, max_bucket=64)
    hot = 0xBEEF << 48
    fps = [hot | rng.getrandbits(48) for _ in range(300)]
    index.check_and_add([(f"h{i}", h) for i, h in enumerate(fps)])
    assert rclient.hlen(f"{settings.KEY_PREFIX}:{{n0}}:sim:0:beef") == 64
    assert index.stats()["full"] == 300 - 64
    before = index.stats()["compared"]
    # a late member of the hot block is still found through its other blocks ...
    assert index.check_and_add([("late", fps[250] ^ 0b11)]) == ["h250"]
    # ... and a check reads at most max_bucket candidates from the hot bucket
    assert index.stats()["compared"] - before <= 64 + 3


def test_rejects_bad_input(rclient, settings):
    index = NearDupIndex(rclient, settings.KEY_PREFIX)
    with pytest.raises(ValueError):
        index.check_and_add([("u", 1 << 64)])
    with pytest.raises(ValueError):
        index.check_and_add([("u", -1)])
    with pytest.raises(ValueError):
        NearDupIndex(rclient, settings.KEY_PREFIX, max_distance=7)
    assert index.check_and_add([]) == []


def _blocks_agree(a: int, b: int) -> bool:
    return any((a >> (16 * i)) & 0xFFFF == (b >> (16 * i)) & 0xFFFF for i in range(4))


def test_a_wider_distance_finds_the_pairs_that_agree_on_a_block(rclient, settings):
    """max_distance 5 on the same four blocks: every pair within 3 bits, a pair 4-5 bits
    apart when it agrees on one block (most do), none beyond 5."""
    rng = random.Random(7)
    bases = [rng.getrandbits(64) for _ in range(300)]
    seen = {4: [0, 0], 5: [0, 0]}
    for d in range(1, 8):   # an index a distance: the copies of one never meet another's
        index = NearDupIndex(rclient, f"{settings.KEY_PREFIX}w{d}", max_distance=5)
        index.check_and_add([(f"http://b/{i}", h) for i, h in enumerate(bases)])
        for i, h in enumerate(bases):
            other = flip(rng, h, d)
            result = index.check_and_add_distances([(f"http://v/{i}/{d}", other)])[0]
            if d <= 3:
                assert result is not None and result[1] == d
            elif d <= 5:
                assert (result is not None) == _blocks_agree(h, other), (d, result)
                seen[d][0] += result is not None
                seen[d][1] += 1
            else:
                assert result is None or result[1] <= 5
    assert seen[4][0] / seen[4][1] > 0.8 and seen[5][0] / seen[5][1] > 0.6, seen


def test_parts_in_one_round_trip_and_a_forgotten_script_is_loaded_again(rclient, settings, monkeypatch):
    """Several parts go in one MULTI/EXEC by the script's SHA (no SCRIPT EXISTS first);
    a server that lost its scripts (a restart) gets the script again, and the batch is
    checked once."""
    index = NearDupIndex(rclient, settings.KEY_PREFIX, parts=3)
    rclient.ping()   # the connection is made: its handshake is not counted
    sent: list[bytes] = []
    conn_class = rclient.connection_pool.connection_class
    send = conn_class.send_packed_command

    def counted(conn, command, check_health=True):
        sent.append(b"".join(command) if isinstance(command, list) else command)
        return send(conn, command, check_health)

    monkeypatch.setattr(conn_class, "send_packed_command", counted)
    h = random.Random(7).getrandbits(64)
    rclient.script_flush()
    sent.clear()
    assert index.check_and_add([("http://a/1", h)]) == [None]
    assert index.check_and_add([("http://a/2", h ^ 0b101)]) == ["http://a/1"]
    # a lost script: the batch, SCRIPT LOAD, the batch again; then the next batch alone
    assert [b"SCRIPT" in c for c in sent] == [False, True, False, False], sent
    assert index.stats()["pages"] == 2
