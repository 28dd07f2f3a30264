"""Fault injection: a crawl's data is never lost, clobbered or written twice.

Each test crawls a local web (testweb), injects one fault mid-crawl and reports, in one
line (``pytest -s -m faults tests/test_faults.py``): records, duplicate records in
pages.jsonl / the feed / WARC, pages the servers answered twice (counted server-side),
time to finish, and what the operator saw. It asserts 0 duplicates, nothing fetched
twice beyond the exchanges in flight at the fault, and a bounded time.
"""
from __future__ import annotations

import gzip
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import psutil
import pytest

from crawler_tasks.ops.child import ORPHAN_GRACE_S
from testweb import TestWeb

pytestmark = pytest.mark.faults

ROOT = Path(__file__).resolve().parent.parent
UA = "faultbot/1.0 (+http://127.0.0.1/bot)"
HOSTS, PAGES = 4, 30
# At most one exchange per host is in flight at a fault. A page fetched and not yet handed
# on to parse (its page group not full) is in flight too: a resume says how many it put back.
MAX_IN_FLIGHT = HOSTS
# Time a fault may cost beyond a clean crawl: restarts, then a lease (LEASE_S below) at most.
FAULT_ENV = {"CRAWLER_LEASE_S": "6", "CRAWLER_TOTAL_TIMEOUT_S": "3", "CRAWLER_READ_TIMEOUT_S": "2",
             "CRAWLER_CONNECT_TIMEOUT_S": "1", "CRAWLER_METRICS_PORT": "-1"}
SLACK_S = 30.0
FIGURES: list[str] = []


@pytest.fixture(scope="module")
def web() -> Iterator[TestWeb]:
    with TestWeb(n_hosts=HOSTS, pages_per_host=PAGES, seed=24, mean_page_bytes=4000) as w:
        yield w


