"""Redis clients: one place that builds them, sets timeouts and the retry policy.

Shard ``s`` lives on ``REDIS_SHARD_URLS[s % n]`` when that list is set (stable and
balanced: shards are already a hash of the host), else on ``REDIS_URL``; global keys (stats, control) always live on ``REDIS_URL``.
A URL ``redis+cluster://host:port`` (or ``rediss+cluster://``) means a Redis Cluster
reached through that node: every key of one Lua call or transaction shares a hash tag
(``{s3}``, ``{g}``, ``{f1}``, ``{n2}``), so each lands in one slot. The Celery broker
cannot be a cluster: set BROKER_URL to a plain Redis then.
Clients are cached per process (and rebuilt after a fork, since sockets must not
be shared between a Celery parent and its children).

Credentials and TLS come from the URL: ``redis://:PASSWORD@host:6379/0``,
``redis://USER:PASSWORD@host/0`` (ACL user), ``rediss://...?ssl_cert_reqs=required``
(TLS). A URL shown to a person goes through ``redact`` first.
"""
from __future__ import annotations

import os
import threading
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from crawler_tasks.exceptions import ConfigError
from crawler_tasks.settings import Settings

_lock = threading.Lock()
_clients: dict[str, redis.Redis] = {}
_pid = os.getpid()

CLUSTER_SCHEMES = ("redis+cluster://", "rediss+cluster://")


def is_cluster_url(url: str) -> bool:
    return url.startswith(CLUSTER_SCHEMES)


