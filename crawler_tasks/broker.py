"""The Celery broker: kombu's Redis transport with one crash contained, what a dead
crawl left in it settled at resume (``settle_leftovers``), and what a dead worker held
while the crawl runs: a stale page group's message delivered again (``redeliver_held``),
a fetch session's it never started dropped (``drop_unstarted``).

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
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from kombu import Connection
from kombu.transport import redis as kombu_redis
from redis.exceptions import ConnectionError as RedisConnectionError

from crawler_tasks.settings import Settings

# How long an idle consumer's BRPOP blocks in Redis (kombu's ``polling_interval``; its
# default is 1 s). Closing the channel at shutdown reads that reply first, so this is a
# worker's exit delay; a message arriving ends the wait at once whatever the value.
BROKER_POLL_S = 0.2


def broker_options(settings: Settings) -> dict[str, Any]:
    """Every broker key (queues, unacked table, bindings, pub/sub channels) under the
    crawl's KEY_PREFIX, so two crawls share a broker and keep their tasks apart while
    the queue names (``-Q crawl.fetch.0``) stay the same for every crawl."""
    return {"visibility_timeout": max(600, int(settings.batch_timeout_s)), "polling_interval": BROKER_POLL_S,
            "global_keyprefix": f"{settings.KEY_PREFIX}/"}


class Channel(kombu_redis.Channel):
    _sync_client: Any = None   # (pool, client) of conn_or_acquire

    def _connparams(self, asynchronous: bool = False) -> Any:
        if self.connection.client is None:
            raise RedisConnectionError("the broker connection is closed")
        return super()._connparams(asynchronous=asynchronous)

    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        """kombu builds a redis-py client for every publish, ack and restore (66 us each:
        its callback table is copied), 5 % of a fetch worker's Python time. A client
        takes a connection from its pool per command, so threads share one, kept as
        long as the channel's pool (a reconnect makes a new pool, and a new client)."""
        if client is None:
            pool = self.pool
            cached = self._sync_client
            if cached is None or cached[0] is not pool:
                cached = self._sync_client = (pool, self._create_client())
            client = cached[1]
        yield client


class Transport(kombu_redis.Transport):
    Channel = Channel


# Given the page URLs of the stage messages taken by the dead workers and of those
# still queued (each by queue), which URLs each queue's taken messages already wrote.
Written = Callable[[dict[str, set[str]], dict[str, set[str]]], dict[str, set[str]]]


@dataclass(slots=True)
class Leftovers:
    """What a dead crawl left in its broker, settled by ``settle_leftovers``."""

    requeued: int = 0      # stage messages its workers had taken and not finished: queued again
    dropped: int = 0       # fetch session messages: their leases were given back instead
    trimmed: int = 0       # items of taken stage messages already written: left out when queued again
    done: dict[str, list[str]] = field(default_factory=dict)   # queue -> batch ids of taken messages
    #                        whose every item was written: dropped, not queued again
    urls: dict[str, set[str]] = field(default_factory=dict)   # queue -> pages its messages carry on
    batches: set[str] = field(default_factory=set)   # batch ids of the stage messages queued now


def settle_leftovers(url: str, stage_queues: Collection[str], fetch_queues: Collection[str],
                     written: Written | None = None, transport_options: dict[str, Any] | None = None) -> Leftovers:
    """At resume, with no worker running: parse and dedup messages taken by the dead
    workers go back to their queues (kombu's ``leftmost`` restore: behind the messages
    already queued; their pages are fetched and become records when they run), fetch
    session messages are dropped (frontier/reclaim.py gave their hosts back), and the
    URLs of the pages the stage messages carry are returned, so the frontier does not
    fetch those pages again.

    A worker can die after its task wrote its output and before it acknowledged the
    message: the items ``written`` names leave a taken message before it is queued
    again (a message left with none is dropped, its batch id in ``done``), so no task
    run again writes a record or feed line twice. ``transport_options``: the workers'
    (``broker_options``), whose key prefix names the queues and unacked table."""
    out = Leftovers()
    with Connection(url, transport_options=transport_options or {}) as conn:
        channel = conn.default_channel
        client, qos = channel.client, channel.qos
        taken: list[tuple[Any, Any, Any]] = []   # (tag, queue, unacked payload)
        for tag in client.zrange(qos.unacked_index_key, 0, -1):
            raw = client.hget(qos.unacked_key, tag)
            try:
                payload = json.loads(raw) if raw else None
                queue = payload[2] if payload else None
            except (ValueError, TypeError, IndexError, KeyError):
                continue
            if queue in stage_queues:
                taken.append((tag, queue, payload))
            elif queue in fetch_queues:
                client.hdel(qos.unacked_key, tag)
                client.zrem(qos.unacked_index_key, tag)
                out.dropped += 1
        for queue in fetch_queues:
            out.dropped += channel.queue_purge(queue) or 0
        done: dict[str, set[str]] = {}
        if written is not None and taken:
            taken_urls: dict[str, set[str]] = {}
            for _, queue, payload in taken:
                taken_urls.setdefault(queue, set()).update(_items_urls(_args(payload[0])))
            done = written(taken_urls, _queued_urls(channel, stage_queues))
        for tag, queue, payload in taken:
            args = _args(payload[0])
            items = args[0] if args else []
            keep = [item for item in items if _item_url(item) not in done.get(queue, ())]
            if args and len(keep) < len(items):
                out.trimmed += len(items) - len(keep)
                if not keep:
                    out.done.setdefault(queue, []).append(str(args[1]))
                    client.hdel(qos.unacked_key, tag)
                    client.zrem(qos.unacked_index_key, tag)
                    continue
                payload[0] = _with_args(payload[0], [keep, *args[1:]])
                client.hset(qos.unacked_key, tag, json.dumps(payload))
            qos.restore_by_tag(tag, client, leftmost=True)
            out.requeued += 1
        out.urls = _queued_urls(channel, stage_queues)
        out.batches = _queued_batches(channel, stage_queues)
    return out


