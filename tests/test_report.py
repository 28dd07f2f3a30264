"""manage.py report: what it derives from pages.jsonl, the time series maintenance samples,
and the page as a browser draws it (headless Chromium, no network)."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from datetime import UTC
from pathlib import Path

import pytest

from crawler_tasks.keys import GlobalKeys
from crawler_tasks.ops import report
from crawler_tasks.ops.report import CrawlInputs, read_inputs, summarize, trap_hosts, write_report
from crawler_tasks.runtime.maintenance import read_samples, record_sample, run_maintenance, safe_value
from testweb import TestWeb

ROOT = Path(__file__).resolve().parent.parent
UA = ["--user-agent", "testbot/1.0 (+http://127.0.0.1/bot)"]


def stamp(t: float) -> str:
    from datetime import datetime

    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


def synthetic_records() -> list[dict]:
    t0 = 1_800_000_000.0
    recs = []
    # host a: 4 fetches 2 s apart, 100 ms each -> waiting 3 x 1.9 s
    for i in range(4):
        recs.append({"url": f"http://a.test/{i}", "status": 200, "fetched_at": stamp(t0 + 2 * i), "fetch_ms": 100.0,
                     "bytes": 1000, "fingerprint": f"{i:016x}", "simhash": f"{i:016x}"})
    # host t: a trap, 25 pages of which 24 duplicate the first
    for i in range(25):
        rec = {"url": f"http://t.test/cal?d={i}", "status": 200, "fetched_at": stamp(t0 + i), "fetch_ms": 10.0,
               "fingerprint": "ffff", "simhash": "ffff"}
        if i:
            rec["duplicate_of" if i % 2 else "near_duplicate_of"] = "http://t.test/cal?d=0"
        recs.append(rec)
    recs.append({"url": "http://b.test/x", "status": None, "error_kind": "robots", "fetched_at": stamp(t0)})
    recs.append({"url": "http://b.test/y", "status": None, "error_kind": "timeout", "fetched_at": stamp(t0 + 1)})
    recs.append({"url": "http://b.test/z", "status": 404, "fetched_at": stamp(t0 + 3), "fetch_ms": 5.0})
    return recs


def test_summary_counts_statuses_waits_clusters_and_traps():
    s = summarize(synthetic_records(), bad_lines=1)
    assert s.status_mix["200"] == 29 and s.status_mix["404"] == 1 and s.status_mix["error: robots"] == 1
    assert s.errors == {"robots": 1, "timeout": 1}
    assert s.hosts["a.test"].pages == 4
    assert s.hosts["a.test"].wait_s == pytest.approx(3 * 1.9)
    assert s.hosts["b.test"].pages == 2          # the timeout reached the host, the robots refusal did not
    assert list(s.clusters) == ["http://t.test/cal?d=0"]
    kinds = [k for _, k in s.clusters["http://t.test/cal?d=0"]]
    assert kinds.count("exact") == 12 and kinds.count("near") == 12
    assert trap_hosts(s, min_pages=20, ratio=0.5) == [("t.test", 25, 24)]
    assert trap_hosts(s, min_pages=30, ratio=0.5) == []


def test_bad_lines_are_counted_not_fatal(tmp_path):
    (tmp_path / "pages.jsonl").write_text('{"url": "http://a.test/", "status": 200}\n[1]\n{"url": "http://a.te')
    records, bad = report.read_jsonl(tmp_path / "pages.jsonl")
    assert len(records) == 1 and bad == 2


def test_settings_values_lose_passwords():
    assert safe_value("redis://:s3cret@127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"
    assert safe_value("redis://u:p@h:1/0,redis://h2:2/0") == "redis://h:1/0,redis://h2:2/0"
    assert safe_value("mybot/1.0 (+https://x.org)") == "mybot/1.0 (+https://x.org)"


def test_maintenance_samples_a_capped_series(settings, rclient):
    import dataclasses

    from crawler_tasks.frontier import Discovered, Frontier
    from crawler_tasks.runtime.control import Control

    s = dataclasses.replace(settings, TIMESERIES_MAX_SAMPLES=3)
    Frontier(s).put_discovered([Discovered("http://a.test/", "a.test")])  # a crawl with work left
    Control(s).start()   # (maintenance samples a started crawl only)
    for _ in range(5):
        run_maintenance(s)
    samples = read_samples(s)
    assert len(samples) == 3
    assert [x["t"] for x in samples] == sorted(x["t"] for x in samples)
    assert samples[-1]["queued"] == 1
    assert {"pages", "queued", "active_hosts", "leased", "errors", "inflight"} <= set(samples[0])
    recorded = rclient.hgetall(GlobalKeys(s.KEY_PREFIX).settings)
    assert recorded["TIMESERIES_MAX_SAMPLES"] == "3" and recorded["KEY_PREFIX"] == s.KEY_PREFIX
    rclient.lpush(GlobalKeys(s.KEY_PREFIX).timeseries, "not json")
    assert len(read_samples(s)) == 3
    inputs = read_inputs(s)
    assert len(inputs.samples) == 3 and inputs.settings["KEY_PREFIX"] == s.KEY_PREFIX


def test_sampling_off(settings, rclient):
    import dataclasses

    s = dataclasses.replace(settings, TIMESERIES_MAX_SAMPLES=0)
    progress = run_maintenance(s)
    record_sample(s, progress)
    assert rclient.llen(GlobalKeys(s.KEY_PREFIX).timeseries) == 0


def sample_inputs() -> CrawlInputs:
    samples = [{"t": 1000.0 + 2 * i, "pages": 10 * i, "queued": max(0, 100 - 8 * i), "active_hosts": 3,
                "leased": 1, "inflight": 1, "errors": i // 3} for i in range(15)]
    return CrawlInputs(stats={"fetch/pages": 140, "robots/rules": 3, "robots/status/200": 2, "robots/allow": 1,
                              "records/error/robots": 1, "filter/depth": 7}, samples=samples,
                       settings={"MIN_DELAY_S": "1.0", "REDIS_URL": "redis://127.0.0.1:1/0"},
                       state="finished", reason="frontier exhausted")


def test_page_is_self_contained(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "pages.jsonl").write_text("".join(json.dumps(r) + "\n" for r in synthetic_records()))
    page = write_report(out, sample_inputs()).read_text()
    assert "<script" not in page
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", page)
    assert "url(" not in page and "@import" not in page
    assert page.count("<svg") >= 9
    d = re.findall(r'<path d="([^"]*)"', page)
    assert len(d) >= 6 and all(len(x.split(" L")) >= 2 for x in d)
    assert "t.test" in page and "MIN_DELAY_S" in page


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no chromium binary (apt-get install -y chromium)")


def run_chromium(*args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    # a dead proxy: any request for the network fails, so a page that needs one shows it
    return subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                           "--proxy-server=127.0.0.1:9", "--no-first-run", *args],
                          capture_output=True, text=True, timeout=timeout)


def test_chromium_draws_the_plots_without_network(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "pages.jsonl").write_text("".join(json.dumps(r) + "\n" for r in synthetic_records()))
    path = write_report(out, sample_inputs())
    dom = run_chromium("--dump-dom", path.as_uri()).stdout
    assert "<svg" in dom, dom[:500]
    paths = re.findall(r'<path d="(M[^"]+)"', dom)
    assert len(paths) >= 6
    assert all(re.fullmatch(r"M[\d.]+,[\d.]+( L[\d.]+,[\d.]+)+", d) for d in paths)
    assert len(re.findall(r'<rect [^>]*class="bar"', dom)) >= 10
    shot = tmp_path / "report.png"
    run_chromium(f"--screenshot={shot}", "--window-size=1300,1800", path.as_uri())
    assert shot.exists() and shot.stat().st_size > 20_000  # a blank page is a few kB


def manage(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")}
    return subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=timeout)


def test_report_of_a_finished_crawl(tmp_path):
    """The crawl's Redis is gone after the crawl; report reopens it from OUT/redis."""
    out = tmp_path / "crawl"
    with TestWeb(n_hosts=2, pages_per_host=8, seed=4) as web:
        crawl = manage("crawl", *web.seeds(), "--out", str(out), "--allow-private", "--min-delay", "0.2", *UA)
        assert crawl.returncode == 0, crawl.stderr[-2000:]
    proc = manage("report", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    page = (out / "report.html").read_text()
    assert "finished" in page and "MIN_DELAY_S" in page
    assert "frontier size (maintenance samples)" in page
    frontier_svg = page.split("frontier size (maintenance samples)</title>", 1)[1].split("</svg>", 1)[0]
    assert '<path d="M' in frontier_svg     # maintenance sampled the queue during the crawl
    assert "127.0.0." in page


def test_report_without_redis_uses_pages_only(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "pages.jsonl").write_text("".join(json.dumps(r) + "\n" for r in synthetic_records()))
    proc = manage("report", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "pages.jsonl only" in proc.stderr
    page = (out / "report.html").read_text()
    assert "from fetch times in pages.jsonl" in page
    assert manage("report", "--out", str(tmp_path / "nothing")).returncode == 2
