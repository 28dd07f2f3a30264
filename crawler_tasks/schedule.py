"""Celery Beat entries of the crawler; the only place that schedules periodic work.

The app (``crawler_tasks.celery``) installs them; the top-level ``beat_schedule.py``
shows the same schedule for the current settings.

- ``wake`` (every WAKE_INTERVAL_S, 0.25 s by default): lease hosts whose earliest
  contact time has passed and send fetch batches to the per-shard queues. Stale wakes
  expire instead of piling up behind a busy control worker. The first one is sent as
  soon as Beat starts, not one interval later: the crawl's first fetch waits for it.
- ``maintenance`` (every MAINTENANCE_INTERVAL_S): expire dead leases, log stats,
  decide when the crawl is finished, checkpoint the frontier.
- ``recrawl`` (continuous mode, every RECRAWL_CHECK_S): move URLs whose next visit
  is due back into the front queues.
"""
from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from crawler_tasks.queues import CONTROL_QUEUE
from crawler_tasks.settings import Settings

# An entry last run at this time is due when Beat starts (Celery's default is "now").
LONG_AGO = datetime(2000, 1, 1, tzinfo=UTC)


def build_schedule(settings: Settings) -> dict[str, dict[str, Any]]:
    schedule = {
        "wake": {
            "task": "crawler.wake",
            "schedule": timedelta(seconds=settings.WAKE_INTERVAL_S),
            "options": {"queue": CONTROL_QUEUE, "expires": max(1.0, 4 * settings.WAKE_INTERVAL_S)},
            "last_run_at": LONG_AGO,
        },
        "maintenance": {
            "task": "crawler.maintenance",
            "schedule": timedelta(seconds=settings.MAINTENANCE_INTERVAL_S),
            "options": {"queue": CONTROL_QUEUE, "expires": max(2.0, 2 * settings.MAINTENANCE_INTERVAL_S)},
        },
    }
    if settings.CONTINUOUS:
        schedule["recrawl"] = {
            "task": "crawler.recrawl",
            "schedule": timedelta(seconds=settings.RECRAWL_CHECK_S),
            "options": {"queue": CONTROL_QUEUE, "expires": max(2.0, 2 * settings.RECRAWL_CHECK_S)},
        }
    return schedule
