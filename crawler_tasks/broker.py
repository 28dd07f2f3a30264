"""The Celery broker: kombu's Redis transport with one crash contained, and what a dead
crawl left in it settled at resume (``settle_leftovers``).

When the broker's Redis dies, Celery 5.6+ collects the lost connection (closing its
channel, then dropping the transport's ``client``) and closes it again; kombu 5.7's
second close restores the unacknowledged messages, builds its connection parameters
from that ``client``, and raises ``AttributeError: 'NoneType' object has no attribute
'hostname'``, which is no connection error, so the worker dies ("Unrecoverable
error") instead of reconnecting. Here that case is a connection error: the close is
given up, as any close of a dead connection is, and the worker reconnects. The
messages it held come back after the visibility timeout, or at once when
``manage.py crawl`` restarts its embedded Redis (``celery.requeue_unacked``).
"""
from __future__ import annotations

import base64
import json
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from kombu import Connection
from kombu.transport import redis as kombu_redis
from redis.exceptions import ConnectionError as RedisConnectionError


class Channel(kombu_redis.Channel):
    def _connparams(self, asynchronous: bool = False) -> Any:
        if self.connection.client is None:
            raise RedisConnectionError("the broker connection is closed")
        return super()._connparams(asynchronous=asynchronous)


class Transport(kombu_redis.Transport):
    Channel = Channel


@dataclass(slots=True)
class Leftovers:
    """What a dead crawl left in its broker, settled by ``settle_leftovers``."""

    requeued: int = 0      # stage messages its workers had taken and not finished: queued again
    dropped: int = 0       # fetch session messages: their leases were given back instead
    urls: dict[str, set[str]] = field(default_factory=dict)   # queue -> pages its messages carry on


def settle_leftovers(url: str, stage_queues: Collection[str], fetch_queues: Collection[str]) -> Leftovers:
    """At resume, with no worker running: parse and dedup messages taken by the dead
    workers go back to the head of their queues (their pages are fetched and become
    records when they run), fetch session messages are dropped (frontier/reclaim.py gave
    their hosts back), and the URLs of the pages the stage messages carry are returned,
    so the frontier does not fetch those pages again."""
    out = Leftovers()
    with Connection(url) as conn:
        channel = conn.default_channel
        client, qos = channel.client, channel.qos
        for tag in client.zrange(qos.unacked_index_key, 0, -1):
            raw = client.hget(qos.unacked_key, tag)
            try:
                queue = json.loads(raw)[2] if raw else None
            except (ValueError, TypeError, IndexError, KeyError):
                continue
            if queue in stage_queues:
                qos.restore_by_tag(tag, client, leftmost=True)
                out.requeued += 1
            elif queue in fetch_queues:
                client.hdel(qos.unacked_key, tag)
                client.zrem(qos.unacked_index_key, tag)
                out.dropped += 1
        for queue in fetch_queues:
            out.dropped += channel.queue_purge(queue) or 0
        for queue in stage_queues:
            urls = out.urls.setdefault(queue, set())
            for key in dict.fromkeys(channel._q_for_pri(queue, pri) for pri in channel.priority_steps):
                for raw in client.lrange(key, 0, -1):
                    urls.update(_page_urls(raw))
    return out


def _page_urls(raw: bytes | str) -> list[str]:
    """The ``url`` of each page or record a stage task message carries ([] if unreadable)."""
    try:
        message = json.loads(raw)
        body = message["body"]
        if message.get("properties", {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        args = json.loads(body)[0]
        return [item["url"] for item in args[0] if isinstance(item, dict) and isinstance(item.get("url"), str)]
    except (ValueError, TypeError, KeyError, IndexError):
        return []
