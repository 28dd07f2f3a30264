"""kombu's Redis transport, with one crash contained.

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

from typing import Any

from kombu.transport import redis as kombu_redis
from redis.exceptions import ConnectionError as RedisConnectionError


class Channel(kombu_redis.Channel):
    def _connparams(self, asynchronous: bool = False) -> Any:
        if self.connection.client is None:
            raise RedisConnectionError("the broker connection is closed")
        return super()._connparams(asynchronous=asynchronous)


class Transport(kombu_redis.Transport):
    Channel = Channel
