"""Rendering in a host turn: an app shell (or a host the operator named) goes to the
browser within the host's turn, and every request of the browser is one of the host's
requests (same host only, robots.txt obeyed, the host's delay kept, into WARC)."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from crawler_tasks.fetch.http import FetchResult
from crawler_tasks.fetch.politeness import HostState, request_gap
from crawler_tasks.frontier import Lease
from crawler_tasks.output.warc import warc_date
from crawler_tasks.records import ErrorKind
from crawler_tasks.stages.fetch.context import TurnContext

if TYPE_CHECKING:
    from crawler_tasks.stages.fetch.outcome import Turn


def maybe_render(ctx: TurnContext, lease: Lease, state: HostState, res: FetchResult, turn: Turn) -> None:
    """Render the turn's page when the render policy says so; the turn's body becomes
    the rendered DOM (and a WARC conversion record), its te follows the last request."""
    w = ctx.w
    site = w.site(lease.host)
    why = w.render.reason(lease.host, res.content_type, res.content, mode=site.render if site else None)
    pool = w.render.pool() if why else None
    if pool is None or turn.page is None:
        return
    last = [res.ended]

    def fetch(url: str, kind: str) -> FetchResult | None:
        del kind   # every kind of subresource is one request of the host's
        return _browser_fetch(ctx, lease, state, last, url)

    rendered = pool.render(res.url, fetch=fetch, document=res)
    ctx.bump("render/pages", 1)
    ctx.bump("render/requests", rendered.fetched)
    if rendered.error or not rendered.html:
        ctx.bump(f"render/error/{(rendered.error or 'empty').split(':')[0]}", 1)
        return
    html = rendered.html.encode("utf-8")
    turn.conversion = (html, warc_date(time.time()))
    turn.body, turn.page.rendered = html, why
    # the host's next contact follows its last request, the browser's included
    turn.te = max(turn.te, last[0] + request_gap(w.policy_for(lease.host), state))


def _browser_fetch(ctx: TurnContext, lease: Lease, state: HostState, last: list[float], url: str) -> FetchResult | None:
    w = ctx.w
    if urlsplit(url).netloc.lower() != lease.host or ctx.stop.is_set():
        return None
    if w.obeys_robots(lease.host):
        entry = w.robots.get(w.frontier, lease.host)
        if entry is None or not entry.rules.is_allowed(url, w.robots_agent):
            ctx.bump("render/refused/robots", 1)
            return None
    gap = request_gap(w.policy_for(lease.host), state)
    wait = last[0] + gap - time.time()
    if wait > 0 and ctx.stop.wait(wait):
        return None
    ctx.renew(lease.host)
    res = w.fetcher.fetch(url, cancel=ctx.halt, gap_s=gap)
    last[0] = res.ended or time.time()
    if res.error_kind == ErrorKind.ABORTED:
        return None
    if res.status is not None:
        w.warc.write_exchange(res, None)
    return res
