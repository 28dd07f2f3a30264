"""The crawl's Celery Beat schedule, for ``celery -A crawler_tasks beat``.

The app installs it itself (``crawler_tasks.schedule.build_schedule``), so Beat works
from any directory; this module shows the entries for the current ``CRAWLER_*``
settings: ``python beat_schedule.py``.
"""
from __future__ import annotations

from datetime import timedelta

from crawler_tasks.schedule import build_schedule
from crawler_tasks.settings import get_settings

beat_schedule = build_schedule(get_settings())

if __name__ == "__main__":
    for name, entry in beat_schedule.items():
        every = entry["schedule"]
        seconds = every.total_seconds() if isinstance(every, timedelta) else every.seconds
        print(f"{name:12} {entry['task']:22} every {seconds:g} s -> {entry['options']['queue']}")
