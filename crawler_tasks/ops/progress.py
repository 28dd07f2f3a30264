"""The crawl's live progress line and its ETA, for a terminal or a log.

In a terminal one line is redrawn in place (carriage return, erase line) every second
and messages are printed above it; elsewhere (a pipe, a CI log) a plain line is
printed every ``PLAIN_EVERY_S``. Plain text, no dependency: one line is all it takes.
"""
from __future__ import annotations

import shutil
from typing import TextIO

from crawler_tasks.runtime.maintenance import Progress

# Seconds between two progress lines when the output is not a terminal.
PLAIN_EVERY_S = 10.0
_ERASE = "\r\x1b[2K"


def eta_s(pages: int, rate: float, elapsed_s: float, max_pages: int, max_seconds: float) -> float | None:
    """Seconds until the first limit is reached, None for an unbounded crawl (or one
    that has not fetched anything yet and has no time limit)."""
    left: list[float] = []
    if max_pages:
        if pages >= max_pages:
            left.append(0.0)
        elif rate > 0:
            left.append((max_pages - pages) / rate)
    if max_seconds:
        left.append(max(0.0, max_seconds - elapsed_s))
    return min(left) if left else None


def clock(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def progress_line(p: Progress, elapsed_s: float, rate: float, eta: float | None, unreachable: int = 0,
                  bounded: bool = False) -> str:
    """``bounded``: the crawl has a limit, so an unknown ETA is shown as ``ETA ?``. Hosts
    leased (held by a session, maybe waiting out a delay, or by a dead one until its
    lease expires) are apart from exchanges in flight, shown when there are any;
    robots.txt exclusions apart from errors: they are the crawl obeying."""
    active = sum(s.get("active_hosts", 0) for s in p.shards)
    parts = [f"{p.state}", clock(elapsed_s), f"pages {p.pages}", f"{rate:.1f}/s", f"queued {p.queued}",
             f"hosts active {active} leased {p.leased}" + (f" fetching {p.fetching}" if p.fetching else ""),
             f"errors {p.errors}"]
    if p.robots_excluded:
        parts.append(f"robots-excluded {p.robots_excluded}")
    if p.dns_lookups:
        parts.append(f"dns {p.dns_lookups}" + (f" ({p.dns_failed} failed)" if p.dns_failed else ""))
    if unreachable:
        parts.append(f"unreachable {unreachable}")
    if eta is not None:
        parts.append(f"ETA {clock(eta)}")
    elif bounded:
        parts.append("ETA ?")
    return "  ".join(parts)


class StatusLine:
    """One line kept at the bottom of a terminal; ``say`` prints above it."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.tty = out.isatty()
        self.shown = ""
        self.last_plain = float("-inf")

    def update(self, line: str, now: float) -> None:
        if self.tty:
            width = shutil.get_terminal_size((120, 24)).columns
            self.shown = line[: max(20, width - 1)]
            self.out.write(_ERASE + self.shown)
            self.out.flush()
        elif now - self.last_plain >= PLAIN_EVERY_S:
            self.last_plain = now
            print(line, file=self.out, flush=True)

    def say(self, message: str) -> None:
        if self.shown:
            self.out.write(_ERASE)
        print(message, file=self.out, flush=True)
        if self.shown:
            self.out.write(self.shown)
            self.out.flush()

    def close(self) -> None:
        """Leave the last line on screen and move below it."""
        if self.shown:
            print(file=self.out, flush=True)
            self.shown = ""
