"""Periodic housekeeping: expire dead leases, hand over what a lost fetch process or node
held, log stats, decide when the crawl is over.

A crawl is *finished* when nothing can happen any more: no batch in flight, no host
leased, no URL in a front or back queue (checked twice, the first time before and the
second after reading the queues, so a batch that ends in between is not missed), or
when only hosts waiting longer than MAX_IDLE_WAIT_S remain (parked or robots-blocked
hosts must not keep a finite crawl alive for hours); a continuous crawl never runs out
of work this way. It is *stopping* once MAX_PAGES
pages are fetched: wake dispatches nothing more and the crawl finishes when the
in-flight batches are through.

Every run also appends one progress sample to a capped Redis list (``record_sample``)
for ``manage.py report``: Redis rather than a file under OUT_DIR, because the control
worker that runs maintenance need not share a disk with the operator, a finished
embedded crawl reopens its Redis anyway, and snapshots carry the list along.
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from crawler_tasks.connection import broker_url, global_client, placement_warning
from crawler_tasks.frontier import Frontier
from crawler_tasks.frontier.spill import Spiller
from crawler_tasks.keys import GlobalKeys
from crawler_tasks.queues import STAGE_TASKS
from crawler_tasks.runtime.control import Control, CrawlState
from crawler_tasks.runtime.livejob import live
from crawler_tasks.runtime.nodes import hand_over_lost, hand_over_lost_processes, hand_over_unstarted_sessions
from crawler_tasks.settings import Settings

log = logging.getLogger(__name__)

# Only hosts further away than this remain: a finite crawl stops instead of idling.
MAX_IDLE_WAIT_S = 300.0
# A page group's message delivered again this often past its deadline is given up.
MAX_REDELIVERIES = 2


@dataclass(slots=True)
class Progress:
    at: float
    state: CrawlState
    reason: str
    stats: dict[str, int]
    shards: list[dict[str, int]]
    inflight: int
    next_ready_s: float | None = None
    expired_leases: int = 0
    fetching: int = 0         # HTTP exchanges in flight (leased hosts may only be waiting)
    started: bool = True      # a crawl exists under the prefix (else workers wait for seeds)
    started_at: float | None = None
    epoch: int = 0            # seed epoch read with the state, before the queues (see settle)
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def pages(self) -> int:
        return self.stats.get("fetch/pages", 0)

    @property
    def queued(self) -> int:
        return sum(s["front"] + s["back"] for s in self.shards)

    @property
    def leased(self) -> int:
        return sum(s["leased_hosts"] for s in self.shards)

    @property
    def errors(self) -> int:
        """Records with an error, robots.txt exclusions apart (they are the crawl obeying)."""
        return sum(v for k, v in self.stats.items()
                   if k.startswith("records/error/") and k != "records/error/robots")

    @property
    def robots_excluded(self) -> int:
        return self.stats.get("records/error/robots", 0)

    @property
    def dns_lookups(self) -> int:
        """Lookups that asked a server (not the ones the cache answered or a lookup in flight joined)."""
        return sum(self.stats.get(f"dns/{k}", 0) for k in ("answers_ok", "nxdomain", "nodata", "temporary"))

    @property
    def dns_failed(self) -> int:
        """Lookups that found no address: NXDOMAIN, NODATA, no server answer."""
        return sum(self.stats.get(f"dns/{k}", 0) for k in ("nxdomain", "nodata", "temporary"))


def read_progress(settings: Settings, frontier: Frontier | None = None) -> Progress:
    """A consistent-enough picture of the crawl, for stats, progress and the stop decision."""
    frontier = frontier or Frontier(settings)
    control = Control(settings)
    c = control.read()
    stats = control.stats()
    inflight = control.inflight()
    shards = [frontier.sizes(s) for s in range(settings.SHARDS)]
    waits = [w for w in (frontier.next_ready_in(s) for s in range(settings.SHARDS)) if w is not None]
    return Progress(at=time.time(), state=c.state, reason=c.reason, stats=stats, shards=shards, inflight=inflight,
                    next_ready_s=min(waits) if waits else None, fetching=control.exchanges(),
                    started=c.exists, epoch=c.epoch, started_at=c.started_at)


def record_sample(settings: Settings, progress: Progress) -> None:
    """Append (t, pages, queued, active hosts, leased, in flight, errors) to the capped
    time series, newest first (LPUSH + LTRIM: O(1) per run)."""
    if settings.TIMESERIES_MAX_SAMPLES <= 0:
        return
    sample = {"t": round(progress.at, 3), "pages": progress.pages, "queued": progress.queued,
              "active_hosts": sum(s["active_hosts"] for s in progress.shards), "leased": progress.leased,
              "inflight": progress.inflight, "errors": progress.errors, "state": str(progress.state)}
    key = GlobalKeys(settings.KEY_PREFIX).timeseries
    pipe = global_client(settings).pipeline(transaction=False)
    pipe.lpush(key, json.dumps(sample, separators=(",", ":")))
    pipe.ltrim(key, 0, settings.TIMESERIES_MAX_SAMPLES - 1)
    pipe.execute()


def safe_value(value: str) -> str:
    """A setting's value with any URL password removed."""
    if "@" not in value or "://" not in value:
        return value
    out = []
    for part in value.split(","):
        try:
            p = urlsplit(part)
            if p.password is not None or p.username is not None:
                netloc = (p.hostname or "") + (f":{p.port}" if p.port else "")
                part = urlunsplit((p.scheme, netloc, p.path, p.query, p.fragment))
        except ValueError:
            part = "(unparsable)"
        out.append(part)
    return ",".join(out)


