"""Celery Beat entries of the crawler; the only place that schedules periodic work.

The app (``crawler_tasks.celery``) installs them; the top-level ``beat_schedule.py``
shows the same schedule for the current settings.

- ``wake`` (every WAKE_INTERVAL_S, 0.25 s by default): lease hosts whose earliest
  contact time has passed and send fetch batches to the per-shard queues. Stale wakes
  expire instead of piling up behind a busy control worker. The first one is sent as
  soon as Beat starts, not one interval later: the crawl's first fetch waits for it.
  Only while the crawl runs (``WhileActive``): before its first seeds, paused or
  finished, Beat sends none (they filled Flower's task list four times a second) and
  looks at the crawl's state every IDLE_CHECK_S instead.
- ``maintenance`` (every MAINTENANCE_INTERVAL_S): expire dead leases, log stats,
  decide when the crawl is finished, checkpoint the frontier. Once the crawl has
  finished, only every IDLE_MAINTENANCE_S (its heartbeat, also before the first seeds,
  tells ``seed`` and ``stats`` that a control worker and beat are up).
- ``recrawl`` (continuous mode, every RECRAWL_CHECK_S): move URLs whose next visit
  is due back into the front queues.
"""
from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
from celery.schedules import schedstate, schedule

from crawler_tasks.queues import CONTROL_QUEUE
from crawler_tasks.runtime.control import NEW, Control, CrawlState
from crawler_tasks.settings import Settings, get_settings

log = logging.getLogger(__name__)

# An entry last run at this time is due when Beat starts (Celery's default is "now").
LONG_AGO = datetime(2000, 1, 1, tzinfo=UTC)
# How soon a wake follows a start, a resume or new seeds while Beat sends none.
IDLE_CHECK_S = 1.0
# Maintenance of a finished crawl (well within control.UNATTENDED_S).
IDLE_MAINTENANCE_S = 10.0


class WhileActive(schedule):
    """An interval due only while the crawl is in one of ``states`` (``NEW``: none
    started yet; one HGET per check); otherwise every ``idle_s``, or never when it is 0 (Beat then looks again
    every IDLE_CHECK_S, so a start or a resume is followed within that)."""

    def __init__(self, run_every: timedelta, relative: bool = False, nowfun: Any = None, app: Any = None,
                 states: tuple[str, ...] = (CrawlState.RUNNING,), idle_s: float = 0.0) -> None:
        super().__init__(run_every, relative, nowfun, app)
        self.states, self.idle_s = tuple(states), idle_s

    def __reduce__(self) -> Any:   # Beat's shelve pickles its entries
        return self.__class__, (self.run_every, self.relative, self.nowfun, None, self.states, self.idle_s)

    def is_due(self, last_run_at: datetime) -> schedstate:
        due = super().is_due(last_run_at)
        if not due.is_due:
            return due
        try:
            state = Control(get_settings()).raw_state() or NEW
        except redis.RedisError as exc:   # say it, and send as before: the task copes
            log.warning("periodic task sent without checking the crawl's state: %s", exc)
            return due
        if state in self.states:
            return due
        waited = (self.now() - self.maybe_make_aware(last_run_at)).total_seconds()
        if self.idle_s and waited >= self.idle_s:
            return schedstate(True, min(IDLE_CHECK_S, self.idle_s))
        return schedstate(False, IDLE_CHECK_S if not self.idle_s else min(IDLE_CHECK_S, self.idle_s - waited))


def build_schedule(settings: Settings) -> dict[str, dict[str, Any]]:
    schedule: dict[str, dict[str, Any]] = {
        "wake": {
            "task": "crawler.wake",
            "schedule": WhileActive(timedelta(seconds=settings.WAKE_INTERVAL_S)),
            "options": {"queue": CONTROL_QUEUE, "expires": max(1.0, 4 * settings.WAKE_INTERVAL_S)},
            "last_run_at": LONG_AGO,
        },
        "maintenance": {
            "task": "crawler.maintenance",
            "schedule": WhileActive(timedelta(seconds=settings.MAINTENANCE_INTERVAL_S),
                                    states=(NEW, CrawlState.RUNNING, CrawlState.PAUSED, CrawlState.STOPPING),
                                    idle_s=max(IDLE_MAINTENANCE_S, settings.MAINTENANCE_INTERVAL_S)),
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
