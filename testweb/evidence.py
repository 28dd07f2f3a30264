"""What the server saw: politeness checks and in-flight counts from its logs.

Why at the server: a crawler's own account of its politeness is what is under
test.  The request log (when each request was read, when its answer's last write
went out, on which connection) and the connection log (accept and close times)
are the evidence; both crawlers of a benchmark are judged by the same code.

Two gaps are checked, because crawlers mean different things by a delay: the
gap from the end of one answer to the next request (this project's rule: the
host rests for the whole delay) and the gap from one request to the next
(Scrapy's DOWNLOAD_DELAY: time between request starts, so a slow answer eats
into the rest).
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from testweb.responses import ConnRecord, RequestRecord

ROBOTS = "/robots.txt"


@dataclass
class Politeness:
    """Violations found in one crawl's logs; all zero for a polite crawler."""

    hosts: int = 0
    requests: int = 0
    robots_late: int = 0  # hosts with a request that went out before robots.txt was answered
    overlapping: int = 0  # requests sent while an earlier one to the same host was being answered
    multi_conn_hosts: int = 0  # hosts with two TCP connections open at the same moment
    short_gaps: int = 0  # answer end to next request below the host's delay
    short_gaps_after_robots: int = 0  # the same, right after robots.txt (its delay was not known yet)
    short_starts: int = 0  # request start to next request start below the host's delay (less tolerance)
    min_gap_ratio: float = float("inf")  # smallest (end to next start) / delay, robots.txt included
    examples: list[str] = field(default_factory=list)  # a few violations, for the eye

    @property
    def violations(self) -> int:
        """Violations of this project's rules (robots first, one at a time, end-to-start gap)."""
        return self.robots_late + self.overlapping + self.multi_conn_hosts + self.short_gaps


def check_politeness(requests: Iterable[RequestRecord], conns: Iterable[ConnRecord],
                     delays: Mapping[str, float], tolerance_s: float = 0.001,
                     start_tolerance_s: float = 0.05, max_examples: int = 5) -> Politeness:
    """Judge each host's requests against its delay (``delays``: host -> seconds; 0 if absent).

    ``tolerance_s`` absorbs the clock for the end-to-start gap: the server stamps an
    answer's end before its last write and a request's start when its bytes arrive,
    so a measured gap is, if anything, longer than the real one.  A start-to-start
    gap has no such luck: the earlier request may reach the server late (a new
    connection, a loaded machine) while the client's clock started at its send, so
    ``start_tolerance_s`` is wider.
    """
    report = Politeness()
    by_host: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in requests:
        by_host[r.host].append(r)
    report.hosts = len(by_host)

    def note(text: str) -> None:
        if len(report.examples) < max_examples:
            report.examples.append(text)

    for host, reqs in by_host.items():
        reqs.sort(key=lambda r: r.start)
        report.requests += len(reqs)
        delay = delays.get(host, 0.0)
        robots_done = next((r.end for r in reqs if r.path == ROBOTS and r.end), None)
        late = [r for r in reqs if r.path != ROBOTS and (robots_done is None or r.start < robots_done)]
        if late:
            report.robots_late += 1
            note(f"{host}: {late[0].path} before robots.txt was answered")
        for a, b in zip(reqs, reqs[1:], strict=False):
            end = a.end or float("inf")
            if b.start < end:
                report.overlapping += 1
                note(f"{host}: {b.path} sent while {a.path} was being answered")
                continue
            gap = b.start - end
            if delay > 0:
                report.min_gap_ratio = min(report.min_gap_ratio, gap / delay)
            if gap < delay - tolerance_s:
                if a.path == ROBOTS:
                    report.short_gaps_after_robots += 1
                else:
                    report.short_gaps += 1
                    note(f"{host}: {gap:.3f} s from the end of {a.path} to {b.path}, delay {delay:g} s")
            if b.start - a.start < delay - start_tolerance_s:
                report.short_starts += 1
    by_host_conns: dict[str, list[ConnRecord]] = defaultdict(list)
    for c in conns:
        by_host_conns[c.host].append(c)
    for host, cs in by_host_conns.items():
        cs.sort(key=lambda c: c.opened)
        last_close = 0.0
        for c in cs:
            if c.opened < last_close:
                report.multi_conn_hosts += 1
                note(f"{host}: connection {c.conn_id} opened while another was open")
                break
            last_close = max(last_close, c.closed or float("inf"))
    return report


@dataclass(frozen=True)
class InFlight:
    """One sample of what the server was doing at time ``t``."""

    t: float
    exchanges: int  # requests read and not yet fully answered
    connections: int  # open TCP connections
    hosts_connected: int  # hosts with at least one open connection
    hosts_active: int  # hosts between their first request and their last answer


class _Coverage:
    """How many of a set of intervals cover an instant (ends exclusive; open ends never end)."""

    def __init__(self, spans: Iterable[tuple[float, float]]) -> None:
        pairs = list(spans)
        self.starts = sorted(s for s, _ in pairs)
        self.ends = sorted(e if e else float("inf") for _, e in pairs)

    def at(self, t: float) -> int:
        return bisect_right(self.starts, t) - bisect_right(self.ends, t)


def _merged(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for s, e in sorted((s, e or float("inf")) for s, e in spans):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def in_flight(requests: list[RequestRecord], conns: list[ConnRecord], step_s: float = 0.1) -> list[InFlight]:
    """Samples every ``step_s`` from the first request to the last answer."""
    if not requests:
        return []
    exchanges = _Coverage((r.start, r.end) for r in requests)
    connections = _Coverage((c.opened, c.closed) for c in conns)
    per_host_conns: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for c in conns:
        per_host_conns[c.host].append((c.opened, c.closed))
    hosts_connected = _Coverage(span for spans in per_host_conns.values() for span in _merged(spans))
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    for r in requests:
        first[r.host] = min(first.get(r.host, r.start), r.start)
        last[r.host] = max(last.get(r.host, 0.0), r.end or r.start)
    hosts_active = _Coverage((first[h], last[h]) for h in first)
    t0 = min(first.values())
    t1 = max(last.values())
    n = int((t1 - t0) / step_s) + 1
    return [InFlight(t, exchanges.at(t), connections.at(t), hosts_connected.at(t), hosts_active.at(t))
            for t in (t0 + i * step_s for i in range(n))]


# -- the log file `python -m testweb --log FILE` writes at exit --------------------------

def write_log(path: Path, requests: Iterable[RequestRecord], conns: Iterable[ConnRecord]) -> None:
    """One JSON line per request (headers left out) and per connection."""
    with open(path, "w") as f:
        for r in requests:
            rec = asdict(r)
            del rec["headers"]
            f.write(json.dumps({"kind": "request", **rec}) + "\n")
        for c in conns:
            f.write(json.dumps({"kind": "conn", **asdict(c)}) + "\n")


def read_log(path: Path) -> tuple[list[RequestRecord], list[ConnRecord]]:
    requests: list[RequestRecord] = []
    conns: list[ConnRecord] = []
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            kind = rec.pop("kind")
            if kind == "request":
                requests.append(RequestRecord(headers={}, **rec))
            else:
                conns.append(ConnRecord(**rec))
    return requests, conns
