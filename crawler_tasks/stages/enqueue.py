"""Enqueue stage (the URL dedup): every URL found by a page group passes the URL gate
(``stages.gate``), then the URL-seen test, into the frontier; the group's records go to
``pages.jsonl``.
"""
from __future__ import annotations

import dataclasses
import time
from datetime import UTC, datetime

from crawler_tasks.counters import Counters, bump
from crawler_tasks.dedup.rules import RuleDrop
from crawler_tasks.frontier import Discovered, Verdict
from crawler_tasks.output.jsonl import append_jsonl, once_written, pages_path
from crawler_tasks.output.spool import written_marker
from crawler_tasks.records import EntryKind, ErrorKind, FetchedPage, PageRecord
from crawler_tasks.settings import Settings
from crawler_tasks.stages.worker import Worker

RECENT_LASTMOD_S = 30 * 86_400.0


def enqueue_stage(w: Worker, records: list[PageRecord], group_id: str) -> int:
    """Filter and enqueue new links, sitemap entries and redirect targets, write
    pages.jsonl, close the group. Returns URLs enqueued."""
    w.refresh()   # the gate takes the live job's scope (manage.py job apply)
    s = w.settings
    counters: Counters = {}
    discovered: list[Discovered] = []
    redirects: dict[int, PageRecord] = {}   # index in discovered -> the redirect's record
    claims = ([(e.url, e.lastmod) for rec in records for e in rec.found.sitemap_urls if e.lastmod]
              if s.CONTINUOUS else [])
    if claims:   # before the entries go: a sitemap's lastmod is evidence of change
        bump(counters, "recrawl/sitemap_due", w.recrawler.sitemap_claims(claims))
    drops: list[RuleDrop] = []
    # the rules of the links' hosts, read at once (links are normalized: the authority is the host)
    w.rules.prefetch(link.split("/", 3)[2] for rec in records if _follows_links(rec) for link in rec.found.links)
    for rec in records:
        found, redirect = _discoveries(w, rec, counters, drops)
        discovered += found
        if redirect is not None:
            redirects[len(discovered)] = rec
            discovered.append(redirect)
    enqueued = 0
    if discovered:
        discovered = _demote_trap_hosts(w, discovered, counters)
        for i, verdict in enumerate(w.frontier.put_discovered(discovered)):
            if verdict == Verdict.ENQUEUED:
                enqueued += 1
                continue
            bump(counters, f"frontier/dropped/{verdict.reason}")
            redirected = redirects.get(i)
            if redirected is not None and verdict == Verdict.SEEN and redirected.page.hops > 0:
                # a chain that comes back to a URL already seen: a loop, say so
                redirected.page.error_kind, redirected.page.error = (
                    ErrorKind.REDIRECTS, f"redirect loop: {redirected.parsed.redirect_to} already seen")
        bump(counters, "frontier/enqueued", enqueued)
    for rec in records:
        if rec.page.error_kind:
            bump(counters, f"records/error/{rec.page.error_kind}")
    if s.CONTINUOUS:
        for name, n in w.recrawler.record_visits(records).items():
            bump(counters, name, n)
    if drops:   # one record per URL a learned rule dropped, naming the rule and its evidence
        dropped = [PageRecord(FetchedPage(url=d.url, depth=d.depth, error_kind=ErrorKind.FILTERED, error=d.reason))
                   for d in w.rules.first_drops(drops, w.frontier)]
        bump(counters, "records/error/filtered", len(dropped))
        records = [*records, *dropped]
    lines = [rec.output() for rec in records]
    marker = written_marker(s, group_id, "pages")   # all or none, once per batch, made again while the disk refuses
    once_written(lambda: append_jsonl(pages_path(s), lines, marker))
    bump(counters, "records/written", len(records))
    bump(counters, "records/indexable", sum(1 for r in records if r.parsed.indexable))

    def close_group() -> None:
        w.count(counters)
        w.control.end_batch(group_id)

    once_written(close_group)   # the records are out: a retry of the task would write them twice
    return enqueued


