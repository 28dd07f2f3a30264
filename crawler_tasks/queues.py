"""Celery queue names: one place, shared by the app, the tasks, Beat and the runner."""
from __future__ import annotations

FETCH_QUEUE = "crawl.fetch.{shard}"
PARSE_QUEUE = "crawl.parse.{node}"
DEDUP_QUEUE = "crawl.dedup"
CONTROL_QUEUE = "crawl.control"


def fetch_queue(shard: int) -> str:
    return FETCH_QUEUE.format(shard=shard)


def parse_queue(node: str) -> str:
    """Parse work stays on the node that fetched: it reads that node's spool files."""
    return PARSE_QUEUE.format(node=node)