def _cluster(url: str, timeout_s: float, decode: bool) -> redis.Redis:
    """A Redis Cluster client (slot map from the given node, follows MOVED/ASK). Typed as
    ``redis.Redis``: the frontier uses only single-slot commands, scripts and pipelines,
    whose API the two share."""
    client = RedisCluster.from_url(url.replace("+cluster", "", 1), decode_responses=decode,
                                   socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
    return client  # type: ignore[return-value]


def is_cluster(client: object) -> bool:
    """redis-py's cluster pipelines cannot run scripts nor span slots: callers that batch
    scripts in a pipeline call them one by one on a cluster client instead."""
    return isinstance(client, RedisCluster)


def replies_of(replies: list[object], at: int, n: int) -> list[object]:
    """One participant's ``n`` replies among a shared pipeline's (run with
    ``raise_on_error=False``), from ``at``; an error reply among them raises."""
    mine = replies[at:at + n]
    for reply in mine:
        if isinstance(reply, Exception):
            raise reply
    return mine


def ping_once(url: str, timeout_s: float = 5.0) -> None:
    """One quick attempt, no retries: a wrong URL or password is said at once (RedisError)."""
    client: redis.Redis | RedisCluster
    if is_cluster_url(url):
        client = RedisCluster.from_url(url.replace("+cluster", "", 1), socket_timeout=timeout_s,
                                       socket_connect_timeout=timeout_s)
    else:
        client = redis.Redis.from_url(url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s,
                                      retry=Retry(NoBackoff(), 0))
    try:
        client.ping()
    finally:
        client.close()


MAX_CONNECTIONS = 64   # per client and process; a round trip takes a connection for ~0.2 ms


def make_client(url: str, timeout_s: float = 10.0) -> redis.Redis:
    """A client that retries transient connection errors (Redis restarts) with backoff."""
    if is_cluster_url(url):
        return _cluster(url, timeout_s, decode=True)
    retry = Retry(ExponentialBackoff(cap=2.0, base=0.05), retries=8)
    # a bounded pool that makes a thread wait for a free connection: a fetch process runs
    # hundreds of turns at once, and redis-py's default pool raises past 100 connections
    pool = redis.BlockingConnectionPool.from_url(
        url,
        max_connections=MAX_CONNECTIONS,
        timeout=timeout_s,
        decode_responses=True,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        health_check_interval=30,
        retry=retry,
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
    )
    return redis.Redis(connection_pool=pool, retry=retry, retry_on_error=[redis.ConnectionError, redis.TimeoutError])


def unblock_consumers(url: str) -> int:
    """End every blocking pop waiting on the server at ``url`` now, as if it timed out
    (CLIENT UNBLOCK). A worker in its warm shutdown closes its channel only once its
    pending BRPOP has answered: up to ``BROKER_POLL_S`` later without this; a worker
    that is not stopping just pops again. Returns how many were unblocked, or -1 when
    the server cannot be reached or refuses CLIENT."""
    try:  # a broker that is not a Redis (amqp://) has no such command
        client = redis.Redis.from_url(url, socket_connect_timeout=1.0, socket_timeout=1.0, retry=Retry(NoBackoff(), 0))
    except ValueError:
        return -1
    try:
        blocked = [c["id"] for c in client.client_list() if "b" in c.get("flags", "")]
        return sum(bool(client.client_unblock(int(i))) for i in blocked)
    except redis.RedisError:
        return -1
    finally:
        client.close()


def bytes_client(url: str, timeout_s: float) -> redis.Redis:
    """A client that returns bytes (snapshots: Bloom bitmaps and arbitrary values must
    not be decoded), with a long read timeout for big values."""
    if is_cluster_url(url):
        return _cluster(url, max(timeout_s, 30.0), decode=False)
    return redis.Redis.from_url(url, decode_responses=False, socket_timeout=max(timeout_s, 30.0),
                                socket_connect_timeout=timeout_s)


def _cached(url: str, timeout_s: float) -> redis.Redis:
    global _pid
    with _lock:
        if os.getpid() != _pid:
            _clients.clear()
            _pid = os.getpid()
        client = _clients.get(url)
        if client is None:
            client = _clients[url] = make_client(url, timeout_s)
        return client


def main_url(settings: Settings) -> str:
    if not settings.REDIS_URL:
        raise ConfigError("no Redis configured: set CRAWLER_REDIS_URL or use `manage.py crawl` (embedded Redis)")
    return settings.REDIS_URL


def global_client(settings: Settings) -> redis.Redis:
    """Client for the global keys (stats, control, fingerprints)."""
    return _cached(main_url(settings), settings.REDIS_TIMEOUT_S)


def shard_url(settings: Settings, shard: int) -> str:
    urls = settings.REDIS_SHARD_URLS
    if not urls:
        return main_url(settings)
    return urls[shard % len(urls)]


def shard_client(settings: Settings, shard: int) -> redis.Redis:
    """Client for one frontier shard's keys."""
    return _cached(shard_url(settings, shard), settings.REDIS_TIMEOUT_S)


def shard_placement(settings: Settings, shards: int | None = None) -> dict[str, list[int]] | None:
    """On a Redis Cluster frontier: each master's address -> the shards whose hash tag
    (``{s<n>}``) falls in its slots (masters holding none included); None otherwise."""
    if not is_cluster_url(main_url(settings)) or settings.REDIS_SHARD_URLS:
        return None
    from crawler_tasks.keys import ShardKeys

    client: RedisCluster = global_client(settings)  # type: ignore[assignment]
    out: dict[str, list[int]] = {node.name: [] for node in client.get_primaries()}
    for shard in range(settings.SHARDS if shards is None else shards):
        out.setdefault(client.get_node_from_key(ShardKeys(settings.KEY_PREFIX, shard).base).name, []).append(shard)
    return out


def lopsided(placement: dict[str, list[int]]) -> bool:
    """Some master holds two shards more than another (or two while another has none)."""
    counts = [len(shards) for shards in placement.values()]
    return bool(counts) and max(counts) - min(counts) > 1 or (max(counts, default=0) > 1 and min(counts) == 0)


def placement_warning(settings: Settings) -> str | None:
    """What to say when the shards sit unevenly on the cluster's masters, with the
    SHARDS values up to 4x that would spread evenly (hash tags are fixed per shard)."""
    placement = shard_placement(settings)
    if placement is None or not lopsided(placement):
        return None
    spread = ", ".join(str(len(v)) for v in placement.values())
    better = [n for n in range(settings.SHARDS + 1, 4 * settings.SHARDS + 1)
              if not lopsided(shard_placement(settings, n) or {})][:3]
    return (f"frontier shards sit unevenly on the cluster's {len(placement)} masters ({settings.SHARDS} shards: {spread} per master): "
            f"one master serves most hosts" + (f"; SHARDS={' or '.join(map(str, better))} spreads evenly on this "
                                               f"cluster (for the next crawl)" if better else ""))


def broker_url(settings: Settings) -> str:
    """The Celery broker: its own database so task messages never mix with frontier state
    (same server, credentials and TLS parameters as REDIS_URL)."""
    if settings.BROKER_URL:
        return settings.BROKER_URL
    base = main_url(settings)
    if is_cluster_url(base):
        raise ConfigError("the frontier is on a Redis Cluster: set CRAWLER_BROKER_URL to a plain Redis for Celery")
    parts = urlsplit(base)
    if parts.scheme == "unix":  # unix:///path/redis.sock?db=N
        query = dict(parse_qsl(parts.query))
        query["db"] = str(int(query.get("db", "0")) + 1) if query.get("db", "0").isdigit() else "1"
        return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query), parts.fragment))
    db = parts.path.strip("/")
    path = f"/{int(db) + 1}" if db.isdigit() else "/1"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, parts.fragment))


def redact(url: str) -> str:
    """The URL without its password (for messages and logs)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, f"{user}:***@{host}", parts.path, parts.query, parts.fragment))
