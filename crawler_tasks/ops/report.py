"""``manage.py report``: one self-contained HTML page that shows a crawl.

Inputs: ``OUT/pages.jsonl`` (always) and, when reachable, the crawl's Redis: the
counters, the progress time series that maintenance samples (``maintenance.record_sample``)
and the settings the control worker ran with. Without Redis the page is drawn from
pages.jsonl alone (pages/s from the fetch times; no frontier-size plot, no counters).

The output opens without a network: plots are inline SVG drawn here, no script, no
font or style sheet from elsewhere.

Politeness waiting is derived, not counted: for each host, the time between the start
of one fetch and the start of the next, minus the first fetch's duration, summed. It
is an upper bound of the politeness delay (it also holds dispatch latency and the time
a host had nothing queued), which is what an operator wants to see: where the crawl's
time went per host.
"""
from __future__ import annotations

import html
import json
import math
import os
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from crawler_tasks.frontier.recrawl import recrawl_lines
from crawler_tasks.output.jsonl import PAGES_FILE
from crawler_tasks.runtime.control import Control
from crawler_tasks.runtime.maintenance import read_samples
from crawler_tasks.settings import Settings

REPORT_FILE = "report.html"
TOP_HOSTS = 15
TOP_CLUSTERS = 20
PLOT_W, PLOT_H = 640, 220
BAR_W = 640

# --------------------------------------------------------------------------- reading the inputs


def read_jsonl(path: str | os.PathLike[str]) -> tuple[list[dict[str, Any]], int]:
    """(records, lines that were not JSON objects): a torn last line is not fatal."""
    records, bad = [], 0
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except ValueError:
                    bad += 1
                    continue
                if isinstance(rec, dict) and isinstance(rec.get("url"), str):
                    records.append(rec)
                else:
                    bad += 1
    except FileNotFoundError:
        pass
    return records, bad


def epoch(stamp: Any) -> float | None:
    """Epoch seconds of a record's ``fetched_at`` (ISO 8601, ``Z`` suffix), or None."""
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def host_of(url: str) -> str:
    try:
        return urlsplit(url).netloc.lower()
    except ValueError:
        return ""


# --------------------------------------------------------------------------- what the page shows


@dataclass(slots=True)
class HostRow:
    host: str
    pages: int = 0
    bytes: int = 0
    fetch_s: float = 0.0
    wait_s: float = 0.0


@dataclass(slots=True)
class Summary:
    """Everything derived from pages.jsonl."""

    records: int = 0
    bad_lines: int = 0
    first_t: float | None = None
    last_t: float | None = None
    status_mix: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    hosts: dict[str, HostRow] = field(default_factory=dict)
    clusters: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # first URL -> [(url, kind)]
    host_dups: dict[str, tuple[int, int]] = field(default_factory=dict)     # host -> (pages, duplicates)
    fetch_times: list[float] = field(default_factory=list)


def summarize(records: Iterable[dict[str, Any]], bad_lines: int = 0) -> Summary:
    s = Summary(bad_lines=bad_lines)
    by_host: dict[str, list[tuple[float, float]]] = defaultdict(list)
    dups: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for rec in records:
        s.records += 1
        url = rec["url"]
        status, kind = rec.get("status"), rec.get("error_kind")
        s.status_mix[str(status) if status is not None else f"error: {kind or 'unknown'}"] += 1
        if kind:
            s.errors[str(kind)] += 1
        host = host_of(url)
        row = s.hosts.get(host) or s.hosts.setdefault(host, HostRow(host))
        t = epoch(rec.get("fetched_at"))
        fetch_s = float(rec.get("fetch_ms") or 0.0) / 1000.0
        if status is not None or kind in ("timeout", "connect", "protocol", "tls", "headers_too_large"):
            row.pages += 1
            row.bytes += int(rec.get("bytes") or 0)
            row.fetch_s += fetch_s
            if t is not None:
                by_host[host].append((t, fetch_s))
                s.fetch_times.append(t)
        for field_name, label in (("duplicate_of", "exact"), ("near_duplicate_of", "near")):
            first = rec.get(field_name)
            if isinstance(first, str) and first:
                s.clusters.setdefault(first, []).append((url, label))
        if status == 200 and rec.get("fingerprint") and rec.get("kind", "page") == "page":
            n = dups[host]
            n[0] += 1
            n[1] += bool(rec.get("duplicate_of") or rec.get("near_duplicate_of"))
    for host, fetches in by_host.items():
        fetches.sort()
        s.hosts[host].wait_s = sum(max(0.0, b[0] - a[0] - a[1]) for a, b in pairwise(fetches))
    s.host_dups = {h: (n[0], n[1]) for h, n in dups.items()}
    if s.fetch_times:
        s.fetch_times.sort()
        s.first_t, s.last_t = s.fetch_times[0], s.fetch_times[-1]
    return s


