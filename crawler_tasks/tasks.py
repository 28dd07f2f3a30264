"""Thin Celery tasks: validate the message, call a stage, hand on to the next one.

Messages carry URLs, lease tokens, session and page group ids and stage records as JSON (the schema is
``records.py``), never objects or page bodies. The chain is fetch -> parse -> enqueue
(task ``crawler.enqueue``); each stage sends the next one itself, because parse must run
on the node that fetched (it reads the group's spool file there), which is known only
once a fetch worker has taken the session. A message that fails validation is refused:
logged, counted as ``error/message``, and nothing is read, written or deleted for it.
"""
from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis
from celery.exceptions import WorkerShutdown
from celery.signals import worker_process_init

from crawler_tasks.celery import app
from crawler_tasks.exceptions import MessageError
from crawler_tasks.frontier import Lease
from crawler_tasks.ops.snapshot import maybe_checkpoint
from crawler_tasks.output.jsonl import WorkerStopping, once_written
from crawler_tasks.output.spool import (
    check_batch_id,
    drop_message,
    keep_message,
    kept_enqueue,
    prune_markers,
    records_written,
    remove_spool,
)
from crawler_tasks.queues import ENQUEUE_QUEUE, ENQUEUE_TASK, FETCH_TASK, PARSE_TASK, fetch_queue, parse_queue
from crawler_tasks.records import Capture, capture_from_message, record_from_message, to_message
from crawler_tasks.runtime.control import CrawlState
from crawler_tasks.runtime.maintenance import run_maintenance
from crawler_tasks.runtime.nodes import ProcessBeat
from crawler_tasks.settings import get_settings
from crawler_tasks.stages.enqueue import enqueue_stage
from crawler_tasks.stages.fetch import fetch_stage
from crawler_tasks.stages.parse import parse_stage
from crawler_tasks.stages.wake import SessionStart, plan_wake
from crawler_tasks.stages.worker import Worker

log = logging.getLogger(__name__)

_worker: Worker | None = None
_worker_lock = threading.Lock()
_beat: ProcessBeat | None = None
MAX_LEASES_PER_MESSAGE = 1024
# About one dedup task in this many removes the old batches' markers of its node.
PRUNE_MARKERS_EVERY = 500


def get_worker() -> Worker:
    """This process's stage state (created after fork: sockets are never shared). Once:
    the first tasks of a threads pool arrive together, and each used to build its own
    (a WARC file, robots and DNS caches each)."""
    global _worker
    with _worker_lock:
        if _worker is None:
            _worker = Worker.create(get_settings())
        return _worker


def fetch_process(w: Worker) -> ProcessBeat:
    """This process's heartbeat, started by its first fetch task: from then on its leases
    and parked URLs are its own, handed over at once should it die (runtime/nodes.py)."""
    global _beat
    with _worker_lock:
        if _beat is None:
            _beat = ProcessBeat(w.settings)
            _beat.start()
            w.frontier.owner = _beat.id
        return _beat


@worker_process_init.connect
def _reset_after_fork(**_: object) -> None:
    global _worker, _worker_lock, _beat
    _worker, _worker_lock, _beat = None, threading.Lock(), None


_REDIS_DOWN = (redis.ConnectionError, redis.TimeoutError)
_cpu_lock = threading.Lock()
_cpu_last = [time.process_time()]


def _process_cpu_ms() -> int:
    """This process's CPU since the last call: fetch sessions share a process (threads pool),
    so each reports what the process used since the previous one ended."""
    with _cpu_lock:
        now = time.process_time()
        spent, _cpu_last[0] = now - _cpu_last[0], now
    return round(spent * 1000)


def _refuse(task: str, exc: MessageError) -> int:
    log.error("refused a %s message: %s", task, exc)
    get_worker().count({"error/message": 1, f"error/message/{task}": 1})
    return 0


def _given_up(task: str, group_id: str) -> int:
    """A page group given up when its node was lost (its pages are fetched again): its
    message, taken by a worker that died or left queued for the lost node, turned up."""
    log.warning("%s of page group %s skipped: it was given up when its node was lost, and its pages are "
                "fetched again", task, group_id)
    get_worker().count({f"frontier/group_given_up/{task}": 1})
    return 0


