"""Celery Beat entries of the crawler; the only place that schedules periodic work.

The app (``crawler_tasks.celery``) installs them; the top-level ``beat_schedule.py``
shows the same schedule for the current settings.

- ``wake`` (every WAKE_INTERVAL_S, 0.25 s by default): lease hosts whose earliest
  contact time has passed and send fetch batches to the per-shard queues. Stale wakes
  expire instead of piling up behind a busy control worker. The first one is sent as
  soon as Beat starts, not one interval later: the crawl's first fetch waits for it.
  Only while the crawl runs (``WhileRunning``): before its first seeds, paused or
  finished, Beat sends none (they filled Flower's task list four times a second) and
  looks at the crawl's state every IDLE_CHECK_S instead.
- ``maintenance`` (every MAINTENANCE_INTERVAL_S): expire dead leases, log stats,
  decide when the crawl is finished, checkpoint the frontier.
- ``recrawl`` (continuous mode, every RECRAWL_CHECK_S): move URLs whose next visit
  is due back into the front queues.
"""
from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
from celery.schedules import schedstate, schedule

from crawler_tasks.ops.control import Control
from crawler_tasks.queues import CONTROL_QUEUE
from crawler_tasks.settings import Settings, get_settings

log = logging.getLogger(__name__)

# An entry last run at this time is due when Beat starts (Celery's default is "now").
LONG_AGO = datetime(2000, 1, 1, tzinfo=UTC)
# How soon a wake follows a start, a resume or new seeds while Beat sends none.
IDLE_CHECK_S = 1.0


class WhileRunning(schedule):
    """An interval that is due only while the crawl runs (one HGET per check)."""

    def is_due(self, last_run_at: datetime) -> schedstate:
        due = super().is_due(last_run_at)
        if not due.is_due:
            return due
        try:
            running = Control(get_settings()).wake_wanted()
        except redis.RedisError as exc:   # say it, and wake as before: its task retries
            log.warning("wake sent without checking the crawl's state: %s", exc)
            return due
        return due if running else schedstate(False, IDLE_CHECK_S)


def build_schedule(settings: Settings) -> dict[str, dict[str, Any]]:
    schedule = {
        "wake": {
            "task": "crawler.wake",
            "schedule": WhileRunning(timedelta(seconds=settings.WAKE_INTERVAL_S)),
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
