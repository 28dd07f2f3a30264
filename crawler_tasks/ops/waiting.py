"""Why queued URLs are not being fetched: hosts on the ready heap whose next contact is
in the future, each with the reason read from its robots.txt cache entry and its
politeness state.

An operator whose crawl "finished" with URLs still queued, or whose seed host does not
resolve, needs to be told which hosts wait and why, while the crawl runs (the runner
reports each host whose robots.txt could not be fetched, once) and in the final
summary. Reading only: the stages write these fields (robots cache entry per host,
``HostState`` per host); ``classify`` is pure.
"""
from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from crawler_tasks.frontier import Frontier, HostInfo
from crawler_tasks.robots.cache import UNREACHABLE


class WaitReason(StrEnum):
    ROBOTS = "waiting for robots.txt"                   # robots.txt unreachable: disallow all for now
    PARKED = "parked after repeated failures"
    BACKOFF = "Retry-After or backoff after errors"
    DELAY = "politeness delay"                          # min delay, delay factor, Crawl-delay


@dataclass(frozen=True, slots=True)
class WaitingHost:
    host: str
    queued: int          # URLs in its back queue
    wait_s: float        # until its next contact
    reason: WaitReason
    detail: str          # the robots.txt error, the failure count...


def classify(robots: Mapping[str, str], state: Mapping[str, str], now: float) -> tuple[WaitReason, str]:
    """Why a host with queued URLs waits, from its robots entry and ``HostState`` fields."""
    if robots.get("kind") == UNREACHABLE:
        error = robots.get("error") or (f"answered {robots['status']}" if robots.get("status") else "failed")
        return WaitReason.ROBOTS, short_error(error)
    if _float(state.get("parked_until")) > now:
        return WaitReason.PARKED, f"{_int(state.get('consecutive_failures'))} failures in a row"
    failures = _int(state.get("consecutive_failures"))
    if failures:
        return WaitReason.BACKOFF, f"{failures} failure(s) in a row"
    delay = state.get("crawl_delay_s")
    return WaitReason.DELAY, f"Crawl-delay {float(delay):g} s" if delay else ""


def waiting_hosts(frontier: Frontier, *, now: float | None = None, min_te: float | None = None,
                  max_te: float | None = None, limit_per_shard: int = 1000) -> list[WaitingHost]:
    """Hosts on the ready heaps whose next contact is after ``now`` (or within
    [min_te, max_te]), earliest first, at most ``limit_per_shard`` per shard; two
    round trips per shard."""
    now = time.time() if now is None else now
    low = f"({now}" if min_te is None else str(min_te)
    high = "+inf" if max_te is None else str(max_te)
    out: list[WaitingHost] = []
    for shard in range(frontier.shards):
        k, client = frontier.keys(shard), frontier.client(shard)
        heap: list[tuple[str, float]] = client.zrangebyscore(  # type: ignore[assignment]
            k.ready, low, high, start=0, num=limit_per_shard, withscores=True)
        if not heap:
            continue
        pipe = client.pipeline(transaction=False)
        for host, _ in heap:
            pipe.hgetall(k.robots(host))
            pipe.hgetall(k.host_state(host))
            pipe.llen(k.queue(host))
        res: list[Any] = pipe.execute()
        for i, (host, te) in enumerate(heap):
            robots, state, queued = res[3 * i: 3 * i + 3]
            reason, detail = classify(robots, state, now)
            out.append(WaitingHost(host, int(queued), max(0.0, te - now), reason, detail))
    return out


def known(info: HostInfo) -> bool:
    """Whether the frontier holds anything of this host (a name without its port holds nothing)."""
    return bool(info.enqueued or info.queue or info.robots or info.politeness or info.active
                or info.next_contact is not None or info.leased_until is not None)


def matching_hosts(frontier: Frontier, name: str, limit: int = 20) -> list[str]:
    """Hosts of the crawl called ``name`` on any port (``manage.py hosts 127.0.0.2`` for
    ``127.0.0.2:8080``), from the per-host URL counts; at most ``limit``."""
    try:
        port = urlsplit("//" + name).port
    except ValueError:
        port = None
    base = name.rsplit(":", 1)[0] if port is not None else name
    pattern = "".join(f"\\{c}" if c in "*?[]\\" else c for c in base) + ":*"
    found: set[str] = set()
    for shard in range(frontier.shards):
        client, key = frontier.client(shard), frontier.keys(shard).host_counts
        if client.hexists(key, base):
            found.add(base)
        for host, _ in client.hscan_iter(key, match=pattern, count=1000):
            found.add(host)
            if len(found) >= limit:
                break
    return sorted(found)[:limit]


# Network errors as a person reads them (the HTTP library's text is long and nested).
_SHORT_ERRORS: tuple[tuple[str, str], ...] = (
    ("temporary DNS failure", "temporary DNS failure"), ("DNS lookup failed", "DNS lookup failed"),
    ("Name or service not known", "DNS lookup failed"), ("Connection refused", "connection refused"),
    ("timed out", "timed out"), ("Timeout", "timed out"), ("Connection reset", "connection reset"),
    ("CERTIFICATE_VERIFY_FAILED", "TLS certificate not trusted"), ("SSLError", "TLS error"),
)


def short_error(error: str, max_chars: int = 100) -> str:
    """``HTTPConnection(...): Failed to establish a new connection: [Errno 111] Connection
    refused`` -> ``connection refused``; unknown texts are cut at ``max_chars``."""
    for needle, short in _SHORT_ERRORS:
        if needle in error:
            return short
    return error if len(error) <= max_chars else error[: max_chars - 3] + "..."


def describe(host: WaitingHost) -> str:
    """``example.org: DNS lookup failed; next try in 300 s``."""
    detail = f"{host.detail}; " if host.detail else ""
    return f"{host.host}: {detail}next try in {host.wait_s:.0f} s"


def _float(raw: str | None) -> float:
    try:
        return float(raw) if raw else 0.0
    except ValueError:
        return 0.0


def _int(raw: str | None) -> int:
    try:
        return int(raw) if raw else 0
    except ValueError:
        return 0
