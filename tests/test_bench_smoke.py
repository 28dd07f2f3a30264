"""The benchmarks still run: each one's smoke mode, in seconds, on loopback. An import or an
API change that broke a bench fails here, not the next time someone measures.

Every script in bench/ (but the Scrapy spider that vs_scrapy.py runs) has ``--smoke``: the
same code at tiny sizes. Each row of ``SMOKES`` runs one and reads a figure off its output
that must be positive (a bench that printed a zero rate measured nothing); a new bench
without a row fails ``test_every_bench_has_a_smoke_run``. A bench that needs what CI may
lack runs its own side without it (render_cost.py alone skips, without Chromium)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from crawler_tasks.render import chromium_path

ROOT = Path(__file__).resolve().parent.parent
NOT_BENCHES = {"scrapy_spider.py"}   # the spider vs_scrapy.py runs under Scrapy
needs_chromium = pytest.mark.skipif(chromium_path() is None, reason="no chromium binary (apt-get install chromium)")


def run_bench(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=env)


def figure(out: str, pattern: str) -> float:
    """The number the pattern's group catches in the output (commas: thousands)."""
    match = re.search(pattern, out, re.M)
    assert match, f"no line matches {pattern!r} in the output:\n{out[-3000:]}"
    return float(match.group(1).replace(",", ""))


# (script and arguments, a pattern whose group is a figure that must be positive)
SMOKES = [
    (("budget_cost.py", "--smoke"), r"^stray-end-tags\s+\S+\s+(\d+)"),                # stage ms of a bomb
    (("changing_web.py", "--smoke"), r"^adaptive\s+([\d.]+)"),                         # mean freshness
    (("cpu_floor.py", "--smoke"), r"floor \(the \* pieces\)\s+([\d.]+)"),
    (("crawl_bench.py", "--smoke"), r"^pages/s whole run\s+([\d.]+)"),
    (("crawl_bench.py", "--smoke", "--monitor"), r"^redis \(own server\): .*, ([\d.]+) commands/page"),
    (("dedup_bench.py", "--smoke"), r"^\s+simhash64\s+(\d+) us/page"),
    (("dns_resolvers.py", "--smoke"), r"^ours\s+\S+\s+\S+ \|\s+\S+\s+\S+\s+(\d+)"),    # answers OK at once
    (("engine_cpu.py", "--smoke"), r"^\s+client CPU ms a page\s+([\d.]+)"),
    (("fetch_cpu.py", "--smoke"), r"client CPU per fetch: median ([\d.]+) ms"),
    (("fetch_cpu.py", "--smoke", "--tls"), r"session resumed: .*; (\d+) of \d+ resumed"),
    (("freshness_sim.py", "--smoke"), r"^adaptive\s+([\d.]+)"),
    (("frontier_memory.py", "--smoke", "--snapshot"), r"^queue bytes per queued URL.*: ([\d.]+)$"),
    (("frontier_memory.py", "--smoke", "--exact"), r"^exact URL-seen: .* = ([\d.]+) bytes per seen URL"),
    (("parse_bench.py", "--smoke"), r"^parse \+ links: ([\d.]+) ms/page"),
    (("pdf_cost.py", "--smoke"), r"^pypdfium2\s+median ([\d.]+) ms/page"),
    (("parse_bench.py", "--smoke", "--analyse"), r"^analyse: ([\d.]+) ms/page"),
    (("real_sites.py", "--smoke"), r"reachable (\d+), fetched"),                      # exit 0: none lost
    (("render_cost.py", "--smoke"), r"^/shell\.html: wall median (\d+) ms"),
    (("session_cpu.py", "--smoke"), r"^fetch path CPU ([\d.]+) ms/page"),
    (("spellings.py", "--smoke"), r"^on\s+([\d,]+)"),                                # requests made
    (("text_quality.py", "--smoke"), r"^\s+main text\s+P \S+\s+R \S+\s+F1 ([\d.]+)"),
    (("vs_scrapy.py", "--smoke"), r"^\s+pages/s whole run\s+([\d.]+)"),
    (("worker_cpu.py", "--smoke"), r"^parse\s+CPU ([\d.]+) ms/page"),
]
NEEDS = {"render_cost.py": needs_chromium}   # what CI may lack and the bench cannot do without


def test_web_shapes_smoke_crawls_a_web_of_names_and_reports_its_bound():
    done = run_bench("bench/web_shapes.py", "--smoke")
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("smoke "))
    fields = line.split()
    assert float(fields[3]) > 0                       # our steady pages/s
    assert fields[-1] == "0"                          # no politeness violation
    assert fields[11].split("/")[0] == fields[11].split("/")[1]   # every live host reached


@pytest.mark.parametrize(("args", "pattern"), [pytest.param(*row, marks=NEEDS.get(row[0][0], ())) for row in SMOKES],
                         ids=[" ".join(args) for args, _ in SMOKES])
def test_bench_smoke_modes_run(args: tuple[str, ...], pattern: str):
    script, *rest = args
    done = run_bench(f"bench/{script}", *rest)
    assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    assert figure(done.stdout, pattern) > 0, done.stdout[-3000:]


def test_frontier_memory_smoke_spills_and_reads_every_url_back():
    done = run_bench("bench/frontier_memory.py", "--smoke")
    assert done.returncode == 0, done.stderr[-3000:]
    spilled = figure(done.stdout, r"^spilled ([\d,]+) URLs to")
    assert spilled > 0
    assert figure(done.stdout, r"^read-back: ([\d,]+) URLs") == spilled


def test_every_bench_has_a_smoke_run():
    benches = {path.name for path in (ROOT / "bench").glob("*.py")} - NOT_BENCHES
    covered = {args[0] for args, _ in SMOKES} | {"web_shapes.py"}   # web_shapes: its own test above
    assert benches - covered == set(), "a bench without a smoke run here (give it --smoke and a row in SMOKES)"
    assert covered - benches == set()