def trap_hosts(summary: Summary, min_pages: int, ratio: float) -> list[tuple[str, int, int]]:
    """Hosts that keep serving duplicate content (the rule of dedup/content.trap_hosts)."""
    out = [(h, p, d) for h, (p, d) in summary.host_dups.items() if p >= min_pages and d >= ratio * p]
    return sorted(out, key=lambda x: -x[2])


def rate_series(samples: Sequence[dict[str, Any]]) -> list[tuple[float, float]]:
    """pages/s between consecutive samples, at the later sample's time (s since the first)."""
    out = []
    for a, b in pairwise(samples):
        dt = float(b["t"]) - float(a["t"])
        if dt > 0:
            out.append((float(b["t"]) - float(samples[0]["t"]), (int(b.get("pages", 0)) - int(a.get("pages", 0))) / dt))
    return out


def rate_from_fetches(times: Sequence[float], max_bins: int = 60, min_bin_s: float = 2.0) -> list[tuple[float, float]]:
    """pages/s in equal time bins (at least ``min_bin_s`` wide, so a polite crawl's rate
    is not drawn as spikes) over sorted fetch start times, when there are no samples."""
    if len(times) < 2:
        return []
    t0, span = times[0], max(times[-1] - times[0], 1e-3)
    bins = max(1, min(max_bins, int(span / min_bin_s)))
    width = span / bins
    counts = [0] * bins
    for t in times:
        counts[min(bins - 1, int((t - t0) / width))] += 1
    return [((i + 0.5) * width, c / width) for i, c in enumerate(counts)]


def cumulative(times: Sequence[float], points: int = 200) -> list[tuple[float, float]]:
    """Pages fetched so far over sorted fetch times (s since the first), thinned."""
    if not times:
        return []
    step = max(1, len(times) // points)
    out = [(t - times[0], float(i + 1)) for i, t in enumerate(times) if i % step == 0]
    return out + [(times[-1] - times[0], float(len(times)))]


def series(samples: Sequence[dict[str, Any]], name: str) -> list[tuple[float, float]]:
    if not samples:
        return []
    t0 = float(samples[0]["t"])
    return [(float(x["t"]) - t0, float(x.get(name, 0) or 0)) for x in samples]


# --------------------------------------------------------------------------- SVG


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _ticks(lo: float, hi: float, n: int = 4) -> list[float]:
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step) + 1)]


def _fmt(v: float) -> str:
    if abs(v) >= 1e6:
        return f"{v / 1e6:.1f}M"
    if abs(v) >= 1e4:
        return f"{v / 1e3:.0f}k"
    return f"{v:.0f}" if abs(v) >= 10 or v == int(v) else f"{v:.2g}"


