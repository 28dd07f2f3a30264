"""End to end: `manage.py crawl` with real Celery workers, beat and an embedded Redis
against a local multi-host web; politeness checked from the server's request log."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import psutil
import pytest

from testweb import HostSpec, TestWeb

ROOT = Path(__file__).resolve().parent.parent
MIN_DELAY = 0.3


def run_crawl(out: Path, seeds: list[str], *extra: str, timeout: float = 180) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(ROOT / "manage.py"), "crawl", *seeds, "--out", str(out), "--allow-private",
           "--min-delay", str(MIN_DELAY), "--user-agent", "testbot/1.0 (+http://127.0.0.1/bot)", *extra]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)


def records(out: Path) -> list[dict]:
    path = out / "pages.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def no_children_left(out: Path) -> list[str]:
    """Processes of this crawl still alive: its redis-server (data dir under OUT) and every
    worker or beat (they carry CRAWLER_OUT_DIR=OUT in their environment)."""
    left = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if proc.pid == os.getpid():
            continue
        try:
            cmd = " ".join(proc.info["cmdline"] or [])
            env = proc.environ() if "python" in cmd or "celery" in cmd else {}
            cwd = proc.cwd() if "redis-server" in cmd else ""  # it runs in its data folder
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if str(out) in cmd or env.get("CRAWLER_OUT_DIR") == str(out) or cwd.startswith(str(out)):
            left.append(cmd)
    return left


FAST_FAIL = {"CRAWLER_LEASE_S": "6", "CRAWLER_TOTAL_TIMEOUT_S": "3", "CRAWLER_READ_TIMEOUT_S": "2",
             "CRAWLER_CONNECT_TIMEOUT_S": "1"}


def start_crawl(out: Path, seeds: list[str], min_delay: float, wait_records: int,
                env_extra: dict[str, str] | None = None, extra: tuple[str, ...] = ()) -> subprocess.Popen:
    """A crawl in the background, returned once it has written ``wait_records`` records."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")}
    env.update(env_extra or {})
    cmd = [sys.executable, str(ROOT / "manage.py"), "crawl", *seeds, "--out", str(out), "--allow-private",
           "--min-delay", str(min_delay), "--user-agent", "testbot/1.0 (+http://127.0.0.1/bot)", *extra]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and len(records(out)) < wait_records:
        time.sleep(0.2)
    return proc


def crawl_redis(out: Path) -> list[psutil.Process]:
    """The embedded redis-server of the crawl writing to ``out`` (found by its port)."""
    port = json.loads((out / "crawl.json").read_text())["redis_url"].rsplit(":", 1)[1].split("/")[0]
    return [p for p in psutil.process_iter(["cmdline"])
            if "redis-server" in " ".join(p.info["cmdline"] or []) and f":{port}" in " ".join(p.info["cmdline"] or [])]


@pytest.fixture(scope="module")
def web():
    specs = {3: HostSpec(pages=6, robots_txt="User-agent: *\nDisallow: /p/\n")}
    with TestWeb(n_hosts=4, pages_per_host=8, seed=3, mean_page_bytes=6000, host_specs=specs) as w:
        yield w


@pytest.fixture(scope="module")
def crawl(web, tmp_path_factory):
    out = tmp_path_factory.mktemp("crawl") / "out"
    web.clear_log()
    proc = run_crawl(out, web.seeds())
    return out, proc, web.requests


def test_crawl_finishes_by_itself_and_cleans_up(crawl):
    out, proc, _ = crawl
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "frontier exhausted" in proc.stderr
    assert no_children_left(out) == []


def test_every_reachable_page_fetched_once(crawl, web):
    out, _, log = crawl
    fetched = [r["url"] for r in records(out) if r.get("status") == 200]
    assert len(fetched) == len(set(fetched)), "a page was recorded twice"
    expected = web.reachable(web.seeds())
    assert expected <= set(fetched), sorted(expected - set(fetched))[:5]
    page_requests = [(r.host, r.path) for r in log if r.path != "/robots.txt"]
    assert len(page_requests) == len(set(page_requests)), "a URL was requested twice"


