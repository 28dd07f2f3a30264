"""The Celery app: ``celery -A crawler_tasks worker|beat|flower``.

Configuration comes from the crawler settings (``CRAWLER_*`` variables). JSON only,
no result backend (each stage sends the next one its input), one message prefetched per
worker process, late acks on the idempotent stage tasks, and the broker in its own
Redis database so task messages never mix with frontier state.
"""
from __future__ import annotations

from celery import Celery

from .connection import broker_url
from .settings import get_settings

FETCH_QUEUE = "crawl.fetch.{shard}"
PARSE_QUEUE = "crawl.parse.{node}"
DEDUP_QUEUE = "crawl.dedup"
CONTROL_QUEUE = "crawl.control"


def fetch_queue(shard: int) -> str:
    return FETCH_QUEUE.format(shard=shard)


def parse_queue(node: str) -> str:
    """Parse work stays on the node that fetched: it reads that node's spool files."""
    return PARSE_QUEUE.format(node=node)


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
    import beat_schedule

    app.conf.beat_schedule = beat_schedule.build(settings)
    return app


app = make_app()
