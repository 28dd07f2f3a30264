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

Hosts that share an address are judged per host as ever (the server names the
host of each request and connection); "one connection per address" is counted
too, by IP (both schemes' ports), but is a violation only when the caller asks:
per-address politeness is a crawler's option, not this project's rule.  A
misdirected request (421: its Host named no host of the address it reached) is
counted, and left out of the per-host checks; so is a connection that never named
its host.
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
# A host resting between two exchanges counts as in flight when the gap is at most
# this many times its delay: the crawler held it (or took it up again at once) rather
# than letting it go.
HELD_GAP_FACTOR = 2.0


@dataclass
class Politeness:
    """Violations found in one crawl's logs; all zero for a polite crawler."""

    hosts: int = 0
    requests: int = 0
    robots_late: int = 0  # hosts with a request that went out before robots.txt was answered
    overlapping: int = 0  # requests sent while an earlier one to the same host was being answered
    multi_conn_hosts: int = 0  # hosts with two TCP connections open at the same moment
    multi_conn_addresses: int = 0  # IP addresses with two TCP connections open at the same moment
    misdirected: int = 0  # requests whose Host named no host of the address they reached (421)
    short_gaps: int = 0  # answer end to next request below the host's delay
    short_gaps_after_robots: int = 0  # the same, right after robots.txt (its delay was not known yet)
    short_starts: int = 0  # request start to next request start below the host's delay (less tolerance)
    short_starts_after_robots: int = 0  # the same, right after robots.txt
    min_gap_ratio: float = float("inf")  # smallest (end to next start) / delay, robots.txt included
    examples: list[str] = field(default_factory=list)  # a few violations, for the eye
    per_address: bool = False  # multi_conn_addresses counts as a violation

    @property
    def violations(self) -> int:
        """Violations of this project's rules (robots first, one at a time, end-to-start gap;
        with ``per_address``, one connection per address too)."""
        return (self.robots_late + self.overlapping + self.multi_conn_hosts + self.short_gaps
                + (self.multi_conn_addresses if self.per_address else 0))


def check_politeness(requests: Iterable[RequestRecord], conns: Iterable[ConnRecord],
                     delays: Mapping[str, float], tolerance_s: float = 0.001,
                     start_tolerance_s: float = 0.05, max_examples: int = 5,
                     per_address: bool = False) -> Politeness:
    """Judge each host's requests against its delay (``delays``: host -> seconds; 0 if absent).

    ``tolerance_s`` absorbs the clock for the end-to-start gap: the server stamps an
    answer's end before its last write and a request's start when its bytes arrive,
    so a measured gap is, if anything, longer than the real one.  A start-to-start
    gap has no such luck: the earlier request may reach the server late (a new
    connection, a loaded machine) while the client's clock started at its send, so
    ``start_tolerance_s`` is wider.
    """
    report = Politeness(per_address=per_address)
    by_host: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in requests:
        if r.status == 421:
            report.misdirected += 1
        elif r.host:
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
                if a.path == ROBOTS:
                    report.short_starts_after_robots += 1
                else:
                    report.short_starts += 1
    by_host_conns: dict[str, list[ConnRecord]] = defaultdict(list)
    by_address: dict[str, list[ConnRecord]] = defaultdict(list)
    for c in conns:
        if c.host:
            by_host_conns[c.host].append(c)
        by_address[_ip(c)].append(c)
    for host, cs in by_host_conns.items():
        if (conn_id := _overlap(cs)) is not None:
            report.multi_conn_hosts += 1
            note(f"{host}: connection {conn_id} opened while another was open")
    for ip, cs in by_address.items():
        if (conn_id := _overlap(cs)) is not None:
            report.multi_conn_addresses += 1
            if per_address:
                note(f"{ip}: connection {conn_id} opened while another to the address was open")
    return report


def _ip(c: ConnRecord) -> str:
    """The IP address a connection reached (older logs name only the host's "ip:port")."""
    return (c.address or c.host).rsplit(":", 1)[0]


def _overlap(cs: list[ConnRecord]) -> int | None:
    """The id of the first connection opened while another of ``cs`` was open, if any."""
    last_close = 0.0
    for c in sorted(cs, key=lambda c: c.opened):
        if c.opened < last_close:
            return c.conn_id
        last_close = max(last_close, c.closed or float("inf"))
    return None


@dataclass(frozen=True)
class InFlight:
    """One sample of what the server was doing at time ``t``."""

    t: float
    exchanges: int  # requests read and not yet fully answered
    connections: int  # open TCP connections
    hosts_connected: int  # hosts with at least one open connection
    hosts_in_flight: int  # hosts in an exchange, or resting between two at most HELD_GAP_FACTOR x delay apart
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


def _held(requests: list[RequestRecord], delays: Mapping[str, float]) -> list[tuple[float, float]]:
    """Per host, its exchanges and the rests between two of them that are at most
    HELD_GAP_FACTOR x its delay, merged."""
    by_host: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in requests:
        by_host[r.host].append(r)
    spans: list[tuple[float, float]] = []
    for host, reqs in by_host.items():
        reqs.sort(key=lambda r: r.start)
        held = HELD_GAP_FACTOR * delays.get(host, 0.0)
        mine = [(r.start, r.end) for r in reqs]
        mine += [(a.end, b.start) for a, b in zip(reqs, reqs[1:], strict=False)
                 if a.end and 0 <= b.start - a.end <= held]
        spans += _merged(mine)
    return spans


def in_flight(requests: list[RequestRecord], conns: list[ConnRecord], step_s: float = 0.1,
              delays: Mapping[str, float] | None = None) -> list[InFlight]:
    """Samples every ``step_s`` from the first request to the last answer (``delays``:
    host -> its delay, for hosts in flight)."""
    if not requests:
        return []
    exchanges = _Coverage((r.start, r.end) for r in requests)
    connections = _Coverage((c.opened, c.closed) for c in conns)
    per_host_conns: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for c in conns:
        if c.host:
            per_host_conns[c.host].append((c.opened, c.closed))
    hosts_connected = _Coverage(span for spans in per_host_conns.values() for span in _merged(spans))
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    for r in requests:
        first[r.host] = min(first.get(r.host, r.start), r.start)
        last[r.host] = max(last.get(r.host, 0.0), r.end or r.start)
    hosts_active = _Coverage((first[h], last[h]) for h in first)
    hosts_held = _Coverage(_held(requests, delays or {}))
    t0 = min(first.values())
    t1 = max(last.values())
    n = int((t1 - t0) / step_s) + 1
    return [InFlight(t, exchanges.at(t), connections.at(t), hosts_connected.at(t), hosts_held.at(t),
                     hosts_active.at(t))
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
