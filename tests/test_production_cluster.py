"""The README's production commands on a real three-master Redis Cluster with two
simulated nodes (issue 28 item 6): each node its own CRAWLER_NODE_NAME and output
folder with fetch and parse workers, one control worker and beat, a plain broker Redis.

Crawl p1: workers first, then ``manage.py seed``; one node's workers are killed (-9)
mid-crawl and the other node takes its hosts over. Crawl p2, on the same broker and
cluster at the same time: seeds first, then its workers, with the same ``-Q`` names.
Prints the figures of the issue's closing note: coverage against the web's reachable
set (what one machine fetches), politeness violations, takeover time, refetches, and
the per-master key and command spread.
"""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

import redis

from crawler_tasks.keys import ShardKeys
from crawler_tasks.ops.embedded import EmbeddedRedis
from crawler_tasks.ops.snapshot import list_snapshots
from crawler_tasks.runtime.control import Control, CrawlState
from crawler_tasks.runtime.maintenance import read_progress
from crawler_tasks.settings import Settings, reset_settings
from tests.test_cluster import Cluster
from testweb import TestWeb

ROOT = Path(__file__).resolve().parent.parent
CELERY = [sys.executable, "-m", "celery", "-A", "crawler_tasks"]
COMMON = ["--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "INFO"]
DELAY = 1.0
UA = "testbot/1.0 (+http://127.0.0.1/bot)"


def wait_for(check: Callable[[], bool], timeout: float) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return check()


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class Crawl:
    """One crawl's processes as the README starts them, node by node."""

    def __init__(self, base: Settings, prefix: str, logs: Path) -> None:
        self.settings = dataclasses.replace(base, KEY_PREFIX=prefix)
        self.logs = logs
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def env(self, node: str) -> dict[str, str]:
        s = dataclasses.replace(self.settings, NODE_NAME=node, OUT_DIR=str(self.out(node)))
        return {**{k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")}, **s.to_env(),
                "PYTHONPATH": str(ROOT)}

    def out(self, node: str) -> Path:
        return self.logs.parent / f"{self.settings.KEY_PREFIX}-{node}"

    def start(self, name: str, node: str, args: list[str]) -> None:
        log = open(self.logs / f"{self.settings.KEY_PREFIX}-{name}.log", "wb")
        # its own process group: stop() ends the worker with its pool and sandbox children
        self.procs[name] = subprocess.Popen(CELERY + args, env=self.env(node), cwd=ROOT, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)

    def node(self, node: str, control: bool = False) -> None:
        fetch = ",".join(f"crawl.fetch.{i}" for i in range(self.settings.SHARDS))
        self.start(f"fetch-{node}", node, ["worker", "-Q", fetch, "-P", "threads", "-c", "4",
                                           "-n", f"fetch-{node}@%h", *COMMON])
        self.start(f"parse-{node}", node, ["worker", "-Q", f"crawl.parse.{node},crawl.enqueue", "-P", "solo",
                                           "-n", f"parse-{node}@%h", *COMMON])
        if control:
            self.start("control", node, ["worker", "-Q", "crawl.control", "-P", "solo", "-n", "control@%h", *COMMON])
            self.start("beat", node, ["beat", "-s", str(self.logs / f"{self.settings.KEY_PREFIX}-beat"), "-l", "INFO"])

    def seed(self, node: str, seeds: list[str]) -> None:
        proc = subprocess.run([sys.executable, str(ROOT / "manage.py"), "seed", *seeds], capture_output=True,
                              text=True, cwd=ROOT, env=self.env(node), timeout=60)
        assert proc.returncode == 0, proc.stdout + proc.stderr

    def state(self) -> CrawlState:
        return read_progress(self.settings).state

    def stop(self) -> None:
        for p in self.procs.values():
            _signal_group(p, signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
            _signal_group(p, signal.SIGKILL)   # whatever of its group is left (a killed worker's children)

    def records(self) -> list[dict]:
        out = []
        for path in self.logs.parent.glob(f"{self.settings.KEY_PREFIX}-*/pages.jsonl"):
            out += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return out

    def tail(self, name: str) -> str:
        return (self.logs / f"{self.settings.KEY_PREFIX}-{name}.log").read_text(errors="replace")[-3000:]


def commands(client: redis.Redis) -> int:
    return sum(v["calls"] for k, v in client.info("commandstats").items() if k.startswith("cmdstat_"))


def test_two_nodes_on_a_cluster_kill_one_and_a_second_crawl_on_the_broker(tmp_path, settings):
    logs = tmp_path / "logs"
    logs.mkdir()
    crawls: list[Crawl] = []   # stopped whatever happens: a failed assertion must leave no worker behind
    cluster = Cluster(tmp_path / "cluster").start()
    masters = [redis.Redis(port=p, socket_timeout=5) for p in cluster.ports]
    try:
        with EmbeddedRedis(tmp_path / "broker", save="") as broker, \
                TestWeb(n_hosts=40, pages_per_host=20, seed=28, mean_page_bytes=2000) as web1, \
                TestWeb(n_hosts=6, pages_per_host=6, seed=29, first_ip=100, mean_page_bytes=2000) as web2:
            base = dataclasses.replace(
                Settings(), REDIS_URL=cluster.url, BROKER_URL=broker.url, SHARDS=4, MIN_DELAY_S=DELAY,
                ALLOW_PRIVATE=True, BLOOM_EXPECTED_URLS=100_000, METRICS_PORT=-1, USER_AGENT=UA,
                MAX_FETCH_SESSIONS=4, SNAPSHOT_INTERVAL_S=5)
            calls0 = [commands(m) for m in masters]
            p1, p2 = Crawl(base, "p1", logs), Crawl(base, "p2", logs)
            crawls += [p1, p2]
            reset_settings(p1.settings)
            # p1: both nodes' workers, control and beat first, then seed
            p1.node("na", control=True)
            p1.node("nb")
            # p2: seeds first (they wait in the frontier), workers after
            p2.seed("m1", web2.seeds(all_hosts=True))
            time.sleep(3)
            p1.seed("na", web1.seeds(all_hosts=True))
            seeded_at = time.time()
            p2.node("m1", control=True)

            # kill -9 node nb's workers once it fetches, with hosts leased
            rc = redis.RedisCluster.from_url(cluster.url.replace("+cluster", ""), decode_responses=True)

            def held_by_nb() -> set[str]:
                out = set()
                for shard in range(base.SHARDS):
                    k = ShardKeys("p1", shard)
                    leased = set(rc.zrange(k.lease, 0, -1))
                    # leases name the fetch process that renewed them: "<node>/<process>"
                    out |= {h for h, n in rc.hgetall(k.lease_owner).items() if n.startswith("nb/") and h in leased}
                return out

            assert wait_for(lambda: len(held_by_nb()) >= 3 and (p1.out("nb") / "pages.jsonl").exists(), 90), \
                p1.tail("fetch-nb")
            held = held_by_nb()
            for name in ("fetch-nb", "parse-nb"):
                p1.procs[name].send_signal(signal.SIGKILL)
            killed_at = time.time()
            unacked_p1 = redis.Redis.from_url(broker.url).hlen("p1/unacked")

            assert wait_for(lambda: p1.state() == CrawlState.FINISHED and p2.state() == CrawlState.FINISHED, 150), \
                p1.tail("control") + p1.tail("fetch-na")
            p1.stop()
            p2.stop()
            crawl_s = time.time() - seeded_at
            keys = [m.dbsize() for m in masters]     # both crawls' keys and commands
            calls = [commands(m) - c for m, c in zip(masters, calls0, strict=True)]

            # checkpoints by the control worker (no manage.py crawl), a snapshot and a restore on the cluster
            checkpoints = list_snapshots(p1.out("na"))
            snap = subprocess.run([sys.executable, str(ROOT / "manage.py"), "snapshot", "--path", str(tmp_path / "p1.jsonl.gz")],
                                  capture_output=True, text=True, cwd=ROOT, env=p1.env("na"), timeout=120)
            assert snap.returncode == 0, snap.stdout + snap.stderr
            p3 = Crawl(base, "p3", logs)
            back = subprocess.run([sys.executable, str(ROOT / "manage.py"), "restore", str(tmp_path / "p1.jsonl.gz")],
                                  capture_output=True, text=True, cwd=ROOT, env=p3.env("na"), timeout=120)
            assert back.returncode == 0, back.stdout + back.stderr
            assert checkpoints and Control(p3.settings).stats()["fetch/pages"] == Control(p1.settings).stats()["fetch/pages"]

            # coverage: both nodes' records against what one machine reaches
            got1 = {r["url"] for r in p1.records() if r.get("status") == 200}
            got2 = {r["url"] for r in p2.records() if r.get("status") == 200}
            want1, want2 = web1.reachable(web1.seeds(all_hosts=True)), web2.reachable(web2.seeds(all_hosts=True))
            missing = (want1 - got1) | (want2 - got2)
            assert not missing, [r for r in p1.records() + p2.records() if r["url"] in missing][:5]
            recorded = [r["url"] for r in p1.records() + p2.records()]
            twice = [u for u, n in Counter(recorded).items() if n > 1]
            assert not twice, twice[:5]     # the pages the lost node held are recorded once, by na
            hosts1 = {u.split("/")[2] for u in want1}
            hosts2 = {u.split("/")[2] for u in want2}
            assert {u.split("/")[2] for u in got1} <= hosts1 and {u.split("/")[2] for u in got2} <= hosts2  # apart
            by_node = Counter(r.get("node", "?") for r in p1.records())
            assert set(by_node) <= {"na", "nb"}, by_node    # every record names the node that fetched it
            # the README's merge of the nodes' folders, then dupes over the whole crawl
            merged = tmp_path / "all"
            (merged / "warc").mkdir(parents=True)
            (merged / "pages.jsonl").write_bytes(b"".join((p1.out(n) / "pages.jsonl").read_bytes() for n in ("na", "nb")))
            for n in ("na", "nb"):
                for f in (p1.out(n) / "warc").glob("*.warc.gz"):
                    (merged / "warc" / f"{n}-{f.name}").symlink_to(f)
            dupes = subprocess.run([sys.executable, str(ROOT / "manage.py"), "dupes", "--out", str(merged)],
                                   capture_output=True, text=True, cwd=ROOT, env=p1.env("na"), timeout=120)
            assert dupes.returncode == 0, dupes.stdout + dupes.stderr

            # politeness and refetches from the servers' logs
            violations, gets = 0, Counter()
            by_host = defaultdict(list)
            for r in web1.requests + web2.requests:
                by_host[r.host].append(r)
                if r.path != "/robots.txt":
                    gets[r.host + r.path] += 1
            for reqs in by_host.values():
                reqs.sort(key=lambda r: r.start)
                violations += sum(b.start - a.end < DELAY - 0.002 for a, b in zip(reqs, reqs[1:]))
            refetches = sum(n - 1 for n in gets.values() if n > 1)

            # takeover: first request to each of nb's leased hosts after the kill
            after = {}
            for host in held:
                later = [r.start for r in by_host[host] if r.start > killed_at]
                if later:
                    after[host] = min(later) - killed_at
            assert after, "no host of the killed node was fetched again"
            counters = Control(p1.settings).stats()
            lost_hosts = counters.get("frontier/process_lost_hosts", 0) + counters.get("frontier/node_lost_hosts", 0)
            returned = counters.get("frontier/handoff_returned", 0), counters.get("frontier/node_lost_urls", 0)
            print(f"\nproduction on a 3-master cluster, 2 nodes x (fetch -c 4 + parse), 4 sessions, {len(hosts1)} hosts, "
                  f"delay {DELAY:g} s: crawl p1+p2 {crawl_s:.1f} s")
            print(f"coverage p1 {len(got1 & want1)}/{len(want1)} (one machine reaches {len(want1)}), "
                  f"p2 {len(got2 & want2)}/{len(want2)}; records by node {dict(by_node)}")
            print(f"politeness violations {violations}; refetches {refetches} of {sum(gets.values())} GETs")
            print(f"kill -9 of nb holding {len(held)} hosts: takeover median {statistics.median(after.values()):.1f} s, "
                  f"max {max(after.values()):.1f} s ({len(after)} hosts refetched by na; NODE_TTL_S "
                  f"{base.NODE_TTL_S:g}, PROCESS_TTL_S {base.PROCESS_TTL_S:g}); p1 broker messages unacknowledged at the "
                  f"kill: {unacked_p1}; handed over: {lost_hosts} hosts; fetched URLs queued again: "
                  f"{returned[0]} not handed to parse, {returned[1]} in page groups given up")
            print(f"per master: keys {keys}, commands {calls}")
            print(f"dupes over the merged folders: {dupes.stdout.strip().splitlines()[:1]}; {len(checkpoints)} "
                  f"checkpoints by the control worker; manage.py snapshot + restore on the cluster: "
                  f"{json.loads(back.stdout)['keys']} keys")
            assert violations == 0
    finally:
        for crawl in crawls:
            crawl.stop()
        reset_settings(settings)
        cluster.stop()