def redeliver_held(url: str, stage_tasks: Collection[str], batch_ids: Collection[str], taken_before: float,
                   transport_options: dict[str, Any] | None = None) -> dict[str, bool]:
    """Page groups past their deadline whose stage message (a task of ``stage_tasks``, on
    any node's queue) a worker took and never acknowledged: batch id -> True when it was
    taken before ``taken_before`` (its worker died or hangs): it goes back to the head of
    its queue, to run again from where that run stopped (its outputs' markers keep each
    line once); False when taken since (the group waited in the queue): it stays with its
    worker. A batch absent is held by no worker."""
    out: dict[str, bool] = {}
    with Connection(url, transport_options=transport_options or {}) as conn:
        channel = conn.default_channel
        for tag, taken_at, batch_id in _taken(channel, stage_tasks, batch_ids):
            out[batch_id] = taken_at < taken_before
            if out[batch_id]:
                channel.qos.restore_by_tag(tag, channel.client, leftmost=True)
    return out


def drop_unstarted(url: str, task: str, ids: Collection[str], taken_before: float,
                   transport_options: dict[str, Any] | None = None) -> set[str]:
    """Messages of ``task`` naming one of ``ids`` (their second argument) that a worker
    took before ``taken_before`` and never started: its worker died in between. They are
    dropped (a fetch session's: its hosts are handed over instead). Returns their ids."""
    out: set[str] = set()
    with Connection(url, transport_options=transport_options or {}) as conn:
        channel = conn.default_channel
        for tag, taken_at, name in _taken(channel, (task,), ids):
            if taken_at < taken_before:
                channel.client.hdel(channel.qos.unacked_key, tag)
                channel.client.zrem(channel.qos.unacked_index_key, tag)
                out.add(name)
    return out


def _taken(channel: Any, tasks: Collection[str], ids: Collection[str]) -> Iterator[tuple[Any, float, str]]:
    """(delivery tag, time taken, id) of the unacknowledged messages of ``tasks`` whose
    second argument (a batch or session id) is one of ``ids``."""
    wanted = set(ids)
    if not wanted:
        return
    client, qos = channel.client, channel.qos
    for tag, taken_at in client.zrange(qos.unacked_index_key, 0, -1, withscores=True):
        raw = client.hget(qos.unacked_key, tag)
        try:
            message = json.loads(raw)[0] if raw else None
            task = message["headers"]["task"] if message else None
        except (ValueError, TypeError, IndexError, KeyError):
            continue
        args = _task_args(message) if task in tasks else []
        name = str(args[1]) if len(args) >= 2 else None
        if name in wanted:
            yield tag, taken_at, name


def _queued_batches(channel: Any, queues: Collection[str]) -> set[str]:
    """The batch ids of the stage messages in ``queues``."""
    out: set[str] = set()
    for queue in queues:
        for key in dict.fromkeys(channel._q_for_pri(queue, pri) for pri in channel.priority_steps):
            for raw in channel.client.lrange(channel.global_keyprefix + key, 0, -1):
                try:
                    args = _args(json.loads(raw))
                except (ValueError, TypeError):
                    continue
                if args:
                    out.add(str(args[1]))
    return out


def _queued_urls(channel: Any, queues: Collection[str]) -> dict[str, set[str]]:
    """queue -> the page URLs its queued stage messages carry."""
    out: dict[str, set[str]] = {}
    for queue in queues:
        urls = out.setdefault(queue, set())
        for key in dict.fromkeys(channel._q_for_pri(queue, pri) for pri in channel.priority_steps):
            # kombu's client prefixes the commands kombu sends; LRANGE is not one of them
            for raw in channel.client.lrange(channel.global_keyprefix + key, 0, -1):
                try:
                    urls.update(_items_urls(_args(json.loads(raw))))
                except (ValueError, TypeError):
                    continue
    return out


def _args(message: Any) -> list[Any]:
    """A stage task message's positional arguments (``[items, batch_id]``; [] if unreadable)."""
    args = _task_args(message)
    return args if len(args) >= 2 and isinstance(args[0], list) else []


def _task_args(message: Any) -> list[Any]:
    """A task message's positional arguments ([] if unreadable)."""
    try:
        body = message["body"]
        if message.get("properties", {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        args = json.loads(body)[0]
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        return []
    return args if isinstance(args, list) else []


def _with_args(message: dict[str, Any], args: list[Any]) -> dict[str, Any]:
    """``message`` with its positional arguments replaced (the body encoded as it was)."""
    body = json.loads(base64.b64decode(message["body"]) if message.get("properties", {}).get(
        "body_encoding") == "base64" else message["body"])
    body[0] = args
    encoded = json.dumps(body)
    if message.get("properties", {}).get("body_encoding") == "base64":
        encoded = base64.b64encode(encoded.encode()).decode()
    return {**message, "body": encoded}


def _item_url(item: Any) -> str | None:
    url = item.get("url") if isinstance(item, dict) else None
    return url if isinstance(url, str) else None


def _items_urls(args: list[Any]) -> list[str]:
    """The ``url`` of each page or record a stage task message carries."""
    return [url for url in map(_item_url, args[0] if args else []) if url is not None]