_settings_recorded: set[str] = set()


def record_settings(settings: Settings) -> None:
    """Once per process: the crawl's settings (as CRAWLER_* values, URL passwords removed)
    for the report, which runs elsewhere and cannot see the workers' environment."""
    if settings.KEY_PREFIX in _settings_recorded:
        return
    warning = placement_warning(settings)
    if warning:
        log.warning("%s", warning)
    key = GlobalKeys(settings.KEY_PREFIX).settings
    values: dict[Any, Any] = {  # redis-py types mapping keys invariantly
        name.removeprefix("CRAWLER_"): safe_value(v) for name, v in settings.to_env().items()}
    pipe = global_client(settings).pipeline(transaction=True)
    pipe.delete(key)
    pipe.hset(key, mapping=values)
    pipe.execute()
    _settings_recorded.add(settings.KEY_PREFIX)


def read_samples(settings: Settings) -> list[dict[str, float | int | str]]:
    """The time series, oldest first; unreadable samples are skipped."""
    out = []
    for raw in reversed(global_client(settings).lrange(GlobalKeys(settings.KEY_PREFIX).timeseries, 0, -1)):
        try:
            sample = json.loads(raw)
        except ValueError:
            continue
        if isinstance(sample, dict) and isinstance(sample.get("t"), (int, float)):
            out.append(sample)
    return out


def forget_finished_groups(frontier: Frontier, control: Control) -> None:
    """The frontier keeps the URLs of each page group handed to parse until the group is
    no longer in flight (enqueued, or given up), to fetch them again if its node is lost
    first: forget those of groups gone. Groups are read before the groups in flight, so
    a group that starts in between is not taken for gone."""
    kept = frontier.parsing_groups()
    if not kept:
        return
    live = control.inflight_groups()
    for shard, ids in kept.items():
        frontier.forget_groups(shard, [g for g in ids if g not in live])


def redeliver_stale_groups(settings: Settings, control: Control, now: float) -> tuple[list[str], list[str]]:
    """Page groups past their deadline whose stage message a worker still holds. Given up,
    such a group's pages were fetched again, and a run that had written the group's feed
    lines (or records) before it died had them written twice. Instead its message goes
    back to its queue, to run again from where it stopped (``broker.redeliver_held``),
    up to MAX_REDELIVERIES times (a group that kills its worker every time is given up);
    one taken within the last half deadline only waited in the queue: it stays with its
    worker. Returns the groups that stay in flight: (delivered again, left with their
    worker). A group whose message no worker holds (its node was lost, or the broker lost
    it) is given up."""
    stale = [group for group, times in control.stale_groups(now).items() if times < MAX_REDELIVERIES]
    if not stale:
        return [], []
    from crawler_tasks.broker import broker_options, redeliver_held  # kombu: only when a group is stale
    try:
        held = redeliver_held(broker_url(settings), STAGE_TASKS, stale, now - settings.batch_timeout_s / 2,
                              broker_options(settings))
    except Exception as exc:  # noqa: BLE001 - the broker is down: given up, as before it was looked at
        log.warning("could not look for the tasks of %d page groups past their deadline: %s", len(stale), exc)
        return [], []
    return [group for group, again in held.items() if again], [group for group, again in held.items() if not again]


