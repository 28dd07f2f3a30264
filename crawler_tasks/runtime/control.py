"""Crawl control: the one reader and writer of the crawl's state, counters and batches in flight.

The state machine is ``new -> running <-> paused``, ``running|paused -> stopping ->
finished`` (``CrawlState``; ``new`` is the absence of a control hash). A crawl starts
when ``manage.py crawl`` starts it or, in the production shape (workers and beat up
first), when its first seeds arrive; the operator pauses and resumes it; the runner
(signal) or ``manage.py stop`` asks it to stop; maintenance stops it at --max-pages and
--max-seconds and finishes it when nothing can happen any more; wake dispatches only while it is running. Every move
is one script (``transition.lua``) that names the states it may leave, so a pause never
overwrites a finish and a finish never lands over seeds added since the decision (the
seed ``epoch``). A crawl that finished for lack of work is marked ``idle``: new seeds
revive it. Counters are slash paths (``fetch/status/200``) in one hash,
page groups between fetch and enqueue a sorted set of group id -> deadline (back-pressure:
fetch sessions give their hosts back while too many wait for parse), fetch sessions
another (wake keeps each shard's share of them running); stale entries of both are
dropped by maintenance.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import NamedTuple

import redis

from crawler_tasks.connection import global_client, replies_of
from crawler_tasks.keys import PAGES_FIELD, GlobalKeys
from crawler_tasks.settings import Settings


class CrawlState(StrEnum):
    RUNNING = "running"
    PAUSED = "paused"          # by the operator: nothing new starts; durable until resumed
    STOPPING = "stopping"
    FINISHED = "finished"


NEW = "new"   # transition.lua's name for "no crawl started under this prefix"
# No maintenance for this long (or 10 intervals): nothing runs the crawl's control.
UNATTENDED_S = 15.0
_TRANSITION = (Path(__file__).parent / "transition.lua").read_text()
_GROUP_CLAIM = (Path(__file__).parent / "groupclaim.lua").read_text()
_GROUP_DROP = (Path(__file__).parent / "groupdrop.lua").read_text()
_GROUP_STALE = (Path(__file__).parent / "groupstale.lua").read_text()


class Stale(NamedTuple):
    """Page groups (their ids) and sessions that outlived their deadline."""

    groups: list[str]
    sessions: int


@dataclass(frozen=True, slots=True)
class ControlState:
    """The control hash, read in one round trip."""

    exists: bool           # a crawl was started (by ``manage.py crawl`` or a first seed)
    state: CrawlState      # RUNNING when none was started (the stages' view)
    reason: str
    at: float | None       # when the state was entered
    idle: bool             # finished for lack of work: new seeds revive it
    epoch: int             # seed operations so far (see transition.lua)
    maintained_at: float | None   # last maintenance run: is a control worker and beat up?
    started_at: float | None      # for MAX_SECONDS, which maintenance enforces too


@dataclass(frozen=True, slots=True)
class ControlView:
    """What wake needs in one round trip."""

    state: CrawlState
    inflight: int
    pages: int


class Control:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.keys = GlobalKeys(settings.KEY_PREFIX)

    @property
    def client(self) -> redis.Redis:
        return global_client(self.settings)

    # -- state ------------------------------------------------------------------------
    def exists(self) -> bool:
        """Whether this Redis holds a crawl under our prefix."""
        return bool(self.client.hexists(self.keys.control, "state"))

    def move(self, state: CrawlState, reason: str, allowed: Iterable[str] = (), *, epoch: int | None = None,
             idle: bool = False) -> tuple[str, bool]:
        """Enter ``state`` if the crawl is in one of ``allowed`` (any when empty; ``NEW``:
        not started) and, given ``epoch``, no seed arrived since it was read. Returns
        (the previous state or ``NEW``, whether it moved)."""
        script = self.client.register_script(_TRANSITION)
        previous, moved = script(keys=[self.keys.control], args=[
            str(state), reason, time.time(), " ".join(allowed), "" if epoch is None else epoch, int(idle)])
        return (previous.decode() if isinstance(previous, bytes) else str(previous)), bool(moved)

    def start(self, started_at: float | None = None) -> None:
        """``manage.py crawl``: run (a paused crawl stays paused until ``manage.py resume``)."""
        self.move(CrawlState.RUNNING, "", (NEW, CrawlState.RUNNING, CrawlState.STOPPING, CrawlState.FINISHED))
        if started_at is not None:
            self.client.hset(self.keys.control, "started_at", started_at)

    def set_state(self, state: CrawlState, reason: str) -> None:
        self.move(state, reason)

    def finish(self, reason: str, epoch: int, idle: bool) -> bool:
        """Finished, unless paused, finished already, or seeded since ``epoch`` was read."""
        return self.move(CrawlState.FINISHED, reason, (CrawlState.RUNNING, CrawlState.STOPPING),
                         epoch=epoch, idle=idle)[1]

    def seeded(self, added: int) -> str:
        """Count seeds just added and start the crawl if none was started (the production
        shape: workers and beat wait for their first seeds). Returns the previous state."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hincrby(self.keys.stats, "frontier/seeds", added)
        pipe.hincrby(self.keys.stats, "frontier/enqueued", added)
        pipe.hincrby(self.keys.control, "epoch", 1)   # cancels a finish decided before the seeds
        pipe.execute()
        return self.move(CrawlState.RUNNING, "", (NEW,))[0]

    def revive(self) -> bool:
        """A crawl that finished for lack of work runs again (new seeds); its time limit
        counts from now."""
        moved = self.move(CrawlState.RUNNING, "", (CrawlState.FINISHED,))[1]
        if moved:
            self.client.hset(self.keys.control, "started_at", time.time())
        return moved

    def read(self) -> ControlState:
        raw: dict[str, str] = self.client.hgetall(self.keys.control)  # type: ignore[assignment]
        at, seen, started = raw.get("state_at"), raw.get("maintained_at"), raw.get("started_at")
        return ControlState("state" in raw, _state(raw.get("state")), raw.get("reason", ""),
                            float(at) if at else None, raw.get("idle") == "1", int(raw.get("epoch") or 0),
                            float(seen) if seen else None, float(started) if started else None)

    def heartbeat(self, now: float) -> None:
        """Maintenance ran (before the first seeds too: a seed can tell whether anything
        will act on it). It does not start a crawl: ``exists`` looks at the state."""
        self.client.hset(self.keys.control, "maintained_at", now)

    def unattended_s(self, c: ControlState, interval_s: float, now: float | None = None) -> float | None:
        """Seconds since maintenance last ran when that is far longer than its interval
        (no control worker or no beat), else None."""
        now = time.time() if now is None else now
        since = now - c.maintained_at if c.maintained_at else float("inf")
        return since if since > max(UNATTENDED_S, 10 * interval_s) else None

    def state(self) -> tuple[CrawlState, str, float | None]:
        """(state, reason, when it was entered); a crawl with no state yet is running."""
        c = self.read()
        return c.state, c.reason, c.at

    def raw_state(self) -> str | None:
        """The state as stored, None before a crawl starts (Beat's schedule asks it
        before each wake: only a started, running crawl dispatches)."""
        state: str | None = self.client.hget(self.keys.control, "state")  # type: ignore[assignment]
        return state

    def running_s(self) -> float:
        """Seconds since the crawl started (0 when it never did)."""
        raw = self.client.hget(self.keys.control, "started_at")
        return max(0.0, time.time() - float(raw)) if raw else 0.0

    def view(self) -> ControlView:
        """State, page groups waiting for parse/enqueue, pages fetched: one round trip."""
        pipe = self.client.pipeline(transaction=False)
        read = self.queue_view(pipe)
        return read(pipe.execute())

    def queue_view(self, pipe: redis.client.Pipeline) -> Callable[[list[object]], ControlView]:
        """``view`` queued on a pipeline of the global client that the caller runs with
        its own commands. Returns the reader of its replies (an error reply raises)."""
        at = len(pipe)
        pipe.hget(self.keys.control, "state")
        pipe.zcard(self.keys.inflight)
        pipe.hget(self.keys.stats, PAGES_FIELD)

        def read(replies: list[object]) -> ControlView:
            state, inflight, pages = replies_of(replies, at, 3)
            return ControlView(_state(state), int(inflight or 0), int(pages or 0))  # type: ignore[arg-type, call-overload]
        return read

    # -- counters ---------------------------------------------------------------------
    def count(self, counters: Mapping[str, int], pipe: redis.client.Pipeline | None = None) -> None:
        """Add to the crawl's counters in one round trip (queued on ``pipe`` when given,
        a pipeline of the global client that the caller runs)."""
        if not counters:
            return
        own = pipe is None
        pipe = self.client.pipeline(transaction=False) if pipe is None else pipe
        for name, n in counters.items():
            pipe.hincrby(self.keys.stats, name, n)
        if own:
            pipe.execute()

    def queue_count_page(self, pipe: redis.client.Pipeline) -> Callable[[list[object]], int]:
        """One more page fetched, counted at once (the page budget must not trail the
        fetches), on a pipeline of the global client that the caller runs. Returns the
        reader of its reply among the pipeline's: the new total (an error reply raises)."""
        at = len(pipe)
        pipe.hincrby(self.keys.stats, PAGES_FIELD, 1)

        def read(replies: list[object]) -> int:
            return int(replies_of(replies, at, 1)[0])  # type: ignore[call-overload]
        return read

    def stats(self) -> dict[str, int]:
        raw: dict[str, str] = self.client.hgetall(self.keys.stats)  # type: ignore[assignment]
        return {k: int(v) for k, v in raw.items()}

    # -- batches in flight ------------------------------------------------------------
    def begin_batches(self, batch_ids: Iterable[str], deadline: float, node: str | None = None,
                      pipe: redis.client.Pipeline | None = None) -> None:
        """Page groups start their way to parse, on ``node``'s parse workers when given: the
        owner is written with them (one round trip, or queued on ``pipe`` as ``count``),
        so that no group of a node lost in between waits without one for its deadline."""
        mapping = {batch_id: deadline for batch_id in batch_ids}
        if not mapping:
            return
        own = pipe is None
        pipe = self.client.pipeline(transaction=False) if pipe is None else pipe
        pipe.zadd(self.keys.inflight, mapping)
        if node is not None:
            pipe.hset(self.keys.group_owner, mapping={batch_id: node for batch_id in mapping})
        if own:
            pipe.execute()

    def end_batch(self, batch_id: str) -> None:
        pipe = self.client.pipeline(transaction=False)
        pipe.zrem(self.keys.inflight, batch_id)
        pipe.hdel(self.keys.group_owner, batch_id)
        pipe.hdel(self.keys.groups_redelivered, batch_id)
        pipe.hdel(self.keys.group_worker, batch_id)
        pipe.execute()

    def inflight(self) -> int:
        """Page groups and fetch sessions not finished: work that can still add URLs."""
        pipe = self.client.pipeline(transaction=False)
        pipe.zcard(self.keys.inflight)
        pipe.zcard(self.keys.sessions)
        groups, sessions = pipe.execute()
        return int(groups) + int(sessions)

    def stale_groups(self, now: float) -> dict[str, int]:
        """Page groups past their deadline -> how often their message was delivered again."""
        groups: list[str] = self.client.zrangebyscore(self.keys.inflight, "-inf", now)  # type: ignore[assignment]
        return self.redelivered(groups) if groups else {}

    def work_on_group(self, group_id: str, task: str, worker: str) -> None:
        """A stage worker (its Celery name) starts a page group's task: should it die, its
        next incarnation delivers the message again at once (``groups_held_by``)."""
        self.client.hset(self.keys.group_worker, group_id, f"{task} {worker}")

    def groups_held_by(self, worker: str) -> dict[str, str]:
        """Page groups whose task ``worker`` started last, not yet enqueued -> the task."""
        running: dict[str, str] = self.client.hgetall(self.keys.group_worker)  # type: ignore[assignment]
        return {group: value.split(" ", 1)[0] for group, value in running.items()
                if value.partition(" ")[2] == worker}

    def redelivered(self, groups: list[str]) -> dict[str, int]:
        """How often each group's message was delivered again."""
        times: list[str | None] = self.client.hmget(self.keys.groups_redelivered, groups)  # type: ignore[assignment]
        return {group: int(n or 0) for group, n in zip(groups, times, strict=True)}

    def count_redelivered(self, groups: Iterable[str]) -> None:
        pipe = self.client.pipeline(transaction=False)
        for group in groups:
            pipe.hincrby(self.keys.groups_redelivered, group, 1)
        pipe.execute()

    def drop_stale_batches(self, now: float, again: Collection[str] = (), held: Collection[str] = (),
                           deadline: float = 0.0) -> Stale:
        """Forget groups and sessions past their deadline (their worker died; a session's
        hosts come back when their leases expire). A stale page group is given up, as a
        lost node's are: the caller queues its URLs again, and its parse or enqueue
        message, should it turn up later, is skipped (``claim_group``). Those in ``again``
        (their message was delivered again, counted) and ``held`` (a worker only just took
        it) stay in flight until ``deadline``."""
        self.client.zremrangebyscore(self.keys.exchanges, "-inf", now)
        script = self.client.register_script(_GROUP_STALE)
        groups = script(keys=[self.keys.inflight, self.keys.group_owner, self.keys.groups_given_up,
                              self.keys.groups_redelivered, self.keys.group_worker],
                        args=[now, deadline, len(again), *again, *held])
        sessions: list[str] = self.client.zrangebyscore(self.keys.sessions, "-inf", now)  # type: ignore[assignment]
        if sessions:
            self.client.zrem(self.keys.sessions, *sessions)
        return Stale([str(g) for g in groups], len(sessions))

    def forget_batches(self) -> None:
        """After a restore: no group or session of the old processes is still running."""
        self.client.delete(self.keys.inflight, self.keys.sessions, self.keys.session_owner, self.keys.group_owner,
                           self.keys.groups_redelivered, self.keys.group_worker)

    # -- exchanges in flight -----------------------------------------------------------
    def begin_exchange(self, pipe: redis.client.Pipeline, session_id: str, host: str, deadline: float) -> None:
        """An HTTP exchange starts (on a pipeline of the global client the caller runs):
        the progress line's "fetching" counts these, not hosts leased, which a dead or
        waiting session holds too. ``deadline``: the exchange's own, so that one whose
        worker died stops counting then."""
        pipe.zadd(self.keys.exchanges, {f"{session_id}/{host}": deadline})

    def end_exchange(self, pipe: redis.client.Pipeline, session_id: str, host: str) -> None:
        pipe.zrem(self.keys.exchanges, f"{session_id}/{host}")

    def report_exchanges(self, session_id: str, hosts: set[str], before: set[str], deadline: float) -> set[str]:
        """A session's hosts in a turn now, given those it reported last (returned, to be
        given next time): one round trip when they changed, none otherwise (sessions report
        on their control tick)."""
        gone, new = before - hosts, hosts - before
        if gone or new:
            pipe = self.client.pipeline(transaction=False)
            for host in gone:
                self.end_exchange(pipe, session_id, host)
            for host in new:
                self.begin_exchange(pipe, session_id, host, deadline)
            pipe.execute()
        return hosts

    def exchanges(self, now: float | None = None) -> int:
        """Exchanges in flight now."""
        now = time.time() if now is None else now
        return int(self.client.zcount(self.keys.exchanges, f"({now}", "+inf"))

    # -- fetch sessions ---------------------------------------------------------------
    @staticmethod
    def session(shard: int, session_id: str) -> str:
        """A session's name among the sessions (and the owner of the hosts wake leased
        for it, until its process renews them)."""
        return f"{shard}/{session_id}"

    def begin_session(self, shard: int, session_id: str, deadline: float) -> None:
        self.client.zadd(self.keys.sessions, {self.session(shard, session_id): deadline})

    def end_session(self, shard: int, session_id: str) -> None:
        pipe = self.client.pipeline(transaction=False)
        pipe.zrem(self.keys.sessions, self.session(shard, session_id))
        pipe.hdel(self.keys.session_owner, self.session(shard, session_id))
        pipe.execute()

    def unowned_sessions(self, begun_before: float) -> list[str]:
        """Sessions begun before then that no fetch process took as its own (queued, or
        taken by a worker that died before it started them)."""
        members: list[str] = self.client.zrangebyscore(  # type: ignore[assignment]
            self.keys.sessions, "-inf", begun_before + self.settings.batch_timeout_s)
        if not members:
            return []
        owners = self.client.hmget(self.keys.session_owner, members)
        return [member for member, owner in zip(members, owners, strict=True) if owner is None]

    def forget_sessions(self, members: list[str]) -> None:
        if members:
            self.client.zrem(self.keys.sessions, *members)

    def own_session(self, shard: int, session_id: str, owner: str) -> None:
        """Which fetch process (``<node>/<process>``) runs a session: a lost one's slots
        are freed at once (``drop_sessions``)."""
        self.client.hset(self.keys.session_owner, self.session(shard, session_id), owner)

    def claim_group(self, group_id: str, node: str) -> bool:
        """A parse or enqueue worker of ``node`` takes a page group (it is that node's until
        the next stage takes it, or enqueued): False when the group was given up (its
        node was lost first; its pages are fetched again), then its message is skipped."""
        script = self.client.register_script(_GROUP_CLAIM)
        return bool(script(keys=[self.keys.group_owner, self.keys.groups_given_up], args=[group_id, node]))

    def drop_sessions(self, owner: str) -> list[str]:
        """Forget the sessions a lost fetch process ran: they held their slots until
        BATCH_TIMEOUT_S, so no session could start in their place meanwhile. Returns them
        (``session`` names: the hosts wake leased for one may still name it)."""
        return self._drop_owned(self.keys.session_owner, self.keys.sessions, owner)

    def drop_node_work(self, node: str) -> tuple[list[str], list[str]]:
        """Forget the sessions a lost node ran (those of its processes go with them) and
        give up the page groups it held, parsed or not: their bodies were in its spool
        folder, and their parse or enqueue message waits for its workers or was taken by
        one (the caller queues their URLs again). Both held their slots until
        BATCH_TIMEOUT_S, so no session could start on their shards and the crawl could not
        finish meanwhile. Returns (sessions, group ids): see ``drop_sessions``."""
        sessions = self._drop_owned(self.keys.session_owner, self.keys.sessions, node)
        script = self.client.register_script(_GROUP_DROP)
        groups = script(keys=[self.keys.group_owner, self.keys.inflight, self.keys.groups_given_up,
                              self.keys.group_worker], args=[node])
        return sessions, [str(g) for g in groups]

    def _drop_owned(self, owner_key: str, zset: str, owner: str) -> list[str]:
        """Sessions that ``owner`` ran (``<owner>/...`` too: a node's processes), removed;
        owner entries of sessions already gone are dropped too."""
        owners: dict[str, str] = self.client.hgetall(owner_key)  # type: ignore[assignment]
        if not owners:
            return []
        live = set(self.client.zrange(zset, 0, -1))
        mine = [m for m, n in owners.items() if (n == owner or n.startswith(owner + "/")) and m in live]
        gone = [m for m in owners if m not in live or m in mine]
        pipe = self.client.pipeline(transaction=False)
        if mine:
            pipe.zrem(zset, *mine)
        if gone:
            pipe.hdel(owner_key, *gone)
        pipe.execute()
        return mine

    def inflight_groups(self) -> set[str]:
        """Page groups between fetch and enqueue."""
        ids: list[str] = self.client.zrange(self.keys.inflight, 0, -1)  # type: ignore[assignment]
        return set(ids)

    def sessions_by_shard(self) -> dict[int, int]:
        out: dict[int, int] = {}
        members: list[str] = self.client.zrange(self.keys.sessions, 0, -1)  # type: ignore[assignment]
        for member in members:
            shard = member.split("/", 1)[0]
            if shard.isdigit():
                out[int(shard)] = out.get(int(shard), 0) + 1
        return out


def _state(raw: str | None) -> CrawlState:
    try:
        return CrawlState(raw) if raw else CrawlState.RUNNING
    except ValueError:  # an unknown value written by a newer version: treat as running
        return CrawlState.RUNNING
