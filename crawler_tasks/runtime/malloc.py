"""glibc malloc thresholds for the crawl's worker processes, and the fetch worker's trim.

A parse worker allocates and frees a few megabytes per page group (the spool file read
whole, bodies, texts, parse results). With glibc's defaults the free top of the heap
went back to the kernel after each group and was faulted in again, page by page, for
the next (70 minor faults a page; 19 with these thresholds), and the spool read (about
1 MB) was a fresh mmap each time until the dynamic threshold caught up. Measured on the
test web's pages, parse and dedup outside Celery: the worker 0.95 -> 0.82 ms CPU a page,
its sandbox child 2.49 -> 2.31. Applied once per worker process; forked processes (the
sandbox child) inherit it. Elsewhere than glibc it does nothing.

A fetch worker's hundreds of exchange threads allocate and free bodies, TLS buffers and
WARC records in two arenas: on a 1,000-host web 300 of its 350 MiB of heap were free but
held, scattered between live blocks where no threshold returns them. ``trim`` gives the
free pages back (``malloc_trim`` releases them wherever they lie), at most once every
``TRIM_EVERY_S``: 2-30 ms of CPU each, RSS 257 -> 91 MiB.
"""
from __future__ import annotations

import ctypes
import threading
import time

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# blocks above this (a body near the fetch cap) are still mapped and unmapped on their own
MMAP_THRESHOLD_BYTES = 4 << 20
# free memory kept at the top of a heap before any of it is given back
TRIM_THRESHOLD_BYTES = 64 << 20
# a fetch worker gives its free heap pages back this often
TRIM_EVERY_S = 5.0

_trim_lock = threading.Lock()
_trimmed_at = 0.0


def tune_malloc() -> bool:
    """True when the thresholds were set."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))


def trim(now: float | None = None) -> bool:
    """Give the process's free heap pages back, once every TRIM_EVERY_S at most (callers may
    ask often: only one of them trims). True when it did."""
    global _trimmed_at
    now = time.monotonic() if now is None else now
    with _trim_lock:
        if now - _trimmed_at < TRIM_EVERY_S:
            return False
        _trimmed_at = now
    try:
        malloc_trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    malloc_trim.argtypes = [ctypes.c_size_t]
    malloc_trim(0)
    return True
