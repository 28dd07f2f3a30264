"""Permuted-blocks simhash index in Redis: exact for d <= 3, bounded work per page; with
NearPrints, fragile bits probed flipped and a check that admits pairs up to wide_distance."""
from __future__ import annotations

import random

import pytest

from crawler_tasks.dedup.nearindex import CHECK_BITS, WIDE_DISTANCE, NearDupIndex
from crawler_tasks.dedup.simhash import NearPrint, hamming, to_hex


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
    with pytest.raises(ValueError):
        index.check_and_add([("u", NearPrint(1, 100, 1 << 64))])
    for bad in ({"max_distance": 5, "wide_distance": 4}, {"check_bits": 65}, {"wide_distance": 65}):
        with pytest.raises(ValueError):
            NearDupIndex(rclient, settings.KEY_PREFIX, **bad)
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


Item = int | NearPrint


def _parts(item: Item) -> tuple[int, int | None, int]:
    return (item.simhash, item.check, item.fragile) if isinstance(item, NearPrint) else (item, None, 0)


def expected_match(indexed: list[tuple[str, Item]], url: str, item: Item) -> int | None:
    """The distance the index must report: the closest earlier item that shares one of the
    query's own blocks, or one with a fragile bit flipped, and is within 5 bits, or within
    WIDE_DISTANCE with checks within CHECK_BITS when both have one."""
    h, check, fragile = _parts(item)
    best = None
    for other_url, other in indexed:
        g, other_check, _ = _parts(other)
        reachable = False
        for b in range(4):
            diff = (h ^ g) >> (16 * b) & 0xFFFF
            reachable |= diff == 0 or bin(diff).count("1") == 1 and diff & (fragile >> (16 * b)) != 0
        d = hamming(h, g)
        if other_url == url or not reachable:
            continue
        if d <= 5 or (d <= WIDE_DISTANCE and check is not None and other_check is not None
                      and hamming(check, other_check) <= CHECK_BITS):
            best = d if best is None else min(best, d)
    return best


@pytest.mark.parametrize("parts", [1, 3])
def test_near_prints_match_as_the_rule_says(rclient, settings, parts):
    """Copies 1-10 bits away with checks near or far, fragile masks that hold some of the
    flipped bits, bare simhashes among them: the index reports what the rule says."""
    rng = random.Random(10 + parts)
    index = NearDupIndex(rclient, settings.KEY_PREFIX, parts=parts, max_distance=5)
    bases: list[NearPrint] = [NearPrint(rng.getrandbits(64), 100, rng.getrandbits(64),
                                        sum(1 << j for j in rng.sample(range(64), 8))) for _ in range(300)]
    items: list[tuple[str, Item]] = [(f"http://b/{i}", p) for i, p in enumerate(bases)]
    for i, p in enumerate(bases[:250]):
        for k in range(2):
            flipped = rng.sample(range(64), rng.randint(1, 10))
            h = p.simhash
            for bit in flipped:
                h ^= 1 << bit
            check = flip(rng, p.check, rng.choice([0, 2, 6, 9, 11, 14, 32]))
            fragile = sum(1 << j for j in {*rng.sample(flipped, min(len(flipped), rng.randint(1, 3))),
                                           *rng.sample(range(64), 8)})
            copy: Item = h if rng.random() < 0.15 else NearPrint(h, 100, check, fragile)
            items.append((f"http://v/{i}/{k}", copy))
    rng.shuffle(items)
    indexed: list[tuple[str, Item]] = []
    kinds = {"near": 0, "wide": 0, "flipped": 0}
    for start in range(0, len(items), 50):
        batch = items[start:start + 50]
        for (url, item), result in zip(batch, index.check_and_add_distances(batch), strict=True):
            expected = expected_match(indexed, url, item)
            assert (result[1] if result else None) == expected, (url, result, expected)
            if result:
                match = dict(indexed)[result[0]]
                assert hamming(_parts(item)[0], _parts(match)[0]) == result[1]
                kinds["near" if result[1] <= 5 else "wide"] += 1
                h, g = _parts(item)[0], _parts(match)[0]
                kinds["flipped"] += all((h ^ g) >> (16 * b) & 0xFFFF for b in range(4))
            indexed.append((url, item))
    assert kinds["near"] > 150 and kinds["wide"] > 25 and kinds["flipped"] > 15, kinds   # all were exercised
    stats = index.stats()
    assert stats["entries"] == 4 * len(items) and stats["pages"] == len(items)
    assert stats["probes"] == sum(4 + bin(_parts(item)[2]).count("1") for _, item in items)  # flipped: read only


def test_a_copy_beyond_five_bits_is_found_on_its_check(rclient, settings):
    h, check = 0x0123_4567_89AB_CDEF, 0xFEDC_BA98_7654_3210
    far = h ^ 0b1111111          # 7 bits, all in the last block: the first three agree
    spread = h ^ 1 << 63 ^ 1 << 47 ^ 1 << 31 ^ 1 << 15   # 4 bits, one in each block: none agrees
    cases: list[tuple[Item, int | None]] = [
        (NearPrint(far, 100, check ^ 0b11), 7),
        (NearPrint(far, 100, ~check & (1 << 64) - 1), None),       # its check disagrees
        (far, None),                                                # a bare simhash: 5 bits at most
        (NearPrint(h ^ 0x0003_0003_0003_0003, 100, check), None),  # 8 bits, but no block agrees
        (NearPrint(h ^ 0xFF, 100, check), 8),                      # 8 bits: WIDE_DISTANCE ...
        (NearPrint(h ^ 0x1FF, 100, check), None),                  # ... not 9
        (NearPrint(spread, 100, check), None),
        (NearPrint(spread, 100, check, 1 << 63 | 1 << 1), 4),      # its fragile bits hold one that differs
    ]
    for n, (query, distance) in enumerate(cases):
        index = NearDupIndex(rclient, f"{settings.KEY_PREFIX}c{n}", max_distance=5)
        index.check_and_add([("http://a/", NearPrint(h, 100, check))])
        found = index.check_and_add_distances([("http://b/", query)])[0]
        assert (found[1] if found else None) == distance, (n, found)
        assert index.stats()["confirmed"] == (distance is not None and distance > 5)


def test_entries_with_and_without_a_check(rclient, settings):
    """A NearPrint's entry holds its check after its fingerprint (32 hex digits); a bare
    simhash's entry (an index made before NearPrints) is 16 and still matches within 5 bits."""
    p = settings.KEY_PREFIX
    index = NearDupIndex(rclient, p, max_distance=5)
    h, check = 0x0001_0002_0003_ABCD, 0x1111_2222_3333_4444
    assert index.check_and_add([("old", h), ("new", NearPrint(h ^ 1 << 40, 100, check))]) == [None, "old"]
    assert rclient.hgetall(f"{p}:{{n0}}:sim:3:abcd") == {"000100020003abcd": "old",
                                                         to_hex(h ^ 1 << 40) + to_hex(check): "new"}
    # 6 bits from "old" (no check: too far), 7 from "new" (its check agrees)
    assert index.check_and_add_distances([("q1", NearPrint(h ^ 0b111_1110, 100, check))]) == [("new", 7)]
    index = NearDupIndex(rclient, p + "x", max_distance=5)
    assert index.check_and_add([("old", h), ("q2", NearPrint(h ^ 0b111_1111, 100, check))]) == [None, None]
