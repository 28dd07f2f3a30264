"""The Celery app: ``celery -A crawler_tasks worker|beat|flower``.

Configuration comes from the crawler settings (``CRAWLER_*`` variables). JSON only,
no result backend (each stage sends the next one its input), one message prefetched per
worker process, late acks on the idempotent stage tasks, and the broker in its own
Redis database so task messages never mix with frontier state.
"""
from __future__ import annotations

from celery import Celery

from crawler_tasks.connection import broker_url
from crawler_tasks.queues import CONTROL_QUEUE, DEDUP_QUEUE
from crawler_tasks.schedule import build_schedule
from crawler_tasks.settings import get_settings


def make_app() -> Celery:
    settings = get_settings()
    app = Celery("crawler_tasks", include=["crawler_tasks.tasks"])
    app.conf.update(
        broker_url=broker_url(settings) if settings.REDIS_URL or settings.BROKER_URL else "redis://127.0.0.1:6379/1",
        broker_connection_retry_on_startup=True,
        broker_transport_options={"visibility_timeout": max(600, int(settings.batch_timeout_s))},
        result_backend=None,
        task_ignore_result=True,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        worker_prefetch_multiplier=1,
        worker_send_task_events=settings.TASK_EVENTS,
        task_send_sent_event=False,
        task_default_queue=CONTROL_QUEUE,
        task_routes={
            "crawler.dedup": {"queue": DEDUP_QUEUE},
            "crawler.wake": {"queue": CONTROL_QUEUE},
            "crawler.maintenance": {"queue": CONTROL_QUEUE},
            "crawler.recrawl": {"queue": CONTROL_QUEUE},
        },
        worker_hijack_root_logger=False,
        timezone="UTC",
    )
    app.conf.beat_schedule = build_schedule(settings)
    return app


app = make_app()
