"""robots.txt fetching and caching, shared by all workers through Redis.

Policy (RFC 9309 section 2.3.1): fetched just before the first fetch of a host and
again once the cached copy is older than ROBOTS_TTL_S (at most 24 h);
2xx -> parse (first 500 KiB); 3xx -> followed up to 5 hops, the rules apply to the
original host; 4xx -> allow all; 429, 5xx, timeouts and network errors -> the site
is "unreachable": disallow all, the host's URLs wait (they are not dropped) and
robots.txt is asked again after ROBOTS_ERROR_TTL_S.

Parsed rules are also kept in a small per-process cache keyed by the Redis copy's
fetch time, so a worker parses a host's robots.txt once, not once per URL.

``RobotsCache.check`` is the one decision used by the fetch stage and by
``manage.py robots``: the shared copy lives wherever the ``RobotsStore`` keeps it (the
frontier's per-host hash in a crawl, a dict for the command line).
"""
from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol
from urllib.parse import urljoin, urlsplit

from crawler_tasks.fetch.http import Cancel, Fetcher, FetchResult
from crawler_tasks.records import ErrorKind
from crawler_tasks.robots.rules import MAX_ROBOTS_BYTES, RobotsRules, Verdict, parse_robots

MAX_ROBOTS_REDIRECTS = 5
LOCAL_CACHE_SIZE = 4096

ALLOW = "allow"            # 4xx: no restrictions
RULES = "rules"            # 2xx: parsed file
UNREACHABLE = "unreachable"  # 5xx / network: disallow all for now


class RobotsStore(Protocol):
    """Where the crawl's shared copy of each host's robots.txt lives."""

    def load_robots(self, host: str) -> dict[str, str]: ...

    def save_robots(self, host: str, fields: dict[str, str | float | int]) -> None: ...


class MemoryRobotsStore:
    """A store for one process (the command line, tests)."""

    def __init__(self) -> None:
        self.data: dict[str, dict[str, str]] = {}

    def load_robots(self, host: str) -> dict[str, str]:
        return self.data.get(host, {})

    def save_robots(self, host: str, fields: dict[str, str | float | int]) -> None:
        self.data[host] = {k: str(v) for k, v in fields.items()}


HopHook = Callable[[FetchResult], None]


class Check(StrEnum):
    """The answer for one URL."""

    ALLOWED = "allowed"
    DISALLOWED = "disallowed"
    FETCHED = "fetched"          # robots.txt was fetched just now: that was this turn's request
    UNREACHABLE = "unreachable"  # robots.txt failed (5xx, network): the host's URLs wait


@dataclass(slots=True)
class RobotsAnswer:
    check: Check
    entry: RobotsEntry
    exchange: FetchResult | None = None   # the robots.txt fetch, when there was one
    verdict: Verdict | None = None        # the matching rule, for ALLOWED / DISALLOWED


@dataclass(slots=True)
class RobotsEntry:
    kind: str              # ALLOW | RULES | UNREACHABLE
    rules: RobotsRules
    fetched_at: float
    expires: float
    status: int | None
    error: str | None = None
    error_kind: ErrorKind | None = None   # UNREACHABLE: why (TLS: the host's certificate fails every URL)


