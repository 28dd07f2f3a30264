"""The README's production shape as an operator runs it: a redis-server of its own, plain
``celery -A crawler_tasks worker``s and beat started first, then ``manage.py seed``,
``stats``, ``pause`` and ``resume`` from the command line (issue 24 item 6, issue 28 item 1)."""
from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from crawler_tasks.ops.embedded import EmbeddedRedis
from crawler_tasks.runtime.control import Control, CrawlState
from crawler_tasks.runtime.maintenance import read_progress
from crawler_tasks.settings import reset_settings
from testweb import TestWeb

ROOT = Path(__file__).resolve().parent.parent
CELERY = [sys.executable, "-m", "celery", "-A", "crawler_tasks"]
COMMON = ["--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "INFO"]
WAKE_SENT = "Sending due task wake"
MAINTENANCE_SENT = "Sending due task maintenance"


def wait_for(check: Callable[[], bool], timeout: float = 90.0) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return check()


def test_workers_first_then_seed_revive_pause_and_resume(settings, tmp_path):
    with EmbeddedRedis(tmp_path / "redis", save="") as server, \
            TestWeb(n_hosts=2, pages_per_host=4, seed=3) as web1, \
            TestWeb(n_hosts=1, pages_per_host=3, seed=4, first_ip=20) as web2, \
            TestWeb(n_hosts=2, pages_per_host=10, seed=5, first_ip=30) as web3:
        s = dataclasses.replace(settings, REDIS_URL=server.url, SHARDS=2, NODE_NAME="prod", MIN_DELAY_S=0.3,
                                OUT_DIR=str(tmp_path / "out"), METRICS_PORT=-1, FETCH_CONCURRENCY=2,
                                MAX_FETCH_SESSIONS=2, USER_AGENT="testbot/1.0 (+http://127.0.0.1/bot)")
        reset_settings(s)
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")}, **s.to_env(),
               "PYTHONPATH": str(ROOT)}

        def manage(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], capture_output=True,
                                  text=True, cwd=ROOT, env=env, timeout=120)

        logs = tmp_path / "logs"
        logs.mkdir()
        specs = {"fetch": ["worker", "-Q", "crawl.fetch.0,crawl.fetch.1", "-P", "threads", "-c", "2",
                           "-n", "fetch@%h"],
                 "process": ["worker", "-Q", "crawl.parse.prod,crawl.enqueue", "-P", "solo", "-n", "process@%h"],
                 "control": ["worker", "-Q", "crawl.control", "-P", "solo", "-n", "control@%h"]}
        procs: dict[str, subprocess.Popen[bytes]] = {}

        def start(name: str) -> None:
            args = (specs[name] + COMMON) if name in specs else ["beat", "-s", str(tmp_path / "beat"), "-l", "INFO"]
            procs[name] = subprocess.Popen(CELERY + args, env=env, cwd=ROOT, stdout=open(logs / f"{name}.log", "ab"),
                                           stderr=subprocess.STDOUT)

        def log(name: str) -> str:
            return (logs / f"{name}.log").read_text(errors="replace")

        def pages() -> int:
            return read_progress(s).pages

        early = manage("stats")   # nothing started yet: say so, and what to start
        assert early.returncode == 0 and "state waiting for seeds" in early.stdout, early.stderr
        assert "no maintenance has run ever: start a control worker" in early.stdout
        try:
            for name in (*specs, "beat"):
                start(name)
            assert wait_for(lambda: all(" ready." in log(n) for n in specs) and "Starting..." in log("beat")), \
                {n: log(n)[-1500:] for n in procs}
            time.sleep(3 * s.MAINTENANCE_INTERVAL_S)   # maintenance ran: it used to finish the empty crawl
            assert not Control(s).exists() and Control(s).read().maintained_at is not None
            assert WAKE_SENT not in log("beat")          # nothing to wake before the first seeds

            # 1. seeding a crawl whose workers are up starts it
            seeded = manage("seed", *web1.seeds(all_hosts=True))
            assert seeded.returncode == 0 and "2 URL(s) added" in seeded.stdout, seeded.stderr
            assert "a new crawl" in seeded.stderr
            assert wait_for(lambda: read_progress(s).state == CrawlState.FINISHED), log("fetch")[-3000:]
            first = {r.host + r.path for r in web1.requests if r.status == 200}
            assert {u.split("//", 1)[1] for u in web1.reachable(web1.seeds(all_hosts=True))} <= first

            # 2. a finished crawl sends no more wakes...
            time.sleep(1.0)   # a wake sent as it finished
            sent, kept = log("beat").count(WAKE_SENT), log("beat").count(MAINTENANCE_SENT)
            time.sleep(3.0)
            assert log("beat").count(WAKE_SENT) == sent
            assert log("beat").count(MAINTENANCE_SENT) - kept <= 1   # every 10 s now, not every second

            # ...and new seeds revive it
            revived = manage("seed", *web2.seeds())
            assert revived.returncode == 0 and "it runs again" in revived.stderr, revived.stderr
            assert wait_for(lambda: read_progress(s).state == CrawlState.FINISHED
                            and {u.split("//", 1)[1] for u in web2.reachable(web2.seeds())}
                            <= {r.host + r.path for r in web2.requests if r.status == 200}), log("fetch")[-3000:]
            assert log("beat").count(WAKE_SENT) > sent

            # 3. pause a live crawl: nothing new starts, the pause outlives a restart of
            #    control and beat, stats shows it; resume finishes the crawl
            assert manage("seed", *web3.seeds(all_hosts=True)).returncode == 0
            base = pages()
            assert wait_for(lambda: pages() >= base + 3)
            paused = manage("pause")
            assert paused.returncode == 0 and "paused" in paused.stdout, paused.stderr
            time.sleep(1.0)   # exchanges in flight end
            held = pages()
            for name in ("control", "beat"):
                procs[name].send_signal(signal.SIGTERM)
                procs[name].wait(30)
                start(name)
            assert wait_for(lambda: log("beat").count("Starting...") == 2)
            time.sleep(3.0)
            assert pages() == held and read_progress(s).state == CrawlState.PAUSED
            assert read_progress(s).queued > 0
            stats = manage("stats")
            assert stats.returncode == 0 and "state paused for " in stats.stdout, stats.stdout
            again = manage("pause")
            assert again.returncode == 0 and "already paused" in again.stdout
            resumed = manage("resume")
            assert resumed.returncode == 0 and "resumed after" in resumed.stdout, resumed.stderr
            assert wait_for(lambda: read_progress(s).state == CrawlState.FINISHED), log("fetch")[-3000:]
            assert pages() > held
            ok = Counter(r.host + r.path for r in web3.requests if r.status == 200)
            assert {u.split("//", 1)[1] for u in web3.reachable(web3.seeds(all_hosts=True))} <= set(ok)
            assert max(ok.values()) == 1      # nothing fetched twice across the pause
            late = manage("resume")
            assert late.returncode == 2 and "crawl --resume" in late.stderr
        finally:
            for p in procs.values():
                p.send_signal(signal.SIGTERM)
            for p in procs.values():
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
