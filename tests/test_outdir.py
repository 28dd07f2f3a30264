"""One crawl owns its output folder (ops/outdir.py): a second owner is refused with
the first one's name; a killed owner's lock is taken over."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from crawler_tasks.exceptions import ConfigError
from crawler_tasks.ops import outdir
from crawler_tasks.ops.outdir import LOCK_FILE, OutputLock, previous_outputs, read_owner

HOLD = ("import sys, time; from crawler_tasks.ops.outdir import OutputLock; "
        "OutputLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(60)")


def _holder(path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_second_owner_is_refused_with_the_first_ones_name(tmp_path):
    proc = _holder(tmp_path)
    try:
        with pytest.raises(ConfigError, match=f"in use by a running crawl \\(pid {proc.pid} on "):
            OutputLock(tmp_path).acquire()
    finally:
        proc.terminate()
        proc.wait()


def test_killed_owner_lock_is_taken_over_and_named(tmp_path):
    proc = _holder(tmp_path)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    lock = OutputLock(tmp_path).acquire()
    try:
        assert lock.previous is not None and lock.previous.pid == proc.pid
        owner = read_owner(tmp_path)
        assert owner is not None and owner.pid == os.getpid() and time.time() - owner.started_at < 10
    finally:
        lock.release()
    # a clean release leaves no name behind: the next owner has no dead predecessor
    with OutputLock(tmp_path) as again:
        assert again.previous is None
    assert (tmp_path / LOCK_FILE).read_text() == ""


WORKER = ("import sys, time; from crawler_tasks.ops.outdir import hold_for_worker; "
          "hold_for_worker(sys.argv[1]); print('held', flush=True); time.sleep(float(sys.argv[2]))")


def _worker(path, lives_s: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", WORKER, str(path), str(lives_s)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_new_owner_waits_for_the_workers_a_killed_crawl_left(tmp_path):
    """Workers outlive a killed runner for a moment: nothing of the folder is touched
    before they are gone."""
    worker = _worker(tmp_path, 1.0)
    try:
        with OutputLock(tmp_path) as lock:
            assert worker.poll() is not None, "taken while a worker of the folder ran"
            assert lock.waited_s >= 0.5 and lock.killed == []
    finally:
        worker.kill()
        worker.wait()
    with OutputLock(tmp_path) as lock:   # none left: no wait
        assert lock.waited_s < 0.5


def test_a_worker_that_does_not_exit_is_killed(tmp_path, monkeypatch):
    monkeypatch.setattr(outdir, "WORKERS_WAIT_S", 0.5)
    worker = _worker(tmp_path, 60.0)
    try:
        with OutputLock(tmp_path) as lock:
            assert lock.killed == [worker.pid]
            assert worker.wait(5) == -signal.SIGKILL
    finally:
        worker.kill()
        worker.wait()


def test_previous_outputs_names_what_a_crawl_left(tmp_path):
    assert previous_outputs(tmp_path) == []
    (tmp_path / LOCK_FILE).write_text("")
    (tmp_path / "logs").mkdir()   # logs alone are no crawl
    assert previous_outputs(tmp_path) == []
    (tmp_path / "pages.jsonl").write_text("")
    (tmp_path / "warc").mkdir()
    assert previous_outputs(tmp_path) == ["pages.jsonl", "warc"]