def test_robots_obeyed(crawl, web):
    _, _, log = crawl
    blocked_host = web.hosts[3]  # its robots.txt disallows /p/ instead of /private/
    assert not [r for r in log if r.path.startswith("/private/") and r.host != blocked_host]
    assert not [r for r in log if r.host == blocked_host and r.path.startswith("/p/")]
    robots_fetches = defaultdict(int)
    for r in log:
        if r.path == "/robots.txt":
            robots_fetches[r.host] += 1
    assert all(n == 1 for n in robots_fetches.values()), robots_fetches


def test_one_connection_per_host_and_gap_respected(crawl):
    _, _, log = crawl
    by_host = defaultdict(list)
    for r in log:
        by_host[r.host].append(r)
    assert len(by_host) >= 3
    for host, reqs in by_host.items():
        reqs.sort(key=lambda r: r.start)
        for a, b in zip(reqs, reqs[1:]):
            assert b.start >= a.end, f"overlapping requests on {host}"
            # exact: te follows the client's read of the last byte (after the server's stamp,
            # taken before its write) and no request leaves before te; 1 ms for the clock
            assert b.start - a.end >= MIN_DELAY - 0.001, f"gap {b.start - a.end:.3f}s on {host}"


def test_output_records_and_warc(crawl):
    out, _, _ = crawl
    recs = records(out)
    ok = [r for r in recs if r.get("status") == 200]
    assert ok and all(r["fingerprint"] and r["content_type"].startswith("text/html") for r in ok)
    for key in ("url", "final_url", "status", "content_type", "bytes", "fetched_at", "fetch_ms", "depth",
                "fingerprint", "n_links"):
        assert key in ok[0], key
    assert {r["depth"] for r in ok} >= {0, 1, 2}
    warcs = list((out / "warc").glob("*.warc.gz"))
    assert warcs
    check = subprocess.run([sys.executable, "-m", "warcio.cli", "check", *map(str, warcs)],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout


def test_max_pages_limit(web, tmp_path):
    out = tmp_path / "out"
    proc = run_crawl(out, web.seeds(), "--max-pages", "5")
    assert proc.returncode == 0, proc.stderr[-3000:]
    fetched = [r for r in records(out) if r.get("status") is not None]
    assert len(fetched) == 5   # exact: the frontier's scripts lease and hold hosts within the budget
    assert "max pages" in proc.stderr
    assert no_children_left(out) == []


def test_sigterm_stops_everything(web, tmp_path):
    out = tmp_path / "out"
    cmd = [sys.executable, str(ROOT / "manage.py"), "crawl", *web.seeds(), "--out", str(out),
           "--allow-private", "--min-delay", "2"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not records(out):
        time.sleep(0.2)
    assert records(out), "crawl did not start"
    port = json.loads((out / "crawl.json").read_text())["metrics_port"]
    import urllib.request

    metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    assert "crawler_up 1.0" in metrics and "crawler_fetch_status_total" in metrics

    # Flower sees the crawl's workers and their tasks (the workers send events)
    from crawler_tasks.ops.embedded import free_port

    info = json.loads((out / "crawl.json").read_text())
    flower_port = free_port()
    env = {**os.environ, "CRAWLER_REDIS_URL": info["redis_url"], "FLOWER_UNAUTHENTICATED_API": "true"}
    flower = subprocess.Popen([sys.executable, "-m", "celery", "-A", "crawler_tasks", "flower",
                               f"--port={flower_port}", "--address=127.0.0.1"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        workers: dict = {}
        for _ in range(30):
            try:
                workers = json.loads(urllib.request.urlopen(
                    f"http://127.0.0.1:{flower_port}/api/workers?refresh=1", timeout=10).read())
                if len(workers) >= 3:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        # fetch (with control and Beat: one fetch worker on this machine) and parse/dedup
        assert any(name.startswith("fetch") for name in workers) and any(n.startswith("process") for n in workers)
    finally:
        flower.terminate()
        flower.wait(20)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert "SIGTERM" in err
    time.sleep(0.5)
    assert no_children_left(out) == []


def test_bad_seed_file_is_a_clear_error(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "manage.py"), "crawl", "--seeds-file",
                           str(tmp_path / "missing.txt"), "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 2 and "cannot read seeds file" in proc.stderr


@pytest.mark.parametrize("workers", [1, 2])
def test_kill_9_worker_and_control_mid_crawl(workers, tmp_path):
    """A fetch worker and the control tasks and Beat die hard (one process with one fetch
    worker, two with two): the crawl restarts them, the dead worker's hosts come back when
    their leases expire, every page is fetched, no host is ever fetched by two connections
    at once."""
    out = tmp_path / "out"
    with TestWeb(n_hosts=3, pages_per_host=10, seed=11, mean_page_bytes=3000) as web:
        proc = start_crawl(out, web.seeds(), 0.3, 4, FAST_FAIL, ("--workers", str(workers)))
        victims = []
        for p in psutil.process_iter(["cmdline"]):
            cmdline = " ".join(p.info["cmdline"] or [])
            if f"fetch0-{proc.pid}@" in cmdline or f"control-{proc.pid}@" in cmdline:
                victims.append((p, cmdline))
        assert len(victims) == workers, victims
        assert all(("crawl.control" in cmdline) == (workers == 1) for _, cmdline in victims if "fetch0" in cmdline)
        for p, _ in victims:
            p.kill()
        _, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err[-3000:]
        assert "restarting" in err and "frontier exhausted" in err
        log = web.requests
        fetched = {r["url"] for r in records(out) if r.get("status") == 200}
        assert web.reachable(web.seeds()) <= fetched
        by_host = defaultdict(list)
        for r in log:
            by_host[r.host].append(r)
        for reqs in by_host.values():
            reqs.sort(key=lambda r: r.start)
            assert all(b.start >= a.end for a, b in zip(reqs, reqs[1:])), "two requests at once on a host"
    time.sleep(0.5)
    assert no_children_left(out) == []


def test_redis_killed_mid_crawl_restarts_from_its_aof(tmp_path):
    out = tmp_path / "out"
    with TestWeb(n_hosts=3, pages_per_host=8, seed=12, mean_page_bytes=3000) as web:
        proc = start_crawl(out, web.seeds(), 0.3, 6, FAST_FAIL)   # the append-only file is on by default
        redis_proc = crawl_redis(out)
        assert len(redis_proc) == 1
        redis_proc[0].kill()
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-3000:]
        assert "restarting it from" in err and "frontier exhausted" in err
        fetched = {r["url"] for r in records(out) if r.get("status") == 200}
        assert web.reachable(web.seeds()) <= fetched
    time.sleep(0.5)
    assert no_children_left(out) == []


def test_redis_state_lost_without_checkpoint_is_an_error_not_success(tmp_path):
    """No AOF, no RDB save yet, no checkpoint: the crawl must say it cannot go on."""
    out = tmp_path / "out"
    with TestWeb(n_hosts=2, pages_per_host=8, seed=13, mean_page_bytes=3000) as web:
        proc = start_crawl(out, web.seeds(), 0.5, 2, {"CRAWLER_SNAPSHOT_INTERVAL_S": "0",
                                                      "CRAWLER_EMBEDDED_REDIS_AOF": "0"})
        victims = crawl_redis(out)
        assert len(victims) == 1
        victims[0].kill()
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 2 and "lost the crawl state" in err and "frontier exhausted" not in err
        assert not list((out / "snapshots").glob("snapshot-*"))
    time.sleep(0.5)
    assert no_children_left(out) == []


def test_crawl_redis_is_closed_to_other_processes(tmp_path):
    """The embedded Redis asks for the crawl's password, has no CONFIG, and the password
    is on no command line and in no file other users can read; the crawl still works."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    out = tmp_path / "out"
    with TestWeb(n_hosts=2, pages_per_host=8, seed=21, mean_page_bytes=3000) as web:
        proc = start_crawl(out, web.seeds(), 0.5, 2)
        try:
            url = json.loads((out / "crawl.json").read_text())["redis_url"]
            password = redis.connection.parse_url(url)["password"]
            assert len(password) >= 32
            assert (out / "crawl.json").stat().st_mode & 0o077 == 0
            assert (out / "redis").stat().st_mode & 0o077 == 0
            assert (out / "redis" / "redis.conf").stat().st_mode & 0o077 == 0
            port = int(url.rsplit(":", 1)[1].split("/")[0])
            # no retries: redis-py 8 retries an AuthenticationError for ~4 s, past the crawl's end
            stranger = redis.Redis(host="127.0.0.1", port=port, socket_timeout=2,
                                   retry=Retry(NoBackoff(), 0))
            with pytest.raises(redis.AuthenticationError):
                stranger.get("anything")
            with pytest.raises(redis.ResponseError, match="(?i)unknown command"):
                redis.Redis.from_url(url).config_get("dir")
            ours = [p for p in psutil.process_iter(["cmdline"])
                    if f"-{proc.pid}@" in " ".join(p.info["cmdline"] or [])
                    or f"{out}/celerybeat-schedule" in " ".join(p.info["cmdline"] or [])]
            ours += crawl_redis(out)
            assert len(ours) >= 5  # redis-server, fetch, 2 process, control (with Beat)
            for p in ours:
                assert password not in " ".join(p.cmdline())
        finally:
            _, err = proc.communicate(timeout=180)
        assert proc.returncode == 0 and "frontier exhausted" in err, err[-3000:]
        assert password not in err
        assert web.reachable(web.seeds()) <= {r["url"] for r in records(out) if r.get("status") == 200}
    time.sleep(0.5)
    assert no_children_left(out) == []


def test_unreachable_host_is_reported_and_explained(tmp_path):
    """A seed host whose robots.txt cannot be fetched (a closed port here; DNS failures
    take the same path) is named while the crawl runs and in the summary, and the
    queued URL is accounted for; pages.jsonl exists although nothing was fetched."""
    from crawler_tasks.ops.embedded import free_port

    out = tmp_path / "out"
    port = free_port("127.0.0.9")
    proc = run_crawl(out, [f"http://down.test:{port}/"], "--resolve", "down.test=127.0.0.9", timeout=120)
    assert proc.returncode == 1, proc.stderr[-3000:]   # nothing was fetched: not a success
    err = proc.stderr
    assert "nothing was fetched" in err and "/warc" not in err   # no folder named that does not exist
    assert f"host unreachable: down.test:{port}: connection refused; next try in" in err, err
    assert f"hosts unreachable: 1 (down.test:{port}: connection refused; next try in" in err
    assert "not fetched: 1 URL(s) of 1 host(s) waiting for robots.txt" in err
    assert (out / "pages.jsonl").exists() and records(out) == []
    stats = subprocess.run([sys.executable, str(ROOT / "manage.py"), "stats", "--out", str(out)],
                           capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert "hosts unreachable: 1" in stats.stdout and f"down.test:{port}: connection refused" in stats.stdout


def test_exact_url_seen_crawls_every_page_once(web, tmp_path):
    """URL_SEEN=exact end to end: fingerprints decide in add.lua, the summary reports them."""
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")}
    env["CRAWLER_URL_SEEN"] = "exact"
    cmd = [sys.executable, str(ROOT / "manage.py"), "crawl", *web.seeds(), "--out", str(out), "--allow-private",
           "--min-delay", "0.1", "--user-agent", "testbot/1.0 (+http://127.0.0.1/bot)"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    fetched = [r["url"] for r in records(out) if r.get("status") == 200]
    assert len(fetched) == len(set(fetched)) and web.reachable(web.seeds()) <= set(fetched)
    assert "URL-seen: exact: " in proc.stderr and "fingerprints of" in proc.stderr
