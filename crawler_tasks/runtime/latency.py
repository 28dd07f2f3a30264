"""The fetch latency histogram in Redis (``<prefix>:{g}:latency``): the fetch stage counts
each page group's durations into it, and the metrics endpoint (``ops/metrics.py``) reads
it on scrape. Fields are the buckets' upper bounds (``le:<seconds>``), ``count`` and ``sum``."""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from typing import Any

import redis

from crawler_tasks.keys import GlobalKeys

# Fetch latency buckets, seconds: from a fast local page to TOTAL_TIMEOUT_S (30 s).
LATENCY_BUCKETS: tuple[float, ...] = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
INF_FIELD = "le:+Inf"

def bucket_field(seconds: float) -> str:
    for le in LATENCY_BUCKETS:
        if seconds <= le:
            return f"le:{le:g}"
    return INF_FIELD


def record_latencies(client: Any, key_prefix: str, seconds: Iterable[float]) -> int:
    """Count fetch durations into the latency hash in one round trip (a batch's worth).

    ``client`` is a Redis client or a pipeline (then nothing is executed here, so it
    can ride along with the stage's other counters). Negative or non-finite values
    are ignored. Returns how many were counted."""
    buckets: Counter[str] = Counter()
    total = 0.0
    n = 0
    for s in seconds:
        if s is None or not math.isfinite(s) or s < 0:
            continue
        buckets[bucket_field(s)] += 1
        total += s
        n += 1
    if not n:
        return 0
    key = GlobalKeys(key_prefix).latency
    own = not isinstance(client, redis.client.Pipeline)
    pipe = client.pipeline(transaction=False) if own else client
    for name, count in buckets.items():
        pipe.hincrby(key, name, count)
    pipe.hincrby(key, "count", n)
    pipe.hincrbyfloat(key, "sum", total)
    if own:
        pipe.execute()
    return n


def record_latency(client: Any, key_prefix: str, seconds: float) -> None:
    """Count one fetch duration (see ``record_latencies`` for a whole batch)."""
    record_latencies(client, key_prefix, [seconds])