def redeliver_predecessor(settings: Settings, worker: str, started: float) -> int:
    """A stage worker starting under the name of one that died (``manage.py crawl``
    restarts a dead child under its name, as a service manager does) puts back at once
    the messages its predecessor had taken and not acknowledged, rather than after their
    groups' deadline (2 x LEASE_S): their tasks run again from where they stopped, as in
    ``redeliver_stale_groups``, and count towards its MAX_REDELIVERIES. Messages taken
    since ``started`` (this worker's own) stay. Returns how many went back."""
    control = Control(settings)
    held = control.groups_held_by(worker)
    times = control.redelivered(list(held)) if held else {}
    held = {group: task for group, task in held.items() if times[group] < MAX_REDELIVERIES}
    if not held:
        return 0
    from crawler_tasks.broker import broker_options, redeliver_held  # kombu: only then
    back: list[str] = []
    for task in set(held.values()):
        groups = [group for group, t in held.items() if t == task]
        found = redeliver_held(broker_url(settings), (task,), groups, started, broker_options(settings))
        back += [group for group, again in found.items() if again]
    control.count_redelivered(back)
    if back:
        control.count({"frontier/group_redelivered": len(back)})
    return len(back)


def run_maintenance(settings: Settings, frontier: Frontier | None = None, now: float | None = None) -> Progress:
    settings = live(settings)   # the limits of the live job (manage.py job apply)
    frontier = frontier or Frontier(settings)
    now = time.time() if now is None else now
    control = Control(settings)
    expired = sum(len(frontier.expire(s, now=now)) for s in range(settings.SHARDS))
    for process, (hosts, urls) in hand_over_lost_processes(settings, frontier, now).items():
        control.count({"frontier/process_lost": 1, "frontier/process_lost_hosts": hosts})
        log.warning("fetch process %s lost (no heartbeat for over %g s): %d leased hosts handed over, %d fetched "
                    "URLs not handed to parse queued again", process, 1.5 * settings.PROCESS_TTL_S, hosts, urls)
    sessions, hosts = hand_over_unstarted_sessions(settings, frontier, now)
    if sessions:
        control.count({"frontier/session_unstarted": sessions, "frontier/session_unstarted_hosts": hosts})
        log.warning("%d fetch sessions were taken by a worker that died before it started them: %d leased hosts "
                    "handed over", sessions, hosts)
    for node, (hosts, urls) in hand_over_lost(settings, frontier, now).items():
        control.count({"frontier/node_lost": 1, "frontier/node_lost_hosts": hosts, "frontier/node_lost_urls": urls})
        log.warning("node %r lost (no worker renewed its claim for %g s): %d leased hosts handed over, %d "
                    "fetched URLs its parse workers never had queued again", node, settings.NODE_TTL_S, hosts, urls)
    returned = sum(frontier.return_handoffs(s, now=now) for s in range(settings.SHARDS))
    if returned:
        control.count({"frontier/handoff_returned": returned})
        log.warning("%d fetched URLs never reached parse (a fetch worker died); queued again", returned)
    drift = sum(frontier.recount_queued(s) for s in range(settings.SHARDS))
    if drift:
        control.count({"frontier/queued_recounted": drift})
        log.warning("queued-URL counters were off by %d with no host active (a checkpoint read while the "
                    "crawl ran can restore them so); set from the queues", drift)
    again, held = redeliver_stale_groups(settings, control, now)
    stale = control.drop_stale_batches(now, again, held, now + settings.batch_timeout_s)
    refetch = frontier.return_groups(stale.groups, now)   # before they are forgotten as finished
    forget_finished_groups(frontier, control)
    if again:
        control.count({"frontier/group_redelivered": len(again)})
        log.warning("%d page groups did not finish within %.0f s and their parse or enqueue task was taken and "
                    "never acknowledged (its worker died or hangs): delivered again", len(again),
                    settings.batch_timeout_s)
    if stale.groups or stale.sessions:
        control.count({"frontier/group_returned": refetch})
        log.warning("%d page groups and %d sessions did not finish within %.0f s (their worker died): %d fetched "
                    "URLs queued again, the sessions' hosts return when their leases expire",
                    len(stale.groups), stale.sessions, settings.batch_timeout_s, refetch)
    if expired:
        control.count({"frontier/lease_expired": expired})
        log.warning("%d host leases expired (a worker died or hung); hosts put back", expired)
    moved_out, moved_in = Spiller(settings, frontier).run()
    if moved_out or moved_in:
        log.info("front queues: %d URLs spilled to disk, %d read back", moved_out, moved_in)
    before_inflight = control.inflight()
    progress = read_progress(settings, frontier)
    progress.expired_leases = expired
    control.heartbeat(now)
    if progress.state == CrawlState.FINISHED or not progress.started:
        return progress   # nothing to decide before the first seeds: workers may start first
    settle(settings, control, progress, before_inflight)
    record_sample(settings, progress)
    record_settings(settings)
    log.info("crawl %s: pages=%d queued=%d leased=%d inflight=%d errors=%d",
             progress.state, progress.pages, progress.queued, progress.leased, progress.inflight, progress.errors)
    return progress


