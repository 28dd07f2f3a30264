"""The benchmarks still run: each one's smoke mode, in seconds, on loopback. An import or an
API change that broke a bench fails here, not the next time someone measures."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_bench(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=env)


def test_web_shapes_smoke_crawls_a_web_of_names_and_reports_its_bound():
    done = run_bench("bench/web_shapes.py", "--smoke")
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("smoke "))
    fields = line.split()
    assert float(fields[3]) > 0                       # our steady pages/s
    assert fields[-1] == "0"                          # no politeness violation
    assert fields[11].split("/")[0] == fields[11].split("/")[1]   # every live host reached


@pytest.mark.parametrize("script", ["cpu_floor.py"])
def test_bench_smoke_modes_run(script: str):
    done = run_bench(f"bench/{script}", "--smoke")
    assert done.returncode == 0, done.stderr[-3000:]
