"""Bloom filter sizing and its measured error rate in Redis."""
from __future__ import annotations

import dataclasses

from crawler_tasks.frontier import Discovered, Frontier, Verdict
from crawler_tasks.frontier.bloom import MAX_SEGMENT_BITS, BloomSpec, FingerprintSpec


def test_sizing_billion_urls_at_one_percent_is_about_1_2_gb():
    spec = BloomSpec.for_capacity(1_000_000_000, 0.01)
    assert 1.15e9 < spec.bytes < 1.25e9
    assert spec.hashes == 7
    assert spec.segment_bits <= MAX_SEGMENT_BITS and spec.segments >= 5


def test_positions_are_stable_and_in_range():
    spec = BloomSpec.for_capacity(1000, 0.01)
    seg, pos = spec.positions("http://a/")
    assert (seg, pos) == spec.positions("http://a/")
    assert len(pos) == spec.hashes and all(0 <= p < spec.segment_bits for p in pos)


def test_measured_false_positive_rate_near_target(settings):
    n = 20_000
    s = dataclasses.replace(settings, SHARDS=1, BLOOM_EXPECTED_URLS=n, BLOOM_ERROR_RATE=0.01)
    frontier = Frontier(s)
    batch = [Discovered(url=f"http://h{i % 50}.test/in/{i}", host=f"h{i % 50}.test") for i in range(n)]
    added = sum(sum(frontier.put_discovered(batch[i:i + 2000])) for i in range(0, n, 2000))
    assert added > 0.99 * n  # false positives while filling stay below the final rate
    probes = [Discovered(url=f"http://h{i % 50}.test/out/{i}", host=f"h{i % 50}.test") for i in range(2_000)]  # few: probes fill the filter too
    fresh = frontier.put_discovered(probes)
    fp_rate = 1 - sum(fresh) / len(fresh)
    assert fp_rate < 0.02, fp_rate
    fill = frontier.bloom_fill()
    assert 0.003 < fill.fp_rate < 0.03
    # the fill's estimate of the URLs lost: both phases added only new URLs, so every
    # one not enqueued was a false positive
    lost = (n - added) + (len(probes) - sum(fresh))
    assert abs(fill.lost - lost) < max(10, 0.35 * lost), (fill.lost, lost)


def test_lua_sets_exactly_the_positions_python_computes(settings):
    s = dataclasses.replace(settings, SHARDS=1, BLOOM_EXPECTED_URLS=1_000_000)
    frontier = Frontier(s)
    url = "http://a.test/some/page?x=1"
    frontier.put_discovered([Discovered(url=url, host="a.test")])
    segment, positions = frontier.bloom.positions(url)
    client = frontier.client(0)
    key = frontier.keys(0).bloom(segment)
    assert all(client.getbit(key, p) for p in positions)
    assert client.bitcount(key) == len(set(positions))


def test_expected_losses_match_a_simulated_filter():
    """The estimate from the fill alone against the false positives counted while
    filling a filter in memory, up to three times its capacity."""
    spec = BloomSpec.for_capacity(5_000, 0.01)
    bits = bytearray(spec.segment_bits)
    set_bits = lost = 0
    for i in range(15_000):
        _, positions = spec.positions(f"http://h{i % 97}.test/page/{i}")
        lost += all(bits[p] for p in positions)
        for p in positions:
            set_bits += not bits[p]
            bits[p] = 1
        if i + 1 in (5_000, 10_000, 15_000):
            assert abs(spec.expected_losses(set_bits) - lost) < max(8, 0.15 * lost), (i, lost)
    assert spec.expected_losses(0) == 0 and lost > 1000


# --- URL_SEEN=exact: fingerprints decide --------------------------------------------

def test_fingerprint_spec_sizes_buckets_for_the_expected_urls():
    spec = FingerprintSpec.for_capacity(5_000_000)
    assert (spec.bucket_bits, spec.bits) == (15, 47)
    bucket, member = spec.of("http://a.test/x")
    assert (bucket, member) == spec.of("http://a.test/x") != spec.of("http://a.test/y")
    assert 0 <= bucket < spec.buckets and -2**31 <= member < 2**31
    assert spec.expected_losses(10_000_000) < 0.5 and spec.expected_losses(0) == 0
    assert FingerprintSpec.for_capacity(1).bucket_bits == 0 and FingerprintSpec.for_capacity(10**15).bucket_bits == 32


def test_exact_mode_loses_no_url_where_a_full_bloom_filter_loses_many(settings):
    """A filter sized for 1,000 URLs takes 6,000: in Bloom mode it drops a share of the new
    ones; in exact mode every new URL is enqueued, every repeat is seen, and the buckets
    stay intsets."""
    n = 6_000
    urls = [Discovered(url=f"http://h{i % 30}.test/p/{i}", host=f"h{i % 30}.test") for i in range(n)]
    lost = {}
    for mode in ("bloom", "exact"):
        s = dataclasses.replace(settings, SHARDS=1, BLOOM_EXPECTED_URLS=1_000, URL_SEEN=mode,
                                KEY_PREFIX=f"{settings.KEY_PREFIX}-{mode}")
        frontier = Frontier(s)
        verdicts = frontier.put_discovered(urls)
        lost[mode] = sum(v == Verdict.SEEN for v in verdicts)
        fill = frontier.bloom_fill()
        if mode == "exact":
            assert frontier.put_discovered(urls[:500]) == [Verdict.SEEN] * 500
            assert fill.fingerprints == n and fill.lost < 0.01   # 6,000^2 / 2^35
            assert "exact: 6000 fingerprints of 34 bits" in fill.describe()
            spec = frontier.fingerprints
            assert spec is not None
            client = frontier.client(0)
            key = frontier.keys(0).fingerprints(spec.of(urls[0].url)[0])
            assert client.object("encoding", key) == "intset"
            assert sum(client.scard(frontier.keys(0).fingerprints(b)) for b in range(spec.buckets)) == n
        else:
            assert abs(fill.lost - lost[mode]) < max(20, 0.2 * lost[mode])
    assert lost["bloom"] > 300 and lost["exact"] == 0


def test_exact_mode_remember_and_seen_test_agree_with_add(settings):
    s = dataclasses.replace(settings, SHARDS=1, BLOOM_EXPECTED_URLS=100_000, URL_SEEN="exact")
    frontier = Frontier(s)
    known = [f"http://k.test/{i}" for i in range(50)]
    fresh = [f"http://k.test/new/{i}" for i in range(50)]
    frontier.remember(0, known)
    assert frontier.seen_test(0, known + fresh) == [True] * 50 + [False] * 50
    verdicts = frontier.put_discovered([Discovered(url=u, host="k.test") for u in known + fresh])
    assert verdicts == [Verdict.SEEN] * 50 + [Verdict.ENQUEUED] * 50
    assert frontier.bloom_fill().fingerprints == 100