def crawl(out: Path, web: TestWeb, *extra: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")}
    args = [] if "--resume" in extra else web.seeds()
    cmd = [sys.executable, str(ROOT / "manage.py"), "crawl", *args, "--out", str(out), "--allow-private",
           "--min-delay", "0.05", "--user-agent", UA, *extra]
    return subprocess.Popen(cmd, cwd=ROOT, env={**base, **FAULT_ENV, **(env or {})}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def lines(path: Path) -> list[dict]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        return []


def wait_records(out: Path, n: int, proc: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None and len(lines(out / "pages.jsonl")) < n:
        time.sleep(0.05)
    assert proc.poll() is None, "the crawl ended before the fault"


def warc_responses(out: Path) -> list[str]:
    """Target URIs of response and revisit records (one per fetch)."""
    uris = []
    for path in sorted((out / "warc").glob("*.warc.gz")):
        with gzip.open(path, "rb") as f:
            data = f.read()
        uris += re.findall(rb"WARC-Type: (?:response|revisit)\r\n(?:[^\r\n]+\r\n)*?WARC-Target-URI: (\S+)", data)
    return [u.decode() for u in uris]


def dupes(items: list[str]) -> int:
    return len(items) - len(set(items))


def children(manage_pid: int, out: Path) -> dict[str, psutil.Process]:
    """The crawl's processes by role: redis, worker-fetch, worker-process, and worker-control
    (which runs Beat) when the crawl has more than one fetch worker."""
    found: dict[str, psutil.Process] = {}
    port = json.loads((out / "crawl.json").read_text())["redis_url"].rsplit(":", 1)[1].split("/")[0]
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "redis-server" in cmd and f":{port}" in cmd:
            found["redis"] = p
        for role, mark in (("fetch", f"fetch0-{manage_pid}@"), ("process", f"process0-{manage_pid}@"),
                           ("control", f"control-{manage_pid}@")):
            # a worker's forked helpers (the parse sandbox) share its command line: the oldest is the worker
            if mark in cmd and (role not in found or p.create_time() < found[role].create_time()):
                found[role] = p
    return found


def counter(out: Path, name: str) -> int:
    """One of the finished crawl's counters (``manage.py stats``)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")}
    stats = subprocess.run([sys.executable, str(ROOT / "manage.py"), "stats", "--out", str(out)], cwd=ROOT,
                           env=base, capture_output=True, text=True, timeout=60).stdout
    found = re.search(rf"^\s*{re.escape(name)}\s+(\d+)$", stats, re.M)
    return int(found[1]) if found else 0


@dataclass
class Figures:
    fault: str
    records: int
    duplicates: int
    feed_duplicates: int
    warc_duplicates: int
    fetched_twice: int
    seconds: float
    saw: str
    in_flight: int = 0   # exchanges in flight at the fault, fetched or not yet handed on

    def line(self) -> str:
        return (f"{self.fault:<22} records {self.records:4d}  dup records {self.duplicates}  dup feed "
                f"{self.feed_duplicates}  dup WARC {self.warc_duplicates}  fetched twice {self.fetched_twice:2d} "
                f"(in flight <= {self.in_flight:2d})  {self.seconds:5.1f} s  saw: {self.saw}")


def figures(fault: str, out: Path, web: TestWeb, seconds: float, saw: str) -> Figures:
    recs = lines(out / "pages.jsonl")
    gets = Counter((r.host, r.path) for r in web.requests if r.method == "GET" and r.path != "/robots.txt")
    f = Figures(fault, len(recs), dupes([r["url"] for r in recs]),
                dupes([r["url"] for r in lines(out / "feed.jsonl")]), dupes(warc_responses(out)),
                sum(n - 1 for n in gets.values() if n > 1), seconds, saw)
    return f


def report(f: Figures) -> None:
    FIGURES.append(f.line())
    print("\n" + f.line())


def said(err: str, *patterns: str) -> str:
    """The lines of stderr an operator would notice for this fault."""
    picked = [ln.strip() for ln in err.splitlines() if any(p in ln for p in patterns)]
    return " | ".join(dict.fromkeys(picked))[:300] or "(nothing)"


def running(p: psutil.Process) -> bool:
    """Alive, not a zombie (nobody may be there to reap an orphan)."""
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def check(f: Figures, clean_s: float, reachable: int, in_flight: int = MAX_IN_FLIGHT) -> None:
    f.in_flight = in_flight
    report(f)
    assert f.duplicates == 0 and f.feed_duplicates == 0, f.line()
    # WARC holds each real exchange: a second capture only for a page fetched twice
    assert f.warc_duplicates <= f.fetched_twice <= in_flight, f.line()
    assert f.records >= reachable, f.line()
    assert f.seconds <= clean_s + SLACK_S, f.line()


@pytest.fixture(scope="module")
def clean(web: TestWeb, tmp_path_factory: pytest.TempPathFactory) -> float:
    out = tmp_path_factory.mktemp("clean") / "out"
    web.clear_log()
    t0 = time.monotonic()
    proc = crawl(out, web)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    f = figures("none", out, web, time.monotonic() - t0, said(err, "crawl finished"))
    report(f)
    assert f.duplicates == 0 and f.fetched_twice == 0
    return f.seconds


@pytest.mark.parametrize("victim", ["redis", "fetch", "process", "control"])
def test_kill_9_of_a_child(victim: str, web: TestWeb, clean: float, tmp_path: Path) -> None:
    """``fetch`` also runs the control tasks and Beat (one fetch worker); ``control`` is
    their own worker, as with two fetch workers."""
    out = tmp_path / "out"
    web.clear_log()
    t0 = time.monotonic()
    proc = crawl(out, web, *(["--workers", "2"] if victim == "control" else []))
    wait_records(out, 40, proc)
    target = children(proc.pid, out)[victim]
    target.kill()
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-3000:]
    f = figures(f"kill -9 {victim}", out, web, time.monotonic() - t0,
                said(err, "restart", "exited", "crawl finished", "Error"))
    check(f, clean, len(web.reachable()), MAX_IN_FLIGHT + counter(out, "frontier/handoff_returned")
          + counter(out, "frontier/group_returned"))


def test_kill_9_of_the_parse_workers_right_after_a_feed_write(web: TestWeb, clean: float, tmp_path: Path) -> None:
    """Both parse workers stopped, then killed, the moment a group's feed lines land: the
    task that wrote them dies before it sends its records on. The worker restarted under
    its name puts its message back (maintenance would, past the group's deadline) and the
    run goes on from where it stopped; the group is not given up, so its pages are not
    fetched, nor their feed lines written, twice."""
    out = tmp_path / "out"
    web.clear_log()
    t0 = time.monotonic()
    proc = crawl(out, web)
    wait_records(out, 40, proc)
    parsers: dict[str, psutil.Process] = {}
    for p in psutil.process_iter(["cmdline"]):
        mark = next((m for m in (f"process0-{proc.pid}@", f"process1-{proc.pid}@")
                     if m in " ".join(p.info["cmdline"] or [])), None)
        if mark and (mark not in parsers or p.create_time() < parsers[mark].create_time()):
            parsers[mark] = p
    feed = out / "feed.jsonl"
    size = feed.stat().st_size
    deadline = time.monotonic() + 30
    while feed.stat().st_size == size and time.monotonic() < deadline:
        time.sleep(0.0005)
    for p in parsers.values():
        p.suspend()
    for p in parsers.values():
        p.kill()
    assert feed.stat().st_size > size, "no feed line was written after the first 40 records"
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-3000:]
    f = figures("kill -9 after feed", out, web, time.monotonic() - t0,
                said(err, "restart", "exited", "crawl finished", "Error"))
    check(f, clean, len(web.reachable()), MAX_IN_FLIGHT + counter(out, "frontier/handoff_returned")
          + counter(out, "frontier/group_returned"))
    assert len(parsers) == 2 and counter(out, "frontier/group_returned") == 0, f.line()


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_manage_py_stopped_then_resumed(how: signal.Signals, web: TestWeb, clean: float, tmp_path: Path) -> None:
    out = tmp_path / "out"
    web.clear_log()
    t0 = time.monotonic()
    proc = crawl(out, web)
    wait_records(out, 40, proc)
    tree = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(how)
    _, err = proc.communicate(timeout=60)
    if how == signal.SIGKILL:
        # its children die with it (PR_SET_PDEATHSIG), at the latest ORPHAN_GRACE_S later; the
        # resumed crawl does not wait for this test: it waits for them itself
        deadline = time.monotonic() + ORPHAN_GRACE_S + 3.0
        while (alive := [p.pid for p in tree if running(p)]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive, f"processes outlived the killed crawl by {ORPHAN_GRACE_S + 3.0:g} s: {alive}"
    resumed = crawl(out, web, "--resume")
    _, err2 = resumed.communicate(timeout=180)
    assert resumed.returncode == 0, err2[-3000:]
    f = figures(f"{how.name} manage.py", out, web, time.monotonic() - t0,
                said(err + err2, "stopping", "killed", "resume:", "crawl finished"))
    handed_back = re.search(r"(\d+) fetched URL\(s\) not handed on", err2)
    check(f, clean, len(web.reachable()), MAX_IN_FLIGHT + (int(handed_back[1]) if handed_back else 0))


def test_redis_data_lost_then_restore_latest(web: TestWeb, clean: float, tmp_path: Path) -> None:
    """The crawl dies with its Redis data (deleted): --restore latest goes back to the
    last checkpoint; records of pages fetched since then are rolled back and written
    once, when fetched again. Fetched twice: the pages rolled back, and those fetched
    but not recorded when the broker's messages were lost."""
    import shutil

    out = tmp_path / "out"
    env = {"CRAWLER_SNAPSHOT_INTERVAL_S": "1"}
    web.clear_log()
    t0 = time.monotonic()
    proc = crawl(out, web, env=env)
    wait_records(out, 70, proc)
    proc.kill()
    proc.communicate(timeout=60)
    time.sleep(1.0)   # its children die with it
    shutil.rmtree(out / "redis")   # the broker's messages go with it: fetched pages not yet recorded are lost
    # served before the kill and not recorded (their WARC records may not be written yet either)
    recorded = {(urlsplit(r["url"]).netloc, urlsplit(r["url"]).path) for r in lines(out / "pages.jsonl")}
    unrecorded = {(r.host, r.path) for r in web.requests if r.method == "GET" and r.path != "/robots.txt"} - recorded
    resumed = crawl(out, web, "--restore", "latest", env=env)
    _, err = resumed.communicate(timeout=180)
    assert resumed.returncode == 0, err[-3000:]
    rolled = re.search(r"; (\d+) record\(s\) of pages fetched since then", err)
    f = figures("Redis lost, restore", out, web, time.monotonic() - t0, said(err, "restored", "resume:", "crawl finished"))
    handed_back = re.search(r"(\d+) fetched URL\(s\) not handed on", err)
    check(f, clean, len(web.reachable()), MAX_IN_FLIGHT + len(unrecorded) + (int(rolled[1]) if rolled else 0)
          + (int(handed_back[1]) if handed_back else 0) + counter(out, "frontier/group_returned"))


def spelled_web(web: TestWeb) -> None:
    """Routes of a shop on a web of its own: each item linked under several ``?color=``
    spellings of one page (a rule a host learns) and ``?ref=`` ones (a prior)."""
    page = "<html><body>{links}<p>{text}</p></body></html>"
    for h in range(len(web.hosts)):
        for i in range(40):   # each spelling is linked from two pages, a while apart
            links = "".join(f'<a href="/item/{i + d}{q}">v</a>' for d in (1, 2)
                            for q in ("", "?color=1", "?color=2", "?ref=nav", f"?color={i % 5 + 3}"))
            text = " ".join(f"w{h}x{i}x{k}" for k in range(80))
            body = page.format(links=links, text=text).encode()
            for q in ("", *(f"?color={c}" for c in range(1, 8)), "?ref=nav"):
                web.set_route(h, f"/item/{i}{q}", 200, {"Content-Type": "text/html"}, body)
        web.set_route(h, "/", 200, {"Content-Type": "text/html"},
                      page.format(links='<a href="/item/0">first</a>', text="home").encode())


def test_kill_9_of_redis_while_learned_rules_filter_urls(tmp_path: Path) -> None:
    """Redis killed once URLs filtered by a learned rule have their records: the restart
    from its append-only file may lose the last second (the rule, the drop's URL-seen
    bit), yet no URL gets a second record when a link names it again."""
    out = tmp_path / "out"
    spec_env = {"CRAWLER_MAX_QUERY_VARIANTS": "20", "CRAWLER_SOFT404_PROBE": "0"}
    from testweb import HostSpec

    spec = HostSpec(pages=0, link_extra_routes=False)
    with TestWeb(n_hosts=2, pages_per_host=1, seed=25, host_specs={0: spec, 1: spec}) as shop:
        spelled_web(shop)
        proc = crawl(out, shop, "--min-delay", "0.1", env=spec_env)
        deadline = time.time() + 60
        while time.time() < deadline and proc.poll() is None and not any(
                r.get("error_kind") == "filtered" for r in lines(out / "pages.jsonl")):
            time.sleep(0.02)
        assert proc.poll() is None, "the crawl ended before the fault"
        children(proc.pid, out)["redis"].kill()
        _, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err[-3000:]
        recs = lines(out / "pages.jsonl")
        urls = Counter(r["url"] for r in recs)
        filtered = [r for r in recs if r.get("error_kind") == "filtered"]
        print(f"\nkill -9 redis with learned rules: {len(recs)} records, {len(filtered)} filtered, "
              f"{sum(n - 1 for n in urls.values())} URLs recorded twice; saw: {said(err, 'restart', 'crawl finished')}")
        assert filtered and all(n == 1 for n in urls.values()), [u for u, n in urls.items() if n > 1]
        fetched = {f"http://{r.host}{r.path}" for r in shop.requests if r.method == "GET"}
        assert all(r["url"] not in fetched for r in filtered), "a URL recorded as filtered was fetched"


def test_two_crawls_on_one_out(web: TestWeb, clean: float, tmp_path: Path) -> None:
    out = tmp_path / "out"
    web.clear_log()
    t0 = time.monotonic()
    first = crawl(out, web)
    wait_records(out, 10, first)
    second = crawl(out, web, "--overwrite")
    _, err2 = second.communicate(timeout=60)
    assert second.returncode == 2 and f"in use by a running crawl (pid {first.pid} on " in err2, err2[-2000:]
    _, err = first.communicate(timeout=180)
    assert first.returncode == 0, err[-3000:]
    f = figures("two crawls, one --out", out, web, time.monotonic() - t0, said(err2, "error"))
    check(f, clean, len(web.reachable()))


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB tmpfs (root may mount one here; elsewhere the test is skipped: a loop
    image needs root as well)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mnt)],
                      capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(disk: Path, leave_bytes: int) -> Path:
    """A file that leaves ``leave_bytes`` free on ``disk``."""
    filler = disk / "filler"
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    try:
        with open(filler, "ab") as f:
            f.write(b"\0" * max(0, free - leave_bytes))
    except OSError:   # the crawl wrote meanwhile (the write or the close's flush): the disk is full, as asked
        pass
    return filler


@pytest.mark.parametrize("left_mib", [16, 0])
def test_disk_nearly_full_stops_cleanly_then_resumes(left_mib: int, web: TestWeb, clean: float,
                                                     small_disk: Path) -> None:
    """Another program eats the crawl's disk: the crawl stops and says why in one line,
    with its state saved, or (no byte left) says that the final save failed, never that
    all went well; once space is back, --resume finishes the crawl from the state."""
    out = small_disk / "out"
    env = {"CRAWLER_DISK_MIN_FREE_BYTES": str(24 * 2**20)}
    web.clear_log()
    t0 = time.monotonic()
    proc = crawl(out, web, env=env)
    wait_records(out, 40, proc)
    filler = fill(small_disk, left_mib * 2**20)
    filled_at = time.time()
    _, err = proc.communicate(timeout=120)
    # with no byte left, Redis loses the writes it acknowledged in its append-only file's last
    # second (everysec) and refuses the rest, and no record can be written: the pages fetched
    # from then on were in flight at the fault
    lost = 0 if left_mib else sum(1 for r in web.requests if r.method == "GET" and r.path != "/robots.txt"
                                  and r.start >= filled_at - 1.0)
    assert "disk nearly full: " in err and "MiB free" in err, err[-3000:]
    if left_mib:
        assert proc.returncode == 75 and "was not saved" not in err, err[-3000:]
    else:   # whatever was cut short, the crawl never says it went well
        assert proc.returncode != 0 and "frontier exhausted" not in err, err[-3000:]
    filler.unlink()
    resumed = crawl(out, web, "--resume", env=env)
    _, err2 = resumed.communicate(timeout=180)
    assert resumed.returncode == 0, err2[-3000:]
    f = figures(f"disk, {left_mib} MiB left", out, web, time.monotonic() - t0,
                said(err + err2, "disk nearly full", "resume:", "crawl finished", "Error"))
    handed_back = re.search(r"(\d+) fetched URL\(s\) not handed on", err2)
    check(f, clean, len(web.reachable()), MAX_IN_FLIGHT + (int(handed_back[1]) if handed_back else 0) + lost)


def test_report(clean: float) -> None:
    """Last: the table for the lead's note (pytest -s shows it)."""
    print("\n" + "\n".join(FIGURES))