def line_chart(lines: Sequence[tuple[str, str, Sequence[tuple[float, float]]]], title: str,
               x_label: str = "seconds since start") -> str:
    """An SVG line chart; ``lines`` are (name, colour, points). Empty data says so."""
    pts = [p for _, _, ps in lines for p in ps]
    head = f'<svg class="chart" role="img" aria-label="{_e(title)}" width="{PLOT_W}" height="{PLOT_H}" ' \
           f'viewBox="0 0 {PLOT_W} {PLOT_H}" xmlns="http://www.w3.org/2000/svg">' \
           f'<title>{_e(title)}</title><text x="8" y="16" class="t">{_e(title)}</text>'
    if len(pts) < 2:
        return head + f'<text x="{PLOT_W / 2}" y="{PLOT_H / 2}" text-anchor="middle" class="none">' \
                      'no data</text></svg>'
    left, right, top, bottom = 56, 12, 28, 36
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y1 = max(p[1] for p in pts) * 1.05 or 1.0
    x1 = x1 if x1 > x0 else x0 + 1.0
    w, h = PLOT_W - left - right, PLOT_H - top - bottom

    def sx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * w

    def sy(y: float) -> float:
        return top + h - y / y1 * h

    parts = [head, f'<rect x="{left}" y="{top}" width="{w}" height="{h}" class="frame"/>']
    for ty in _ticks(0.0, y1):
        parts.append(f'<line x1="{left}" x2="{left + w}" y1="{sy(ty):.1f}" y2="{sy(ty):.1f}" class="grid"/>'
                     f'<text x="{left - 4}" y="{sy(ty) + 4:.1f}" text-anchor="end">{_fmt(ty)}</text>')
    for tx in _ticks(x0, x1):
        parts.append(f'<text x="{sx(tx):.1f}" y="{top + h + 14}" text-anchor="middle">{_fmt(tx)}</text>')
    parts.append(f'<text x="{left + w / 2}" y="{PLOT_H - 4}" text-anchor="middle">{_e(x_label)}</text>')
    for i, (name, colour, ps) in enumerate(lines):
        if not ps:
            continue
        d = "M" + " L".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in ps)
        parts.append(f'<path d="{d}" fill="none" stroke="{colour}" stroke-width="1.6" class="series"/>')
        lx = left + 8 + 150 * i
        parts.append(f'<rect x="{lx}" y="{top + 6}" width="10" height="3" fill="{colour}"/>'
                     f'<text x="{lx + 14}" y="{top + 11}">{_e(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def bar_chart(items: Sequence[tuple[str, float]], title: str, unit: str = "") -> str:
    """Horizontal bars, one per (label, value), largest first as given."""
    row, label_w = 18, 260
    height = 26 + row * max(1, len(items))
    parts = [f'<svg class="chart" role="img" aria-label="{_e(title)}" width="{BAR_W}" height="{height}" '
             f'viewBox="0 0 {BAR_W} {height}" xmlns="http://www.w3.org/2000/svg"><title>{_e(title)}</title>'
             f'<text x="8" y="16" class="t">{_e(title)}</text>']
    if not items:
        parts.append('<text x="8" y="38" class="none">none</text></svg>')
        return "".join(parts)
    top = max(v for _, v in items) or 1.0
    span = BAR_W - label_w - 90
    for i, (label, value) in enumerate(items):
        y = 24 + i * row
        short = label if len(label) <= 40 else label[:37] + "..."
        parts.append(f'<text x="{label_w - 6}" y="{y + 12}" text-anchor="end"><title>{_e(label)}</title>'
                     f'{_e(short)}</text><rect x="{label_w}" y="{y + 2}" height="{row - 5}" '
                     f'width="{max(1.0, value / top * span):.1f}" class="bar"/>'
                     f'<text x="{label_w + max(1.0, value / top * span) + 4:.1f}" y="{y + 12}">'
                     f'{_e(_fmt(value) if unit != "s" else f"{value:.1f}")}{_e(unit)}</text>')
    parts.append("</svg>")
    return "".join(parts)


# --------------------------------------------------------------------------- the page


@dataclass(slots=True)
class CrawlInputs:
    """The Redis side of a report (all empty when the crawl's Redis is unreachable)."""

    stats: dict[str, int] = field(default_factory=dict)
    samples: list[dict[str, Any]] = field(default_factory=list)
    settings: dict[str, str] = field(default_factory=dict)
    state: str = ""
    reason: str = ""
    note: str = ""
    recrawl: list[str] = field(default_factory=list)   # a continuous crawl's revisit plan


_CSS = """
body{font:14px/1.4 sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}
.grid2{display:flex;flex-wrap:wrap;gap:16px}
svg.chart{background:#fafafa;border:1px solid #e3e3e3}
svg text{font:11px sans-serif;fill:#333}svg text.t{font-weight:bold;font-size:12px}
svg text.none{fill:#999;font-size:13px}
rect.frame{fill:none;stroke:#bbb}line.grid{stroke:#e6e6e6}rect.bar{fill:#4878b0}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:2px 8px;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums}.note{color:#a55}
details{margin:4px 0}code{font-size:12px}
"""


def _table(headers: Sequence[str], rows: Iterable[Sequence[object]], numeric_from: int = 1) -> str:
    out = ["<table>" + ("<tr>" + "".join(f"<th>{_e(h)}</th>" for h in headers) + "</tr>" if headers else "")]
    for row in rows:
        out.append("<tr>" + "".join(
            f'<td class="n">{_e(v)}</td>' if i >= numeric_from else f"<td>{_e(v)}</td>"
            for i, v in enumerate(row)) + "</tr>")
    out.append("</table>")
    return "".join(out)


def render(summary: Summary, inputs: CrawlInputs, *, title: str, trap_min_pages: int = 20,
           trap_ratio: float = 0.5) -> str:
    """The report page as one HTML string."""
    st = inputs.stats
    samples = inputs.samples
    if len(samples) >= 2:
        rate, rate_note = rate_series(samples), "from maintenance samples"
    else:
        rate, rate_note = rate_from_fetches(summary.fetch_times), "from fetch times in pages.jsonl"
    duration = (summary.last_t - summary.first_t) if summary.first_t is not None and summary.last_t else 0.0
    pages = st.get("fetch/pages", sum(r.pages for r in summary.hosts.values()))
    body = [f"<h1>{_e(title)}</h1>"]
    facts = [("records in pages.jsonl", summary.records), ("pages fetched", pages),
             ("fetch span", f"{duration:.1f} s"), ("hosts", len(summary.hosts))]
    if inputs.state:
        facts.insert(0, ("state", f"{inputs.state} {inputs.reason}".strip()))
    if duration > 0:
        facts.append(("mean rate", f"{pages / duration:.1f} pages/s"))
    if summary.bad_lines:
        facts.append(("unreadable lines", summary.bad_lines))
    body.append(_table([], facts, numeric_from=9))
    if inputs.note:
        body.append(f'<p class="note">{_e(inputs.note)}</p>')

    body.append("<h2>Progress</h2><div class=grid2>")
    body.append(line_chart([("pages/s", "#4878b0", rate)], f"pages per second ({rate_note})"))
    body.append(line_chart([("queued URLs", "#c0504d", series(samples, "queued")),
                            ("active hosts", "#9bbb59", series(samples, "active_hosts")),
                            ("leased hosts", "#8064a2", series(samples, "leased"))],
                           "frontier size (maintenance samples)"))
    if len(samples) >= 2:
        body.append(line_chart([("pages", "#4878b0", series(samples, "pages")),
                                ("errors", "#c0504d", series(samples, "errors"))], "pages and errors (cumulative)"))
    else:
        body.append(line_chart([("pages", "#4878b0", cumulative(summary.fetch_times))],
                               "pages fetched (cumulative, from pages.jsonl)"))
    body.append("</div>")

    body.append("<h2>Outcomes</h2><div class=grid2>")
    body.append(bar_chart(summary.status_mix.most_common(), "status mix (records)"))
    errors = Counter({k.removeprefix("records/error/"): v for k, v in st.items() if k.startswith("records/error/")})
    body.append(bar_chart((errors or summary.errors).most_common(), "errors by kind"))
    robots = sorted(((k.removeprefix("robots/"), v) for k, v in st.items() if k.startswith("robots/")),
                    key=lambda kv: -kv[1])
    body.append(bar_chart(robots, "robots.txt outcomes (counters robots/*)"))
    drops = sorted(((k, v) for k, v in st.items() if k.startswith(("filter/", "frontier/dropped/"))),
                   key=lambda kv: -kv[1])
    body.append(bar_chart(drops, "URLs refused (filters, budgets, traps)"))
    body.append("</div>")

    body.append("<h2>Hosts</h2><div class=grid2>")
    rows = sorted(summary.hosts.values(), key=lambda r: -r.pages)[:TOP_HOSTS]
    body.append(bar_chart([(r.host, r.pages) for r in rows], f"top {TOP_HOSTS} hosts by pages"))
    waits = sorted(summary.hosts.values(), key=lambda r: -r.wait_s)[:TOP_HOSTS]
    body.append(bar_chart([(r.host, r.wait_s) for r in waits if r.wait_s > 0],
                          f"top {TOP_HOSTS} hosts by time waiting between fetches", unit="s"))
    body.append("</div><p>Waiting = sum over a host's consecutive fetches of (next start - start - fetch "
                "time): the politeness delay plus dispatch latency and idle time.</p>")
    body.append(_table(["host", "pages", "bytes", "fetch s", "waiting s"],
                       [(r.host, r.pages, r.bytes, f"{r.fetch_s:.2f}", f"{r.wait_s:.1f}") for r in rows]))

    body.append("<h2>Duplicates</h2>")
    n_exact = sum(1 for ms in summary.clusters.values() for _, k in ms if k == "exact")
    n_near = sum(1 for ms in summary.clusters.values() for _, k in ms if k == "near")
    body.append(f"<p>{len(summary.clusters)} clusters: {n_exact} exact and {n_near} near duplicates "
                "(simhash within NEAR_DUP_BITS, 5 by default) of a first page.</p>")
    clusters = sorted(summary.clusters.items(), key=lambda kv: -len(kv[1]))[:TOP_CLUSTERS]
    body.append(bar_chart([(first, len(ms) + 1) for first, ms in clusters], "largest clusters (pages)"))
    for first, members in clusters:
        items = "".join(f"<li>{_e(u)} <small>({k})</small></li>" for u, k in members[:50])
        body.append(f"<details><summary>{_e(first)} — {len(members) + 1} pages</summary><ul>{items}</ul></details>")

    body.append("<h2>Trap hosts</h2>")
    traps = trap_hosts(summary, trap_min_pages, trap_ratio)
    body.append(f"<p>Hosts with at least {trap_min_pages} pages of which at least {trap_ratio:.0%} duplicate "
                "earlier content (their new links are demoted to the lowest priority).</p>")
    body.append(_table(["host", "pages", "duplicates"], traps) if traps else "<p>none</p>")

    if inputs.recrawl:
        body.append("<h2>Recrawl</h2><pre>" + _e("\n".join(inputs.recrawl)) + "</pre>")

    body.append("<h2>Settings</h2>")
    if inputs.settings:
        body.append(_table(["setting", "value"], sorted(inputs.settings.items()), numeric_from=9))
    else:
        body.append("<p>not recorded (the crawl's Redis was not reachable or predates this report)</p>")
    if st:
        body.append("<details><summary>all counters</summary>"
                    + _table(["counter", "value"], sorted(st.items())) + "</details>")
    return ("<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
            f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>"
            + "".join(body) + "</body></html>")


def read_inputs(settings: Settings) -> CrawlInputs:
    """Counters, samples, settings and state from the crawl's Redis."""
    control = Control(settings)
    state, reason, _ = control.state()
    recorded = control.client.hgetall(control.keys.settings)
    stats = control.stats()
    recrawl = recrawl_lines(settings, stats, control.running_s()) if "recrawl/revisits" in stats else []
    return CrawlInputs(stats=stats, samples=read_samples(settings),
                       settings={str(k): str(v) for k, v in recorded.items()},
                       state=str(state), reason=reason, recrawl=recrawl)


def write_report(out_dir: str | os.PathLike[str], inputs: CrawlInputs, dest: str | os.PathLike[str] | None = None,
                 trap_min_pages: int = 20, trap_ratio: float = 0.5) -> Path:
    """Read OUT/pages.jsonl, render, write OUT/report.html (or ``dest``); returns the path."""
    out = Path(out_dir)
    records, bad = read_jsonl(out / PAGES_FILE)
    summary = summarize(records, bad)
    page = render(summary, inputs, title=f"Crawl report: {out.resolve().name}",
                  trap_min_pages=trap_min_pages, trap_ratio=trap_ratio)
    path = Path(dest) if dest else out / REPORT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(path)
    return path
