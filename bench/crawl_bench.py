#!/usr/bin/env python3
"""Crawl benchmark: a local synthetic web of 100 hosts, then `manage.py crawl` on it.

Prints pages/s (whole run and steady state), CPU seconds per page for the crawl's
process tree (workers, beat, redis), and the peak RSS of that tree. The test web
runs in its own process and its CPU is not counted. Only loopback traffic.

    python bench/crawl_bench.py [--hosts 100] [--pages 40] [--mean-bytes 60000] [--max-pages 3000] [--smoke]

With ``--commands`` the crawl runs on a redis-server this script starts (the embedded
one, outside the crawl tree), and the Redis commands it served are printed per page
(INFO commandstats after the crawl), with that server's CPU ms per page. ``--monitor``
also counts, through MONITOR, the commands each role sends itself (scripts by file
name, commands inside scripts apart): MONITOR costs that server CPU, so take its CPU
figure from a run without it. ``--smoke``: 4 hosts x 10 pages of 10 kB, at most 40 pages,
one fetch and one parse worker (seconds; with ``--monitor`` too).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

import psutil
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from crawler_tasks.ops.child import die_with_parent  # noqa: E402
from crawler_tasks.ops.embedded import EmbeddedRedis  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


ROLES = (("crawl.fetch", "fetch"), ("crawl.parse", "parse"), ("crawl.control", "control"), (" beat", "beat"),
         ("redis-", "redis"), ("manage.py", "runner"), ("crawler_tasks.ops.child", "runner"),
         ("scrapy", "scrapy"))


def role_of(cmdline: list[str], parent_cmdline: list[str] | None = None) -> str:
    """fetch, parse, parse sandbox (a parse worker's forked child: same command line),
    control, beat, redis (and its snapshot forks), runner (manage.py and its fork server), scrapy, other."""
    cmd = " ".join(cmdline)
    role = next((name for key, name in ROLES if key in cmd), "other")
    if role == "parse" and parent_cmdline == cmdline:
        return "parse sandbox"
    return role


def sample_tree(pid: int, cpu_by_pid: dict[int, tuple[str, float]], rss_by_role: dict[str, int] | None = None) -> int:
    """RSS of the whole tree now; records each process's CPU seconds so far (the last
    sample of a process that exits is what it is counted for) and, when given, adds each
    role's RSS now to ``rss_by_role``."""
    try:
        root = psutil.Process(pid)
        procs = [root] + root.children(recursive=True)
    except psutil.NoSuchProcess:
        return 0
    cmdlines: dict[int, list[str]] = {}
    total = 0
    for p in procs:
        try:
            with p.oneshot():
                rss = p.memory_info().rss
                t = p.cpu_times()
                cmdlines[p.pid] = p.cmdline()
                # a process that exited (a zombie until reaped) has no command line: it keeps
                # its role, or its last sample would count all its CPU as "other"
                role = (cpu_by_pid[p.pid][0] if not cmdlines[p.pid] and p.pid in cpu_by_pid
                        else role_of(cmdlines[p.pid], cmdlines.get(p.ppid())))
        except psutil.NoSuchProcess:
            continue
        total += rss
        cpu_by_pid[p.pid] = (role, t.user + t.system)
        if rss_by_role is not None:
            rss_by_role[role] = rss_by_role.get(role, 0) + rss
    return total


def cpu_by_role(cpu_by_pid: dict[int, tuple[str, float]]) -> dict[str, float]:
    roles: dict[str, float] = {}
    for role, secs in cpu_by_pid.values():
        roles[role] = roles.get(role, 0.0) + secs
    return roles


def _cpu_s(server: EmbeddedRedis) -> float:
    assert server.proc is not None
    t = psutil.Process(server.proc.pid).cpu_times()
    return t.user + t.system


def print_commands(server: EmbeddedRedis, pages: int, cpu_s: float) -> None:
    """The commands the crawl sent (the server is fresh: its counts are the crawl's)."""
    stats = redis.Redis.from_url(server.url).info("commandstats")
    calls = {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}
    usec = {name.removeprefix("cmdstat_"): int(v["usec"]) for name, v in stats.items()}
    total = sum(calls.values())
    print(f"redis (own server): CPU {cpu_s / pages * 1000:.2f} ms/page, {total / pages:.1f} commands/page, "
          f"{sum(usec.values()) / pages / 1000:.2f} ms/page inside commands")
    top = sorted(calls, key=lambda c: -calls[c])[:16]
    print("  calls/page: " + ", ".join(f"{c} {calls[c] / pages:.2f}" for c in top))
    top = sorted(usec, key=lambda c: -usec[c])[:10]
    print("  usec/page:  " + ", ".join(f"{c} {usec[c] / pages:.0f}" for c in top))