class RobotsCache:
    def __init__(self, ttl_s: float, error_ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self.error_ttl_s = error_ttl_s
        self._local: OrderedDict[str, RobotsEntry] = OrderedDict()

    def check(self, store: RobotsStore, fetcher: Fetcher, url: str, agent: str,
              *, explain: bool = False, before_hop: HopHook | None = None,
              cancel: Cancel | None = None, not_before: float = 0.0) -> RobotsAnswer:
        """May ``agent`` fetch ``url``? Fetches robots.txt first when the cached copy is
        missing or stale (the answer is then FETCHED, and the caller spends its turn on
        it); UNREACHABLE while the last attempt failed."""
        parts = urlsplit(url)
        host = parts.netloc
        entry = self.get(store, host)
        if entry is None:
            entry, res = self.fetch_and_store(fetcher, store, parts.scheme, host, before_hop, cancel, not_before)
            if not explain:
                return RobotsAnswer(Check.FETCHED if entry.kind != UNREACHABLE else Check.UNREACHABLE, entry, res)
        else:
            res = None
        if entry.kind == UNREACHABLE:
            return RobotsAnswer(Check.UNREACHABLE, entry, res)
        if explain:
            verdict = entry.rules.explain(url, agent)
            return RobotsAnswer(Check.ALLOWED if verdict.allowed else Check.DISALLOWED, entry, res, verdict)
        allowed = entry.rules.is_allowed(url, agent)
        return RobotsAnswer(Check.ALLOWED if allowed else Check.DISALLOWED, entry, res)

    def get(self, store: RobotsStore, host: str, now: float | None = None) -> RobotsEntry | None:
        """The cached entry, or None when robots.txt must be (re)fetched now."""
        now = time.time() if now is None else now
        entry = self._local.get(host)
        if entry is not None and entry.expires > now:
            self._local.move_to_end(host)
            return entry
        data = store.load_robots(host)
        if not data or float(data.get("expires", 0)) <= now:
            return None
        entry = self._from_fields(data)
        self._remember(host, entry)
        return entry

    def fetch_and_store(self, fetcher: Fetcher, store: RobotsStore, scheme: str, host: str,
                        before_hop: HopHook | None = None, cancel: Cancel | None = None,
                        not_before: float = 0.0) -> tuple[RobotsEntry, FetchResult]:
        """Fetch robots.txt for ``scheme://host`` (following redirects) and cache it.
        ``before_hop(previous)`` runs before each redirect hop: the fetch stage waits out
        the host's delay there and renews its lease, as for any request to the host. An
        exchange ``cancel`` ended is not an answer: nothing is cached (UNREACHABLE, due
        again at once)."""
        url = f"{scheme}://{host}/robots.txt"
        res = fetcher.fetch(url, max_body_bytes=MAX_ROBOTS_BYTES, cancel=cancel, not_before=not_before)
        for _ in range(MAX_ROBOTS_REDIRECTS):
            if not (res.status and 300 <= res.status < 400 and res.location):
                break
            target = urljoin(res.url, res.location.strip())
            if urlsplit(target).scheme not in ("http", "https"):
                break
            if before_hop is not None:
                before_hop(res)
            res = fetcher.fetch(target, max_body_bytes=MAX_ROBOTS_BYTES, cancel=cancel)
        if res.error_kind == ErrorKind.ABORTED:
            now = time.time()
            return RobotsEntry(UNREACHABLE, RobotsRules.disallow_all(), now, now, None, res.error), res
        entry = self._classify(res, time.time())
        # the host's next contact follows from the last hop (each hop was paced)
        fields: dict[str, str | float | int] = {
            "kind": entry.kind, "fetched_at": entry.fetched_at, "expires": entry.expires,
            "status": "" if entry.status is None else entry.status, "error": entry.error or "",
            "error_kind": entry.error_kind or ""}
        if entry.kind == RULES:
            fields["body"] = res.content[:MAX_ROBOTS_BYTES].decode("utf-8", "replace")
        store.save_robots(host, fields)
        self._remember(host, entry)
        return entry, res

    def _classify(self, res: FetchResult, now: float) -> RobotsEntry:
        status = res.status
        if status is not None and 200 <= status < 300:
            return RobotsEntry(RULES, parse_robots(res.content[:MAX_ROBOTS_BYTES]), now, now + self.ttl_s, status)
        if status is not None and 400 <= status < 500 and status != 429:
            return RobotsEntry(ALLOW, RobotsRules.allow_all(), now, now + self.ttl_s, status)
        if status is not None and 300 <= status < 400:
            # too many redirects: RFC 9309 says treat as unavailable (allow all)
            return RobotsEntry(ALLOW, RobotsRules.allow_all(), now, now + self.ttl_s, status,
                               "robots.txt redirect chain too long")
        error = res.error or f"robots.txt answered {status}"
        return RobotsEntry(UNREACHABLE, RobotsRules.disallow_all(), now, now + self.error_ttl_s, status, error,
                           res.error_kind)

    @staticmethod
    def _from_fields(data: dict[str, str]) -> RobotsEntry:
        kind = data.get("kind", UNREACHABLE)
        status = int(data["status"]) if data.get("status") else None
        if kind == RULES:
            rules = parse_robots(data.get("body", ""))
        elif kind == ALLOW:
            rules = RobotsRules.allow_all()
        else:
            rules = RobotsRules.disallow_all()
        try:
            error_kind: ErrorKind | None = ErrorKind(data.get("error_kind", ""))
        except ValueError:   # none, or a kind this version does not know
            error_kind = None
        return RobotsEntry(kind, rules, float(data.get("fetched_at", 0)), float(data.get("expires", 0)),
                           status, data.get("error") or None, error_kind)

    def _remember(self, host: str, entry: RobotsEntry) -> None:
        self._local[host] = entry
        self._local.move_to_end(host)
        while len(self._local) > LOCAL_CACHE_SIZE:
            self._local.popitem(last=False)
