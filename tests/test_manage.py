"""manage.py commands as an operator runs them: resume, stats, seed, robots, bad config."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testweb import TestWeb

ROOT = Path(__file__).resolve().parent.parent
UA = ["--user-agent", "testbot/1.0 (+http://127.0.0.1/bot)"]


def manage(*args: str, env: dict[str, str] | None = None, timeout: float = 180,
           cwd: Path = ROOT) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")}
    return subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], capture_output=True, text=True,
                          cwd=cwd, env={**base, **(env or {})}, timeout=timeout)


def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "pages.jsonl").read_text().splitlines()]


def test_resume_continues_where_the_crawl_stopped(tmp_path):
    out = tmp_path / "out"
    with TestWeb(n_hosts=2, pages_per_host=6, seed=5) as web:
        first = manage("crawl", *web.seeds(), "--out", str(out), "--allow-private", "--min-delay", "0.1",
                       "--max-pages", "4", *UA)
        assert first.returncode == 0, first.stderr[-2000:]
        fetched_first = {r["url"] for r in records(out) if r.get("status") is not None}
        assert 4 <= len(fetched_first) < len(web.reachable(web.seeds()))

        stats = manage("stats", "--out", str(out))
        assert stats.returncode == 0, stats.stderr
        assert "state finished" in stats.stdout and "fetch/pages" in stats.stdout
        assert "Bloom filter:" in stats.stdout and "false-positive rate" in stats.stdout
        assert "top hosts by URLs enqueued: " + web.hosts[0] in stats.stdout or web.hosts[1] in stats.stdout

        hosts = manage("hosts", web.hosts[0], "--out", str(out))
        assert hosts.returncode == 0 and "robots.txt rules" in hosts.stdout and "next contact" in hosts.stdout

        # a seed is fetched even when seen before (the operator asked): pick one not fetched yet
        extra = next(web.url(h, f"/p/{i}.html") for i in (5, 4, 3) for h in (1, 0)
                     if web.url(h, f"/p/{i}.html") not in fetched_first)
        seeded = manage("seed", "--out", str(out), extra, "mailto:nobody@example.org")
        assert seeded.returncode == 0 and "skipped" in seeded.stderr

        second = manage("crawl", "--resume", "--out", str(out), "--allow-private", "--min-delay", "0.1", *UA)
        assert second.returncode == 0, second.stderr[-2000:]
        assert "frontier exhausted" in second.stderr
        # the summary counts this run's pages, and the whole crawl's beside them
        answered = [r for r in records(out) if r.get("status") is not None]
        assert f"pages fetched {len(answered) - len(fetched_first)} in " in second.stderr, second.stderr[-1500:]
        assert f", {len(answered)} since the crawl began" in second.stderr
        all_fetched = [r["url"] for r in records(out) if r.get("status") == 200]
        # nothing fetched twice across the runs, the forced seed neither: when the first run
        # had queued it already (timing decides), the seed leaves it where it waits
        assert len(all_fetched) == len(set(all_fetched))
        assert web.reachable(web.seeds()) | {extra} <= set(all_fetched)


def test_a_previous_crawl_is_kept_unless_the_operator_asks(tmp_path):
    """A mistyped seed, a missing seeds file or a plain second crawl on the same --out
    are refused before anything is deleted; --overwrite replaces the previous crawl."""
    out = tmp_path / "out"
    with TestWeb(n_hosts=1, pages_per_host=2) as web:
        first = manage("crawl", *web.seeds(), "--out", str(out), "--allow-private", "--min-delay", "0", *UA)
        assert first.returncode == 0, first.stderr[-2000:]
        kept = (out / "pages.jsonl").read_bytes()
        assert kept and list((out / "warc").iterdir())
        for args, message in ((["htp:/typo.example"], "no usable seed URL"),
                              (["--seeds-file", str(tmp_path / "missing.txt")], "cannot read seeds file"),
                              (web.seeds(), "holds a previous crawl")):
            proc = manage("crawl", *args, "--out", str(out), "--allow-private", *UA, timeout=60)
            assert proc.returncode == 2 and message in proc.stderr, proc.stderr[-2000:]
            assert (out / "pages.jsonl").read_bytes() == kept and list((out / "warc").iterdir())
        assert "--overwrite" in proc.stderr and "--resume" in proc.stderr
        again = manage("crawl", *web.seeds(), "--out", str(out), "--allow-private", "--min-delay", "0",
                       "--overwrite", *UA)
        assert again.returncode == 0, again.stderr[-2000:]
        assert "--overwrite: removed the previous crawl" in again.stderr
        urls = [r["url"] for r in records(out) if r.get("status") == 200]
        assert urls and len(urls) == len(set(urls))


def test_robots_command_explains_the_verdict():
    with TestWeb(n_hosts=1, pages_per_host=2) as web:
        blocked = manage("robots", web.url(0, "/private/x.html"), "--allow-private", "--agent", "somebot")
        assert blocked.returncode == 3
        assert "DISALLOWED" in blocked.stdout and "/private/" in blocked.stdout
        ok = manage("robots", web.url(0, "/p/1.html"), "--allow-private")
        assert ok.returncode == 0 and "ALLOWED" in ok.stdout
        assert "Verdict(" not in blocked.stdout + ok.stdout     # a sentence, not a repr
        assert "disallowed by line" in blocked.stdout


@pytest.mark.parametrize("env, args, message", [
    ({"CRAWLER_SHARDS": "lots"}, [], "SHARDS"),
    ({}, ["--min-delay", "-1"], "MIN_DELAY_S"),
    ({}, [], "no seed URLs"),
    ({}, ["http://127.0.0.1/", "--include", "docs/(", "--allow-private"],
     "INCLUDE_PATTERNS: 'docs/(' is not a regular expression: missing ), unterminated subpattern at position 5"),
    ({"CRAWLER_EXCLUDE_PATTERNS": "[a-"}, ["http://127.0.0.1/", "--allow-private"], "EXCLUDE_PATTERNS: '[a-'"),
])
def test_bad_config_is_a_clear_error(tmp_path, env, args, message):
    proc = manage("crawl", "--out", str(tmp_path / "o"), *args, env=env, timeout=60)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
    assert "redis-server" not in proc.stderr   # said before anything was started


def test_snapshot_then_restore_after_losing_redis(tmp_path):
    import shutil

    out = tmp_path / "out"
    with TestWeb(n_hosts=2, pages_per_host=5, seed=9) as web:
        first = manage("crawl", *web.seeds(), "--out", str(out), "--allow-private", "--min-delay", "0.1",
                       "--max-pages", "3", *UA)
        assert first.returncode == 0, first.stderr[-2000:]
        snap = manage("snapshot", "--out", str(out))
        assert snap.returncode == 0, snap.stderr
        assert list((out / "snapshots").glob("snapshot-*.jsonl.gz"))
        shutil.rmtree(out / "redis")  # the Redis data is gone; the snapshot is not
        second = manage("crawl", "--restore", "latest", "--out", str(out), "--allow-private",
                        "--min-delay", "0.1", *UA)
        assert second.returncode == 0, second.stderr[-2000:]
        assert "restored" in second.stderr and "frontier exhausted" in second.stderr
        fetched = [r["url"] for r in records(out) if r.get("status") == 200]
        assert len(fetched) == len(set(fetched))
        assert web.reachable(web.seeds()) <= set(fetched)


def test_restore_of_an_older_snapshot_rolls_back_later_records(tmp_path):
    """`restore` of a checkpoint older than the records: the records of pages the restored
    frontier fetches again move to pages.jsonl.rolled-back; the resumed crawl writes each
    URL once."""
    out = tmp_path / "out"
    with TestWeb(n_hosts=2, pages_per_host=6, seed=9) as web:
        common = ["--out", str(out), "--allow-private", "--min-delay", "0.05", *UA]
        assert manage("crawl", *web.seeds(), "--max-pages", "3", *common).returncode == 0
        snap = tmp_path / "early.jsonl.gz"
        assert manage("snapshot", "--out", str(out), "--path", str(snap)).returncode == 0
        finished = manage("crawl", "--resume", *common)
        assert finished.returncode == 0 and "frontier exhausted" in finished.stderr, finished.stderr[-2000:]
        before = len(records(out))
        restored = manage("restore", str(snap), "--out", str(out), "--replace")
        assert restored.returncode == 0, restored.stderr[-2000:]
        rolled = json.loads(restored.stdout)["repaired"]["records_rolled_back"]
        assert rolled > 0 and len(records(out)) == before - rolled
        again = manage("crawl", "--resume", *common)
        assert again.returncode == 0, again.stderr[-2000:]
        urls = [r["url"] for r in records(out)]
        assert len(urls) == len(set(urls)) and web.reachable(web.seeds()) <= set(urls)


def test_corrupt_snapshot_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(b"not gzip at all")
    out = tmp_path / "out"
    out.mkdir()
    (out / "crawl.json").write_text(json.dumps({"redis_url": "redis://127.0.0.1:1/0", "key_prefix": "x",
                                                "shards": 1}))
    (out / "redis").mkdir()
    proc = manage("restore", str(bad), "--out", str(out), timeout=60)
    assert proc.returncode == 2 and "error:" in proc.stderr and "Traceback" not in proc.stderr


def test_continuous_crawl_revisits_until_time_limit(tmp_path):
    out = tmp_path / "out"
    env = {"CRAWLER_RECRAWL_INITIAL_S": "1", "CRAWLER_RECRAWL_MIN_S": "1", "CRAWLER_RECRAWL_CHECK_S": "0.5"}
    with TestWeb(n_hosts=1, pages_per_host=2) as web:
        proc = manage("crawl", *web.seeds(), "--out", str(out), "--allow-private", "--min-delay", "0.1",
                      "--continuous", "--max-seconds", "12", *UA, env=env)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "max seconds" in proc.stderr
        home = [r for r in records(out) if r["url"] == web.url(0, "/")]
        assert len(home) >= 2 and {r["status"] for r in home} <= {200, 304}
        assert 304 in {r["status"] for r in records(out)}


def test_crawl_and_stats_with_a_relative_out_from_another_folder(tmp_path):
    """The first command a new user types: a relative --out (the default is relative too)
    from any folder; progress lines in a log, and stats reopens the finished crawl."""
    with TestWeb(n_hosts=1, pages_per_host=4) as web:
        crawl = manage("crawl", *web.seeds(), "--out", "rel-out", "--allow-private", "--min-delay", "0.1",
                       "--max-pages", "3", *UA, cwd=tmp_path)
        assert crawl.returncode == 0, crawl.stderr[-2000:]
    out = tmp_path / "rel-out"
    assert "crawl finished: max pages (3) reached" in crawl.stderr
    assert f"output: {out / 'pages.jsonl'}" in crawl.stderr
    # the first line may already say "stopping": 3 pages can take less than a watch interval
    progress = [line for line in crawl.stderr.splitlines() if line.startswith(("running ", "stopping "))]
    assert progress and "pages " in progress[0] and "/s  queued " in progress[0] and "ETA " in progress[0]
    assert "\r" not in crawl.stderr and "\x1b" not in crawl.stderr  # no terminal codes in a log
    assert len(records(out)) >= 3
    stats = manage("stats", "--out", "rel-out", cwd=tmp_path, timeout=60)
    assert stats.returncode == 0, stats.stderr
    assert "state finished" in stats.stdout and "fetch/pages" in stats.stdout
    watch = manage("stats", "--out", "rel-out", "--watch", cwd=tmp_path, timeout=60)
    assert watch.returncode == 0 and watch.stdout.count("state finished") == 1  # ends with the crawl


def test_messages_name_bad_input_short_and_never_a_negative_wait(tmp_path):
    out = tmp_path / "out"
    with TestWeb(n_hosts=1, pages_per_host=3, seed=2) as web:
        crawl = manage("crawl", *web.seeds(), "--out", str(out), "--allow-private", "--min-delay", "0", *UA)
        assert crawl.returncode == 0, crawl.stderr[-2000:]
        host = web.hosts[0]
        bare = host.rsplit(":", 1)[0]
        found = manage("hosts", bare, "--out", str(out))       # without its port: found
        assert found.returncode == 0 and f"host {host} " in found.stdout, found.stdout + found.stderr
        assert "in -" not in found.stdout and " -" not in found.stdout.split("pages enqueued")[0]
        missing = manage("hosts", "nosuch.test", "--out", str(out))
        assert missing.returncode == 1 and "not in this crawl" in missing.stderr

        # a 10 MB line and 300 bad ones: each quoted short, the rest counted, never echoed whole
        seeds = tmp_path / "seeds.txt"
        seeds.write_text("http://" + "a" * 10 * 2**20 + "\n" + "".join(f"nope{i}\n" for i in range(300))
                         + web.url(0, "/extra.html") + "\n")
        seeded = manage("seed", "--out", str(out), "--seeds-file", str(seeds))
        assert seeded.returncode == 0, seeded.stderr[-2000:]
        assert len(seeded.stderr) < 5000 and "characters)" in seeded.stderr and "... and 291 more" in seeded.stderr
        assert "1 URL(s) added, 301 skipped" in seeded.stdout
        assert "the crawl is not running" in seeded.stderr and "crawl --resume" in seeded.stderr

        # a binary seeds file is refused whole, before anything is written
        binary = tmp_path / "seeds.bin"
        binary.write_bytes(bytes(range(256)) * 200)
        for args in (["seed", "--out", str(out)], ["crawl", "--out", str(tmp_path / "other"), "--allow-private"]):
            proc = manage(*args, "--seeds-file", str(binary))
            assert proc.returncode == 2 and "is not UTF-8 text" in proc.stderr, proc.stderr[-2000:]
            assert len(proc.stderr.splitlines()) <= 3
        assert not (tmp_path / "other").exists()

        # restore over a crawl that is not running: no library argument, no "running"
        snap = manage("snapshot", "--out", str(out))
        assert snap.returncode == 0, snap.stderr
        path = next((out / "snapshots").glob("snapshot-*.jsonl.gz"))
        refused = manage("restore", str(path), "--out", str(out))
        assert refused.returncode == 2 and "add --replace" in refused.stderr, refused.stderr
        assert "replace=True" not in refused.stderr and "running" not in refused.stderr


def test_include_and_exclude_flags_scope_a_crawl(tmp_path):
    """--include keeps a crawl to the URLs one of its regexes finds, --exclude leaves out
    those any of its regexes finds; the home page is a seed, and a seed is filtered too."""
    out = tmp_path / "out"
    with TestWeb(n_hosts=1, pages_per_host=12, seed=3) as web:
        proc = manage("crawl", web.url(0, "/"), "--out", str(out), "--allow-private", "--min-delay", "0", *UA,
                      "--include", r"/$", "--include", r"/p/\d+\.html$", "--exclude", r"/p/1\d*\.html$",
                      env={"CRAWLER_SOFT404_PROBE": "0", "CRAWLER_PROBE_SITEMAP_XML": "0"})
        assert proc.returncode == 0, proc.stderr[-2000:]
        fetched = {r.path for r in web.requests if r.path != "/robots.txt"}
    assert "/" in fetched and any(p.startswith("/p/") for p in fetched), fetched
    assert all(p == "/" or (p.startswith("/p/") and not p.startswith("/p/1")) for p in fetched), fetched


def test_a_bad_sites_variable_is_a_clear_error(tmp_path):
    proc = manage("crawl", "http://127.0.0.1/", "--out", str(tmp_path / "o"), "--allow-private",
                  env={"CRAWLER_SITES": '[{"match": "a.org", "min_delay": "fast"}]'}, timeout=60)
    assert proc.returncode == 2 and "SITES: sites[0]: min_delay must be a number of seconds" in proc.stderr
