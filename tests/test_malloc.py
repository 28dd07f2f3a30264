"""The worker processes' malloc thresholds (glibc): the top of the heap is kept, not
given back and faulted in again for every page group."""
from __future__ import annotations

import subprocess
import sys

from crawler_tasks.runtime.malloc import tune_malloc

# Four megabytes in 100 kB blocks, freed, forty times over: what a parse worker does per
# page group. Prints the minor page faults of the last 39 rounds.
_ROUNDS = """
import resource, sys
if sys.argv[1] == "tuned":
    from crawler_tasks.runtime.malloc import tune_malloc
    assert tune_malloc()
def group():
    blocks = [bytes([i % 251]) * 100_000 for i in range(40)]
    return sum(len(b) for b in blocks)
group()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(39):
    group()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", _ROUNDS, mode], capture_output=True, text=True, check=True)
    return int(out.stdout)


def test_tuned_heap_is_not_faulted_in_again_for_each_group():
    default, tuned = _faults("default"), _faults("tuned")
    assert default > 39 * 500          # glibc gave the 4 MB back each round (~1,000 pages)
    assert tuned < 39 * 20, (default, tuned)


def test_tune_malloc_says_whether_it_applied():
    assert tune_malloc() is True       # CI runs on glibc
