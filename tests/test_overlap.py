"""manage.py overlap: capture-recapture estimates of |A|/|B| against a known truth."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from crawler_tasks.ops import overlap
from testweb import TestWeb

ROOT = Path(__file__).resolve().parent.parent
UA = ["--user-agent", "testbot/1.0 (+http://127.0.0.1/bot)"]
WORDS = [f"w{i:03d}" for i in range(400)]


def write_crawl(out: Path, pages: list[dict]) -> None:
    out.mkdir(parents=True)
    with open(out / "pages.jsonl", "w") as f:
        for p in pages:
            f.write(json.dumps({"url": p["url"], "status": 200, "fingerprint": p["fp"], "simhash": f"{p['sim']:016x}",
                                "fetched_at": "2026-01-01T00:00:00Z"}) + "\n")
        f.write(json.dumps({"url": "http://x.test/404", "status": 404}) + "\n")   # not a page
        f.write('{"url": "http://x.test/torn", "sta')                              # a torn last line
    with open(out / "feed.jsonl", "w") as f:
        for p in pages:
            f.write(json.dumps({"url": p["url"], "text": p["text"], "fingerprint": p["fp"],
                                "simhash": f"{p['sim']:016x}"}) + "\n")


def synthetic(tmp_path: Path) -> tuple[Path, Path, float]:
    """A: 600 pages; B: 200 of them, 50 mirrors (other URL, simhash 2 bits off, other
    fingerprint) of 50 more, 100 of its own. True |A|/|B| = 600/350 for every method."""
    rng = random.Random(7)

    def page(i: int, site: str) -> dict:
        text = " ".join(rng.choices(WORDS, k=60)) + f" rare{site}{i}a rare{site}{i}b"
        return {"url": f"http://{site}.test/p/{i}", "fp": f"{rng.getrandbits(64):016x}", "sim": rng.getrandbits(64),
                "text": text}

    a = [page(i, "a") for i in range(600)]
    mirrors = [{**p, "url": p["url"].replace("a.test", "mirror.test"), "fp": f"{rng.getrandbits(64):016x}",
                "sim": p["sim"] ^ 0b101} for p in a[200:250]]
    b = a[:200] + mirrors + [page(i, "b") for i in range(100)]
    write_crawl(tmp_path / "A", a)
    write_crawl(tmp_path / "B", b)
    return tmp_path / "A", tmp_path / "B", 600 / 350


def test_estimates_cover_the_true_ratio(tmp_path):
    a, b, truth = synthetic(tmp_path)
    result = overlap.compare(a, b, sample=150, seed=3, queries=150)
    assert (result.size_a, result.size_b) == (600, 350)
    by = {e.method: e for e in result.estimates}
    assert set(by) == {"url", "content", "query"}
    assert by["url"].x == pytest.approx(200 / 600, abs=0.1) and by["url"].y == pytest.approx(200 / 350, abs=0.1)
    assert by["content"].x == pytest.approx(250 / 600, abs=0.1)   # mirrors count by content only
    for e in by.values():
        assert e.ci is not None and e.ci[0] <= truth <= e.ci[1], e
        assert e.boot_ci is not None and e.boot_ci[0] <= truth <= e.boot_ci[1], e
        assert e.ratio == pytest.approx(truth, rel=0.35)
    assert result.mean_query_hits[0] >= 0.0
    text = overlap.format_result(result)
    assert "true |A|/|B| = 1.714" in text and "query" in text


def test_whole_samples_give_the_exact_ratio(tmp_path):
    a, b, truth = synthetic(tmp_path)
    result = overlap.compare(a, b, sample=10_000, seed=1, queries=0)
    url = result.estimates[0]
    assert url.ratio == pytest.approx(truth)
    assert url.ci == pytest.approx((truth, truth))   # no sampling error left (finite-population correction)


def test_disjoint_crawls_have_no_interval(tmp_path):
    write_crawl(tmp_path / "A", [{"url": "http://a.test/", "fp": "01", "sim": 0, "text": "alpha beta gamma"}])
    write_crawl(tmp_path / "B", [{"url": "http://b.test/", "fp": "02", "sim": 2**64 - 1, "text": "delta epsilon"}])
    result = overlap.compare(tmp_path / "A", tmp_path / "B")
    assert all(e.ratio is None and e.ci is None for e in result.estimates)
    assert "n/a" in overlap.format_result(result)


def test_near_index_finds_within_three_bits_only():
    index = overlap.NearIndex([0xFFFF_0000_FFFF_0000])
    assert index.near(0xFFFF_0000_FFFF_0007)           # 3 bits
    assert not index.near(0xFFFF_0000_FFFF_000F)       # 4 bits
    assert index.near(0x7FFF_0001_FFFF_0000)           # 2 bits in different blocks


def test_delta_interval_widens_with_smaller_samples():
    wide = overlap.delta_ci(0.3, 50, 10_000, 0.6, 50, 10_000)
    narrow = overlap.delta_ci(0.3, 500, 10_000, 0.6, 500, 10_000)
    assert wide and narrow and wide[0] < narrow[0] < 2.0 < narrow[1] < wide[1]


def manage(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")}
    return subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=timeout)


def test_two_real_crawls_of_one_web(tmp_path):
    """A stops at 25 pages, B crawls the whole web: the true ratio is counted from the files."""
    with TestWeb(n_hosts=3, pages_per_host=20, seed=11) as web:
        for name, limit in (("A", ["--max-pages", "25"]), ("B", [])):
            proc = manage("crawl", *web.seeds(), "--out", str(tmp_path / name), "--allow-private",
                          "--min-delay", "0.05", *limit, *UA)
            assert proc.returncode == 0, proc.stderr[-2000:]
    full = overlap.compare(tmp_path / "A", tmp_path / "B", sample=10_000)
    truth = full.true_ratio
    assert truth is not None and 0.2 < truth < 0.8
    by = {e.method: e for e in full.estimates}
    assert by["url"].x == 1.0                      # A's pages are all in the complete crawl B
    assert by["url"].ratio == pytest.approx(truth)
    assert by["content"].x == 1.0
    # A 95 % interval misses the truth in one sample of 20: count its coverage over many samples
    covered = 0
    for seed in range(100):
        url = overlap.compare(tmp_path / "A", tmp_path / "B", sample=12, seed=seed, queries=0).estimates[0]
        covered += url.ci is not None and url.ci[0] <= truth <= url.ci[1]
    assert covered >= 85, covered
    proc = manage("overlap", str(tmp_path / "A"), str(tmp_path / "B"), "--sample", "12")
    assert proc.returncode == 0, proc.stderr
    assert "y/x" in proc.stdout and "true |A|/|B|" in proc.stdout


def test_all_found_in_a_partial_sample_is_not_a_zero_width_interval(tmp_path):
    """Two copies of one crawl sampled in part: x = y = 1 used to print [1.000, 1.000]."""
    rng = random.Random(2)
    pages = [{"url": f"http://a.test/p/{i}", "fp": f"{rng.getrandbits(64):016x}", "sim": rng.getrandbits(64),
              "text": f"word{i} other{i}"} for i in range(200)]
    write_crawl(tmp_path / "A", pages)
    write_crawl(tmp_path / "B", pages)
    part = overlap.compare(tmp_path / "A", tmp_path / "B", sample=40, seed=1, queries=0).estimates[0]
    assert part.x == part.y == 1.0 and part.ci is not None and part.ci[0] < 1.0 < part.ci[1]
    text = overlap.format_result(overlap.compare(tmp_path / "A", tmp_path / "B", sample=40, seed=1, queries=0))
    assert "[1.000, 1.000]" not in text and "no spread to resample" in text
    whole = overlap.format_result(overlap.compare(tmp_path / "A", tmp_path / "B", sample=1000, queries=0))
    assert "delta 1.000 exact (both crawls sampled whole)" in whole
