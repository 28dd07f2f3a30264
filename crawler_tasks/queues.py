"""Celery queue names: one place, shared by the app, the tasks, Beat and the runner."""
from __future__ import annotations

FETCH_QUEUE = "crawl.fetch.{shard}"
PARSE_QUEUE = "crawl.parse.{node}"
ENQUEUE_QUEUE = "crawl.enqueue"
# The enqueue task was ``crawler.dedup`` on ``crawl.dedup`` up to 0.1: for one release the
# workers still take that queue and that name, so the messages a crawl stopped (or a worker
# not yet upgraded) left there are run, not lost. Remove both in the release after.
OLD_ENQUEUE_QUEUE = "crawl.dedup"
ENQUEUE_QUEUES = (ENQUEUE_QUEUE, OLD_ENQUEUE_QUEUE)
CONTROL_QUEUE = "crawl.control"
# The task that runs a fetch session, and those that carry a page group between fetch and
# the frontier (their messages name the session or group second).
FETCH_TASK = "crawler.fetch"
PARSE_TASK = "crawler.parse"
ENQUEUE_TASK = "crawler.enqueue"
STAGE_TASKS = (PARSE_TASK, ENQUEUE_TASK, "crawler.dedup")


def fetch_queue(shard: int) -> str:
    return FETCH_QUEUE.format(shard=shard)


def parse_queue(node: str) -> str:
    """Parse work stays on the node that fetched: it reads that node's spool files."""
    return PARSE_QUEUE.format(node=node)