def _leases(shard: Any, leases: Any) -> list[Lease]:
    settings = get_worker().settings
    if isinstance(shard, bool) or not isinstance(shard, int) or not 0 <= shard < settings.SHARDS:
        raise MessageError(f"bad shard {shard!r}")
    if not isinstance(leases, list) or len(leases) > MAX_LEASES_PER_MESSAGE:
        raise MessageError("leases must be a bounded list")
    out = []
    for item in leases:
        if not (isinstance(item, list) and len(item) == 3 and all(isinstance(x, str) for x in item)):
            raise MessageError("a lease is [host, entry, token]")
        out.append(Lease(shard, item[0], item[1], item[2]))
    return out


def _list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise MessageError(f"{what} must be a list")
    return value


def send_session(start: SessionStart) -> None:
    leases = [[lease.host, lease.raw, lease.token] for lease in start.leases]
    fetch.apply_async((start.shard, start.session_id, leases), queue=fetch_queue(start.shard),
                      **_summary(f"{start.shard}, {start.session_id!r}, <{len(leases)} leases>"))


def _summary(args: str) -> dict[str, str]:
    """What a task message shows of its arguments (Flower, logs): a summary, because
    Celery's own repr of a batch of pages costs more CPU than sending it."""
    return {"argsrepr": f"({args})", "kwargsrepr": "{}"}


@app.task(name="crawler.wake", ignore_result=True)
def wake() -> int:
    w = get_worker()
    starts = plan_wake(w.settings, w.frontier)
    for start in starts:
        send_session(start)
    return len(starts)


@app.task(name=FETCH_TASK, acks_late=True, autoretry_for=_REDIS_DOWN,
          retry_backoff=True, retry_backoff_max=30, max_retries=10)
def fetch(shard: Any, session_id: Any, leases: Any) -> int:
    """Acknowledged when done, although the frontier's leases, not the message, carry
    a session: an early ack frees the worker's prefetch window as a session starts, and
    a -c 2 worker then took a third session it could not start (measured: 3 of 4 on one
    node). A dead worker's session comes back after the visibility timeout; its leases
    were handed over long before, so it only takes ready hosts like any session."""
    w = get_worker()
    try:
        session_id = check_batch_id(session_id)
        checked = _leases(shard, leases)
    except MessageError as exc:
        return _refuse("fetch", exc)
    w.control.own_session(shard, session_id, fetch_process(w).id)

    def emit(pages: list[Capture], group_id: str) -> None:
        message = [to_message(p) for p in pages]
        keep_message(w.settings, group_id, "parse", message)   # until its records are written
        parse.apply_async((message, group_id), queue=parse_queue(w.settings.node_name),
                          **_summary(f"<{len(pages)} pages>, {group_id!r}"))

    handed = fetch_stage(w, checked[0].shard if checked else shard, checked, session_id, emit)
    w.count({"cpu_ms/fetch": _process_cpu_ms()})
    return handed


@contextmanager
def _unacked_if_stopped() -> Iterator[None]:
    """A stage task that waits for its storage never fails on it (failed, it would be
    acknowledged and its batch lost): it waits (``once_written``) and, if the worker is
    asked to stop meanwhile, ends as a worker shutdown, which leaves its message
    unacknowledged to be delivered again (at resume, or after the visibility timeout)."""
    try:
        yield
    except WorkerStopping as exc:
        log.warning("%s; the task's message is left to be delivered again", exc)
        raise WorkerShutdown(0) from exc


@app.task(name=PARSE_TASK, acks_late=True)
def parse(pages: Any, group_id: Any) -> int:
    w = get_worker()
    t0 = time.process_time()
    try:
        group_id = check_batch_id(group_id)
        checked = [capture_from_message(p) for p in _list(pages, "pages")]
    except MessageError as exc:
        return _refuse("parse", exc)
    with _unacked_if_stopped():
        once_written(lambda: w.control.work_on_group(group_id, PARSE_TASK, parse.request.hostname))
        message = _enqueue_message(w, checked, group_id)
        if message is None:
            return 0
        once_written(lambda: enqueue.apply_async((message, group_id), queue=ENQUEUE_QUEUE,
                                                 **_summary(f"<{len(message)} records>, {group_id!r}")))
        # last: a run stopped before this (its worker died) is made again from the spool
        # file, and writes nothing twice (its outputs' markers)
        remove_spool(w.settings, group_id)
        w.count({"cpu_ms/parse": round((time.process_time() - t0) * 1000)})
    return len(message)


