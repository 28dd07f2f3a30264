"""A polite, robust web crawler: Celery workers over a Redis Mercator frontier.

The Celery app is ``crawler_tasks.celery:app`` (``celery -A crawler_tasks worker``
finds it); the stage modules (frontier, fetcher, parser, dedup, storage, ...) do not
import Celery.
"""
__version__ = "0.1.0"
