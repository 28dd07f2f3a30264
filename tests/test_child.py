"""The crawl's Celery processes: forked by the fork server (own session, own title,
exit codes reported, dead with the server), Beat's first wake due at once, and the
runner's own stop decision."""
from __future__ import annotations

import io
import os
import signal
import time
from pathlib import Path

import psutil
from celery.beat import ScheduleEntry

from crawler_tasks.celery import app
from crawler_tasks.ops.child import ForkServer
from crawler_tasks.ops.runner import REPO_ROOT, CrawlRunner
from crawler_tasks.runtime.control import Control, CrawlState
from crawler_tasks.schedule import build_schedule

ROOT = Path(__file__).resolve().parents[1]


def wait_for(predicate, timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def start_server(settings, tmp_path) -> ForkServer:
    server = ForkServer(str(REPO_ROOT))
    server.configure({**os.environ, **settings.to_env(), "PYTHONPATH": str(ROOT)}, tmp_path / "forkserver.log")
    return server


def worker_args(settings, name: str) -> list[str]:
    # a queue of this test's own: no other test's message is taken
    return ["worker", "-Q", f"{settings.KEY_PREFIX}.test", "-P", "solo", "-n", f"{name}@%h"]


def test_forked_worker_has_its_own_session_and_title_and_stops_warm_on_sigterm(settings, tmp_path):
    server = start_server(settings, tmp_path)
    log = tmp_path / "w.log"
    try:
        proc = server.spawn(worker_args(settings, f"childtest{os.getpid()}"), log)
        assert proc is not None
        # its group exists as soon as it is reported: a signal sent at once reaches it
        assert os.getsid(proc.pid) == proc.pid
        assert wait_for(lambda: log.exists() and " ready." in log.read_text()), log.read_text()
        assert psutil.Process(proc.pid).ppid() == server.proc.pid
        assert f"childtest{os.getpid()}@" in " ".join(psutil.Process(proc.pid).cmdline())
        assert proc.poll() is None
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(60) == 0
        assert "Warm shutdown" in log.read_text()
    finally:
        server.stop()
    assert server.proc.returncode is not None
    assert server.spawn(worker_args(settings, "late"), log) is None  # the runner then execs instead


def test_forked_worker_dies_with_the_server(settings, tmp_path):
    server = start_server(settings, tmp_path)
    log = tmp_path / "w.log"
    proc = server.spawn(worker_args(settings, f"orphan{os.getpid()}"), log)
    assert proc is not None
    try:
        assert wait_for(lambda: log.exists() and " ready." in log.read_text()), log.read_text()
        server.proc.kill()
        assert wait_for(lambda: not psutil.pid_exists(proc.pid) or
                        psutil.Process(proc.pid).status() == psutil.STATUS_ZOMBIE), "outlived its server"
        assert proc.poll() is not None
    finally:
        if psutil.pid_exists(proc.pid):
            os.kill(proc.pid, signal.SIGKILL)
        server.stop()


def test_first_wake_is_due_when_beat_starts_and_maintenance_is_not(settings):
    Control(settings).start()   # wake is due only while a crawl runs (test_wake.py)
    schedule = build_schedule(settings)
    wake = ScheduleEntry(**dict(schedule["wake"], name="wake", app=app))
    maintenance = ScheduleEntry(**dict(schedule["maintenance"], name="maintenance", app=app))
    assert wake.is_due()[0]
    assert not maintenance.is_due()[0]


def test_runner_finishes_a_stopping_idle_crawl_without_maintenance(settings):
    """No control worker runs here: the runner itself sees that nothing is in flight."""
    runner = CrawlRunner(settings, seeds=[], out=io.StringIO())
    control = Control(settings)
    control.start()
    control.set_state(CrawlState.STOPPING, "stopped by SIGINT")
    progress = runner._watch()
    assert progress.state == CrawlState.FINISHED
    assert control.state()[:2] == (CrawlState.FINISHED, "stopped by SIGINT")


def test_fork_server_writes_the_packages_bytecode_even_if_told_not_to(settings, tmp_path, monkeypatch):
    """Run from its source folder under PYTHONDONTWRITEBYTECODE, the package was compiled
    again by every crawl's fork server (0.2 s that every process of the crawl waits for)."""
    import importlib.util

    source = ROOT / "crawler_tasks" / "records.py"
    cached = Path(importlib.util.cache_from_source(str(source)))
    cached.unlink(missing_ok=True)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    server = start_server(settings, tmp_path)
    try:   # it answers a spawn once it has imported everything
        proc = server.spawn(worker_args(settings, f"pyc{os.getpid()}"), tmp_path / "w.log")
        assert proc is not None
        assert cached.is_file() and cached.stat().st_mtime >= source.stat().st_mtime
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)
    finally:
        server.stop()


def test_beat_runs_in_its_worker_and_takes_it_down_when_it_dies(settings, tmp_path):
    """The control worker runs Beat in a thread (``-B``): Beat starts with the worker, and
    a Beat that cannot go on (here its state file cannot be made) stops the worker, which the
    runner then restarts like any dead child, instead of a crawl that waits for wakes."""
    server = start_server(settings, tmp_path)
    good, bad = tmp_path / "good.log", tmp_path / "bad.log"
    (tmp_path / "file").write_text("")
    try:
        ok = server.spawn(worker_args(settings, f"beatok{os.getpid()}") + ["-B", str(tmp_path / "schedule")], good)
        broken = server.spawn(worker_args(settings, f"beatbad{os.getpid()}") + ["-B", str(tmp_path / "file" / "schedule")], bad)
        assert ok is not None and broken is not None
        assert wait_for(lambda: good.exists() and " ready." in good.read_text() and "beat: Starting" in good.read_text())
        assert broken.wait(60) is not None and "beat stopped: its worker stops too" in bad.read_text()
        assert ok.poll() is None   # a sound Beat leaves its worker alone
        os.killpg(ok.pid, signal.SIGTERM)
        assert ok.wait(60) == 0
    finally:
        server.stop()
