"""The real web's shape on loopback: slow first bytes and a polite delay per host.

Why: on loopback every answer is instant, so a crawler that holds one thread per
waiting host looks fast there and slow on the web, where throughput comes from how
many hosts it keeps in flight.  Answer times are lognormal (a median of hundreds of
milliseconds, a long tail), like real time to first byte; each host asks for its own
Crawl-delay.  Both are functions of the seed and the URL (not of the request order),
so two crawlers that fetch the same URLs meet the same latencies and delays.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from statistics import NormalDist

_NORMAL = NormalDist()


def _unit(seed: int, *key: object) -> float:
    """A uniform number in (0, 1) from the key: stable across runs and processes."""
    digest = hashlib.blake2b(repr((seed, *key)).encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "big") + 0.5) / 2.0**64


@dataclass(frozen=True)
class Latency:
    """Lognormal time to first byte: ``median_s`` x exp(``sigma`` x N(0,1)), capped at ``max_s``.

    With median 0.4 s and sigma 0.9 the 95th percentile is about 1.7 s.
    """

    median_s: float
    sigma: float
    max_s: float = 30.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.median_s < 0 or self.sigma < 0 or self.max_s < 0:
            raise ValueError("latency median, sigma and cap must be >= 0")

    def __call__(self, host_index: int, target: str) -> float:
        if self.median_s == 0:
            return 0.0
        z = _NORMAL.inv_cdf(_unit(self.seed, "latency", host_index, target))
        return min(self.max_s, self.median_s * math.exp(self.sigma * z))

    def quantile(self, q: float) -> float:
        """The q-quantile of the (uncapped) distribution, for reports."""
        return self.median_s * math.exp(self.sigma * _NORMAL.inv_cdf(q))


def host_delays(n_hosts: int, low_s: float, high_s: float, seed: int = 0) -> list[float]:
    """A Crawl-delay per host, uniform in [low_s, high_s] and rounded to 0.1 s (robots.txt
    writes it as a decimal; Scrapy and we then read the same number)."""
    if not 0 <= low_s <= high_s:
        raise ValueError("host delays need 0 <= low <= high")
    return [round(low_s + (high_s - low_s) * _unit(seed, "delay", h), 1) for h in range(n_hosts)]


def robots_with_delay(base: str, delay_s: float) -> str:
    """``base`` robots.txt with a Crawl-delay line in each group (none when delay_s is 0)."""
    if delay_s <= 0:
        return base
    lines: list[str] = []
    in_agents = False  # after a group's user-agent lines, before its first rule
    for line in [*base.splitlines(), ""]:
        is_agent = line.lower().startswith("user-agent:")
        if in_agents and not is_agent:
            lines.append(f"Crawl-delay: {delay_s:g}")
        in_agents = is_agent
        lines.append(line)
    return "\n".join(lines)