class Monitor:
    """Counts the commands the crawl sends (MONITOR), by role: (role, command, key shape)."""

    def __init__(self, server: EmbeddedRedis) -> None:
        self.server = server
        assert server.proc is not None
        self.port = server.port
        self.roles: dict[str, str] = {}   # client port -> role
        self.counts: dict[tuple[str, str, str], int] = {}
        # runs of commands from one client with no other client's between: round trips
        # (the server runs a pipeline it read at once; two in a row count as one)
        self.trips: dict[str, int] = {}
        self.trip_starts: dict[tuple[str, str, str], int] = {}   # (client, first command, key shape) of each
        self.scripts = {hashlib.sha1(path.read_bytes()).hexdigest(): path.stem
                        for path in (ROOT / "crawler_tasks").rglob("*.lua")}
        conn = redis.Redis.from_url(server.url, socket_timeout=None).connection_pool.get_connection("MONITOR")
        conn.send_command("MONITOR")
        conn.read_response()
        self.conn = conn
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def map_ports(self, pid: int) -> None:
        try:
            procs = [psutil.Process(pid)] + psutil.Process(pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return
        for p in procs:
            try:
                role = role_of(p.cmdline())
                for c in p.net_connections(kind="tcp"):
                    if c.raddr and c.raddr.port == self.port:
                        self.roles[str(c.laddr.port)] = role
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue

    def _read(self) -> None:
        seen = self.counts
        last = ""
        try:
            while True:
                try:
                    line = self.conn.read_response()
                except redis.TimeoutError:
                    continue
                if isinstance(line, bytes):
                    line = line.decode("utf-8", "replace")
                m = _MONITOR_LINE.match(line)
                if m is None:
                    continue
                client, rest = m.groups()
                args = _MONITOR_ARG.findall(rest)
                if not args:
                    continue
                cmd = args[0].lower()
                key = ""
                if cmd in ("evalsha", "eval") and len(args) > 1:
                    cmd = self.scripts.get(args[1], args[1][:8]) + ".lua"
                    key = args[3] if len(args) > 3 else ""
                elif len(args) > 1:
                    key = args[1]
                where = "lua" if client == "lua" else client.rsplit(":", 1)[-1]
                item = (where, cmd, _key_shape(key))
                if where != "lua" and where != last:
                    self.trips[where] = self.trips.get(where, 0) + 1
                    self.trip_starts[item] = self.trip_starts.get(item, 0) + 1
                    last = where
                seen[item] = seen.get(item, 0) + 1
        except (redis.ConnectionError, OSError):
            pass

    def report(self, pages: int) -> None:
        """Each role's commands per page, read while the server still runs (the crawl has exited)."""
        time.sleep(0.5)
        by_role: dict[str, dict[tuple[str, str], int]] = {}
        for (where, cmd, key), n in list(self.counts.items()):
            role = "inside scripts" if where == "lua" else self.roles.get(where, "unmapped")
            by_role.setdefault(role, {})
            by_role[role][(cmd, key)] = by_role[role].get((cmd, key), 0) + n
        trips: dict[str, int] = {}
        for where, n in list(self.trips.items()):
            role = self.roles.get(where, "unmapped")
            trips[role] = trips.get(role, 0) + n
        print("round trips per page by role (MONITOR: runs of one client's commands): " +
              ", ".join(f"{role} {n / pages:.2f}" for role, n in sorted(trips.items(), key=lambda kv: -kv[1])))
        starts: dict[str, dict[tuple[str, str], int]] = {}
        for (where, cmd, key), n in list(self.trip_starts.items()):
            role_starts = starts.setdefault(self.roles.get(where, "unmapped"), {})
            role_starts[(cmd, key)] = role_starts.get((cmd, key), 0) + n
        print("round trips per page by role and first command:")
        for role, firsts in sorted(starts.items(), key=lambda kv: -sum(kv[1].values())):
            top = sorted(firsts.items(), key=lambda kv: -kv[1])[:12]
            print(f"  {role}: " + ", ".join(f"{c} {k} {n / pages:.2f}" for (c, k), n in top))
        print("commands per page by role (MONITOR; scripts by file; key shape):")
        for role, cmds in sorted(by_role.items(), key=lambda kv: -sum(kv[1].values())):
            top = sorted(cmds.items(), key=lambda kv: -kv[1])[:14]
            print(f"  {role} {sum(cmds.values()) / pages:.2f}: " +
                  ", ".join(f"{c} {k} {n / pages:.2f}" for (c, k), n in top))


_MONITOR_LINE = re.compile(r'^[0-9.]+ \[\d+ ([^\]]*)\] (.*)$', re.S)
_MONITOR_ARG = re.compile(r'"((?:[^"\\]|\\.)*)"')


def _key_shape(key: str) -> str:
    """A key with its prefix, host, id and level taken out: ``{s}:q``, ``{g}:stats``."""
    m = re.search(r"\{([a-z])[0-9]*\}:([a-z_]+)", key)
    return f"{{{m.group(1)}}}:{m.group(2)}" if m else ("" if not key else "other")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--hosts", type=int, default=100)
    ap.add_argument("--pages", type=int, default=40, help="pages per host")
    ap.add_argument("--mean-bytes", type=int, default=60_000)
    ap.add_argument("--max-pages", type=int, default=3000)
    ap.add_argument("--min-delay", type=float, default=0.05)
    ap.add_argument("--workers", type=int, help="fetch worker processes (default: manage.py's)")
    ap.add_argument("--parsers", type=int, default=2)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--keep", action="store_true", help="keep the output folder")
    ap.add_argument("--commands", action="store_true",
                    help="run on a redis-server of this script's and print its commands per page")
    ap.add_argument("--monitor", action="store_true", help="--commands, and each role's own commands per page")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="a crawler setting for this run, e.g. --set FETCH_BATCH=32")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: a few seconds")
    args = ap.parse_args()
    if args.smoke:
        args.hosts, args.pages, args.mean_bytes, args.max_pages = 4, 10, 10_000, 40
        args.workers, args.parsers = 1, 1

    web = subprocess.Popen([sys.executable, "-m", "testweb", "--hosts", str(args.hosts),
                            "--pages", str(args.pages), "--mean-bytes", str(args.mean_bytes)],
                           cwd=ROOT, stdout=subprocess.PIPE, text=True, preexec_fn=die_with_parent)
    seeds = [web.stdout.readline().strip() for _ in range(args.hosts)]
    out = Path(tempfile.mkdtemp(prefix="crawl-bench-"))
    own_redis = EmbeddedRedis(out / "redis", save="").start() if args.commands or args.monitor else None
    monitor = Monitor(own_redis) if args.monitor and own_redis is not None else None
    try:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        cmd = [sys.executable, str(ROOT / "manage.py"), "crawl", seeds[0], "--out", str(out / "out"),
               "--allow-private", "--min-delay", str(args.min_delay), "--max-pages", str(args.max_pages),
               *(["--workers", str(args.workers)] if args.workers else []), "--parsers", str(args.parsers), "--shards", str(args.shards),
               "--user-agent", "benchbot/1.0 (+http://127.0.0.1/bench)"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")}
        env.update({"CRAWLER_" + item.split("=", 1)[0]: item.split("=", 1)[1] for item in args.set})
        if own_redis is not None:
            env["CRAWLER_REDIS_URL"] = own_redis.url
            redis_cpu0 = _cpu_s(own_redis)
        t0 = time.time()
        crawl = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        peak = 0
        stop = threading.Event()
        cpu_by_pid: dict[int, tuple[str, float]] = {}

        peak_by_role: dict[str, int] = {}

        def sample() -> None:
            nonlocal peak
            while not stop.is_set():
                now: dict[str, int] = {}
                peak = max(peak, sample_tree(crawl.pid, cpu_by_pid, now))
                if monitor is not None:
                    monitor.map_ports(crawl.pid)
                for role, rss in now.items():
                    peak_by_role[role] = max(peak_by_role.get(role, 0), rss)
                time.sleep(0.5)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, err = crawl.communicate()
        wall = time.time() - t0
        stop.set()
        sampler.join()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        recs = [json.loads(line) for line in (out / "out" / "pages.jsonl").read_text().splitlines()]
        fetched = [r for r in recs if r.get("status") is not None]
        times = sorted(datetime.strptime(r["fetched_at"], "%Y-%m-%dT%H:%M:%S.%fZ").timestamp() for r in fetched)
        steady = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else 0.0
        total_bytes = sum(r.get("bytes", 0) for r in fetched)
        print(err.strip().splitlines()[-4] if err.strip() else "", file=sys.stderr)
        print(f"web: {args.hosts} hosts x {args.pages} pages, mean {args.mean_bytes} B")
        print(f"pages fetched        {len(fetched)} ({total_bytes / max(len(fetched), 1) / 1024:.1f} KiB mean)")
        print(f"wall time            {wall:.1f} s (includes ~start-up and shutdown)")
        print(f"pages/s whole run    {len(fetched) / wall:.1f}")
        print(f"pages/s steady state {steady:.1f}")
        print(f"settings             {' '.join(args.set) or 'defaults'}")
        print(f"CPU s per page       {cpu / max(len(fetched), 1) * 1000:.2f} ms (crawl tree: workers, beat, redis)")
        print(f"peak RSS crawl tree  {peak / 2**20:.0f} MiB")
        roles = cpu_by_role(cpu_by_pid)
        n = max(len(fetched), 1)
        stats_line = [ln for ln in err.splitlines() if ln.strip().startswith("stage CPU")]
        if stats_line:
            print(stats_line[0].strip())
        print("CPU ms per page by role (sampled every 0.5 s): " +
              ", ".join(f"{role} {secs / n * 1000:.2f}" for role, secs in sorted(roles.items())))
        print("peak RSS MiB by role (sampled every 0.5 s): " +
              ", ".join(f"{role} {rss / 2**20:.0f}" for role, rss in sorted(peak_by_role.items())))
        if own_redis is not None:
            print_commands(own_redis, n, _cpu_s(own_redis) - redis_cpu0)
        if monitor is not None:
            monitor.report(n)
        return 0 if crawl.returncode == 0 else 1
    finally:
        if own_redis is not None:
            own_redis.stop()
        if monitor is not None:
            monitor.thread.join(5)
        web.terminate()
        web.wait(10)
        if not args.keep:
            shutil.rmtree(out, ignore_errors=True)
        else:
            print(f"output kept in {out}")


if __name__ == "__main__":
    sys.exit(main())