def _discoveries(w: Worker, rec: PageRecord, counters: Counters,
                 drops: list[RuleDrop]) -> tuple[list[Discovered], Discovered | None]:
    """The record's links, sitemap entries and canonical; its redirect target apart.
    Links and sitemap entries that a learned rule drops go to ``drops``."""
    s, gate = w.settings, w.gate
    page, parsed, found = rec.page, rec.parsed, rec.found
    out: list[Discovered | None] = []
    depth = page.depth
    if _follows_links(rec):
        out += [gate.admit(url, depth + 1, counters, normalized=True, drops=drops) for url in found.links]
    # sitemap entries are not forced: a sitemap usually lists pages the links reach too,
    # and only the Bloom filter knows those (an exact test would fetch each of them twice)
    out += [gate.admit(e.url, 0, counters, check_depth=False, drops=drops,
                       priority=_sitemap_level(s, e.priority, e.lastmod)) for e in found.sitemap_urls]
    out += [gate.admit(url, 0, counters, check_depth=False, kind=EntryKind.SITEMAP)
            for url in found.sitemaps]
    if parsed.canonical and parsed.canonical != page.url:
        out.append(gate.admit(parsed.canonical, depth, counters))
    redirect = None
    if parsed.redirect_to:
        hops = page.hops + 1
        if hops > s.MAX_REDIRECTS:
            page.error_kind, page.error = ErrorKind.REDIRECTS, f"more than {s.MAX_REDIRECTS} redirects"
            bump(counters, "filter/redirects")
        elif parsed.redirect_to == page.url:
            page.error_kind, page.error = ErrorKind.REDIRECTS, "redirect to itself"
        else:  # a sitemap's redirect is still a sitemap
            kind = EntryKind.SITEMAP if page.kind == EntryKind.SITEMAP else EntryKind.PAGE
            refused: Counters = {}
            redirect = gate.admit(parsed.redirect_to, depth, refused, hops=hops, kind=kind,
                                  check_depth=kind != EntryKind.SITEMAP)
            for name, n in refused.items():
                bump(counters, name, n)
            if redirect is None and not page.error_kind:   # the target gets no record: this one says why
                reason = next((name.split("/", 1)[1] for name in refused if name.startswith("filter/")), "filtered")
                page.error_kind, page.error = ErrorKind.FILTERED, f"redirect target not followed ({reason})"
    return [d for d in out if d is not None], redirect


def _follows_links(rec: PageRecord) -> bool:
    """A soft 404's links are not followed, nor those of a copy of another host's page (a
    mirror links its own copies). A copy of a page of its own host is followed: the main
    text of a pager's pages can be the same chrome while their links name other items
    (the links already seen cost a URL-seen test)."""
    duplicate_of = rec.parsed.duplicate_of
    if rec.parsed.soft_404:
        return False
    return not duplicate_of or duplicate_of.split("/", 3)[2:3] == rec.page.url.split("/", 3)[2:3]


def _sitemap_level(s: Settings, priority: float | None, lastmod: str | None = None) -> int:
    """Sitemap <priority> (0..1, default 0.5) -> front-queue level (0 = highest); a page
    modified in the last RECENT_LASTMOD_S moves up one level."""
    top = s.PRIORITY_LEVELS - 1
    p = 0.5 if priority is None else min(1.0, max(0.0, priority))
    level = min(top, int(round((1.0 - p) * top)))
    if lastmod and level > 0:
        try:
            when = datetime.fromisoformat(lastmod.replace("Z", "+00:00"))
            if when.tzinfo is None:
                when = when.replace(tzinfo=UTC)
            if time.time() - when.timestamp() < RECENT_LASTMOD_S:
                level -= 1
        except ValueError:
            pass
    return level


def _demote_trap_hosts(w: Worker, discovered: list[Discovered], counters: Counters) -> list[Discovered]:
    """New URLs of hosts whose content keeps duplicating go to the lowest level."""
    trap = w.content.trap_hosts(d.host for d in discovered)
    if not trap:
        return discovered
    top = w.settings.PRIORITY_LEVELS - 1
    bump(counters, "frontier/demoted_duplicate_host", sum(d.host in trap for d in discovered))
    return [dataclasses.replace(d, priority=top) if d.host in trap else d for d in discovered]
