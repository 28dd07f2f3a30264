"""Per-host politeness arithmetic for the frontier.

Pure functions only: no I/O, no sleeping, no hidden clock. The frontier owns
the per-host earliest-next-contact time ``te``; this module only computes it
from the outcome of the last fetch, so every rule can be tested with plain
numbers and a seeded ``random.Random``.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime

__all__ = [
    "FetchOutcome",
    "HostState",
    "PolitenessPolicy",
    "REASONS",
    "crawl_delay_verdict",
    "next_contact",
    "parse_retry_after",
    "request_gap",
]

#: Every value ``next_contact`` can return as its reason, in tie-break order.
REASONS: tuple[str, ...] = (
    "min_delay",
    "factor",
    "crawl_delay",
    "retry_after",
    "backoff",
    "parked",
)

# Statuses whose Retry-After means "come back later" (RFC 9110 10.2.3, RFC 6585 4).
_RETRY_AFTER_STATUSES = frozenset({429, 503})

# RFC 9111 1.2.2: a delta-seconds too large to represent is taken as 2**31.
_DELTA_SECONDS_CAP = float(2**31)

# Beyond this the backoff doubling has long since passed any sane cap; stops
# ``2.0 ** n`` from overflowing on a host with an absurd failure count.
_MAX_BACKOFF_EXPONENT = 64


@dataclass(frozen=True, slots=True)
class PolitenessPolicy:
    """Tunables of the politeness rule; validated so a typo cannot disable it."""

    min_delay_s: float = 1.0
    delay_factor: float = 0.0
    max_factor_delay_s: float = 30.0
    honour_crawl_delay: bool = True
    max_crawl_delay_s: float = 60.0
    skip_host_over_max_crawl_delay: bool = False
    max_retry_after_s: float = 3600.0
    backoff_base_s: float = 5.0
    backoff_max_s: float = 600.0
    backoff_jitter: float = 0.25
    park_after_failures: int = 8
    park_s: float = 6 * 3600.0

    def __post_init__(self) -> None:
        for name in (
            "min_delay_s",
            "delay_factor",
            "max_factor_delay_s",
            "max_crawl_delay_s",
            "max_retry_after_s",
            "backoff_base_s",
            "backoff_max_s",
            "park_s",
        ):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise TypeError(f"PolitenessPolicy.{name} must be a number, got {value!r}")
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"PolitenessPolicy.{name} must be finite and >= 0, got {value!r}")
        if not 0.0 <= self.backoff_jitter < 1.0:
            raise ValueError(
                f"PolitenessPolicy.backoff_jitter must be in [0, 1), got {self.backoff_jitter!r}"
            )
        if isinstance(self.park_after_failures, bool) or not isinstance(
            self.park_after_failures, int
        ):
            raise TypeError("PolitenessPolicy.park_after_failures must be an int")
        if self.park_after_failures < 0:
            raise ValueError("PolitenessPolicy.park_after_failures must be >= 0 (0 = never park)")

    @property
    def max_wait_s(self) -> float:
        """Longest delay ``next_contact`` can ever add to ``end``; handy for sanity checks."""
        caps = [
            self.min_delay_s,
            self.max_factor_delay_s,
            self.max_retry_after_s,
            self.backoff_max_s,
        ]
        if self.honour_crawl_delay:
            caps.append(self.max_crawl_delay_s)
        if self.park_after_failures > 0:
            caps.append(self.park_s)
        return max(caps)


@dataclass(slots=True)
class HostState:
    """What the frontier keeps per host between fetches (one Redis hash)."""

    consecutive_failures: int = 0
    crawl_delay_s: float | None = None
    last_fetch_s: float = 0.0
    parked_until: float = 0.0
    # The host's name, as last looked up: kept with the host so that whichever process
    # leases it next looks it up once per TTL, not once per process (``fetch/dns.py``).
    address: str = ""            # its address ('' : none known)
    address_until: float = 0.0   # epoch s: ``address`` (or ``dns_error``) holds until then
    dns_error: str = ""          # the name is dead until ``address_until`` (NXDOMAIN, or gave up)
    dns_failures: int = 0        # lookups in a row that found no server answer (timeout, SERVFAIL)

    def to_fields(self) -> dict[str, str]:
        """Flat str->str mapping for HSET.

        ``crawl_delay_s=None`` is written as "" rather than omitted, so an HSET
        over an old hash clears a Crawl-delay the host has since dropped.
        Floats use ``repr`` so they round-trip exactly.
        """
        return {
            "consecutive_failures": str(int(self.consecutive_failures)),
            "crawl_delay_s": "" if self.crawl_delay_s is None else repr(float(self.crawl_delay_s)),
            "last_fetch_s": repr(float(self.last_fetch_s)),
            "parked_until": repr(float(self.parked_until)),
            "address": self.address,
            "address_until": repr(float(self.address_until)),
            "dns_error": self.dns_error,
            "dns_failures": str(int(self.dns_failures)),
        }

    @classmethod
    def from_fields(cls, data: Mapping[str, str] | Mapping[bytes, bytes]) -> HostState:
        """Inverse of ``to_fields``.

        Accepts bytes keys/values (redis-py without decode_responses), ignores
        unknown keys (the frontier may share the hash) and uses defaults for
        missing ones (a host seen for the first time). Corrupt values raise
        ValueError instead of silently resetting a host's backoff.
        """
        text: dict[str, str] = {}
        for key, value in data.items():
            k = key.decode("utf-8") if isinstance(key, bytes) else str(key)
            v = value.decode("utf-8") if isinstance(value, bytes) else str(value)
            text[k] = v.strip()

        state = cls()
        known = {f.name for f in fields(cls)}
        for name in known & text.keys():
            raw = text[name]
            if name in ("consecutive_failures", "dns_failures"):
                if not re.fullmatch(r"[0-9]+", raw, re.ASCII):
                    raise ValueError(
                        f"HostState field {name}={raw!r} is not a non-negative integer"
                    )
                setattr(state, name, int(raw))
            elif name in ("address", "dns_error"):
                setattr(state, name, raw)
            elif name == "crawl_delay_s":
                # robots.txt is untrusted input: "inf" is kept (next_contact caps
                # it), NaN means "no usable Crawl-delay", junk is still an error.
                state.crawl_delay_s = _crawl_delay_field(raw)
            else:
                setattr(state, name, _finite_field(name, raw))
        return state


@dataclass(frozen=True, slots=True)
class FetchOutcome:
    """What the fetcher reports back about one request to a host."""

    end: float
    duration_s: float
    status: int | None
    retry_after: str | None
    failed: bool


def _crawl_delay_field(raw: str) -> float | None:
    if raw == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"HostState field crawl_delay_s={raw!r} is not a number") from None
    return None if math.isnan(value) else value


def _finite_field(name: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"HostState field {name}={raw!r} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"HostState field {name}={raw!r} is not finite")
    return value


# --- Retry-After ------------------------------------------------------------

_MONTHS = {
    name: number
    for number, name in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
        start=1,
    )
}
_SHORT_DAYS = frozenset({"mon", "tue", "wed", "thu", "fri", "sat", "sun"})
_LONG_DAYS = frozenset(
    {"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"}
)
_TIME = r"(?P<H>\d{2}):(?P<M>\d{2}):(?P<S>\d{2})"
_FLAGS = re.ASCII | re.IGNORECASE
# IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT" (one-digit day tolerated).
_IMF_FIXDATE = re.compile(
    rf"(?P<wd>[a-z]{{3}}),[ ]+(?P<d>\d{{1,2}})[ ]+(?P<mon>[a-z]{{3}})[ ]+(?P<y>\d{{4}})"
    rf"[ ]+{_TIME}[ ]+GMT",
    _FLAGS,
)
# Obsolete RFC 850: "Sunday, 06-Nov-94 08:49:37 GMT" (a four-digit year tolerated).
_RFC850 = re.compile(
    rf"(?P<wd>[a-z]{{6,9}}),[ ]+(?P<d>\d{{1,2}})-(?P<mon>[a-z]{{3}})-(?P<y>\d{{2}}|\d{{4}})"
    rf"[ ]+{_TIME}[ ]+GMT",
    _FLAGS,
)
# ANSI C asctime(): "Sun Nov  6 08:49:37 1994".
_ASCTIME = re.compile(
    rf"(?P<wd>[a-z]{{3}})[ ]+(?P<mon>[a-z]{{3}})[ ]+(?P<d>\d{{1,2}})[ ]+{_TIME}[ ]+(?P<y>\d{{4}})",
    _FLAGS,
)


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds from ``now`` the server asked us to wait, or None if absent/invalid.

    Accepts delta-seconds and all three HTTP-date forms of RFC 9110 5.6.7. A
    date in the past means "now" (0.0). Negative or fractional numbers and
    anything else are invalid: a garbled header must not stall a host, so the
    caller falls back to its other rules. No cap here; the policy applies it.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    if re.fullmatch(r"[0-9]+", text, re.ASCII):
        digits = text.lstrip("0") or "0"
        # Length check first: int() refuses very long digit strings outright.
        if len(digits) > 10:
            return _DELTA_SECONDS_CAP
        return min(float(int(digits)), _DELTA_SECONDS_CAP)
    when = _parse_http_date(text, now)
    if when is None:
        return None
    return max(0.0, when - now)


def _parse_http_date(text: str, now: float) -> float | None:
    forms = ((_IMF_FIXDATE, _SHORT_DAYS), (_RFC850, _LONG_DAYS), (_ASCTIME, _SHORT_DAYS))
    for pattern, days in forms:
        match = pattern.fullmatch(text)
        if match is None:
            continue
        if match["wd"].lower() not in days:
            return None
        month = _MONTHS.get(match["mon"].lower())
        if month is None:
            return None
        year = int(match["y"])
        if len(match["y"]) == 2:
            year = _expand_two_digit_year(year, now)
        second = min(int(match["S"]), 59)  # a leap second 60 is read as 59
        try:
            moment = datetime(
                year, month, int(match["d"]), int(match["H"]), int(match["M"]), second,
                tzinfo=UTC,
            )
        except ValueError:  # 31 Feb, hour 25, ...
            return None
        return moment.timestamp()
    return None


def _expand_two_digit_year(yy: int, now: float) -> int:
    """RFC 9110 5.6.7: a two-digit year more than 50 years ahead is in the past century."""
    try:
        current = datetime.fromtimestamp(now, tz=UTC).year
    except (OverflowError, OSError, ValueError):
        current = 2000
    year = current - current % 100 + yy
    if year > current + 50:
        year -= 100
    return year


# --- Delay rules ------------------------------------------------------------


def crawl_delay_verdict(
    policy: PolitenessPolicy, crawl_delay: float | None
) -> tuple[float | None, bool]:
    """Decide what to do with a robots.txt Crawl-delay: (delay to use or None, skip_host).

    Called when robots.txt is (re)parsed, so a host whose Crawl-delay is above
    the cap can be dropped before its URLs are scheduled. Negative, NaN or
    absent values are ignored rather than trusted.
    """
    if not policy.honour_crawl_delay or crawl_delay is None:
        return None, False
    try:
        delay = float(crawl_delay)
    except (TypeError, ValueError):
        return None, False
    if math.isnan(delay) or delay < 0:
        return None, False
    if delay > policy.max_crawl_delay_s:
        if policy.skip_host_over_max_crawl_delay:
            return None, True
        return policy.max_crawl_delay_s, False
    return delay, False


def request_gap(policy: PolitenessPolicy, state: HostState) -> float:
    """The least time between two requests to a host: min_delay, or its capped
    Crawl-delay when larger (the factor term needs a fetch's duration)."""
    delay = state.crawl_delay_s
    if not policy.honour_crawl_delay or delay is None or not delay >= 0:
        return policy.min_delay_s
    return max(policy.min_delay_s, min(delay, policy.max_crawl_delay_s))


def _backoff(policy: PolitenessPolicy, failures: int, rng: random.Random | None) -> float:
    exponent = min(max(failures - 1, 0), _MAX_BACKOFF_EXPONENT)
    raw = min(policy.backoff_base_s * 2.0**exponent, policy.backoff_max_s)
    if policy.backoff_jitter > 0 and raw > 0:
        j = policy.backoff_jitter
        factor = (rng.uniform(1.0 - j, 1.0 + j) if rng is not None
                  else random.uniform(1.0 - j, 1.0 + j))
        raw *= factor
    # Clamp after jitter so backoff_max_s stays a hard ceiling.
    return min(raw, policy.backoff_max_s)


def next_contact(
    policy: PolitenessPolicy,
    state: HostState,
    outcome: FetchOutcome,
    rng: random.Random | None = None,
) -> tuple[float, HostState, str]:
    """Earliest next contact ``te`` for a host after a fetch, its new state, and why.

    ``te = end + max(terms)`` where the terms are min_delay, the capped factor
    x duration (Mercator), the capped Crawl-delay, the capped Retry-After on
    429/503, and the jittered exponential backoff on failures. The reason is
    the largest term (ties go to the earlier name in ``REASONS``). Once
    ``park_after_failures`` failures in a row are reached, the host is parked:
    ``te = end + max(park_s, other terms)``, reason "parked", and
    ``parked_until = te``; each further failure re-parks it, one success
    clears both counters. A Crawl-delay above the cap is applied at the cap
    here; skipping such hosts is ``crawl_delay_verdict``'s job. ``state`` is
    not modified.
    """
    if not math.isfinite(outcome.end):
        raise ValueError(f"FetchOutcome.end must be finite, got {outcome.end!r}")
    duration = outcome.duration_s
    if not math.isfinite(duration) or duration < 0:
        duration = 0.0

    failures = state.consecutive_failures + 1 if outcome.failed else 0

    terms: list[tuple[str, float]] = [
        ("min_delay", policy.min_delay_s),
        ("factor", min(policy.delay_factor * duration, policy.max_factor_delay_s)),
    ]
    if policy.honour_crawl_delay and state.crawl_delay_s is not None:
        delay = state.crawl_delay_s
        if math.isfinite(delay) and delay >= 0:
            terms.append(("crawl_delay", min(delay, policy.max_crawl_delay_s)))
        elif delay == math.inf:
            terms.append(("crawl_delay", policy.max_crawl_delay_s))
    if outcome.status in _RETRY_AFTER_STATUSES:
        retry_after = parse_retry_after(outcome.retry_after, outcome.end)
        if retry_after is not None:
            terms.append(("retry_after", min(retry_after, policy.max_retry_after_s)))
    if outcome.failed:
        terms.append(("backoff", _backoff(policy, failures, rng)))

    reason, wait = terms[0]
    for name, value in terms[1:]:
        if value > wait:
            reason, wait = name, value

    parked_until = 0.0
    if outcome.failed and 0 < policy.park_after_failures <= failures:
        wait = max(wait, policy.park_s)
        reason = "parked"
        parked_until = outcome.end + wait

    te = outcome.end + wait
    new_state = replace(state, consecutive_failures=failures, last_fetch_s=duration, parked_until=parked_until)
    return te, new_state, reason
