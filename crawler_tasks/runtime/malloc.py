"""glibc malloc thresholds for the crawl's worker processes.

A parse worker allocates and frees a few megabytes per page group (the spool file read
whole, bodies, texts, parse results). With glibc's defaults the free top of the heap
went back to the kernel after each group and was faulted in again, page by page, for
the next (70 minor faults a page; 19 with these thresholds), and the spool read (about
1 MB) was a fresh mmap each time until the dynamic threshold caught up. Measured on the
test web's pages, parse and dedup outside Celery: the worker 0.95 -> 0.82 ms CPU a page,
its sandbox child 2.49 -> 2.31. Applied once per worker process; forked processes (the
sandbox child) inherit it. Elsewhere than glibc it does nothing.
"""
from __future__ import annotations

import ctypes

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# blocks above this (a body near the fetch cap) are still mapped and unmapped on their own
MMAP_THRESHOLD_BYTES = 4 << 20
# free memory kept at the top of a heap before any of it is given back
TRIM_THRESHOLD_BYTES = 64 << 20


def tune_malloc() -> bool:
    """True when the thresholds were set."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
