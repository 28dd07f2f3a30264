"""The Celery app: ``celery -A crawler_tasks worker|beat|flower``.

Configuration comes from the crawler settings (``CRAWLER_*`` variables). JSON only,
no result backend (each stage sends the next one its input), one message prefetched per
worker process, late acks on the idempotent stage tasks, and the broker in its own
Redis database so task messages never mix with frontier state, every broker key under
the crawl's prefix (``broker.broker_options``), and every worker of a machine's fetch or parse
queues claiming its node name first (``ClaimNode``).

Workers act on SIGTERM at once: ``manage.py crawl`` stops them with a warm shutdown,
which otherwise waited out the event loop's idle poll (``WakeOnSignal``) and then the
pending BRPOP (``broker.BROKER_POLL_S``), up to a second each.
"""
from __future__ import annotations

import json
import logging
import signal
import socket
import threading
import time
from collections.abc import Collection
from typing import Any

from celery import Celery, bootsteps
from celery.signals import worker_init

from crawler_tasks.broker import broker_options
from crawler_tasks.connection import broker_url
from crawler_tasks.queues import (
    CONTROL_QUEUE,
    ENQUEUE_QUEUE,
    ENQUEUE_QUEUES,
    FETCH_QUEUE,
    OLD_ENQUEUE_QUEUE,
    PARSE_QUEUE,
)
from crawler_tasks.runtime.malloc import tune_malloc
from crawler_tasks.schedule import build_schedule
from crawler_tasks.settings import Settings, get_settings

log = logging.getLogger(__name__)
PUBLISH_RETRY_POLICY = {"max_retries": 30, "interval_start": 0, "interval_step": 0.2, "interval_max": 1.0}


def _consumed(w: Any) -> set[str]:
    """The queues a worker takes (``-Q``, or every queue the app knows)."""
    return set(w.app.amqp.queues.consume_from or w.app.amqp.queues)


class ClaimNode(bootsteps.StartStopStep):
    """A worker of this machine's fetch or parse queues claims the node name first and
    refuses to start (exit 1, the reason logged) when another machine holds it
    (``runtime/nodes.py``). Control workers write no spool and claim nothing."""

    def __init__(self, w: Any, **kwargs: Any) -> None:
        super().__init__(w, **kwargs)
        self.claim: Any = None

    def start(self, w: Any) -> None:
        from crawler_tasks.runtime.nodes import NodeClaim

        if not any(q.startswith((FETCH_QUEUE.partition("{")[0], PARSE_QUEUE.partition("{")[0])) for q in _consumed(w)):
            return
        self.claim = NodeClaim(get_settings())
        self.claim.start()

    def stop(self, w: Any) -> None:
        if self.claim is not None:
            self.claim.stop()
            self.claim = None

    shutdown = stop


class RedeliverPredecessor(bootsteps.StartStopStep):
    """A worker of the stage queues (parse, enqueue) starting under the name of one that
    died puts back at once the messages that one had taken and not acknowledged
    (``maintenance.redeliver_predecessor``): its page groups would otherwise wait for their
    deadline, and the crawl's end with them."""

    def __init__(self, w: Any, **kwargs: Any) -> None:
        super().__init__(w, **kwargs)
        self.started = time.time()   # before this worker takes any message

    def start(self, w: Any) -> None:
        from crawler_tasks.runtime.maintenance import redeliver_predecessor

        if not any(q.startswith(PARSE_QUEUE.partition("{")[0]) or q in ENQUEUE_QUEUES for q in _consumed(w)):
            return
        try:
            back = redeliver_predecessor(get_settings(), w.hostname, self.started)
        except Exception as exc:  # noqa: BLE001 - they come back after their groups' deadline
            log.warning("could not look for the tasks a dead worker named %s left: %s", w.hostname, exc)
            return
        if back:
            log.warning("%d page group task(s) that a dead worker named %s had taken are queued again", back,
                        w.hostname)