def settle(settings: Settings, control: Control, progress: Progress, before_inflight: int) -> None:
    """The stop decision: STOPPING at the page limit, FINISHED once idle (``before_inflight``
    read before ``progress``). ``manage.py crawl`` also runs it between maintenance ticks,
    so the end of a crawl is seen without waiting for the next one. Both limits hold here,
    so they work without ``manage.py crawl`` (the production shape). A paused crawl is
    only stopped by MAX_SECONDS, and a finish is dropped when seeds arrived since
    ``progress`` was read."""
    if not progress.started:
        return
    if settings.MAX_SECONDS and progress.started_at and progress.at - progress.started_at >= settings.MAX_SECONDS \
            and progress.state in (CrawlState.RUNNING, CrawlState.PAUSED):
        reason = f"max seconds ({settings.MAX_SECONDS:g}) reached"
        if control.move(CrawlState.STOPPING, reason, (CrawlState.RUNNING, CrawlState.PAUSED))[1]:
            progress.state, progress.reason = CrawlState.STOPPING, reason
    if progress.state == CrawlState.PAUSED:
        return
    if settings.MAX_PAGES and progress.pages >= settings.MAX_PAGES and progress.state == CrawlState.RUNNING:
        reason = f"max pages ({settings.MAX_PAGES}) reached"
        if control.move(CrawlState.STOPPING, reason, (CrawlState.RUNNING,))[1]:
            progress.state, progress.reason = CrawlState.STOPPING, reason
    idle = before_inflight == 0 and progress.inflight == 0 and progress.leased == 0
    finish: tuple[str, bool] | None = None
    if settings.CONTINUOUS and progress.state == CrawlState.RUNNING:
        pass  # a continuous crawl waits for its next visits; only limits and signals stop it
    elif idle and progress.state == CrawlState.STOPPING:
        finish = progress.reason or "stopped", False
    elif idle and progress.queued == 0:
        finish = "frontier exhausted", True
    elif idle and progress.next_ready_s is not None and progress.next_ready_s > MAX_IDLE_WAIT_S \
            and sum(s["front"] for s in progress.shards) == 0:
        finish = f"only hosts waiting more than {MAX_IDLE_WAIT_S:.0f} s remain", True
    if finish is not None and control.finish(finish[0], progress.epoch, idle=finish[1]):
        progress.state, progress.reason = CrawlState.FINISHED, finish[0]