def _enqueue_message(w: Worker, checked: list[Capture], group_id: str) -> list[Any] | None:
    """The group's enqueue message: the one an earlier run of this task kept (it stopped
    before it sent it, or was acknowledged; sent again, as enqueue writes a group's records
    once), or made from its parse (again). None: nothing to send (its records are written,
    or the group was given up)."""
    s = w.settings
    if records_written(s, group_id):
        log.info("page group %s was handed on by an earlier run of its parse task: skipped", group_id)
        w.count({"parse/redelivered_done": 1})
        remove_spool(s, group_id)
        return None
    kept = kept_enqueue(s, group_id)
    # its feed lines are in place, unless a resume moved them aside as uncommitted (it drops
    # every feed marker): then they are written again from a parse
    if kept is not None and (not s.FEED_JSONL or records_written(s, group_id, "feed")
                             or not any(isinstance(item, dict) and item.get("indexable") for item in kept)):
        log.info("page group %s was parsed by an earlier run of its parse task: its records are sent on", group_id)
        w.count({"parse/redelivered_resent": 1})
        return kept
    # made again whole while the storage refuses, up to its first output (the feed);
    # from there on each write is made again in place, never the stage
    records = once_written(lambda: parse_stage(w, checked, group_id))
    if records is None:   # a redelivery of a run that handed the group on
        return None
    # claimed here, not first: a parse task blocked on a restarting Redis at its start was
    # also queued again by the runner's recovery (requeue_unacked), and ran twice
    if not once_written(lambda: w.control.claim_group(group_id, s.node_name)):
        _given_up("parse", group_id)
        return None
    message = [to_message(r) for r in records]
    once_written(lambda: keep_message(s, group_id, "enqueue", message))   # in the parse message's place
    return message


@app.task(name=ENQUEUE_TASK, acks_late=True)
def enqueue(records: Any, group_id: Any) -> int:
    w = get_worker()
    t0 = time.process_time()
    try:
        group_id = check_batch_id(group_id)
        checked = [record_from_message(r) for r in _list(records, "records")]
    except MessageError as exc:
        return _refuse("dedup", exc)
    with _unacked_if_stopped():   # as parse: made again whole up to the append of its records
        once_written(lambda: w.control.work_on_group(group_id, ENQUEUE_TASK, enqueue.request.hostname))
        if not once_written(lambda: w.control.claim_group(group_id, w.settings.node_name)):
            return _given_up("dedup", group_id)
        enqueued = once_written(lambda: enqueue_stage(w, checked, group_id))
        drop_message(w.settings, group_id)   # its records are written
        if random.random() < 1 / PRUNE_MARKERS_EVERY:   # a long crawl's markers do not pile up
            prune_markers(w.settings)
        w.count({"cpu_ms/dedup": round((time.process_time() - t0) * 1000)})
    return enqueued


@app.task(name="crawler.dedup", acks_late=True)
def enqueue_old_name(records: Any, group_id: Any) -> int:
    """``crawler.enqueue`` under its name up to 0.1 (``queues.OLD_ENQUEUE_QUEUE``): one release."""
    return int(enqueue(records, group_id))


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
    w = get_worker()
    progress = run_maintenance(s, w.frontier)
    # a Redis that lost the crawl (no control hash) must not overwrite good checkpoints
    if s.SNAPSHOT_INTERVAL_S and progress.state == CrawlState.RUNNING and w.control.exists():
        try:
            maybe_checkpoint(s, s.SNAPSHOT_INTERVAL_S, keep=s.SNAPSHOT_KEEP)
        except OSError as exc:  # a full disk must not stop the crawl; say it each time
            log.error("checkpoint failed: %s", exc)
    return str(progress.state)
