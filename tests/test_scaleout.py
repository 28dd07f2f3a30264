"""Two frontier Redis servers, two fetch workers each owning half the shards, plain
Celery processes (the production shape): the crawl completes, every host is fetched by
its owner only, politeness holds."""
from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import redis
from warcio.archiveiterator import ArchiveIterator

from crawler_tasks.keys import shard_of
from crawler_tasks.ops.embedded import EmbeddedRedis
from crawler_tasks.ops.seeds import seed_urls
from crawler_tasks.runtime.control import CrawlState
from crawler_tasks.runtime.maintenance import read_progress
from crawler_tasks.settings import reset_settings
from testweb import TestWeb

ROOT = Path(__file__).resolve().parent.parent
MIN_DELAY = 0.2


def web_on_both_shards() -> TestWeb:
    """The OS picks the hosts' ports, so the shard of each host varies from run to run: one
    web in 32 had all six hosts on one shard, and the test then saw a single owner."""
    while True:
        web = TestWeb(n_hosts=6, pages_per_host=5, seed=21, mean_page_bytes=3000).start()
        if {shard_of(host, 2) for host in web.hosts} == {0, 1}:
            return web
        web.stop()


def test_two_frontier_servers_two_owners(settings, tmp_path):
    with EmbeddedRedis(tmp_path / "r0", save="") as r0, EmbeddedRedis(tmp_path / "r1", save="") as r1, \
            web_on_both_shards() as web:
        s = dataclasses.replace(settings, SHARDS=2, REDIS_SHARD_URLS=(r0.url, r1.url), MIN_DELAY_S=MIN_DELAY,
                                OUT_DIR=str(tmp_path / "out"), NODE_NAME="nodeA", METRICS_PORT=-1)
        reset_settings(s)
        assert seed_urls(s, web.seeds(all_hosts=True))[0] == 6
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")}, **s.to_env(),
               "PYTHONPATH": str(ROOT)}
        celery = [sys.executable, "-m", "celery", "-A", "crawler_tasks"]
        common = ["--without-gossip", "--without-mingle", "--without-heartbeat", "-P", "solo", "-l", "INFO"]
        specs = {"owner0": ["worker", "-Q", "crawl.fetch.0", "-n", "owner0@%h"],
                 "owner1": ["worker", "-Q", "crawl.fetch.1", "-n", "owner1@%h"],
                 "process": ["worker", "-Q", "crawl.parse.nodeA,crawl.enqueue", "-n", "process@%h"],
                 "control": ["worker", "-Q", "crawl.control", "-n", "control@%h"]}
        logs = tmp_path / "logs"
        logs.mkdir()
        procs = {name: subprocess.Popen(celery + args + common, env=env, cwd=ROOT,
                                        stdout=open(logs / f"{name}.log", "wb"), stderr=subprocess.STDOUT)
                 for name, args in specs.items()}
        procs["beat"] = subprocess.Popen(celery + ["beat", "-s", str(tmp_path / "beat"), "-l", "INFO"], env=env,
                                         cwd=ROOT, stdout=open(logs / "beat.log", "wb"), stderr=subprocess.STDOUT)
        try:
            deadline = time.time() + 120
            while time.time() < deadline and read_progress(s).state != CrawlState.FINISHED:
                time.sleep(0.5)
            assert read_progress(s).state == CrawlState.FINISHED, (logs / "owner0.log").read_text()[-2000:]
        finally:
            for p in procs.values():
                p.send_signal(signal.SIGTERM)
            for p in procs.values():
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
        owner_pid = {procs["owner0"].pid: 0, procs["owner1"].pid: 1}

        # every page fetched, each host by the worker owning its shard only
        fetched_by: dict[str, set[int]] = defaultdict(set)
        for path in (tmp_path / "out" / "warc").glob("*.warc.gz"):
            pid = int(path.name.split("-")[-2])
            with open(path, "rb") as fh:
                for rec in ArchiveIterator(fh):
                    if rec.rec_type == "response":
                        url = rec.rec_headers.get_header("WARC-Target-URI")
                        fetched_by[url.split("/")[2]].add(owner_pid[pid])
        assert set(fetched_by) == set(web.hosts)
        for host, owners in fetched_by.items():
            assert owners == {shard_of(host, 2)}, (host, owners)
        fetched = {r.host + r.path for r in web.requests if r.status == 200}
        assert {u.split("//", 1)[1] for u in web.reachable(web.seeds(all_hosts=True))} <= fetched

        # politeness from the server's side
        by_host = defaultdict(list)
        for r in web.requests:
            by_host[r.host].append(r)
        for reqs in by_host.values():
            reqs.sort(key=lambda r: r.start)
            for a, b in zip(reqs, reqs[1:]):
                assert b.start - a.end >= MIN_DELAY - 0.001

        # each shard's keys live on its own server
        keys0 = redis.Redis.from_url(r0.url).keys(f"{s.KEY_PREFIX}:*")
        keys1 = redis.Redis.from_url(r1.url).keys(f"{s.KEY_PREFIX}:*")
        assert keys0 and all(b"{s0}" in k for k in keys0)
        assert keys1 and all(b"{s1}" in k for k in keys1)