class WakeOnSignal(bootsteps.StartStopStep):
    """Ends the event loop's wait when a signal arrives. The warm-shutdown handler only
    sets a flag, which the loop reads after its poll returns: up to a second later when
    idle. Python writes each caught signal's number to the wakeup fd; that fd is one of
    the loop's readers, so the poll returns and the flag is read at once."""

    requires = ("celery.worker.components:Hub",)

    def __init__(self, w: Any, **kwargs: Any) -> None:
        super().__init__(w, **kwargs)
        self._pair: tuple[socket.socket, socket.socket] | None = None

    def start(self, w: Any) -> None:
        if w.hub is None or threading.current_thread() is not threading.main_thread():
            return
        reader, writer = socket.socketpair()
        reader.setblocking(False)
        writer.setblocking(False)
        previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        if previous != -1:  # someone else's: leave it in place
            signal.set_wakeup_fd(previous)
            reader.close()
            writer.close()
            return
        self._pair = (reader, writer)
        w.hub.add_reader(reader.fileno(), self._drain, reader)

    @staticmethod
    def _drain(reader: socket.socket) -> None:
        try:
            reader.recv(4096)
        except OSError:  # nothing left (BlockingIOError) or already closed
            pass

    def stop(self, w: Any) -> None:
        if self._pair is None:
            return
        reader, writer = self._pair
        self._pair = None
        signal.set_wakeup_fd(-1)
        w.hub.remove(reader.fileno())
        reader.close()
        writer.close()

    shutdown = stop


def make_app() -> Celery:
    settings = get_settings()
    app = Celery("crawler_tasks", include=["crawler_tasks.tasks"])
    url = broker_url(settings) if settings.REDIS_URL or settings.BROKER_URL else "redis://127.0.0.1:6379/1"
    app.conf.update(
        broker_url=url,
        # kombu's Redis transport, minus a crash when the broker dies (broker.py)
        broker_transport="crawler_tasks.broker:Transport" if url.startswith(("redis://", "rediss://")) else None,
        broker_connection_retry_on_startup=True,
        broker_transport_options=broker_options(settings),
        result_backend=None,
        task_ignore_result=True,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        worker_prefetch_multiplier=1,
        # a message sent while the embedded Redis restarts (the runner sees a crash within
        # WATCH_S and restarts it from its data) waits for it: Celery's default gave up
        # after 0.6 s, and a stage task that could not send its result on was lost
        task_publish_retry_policy=PUBLISH_RETRY_POLICY,
        worker_send_task_events=settings.TASK_EVENTS,
        task_send_sent_event=False,
        task_default_queue=CONTROL_QUEUE,
        task_routes={
            "crawler.enqueue": {"queue": ENQUEUE_QUEUE},
            "crawler.dedup": {"queue": OLD_ENQUEUE_QUEUE},   # the old name, for one release
            "crawler.wake": {"queue": CONTROL_QUEUE},
            "crawler.maintenance": {"queue": CONTROL_QUEUE},
            "crawler.recrawl": {"queue": CONTROL_QUEUE},
        },
        worker_hijack_root_logger=False,
        timezone="UTC",
    )
    app.conf.beat_schedule = build_schedule(settings)
    app.steps["worker"].add(WakeOnSignal)
    app.steps["worker"].add(ClaimNode)
    app.steps["worker"].add(RedeliverPredecessor)
    return app


app = make_app()


def requeue_unacked(url: str, queues: Collection[str], before: float, settings: Settings | None = None) -> int:
    """Put back at the head of their queues the messages of ``queues`` that a worker
    took before ``before`` and had not acknowledged when the broker's Redis was
    restarted from its append-only file: what their tasks did after the file's last
    write was lost with the crash, and kombu would hand them out again only after the
    visibility timeout. The stage tasks are idempotent (a parse task whose spool is
    gone fetches its pages again); fetch sessions stay: a live one may hold their
    hosts. Returns how many were requeued."""
    from kombu import Connection

    requeued = 0
    with Connection(url, transport_options=broker_options(settings or get_settings())) as conn:
        channel = conn.default_channel
        client, qos = channel.client, channel.qos
        for tag, taken_at in client.zrange(qos.unacked_index_key, 0, -1, withscores=True):
            raw = client.hget(qos.unacked_key, tag) if taken_at < before else None
            try:
                routing_key = json.loads(raw)[2] if raw else None
            except (ValueError, TypeError, IndexError, KeyError):
                continue
            if routing_key in queues:
                qos.restore_by_tag(tag, client, leftmost=True)
                requeued += 1
    return requeued


@worker_init.connect
def _tune_allocator(**_: object) -> None:
    """Every worker, however started (``manage.py crawl`` or ``celery -A crawler_tasks worker``)."""
    tune_malloc()
