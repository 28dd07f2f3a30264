"""Thin Celery tasks: decode arguments, call a stage, hand on to the next one.

Messages carry URLs, lease tokens, batch ids and spool paths (JSON), never objects
or page bodies. The chain is fetch -> parse -> dedup; each stage sends the next one
itself, because parse must run on the node that fetched (it reads the batch's spool
file there), which is known only once a fetch worker has taken the batch.
"""
from __future__ import annotations

import logging
import time

import redis
from celery.signals import worker_process_init

from crawler_tasks.celery import app
from crawler_tasks.queues import DEDUP_QUEUE, fetch_queue, parse_queue
from crawler_tasks.frontier import Lease
from crawler_tasks.ops.maintenance import run_maintenance
from crawler_tasks.stages.pipeline import Worker, dedup_stage, fetch_stage, parse_stage
from crawler_tasks.stages.wake import RUNNING, Batch, plan_wake
from crawler_tasks.ops.snapshot import maybe_checkpoint
from crawler_tasks.settings import get_settings

log = logging.getLogger(__name__)

_worker: Worker | None = None


def get_worker() -> Worker:
    """This process's stage state (created after fork: sockets are never shared)."""
    global _worker
    if _worker is None:
        _worker = Worker.create(get_settings())
    return _worker


@worker_process_init.connect
def _reset_after_fork(**_: object) -> None:
    global _worker
    _worker = None


_REDIS_DOWN = (redis.ConnectionError, redis.TimeoutError)


def send_batch(batch: Batch) -> None:
    leases = [[lease.host, lease.raw, lease.token] for lease in batch.leases]
    fetch.apply_async((batch.shard, batch.batch_id, leases), queue=fetch_queue(batch.shard))


@app.task(name="crawler.wake", ignore_result=True)
def wake() -> int:
    w = get_worker()
    batches = plan_wake(w.settings, w.frontier)
    for batch in batches:
        send_batch(batch)
    return len(batches)


@app.task(name="crawler.fetch", acks_late=True, autoretry_for=_REDIS_DOWN,
          retry_backoff=True, retry_backoff_max=30, max_retries=10)
def fetch(shard: int, batch_id: str, leases: list[list[str]]) -> int:
    w = get_worker()
    t0 = time.process_time()
    pages, spool = fetch_stage(w, [Lease(shard, host, raw, token) for host, raw, token in leases], batch_id)
    parse.apply_async((pages, batch_id, spool), queue=parse_queue(w.settings.node_name))
    w.count({"cpu_ms/fetch": round((time.process_time() - t0) * 1000)})
    return len(pages)


@app.task(name="crawler.parse", acks_late=True, autoretry_for=_REDIS_DOWN,
          retry_backoff=True, retry_backoff_max=30, max_retries=10)
def parse(pages: list[dict], batch_id: str, spool: str | None) -> int:
    w = get_worker()
    t0 = time.process_time()
    records = parse_stage(w, pages, spool)
    dedup.apply_async((records, batch_id), queue=DEDUP_QUEUE)
    w.count({"cpu_ms/parse": round((time.process_time() - t0) * 1000)})
    return len(records)


@app.task(name="crawler.dedup", acks_late=True, autoretry_for=_REDIS_DOWN,
          retry_backoff=True, retry_backoff_max=30, max_retries=10)
def dedup(records: list[dict], batch_id: str) -> int:
    w = get_worker()
    t0 = time.process_time()
    enqueued = dedup_stage(w, records, batch_id)
    w.count({"cpu_ms/dedup": round((time.process_time() - t0) * 1000)})
    return enqueued


@app.task(name="crawler.recrawl", ignore_result=True)
def recrawl() -> int:
    """Continuous mode: move URLs whose next visit is due back into the front queues."""
    w = get_worker()
    moved = w.recrawler.requeue_due()
    if moved:
        w.count({"recrawl/requeued": moved})
    return moved


@app.task(name="crawler.maintenance", ignore_result=True)
def maintenance() -> str:
    s = get_settings()
    progress = run_maintenance(s, get_worker().frontier)
    if s.SNAPSHOT_INTERVAL_S and progress.state == RUNNING:
        try:
            maybe_checkpoint(s, s.SNAPSHOT_INTERVAL_S, keep=s.SNAPSHOT_KEEP)
        except OSError as exc:  # a full disk must not stop the crawl; say it each time
            log.error("checkpoint failed: %s", exc)
    return progress.state
