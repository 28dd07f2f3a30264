"""Node identity: one machine per node name, checked when a worker starts; and the
heartbeat of each fetch worker process, so that a dead one's work is handed over at once.

A node name routes parse work to the machine that holds the fetched bodies
(``crawl.parse.<node>`` reads that machine's spool). Two machines under one name each
take the other's parse tasks, cannot read the spool files, and fetch every page again:
double load on every site, nothing reported as an error. So the workers of one
machine claim the name in Redis for the machine's id (``OUT_DIR/node-id``, created
once, shared by the fetch and parse workers that share the spool folder) and renew
the claim while they run; a worker of another machine under a held name refuses to
start. The claim lapses ``NODE_TTL_S`` after the last worker of a machine is gone, so
a dead machine's name can be taken over by a replacement after that long, and
maintenance queues again the page groups its parse workers never parsed
(``hand_over_lost``). Only a machine whose workers all stopped is lost: a live parse
worker keeps renewing the claim.

Leases and parked URLs belong to a fetch worker *process* (``<node>/<pid>.<random>``),
not to its node: a node runs several, and one of them dying (kill -9, out of memory)
must not wait out ``LEASE_S`` for its hosts while its siblings live. Each fetch process
renews a heartbeat key (``ProcessBeat``, ``PROCESS_TTL_S``); maintenance hands over
what a process whose heartbeat lapsed held (``hand_over_lost_processes``): its hosts at
once (after one request gap), its fetched pages not yet handed to parse queued again.
Pages it handed to parse are not fetched again: its node's parse workers have them.
"""
from __future__ import annotations

import contextlib
import logging
import os
import secrets
import threading
import time
import uuid
from pathlib import Path

import redis

from crawler_tasks.connection import broker_url, global_client
from crawler_tasks.exceptions import ConfigError
from crawler_tasks.frontier import Frontier
from crawler_tasks.keys import GlobalKeys
from crawler_tasks.queues import FETCH_TASK
from crawler_tasks.runtime.control import Control
from crawler_tasks.settings import Settings

log = logging.getLogger(__name__)

_CLAIM = (Path(__file__).parent / "node.lua").read_text()
NODE_ID_FILE = "node-id"


def node_id(out_dir: str | os.PathLike) -> str:
    """This machine's id: the one in ``out_dir/node-id``, made on first use (atomically,
    so workers starting together agree)."""
    path = Path(out_dir) / NODE_ID_FILE
    with contextlib.suppress(FileNotFoundError):
        text = path.read_text().strip()
        if text:
            return text
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{NODE_ID_FILE}.{os.getpid()}.tmp")
    tmp.write_text(uuid.uuid4().hex + "\n")
    try:
        os.link(tmp, path)   # fails if another worker made it first: theirs stands
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    return path.read_text().strip()


class NodeClaim:
    """The claim of this machine on its node name, renewed by a daemon thread."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.name = settings.node_name
        self.id = node_id(settings.OUT_DIR)
        keys = GlobalKeys(settings.KEY_PREFIX)
        self.key, self.names = keys.node(self.name), keys.nodes
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def claim(self) -> None:
        """Take or renew the name; ConfigError when another machine holds it."""
        client = global_client(self.settings)
        holder = client.register_script(_CLAIM)(keys=[self.key, self.names],
                                                args=[self.id, int(self.settings.NODE_TTL_S * 1000), self.name])
        if holder:
            raise ConfigError(
                f"node name {self.name!r} is held by another machine (node id {holder}, this one is {self.id}): "
                f"give each machine its own CRAWLER_NODE_NAME (its parse queue reads its own spool folder); "
                f"a dead machine's name is free {self.settings.NODE_TTL_S:g} s after its workers stopped")

    def start(self) -> None:
        self.claim()
        self._thread = threading.Thread(target=self._renew, name="node-claim", daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        every = self.settings.NODE_TTL_S / 3
        while not self._stop.wait(every):
            try:
                self.claim()
            except ConfigError as exc:  # taken over while Redis could not be reached: say so each time
                log.error("%s", exc)
            except redis.RedisError as exc:
                log.warning("node claim not renewed: %s", exc)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)


def lost_nodes(settings: Settings) -> list[str]:
    """Names claimed whose claim has lapsed: every worker of that machine is gone."""
    client = global_client(settings)
    keys = GlobalKeys(settings.KEY_PREFIX)
    names: list[str] = sorted(client.smembers(keys.nodes))  # type: ignore[arg-type]
    if not names:
        return []
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.exists(keys.node(name))
    return [str(name) for name, alive in zip(names, pipe.execute(), strict=True) if not alive]


def hand_over_lost(settings: Settings, frontier: Frontier, now: float) -> dict[str, tuple[int, int]]:
    """Hand over what lost nodes held (per node: hosts put back, fetched URLs queued
    again): leases renewed under the node's name (by clients that run no heartbeat; its
    fetch processes' are handed over as processes), its session slots, and the page
    groups its parse workers never parsed, whose pages are fetched again (their bodies
    were in its spool folder). Then the names are forgotten; a node that comes back
    claims its name again."""
    out: dict[str, tuple[int, int]] = {}
    client = global_client(settings)
    for name in lost_nodes(settings):
        hosts, parked = _release(settings, frontier, name, now)
        sessions, groups = Control(settings).drop_node_work(name)
        more, _ = _release_sessions(frontier, sessions, now)
        refetch = frontier.return_groups(groups, now)
        log.info("node %r lost: %d sessions forgotten, %d page groups given up (%d URLs queued again)",
                 name, len(sessions), len(groups), refetch)
        out[name] = (hosts + more, parked + refetch)
        client.srem(GlobalKeys(settings.KEY_PREFIX).nodes, name)
    return out


def hand_over_unstarted_sessions(settings: Settings, frontier: Frontier, now: float) -> tuple[int, int]:
    """Fetch sessions whose message a worker took and never started: its worker died in
    between (a live one owns a session as its task starts, ``Control.own_session``), so
    neither its process's loss nor its node's names them. Their slots held the shard's
    fetching to a stop until BATCH_TIMEOUT_S, and the hosts wake leased for them waited
    out LEASE_S. Taken more than 1.5 x PROCESS_TTL_S ago (when a dead process is found
    lost), their slots are freed, their hosts handed over and their messages dropped.
    Returns (sessions, hosts)."""
    taken_before = now - 1.5 * settings.PROCESS_TTL_S
    control = Control(settings)
    waiting = {member.split("/", 1)[1]: member for member in control.unowned_sessions(taken_before)}
    if not waiting:
        return 0, 0
    from crawler_tasks.broker import broker_options, drop_unstarted  # kombu: only then

    try:
        dropped = drop_unstarted(broker_url(settings), FETCH_TASK, waiting, taken_before, broker_options(settings))
    except Exception as exc:  # noqa: BLE001 - the broker is down: their slots wait for BATCH_TIMEOUT_S
        log.warning("could not look for the messages of %d fetch sessions not started: %s", len(waiting), exc)
        return 0, 0
    members = [waiting[session_id] for session_id in dropped]
    control.forget_sessions(members)
    hosts, _ = _release_sessions(frontier, members, now)
    return len(members), hosts


def _release(settings: Settings, frontier: Frontier, owner: str, now: float) -> tuple[int, int]:
    hosts = parked = 0
    for shard in range(settings.SHARDS):
        released, due = frontier.release_owner(shard, owner, now)
        hosts, parked = hosts + len(released), parked + due
    return hosts, parked


def _release_sessions(frontier: Frontier, sessions: list[str], now: float) -> tuple[int, int]:
    """The hosts wake leased for sessions whose process died before renewing them."""
    hosts = parked = 0
    for session in sessions:
        shard = session.split("/", 1)[0]
        if shard.isdigit() and int(shard) < frontier.shards:
            released, due = frontier.release_owner(int(shard), session, now)
            hosts, parked = hosts + len(released), parked + due
    return hosts, parked


class ProcessBeat:
    """A fetch worker process's heartbeat: a key with a time to live, renewed by a daemon
    thread every quarter of ``PROCESS_TTL_S``. Started by the process's first fetch task;
    the frontier client then renews leases and parks URLs under the process's id."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.id = f"{settings.node_name}/{os.getpid()}.{secrets.token_hex(3)}"
        keys = GlobalKeys(settings.KEY_PREFIX)
        self.key, self.all = keys.process(self.id), keys.processes
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def beat(self) -> bool:
        """Renew the heartbeat; False when it had lapsed (maintenance may have handed this
        process's hosts over already: its sessions then find those leases lost). The id
        joins the set each time: maintenance may have just forgotten it."""
        client = global_client(self.settings)
        ttl_ms = int(self.settings.PROCESS_TTL_S * 1000)
        pipe = client.pipeline(transaction=False)
        pipe.set(self.key, "1", px=ttl_ms, xx=True)
        pipe.sadd(self.all, self.id)
        renewed, _ = pipe.execute()
        if not renewed:
            client.set(self.key, "1", px=ttl_ms)
        return bool(renewed)

    def start(self) -> None:
        self.beat()
        self._thread = threading.Thread(target=self._run, name="process-beat", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        every = self.settings.PROCESS_TTL_S / 4
        last = time.monotonic()
        while not self._stop.wait(every):
            try:
                if not self.beat():
                    log.warning("fetch process %s: its heartbeat lapsed (%.1f s since the last one); its "
                                "hosts may have been handed over", self.id, time.monotonic() - last)
                last = time.monotonic()
            except redis.RedisError as exc:
                log.warning("fetch process heartbeat not renewed: %s", exc)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)


def lost_processes(settings: Settings, now: float) -> list[str]:
    """Fetch processes whose heartbeat lapsed and stayed lapsed for half its time to live
    since maintenance first found it so: every heartbeat lapses together while Redis is
    down (a restart, a failover), and a live process beats again within a quarter of it
    once Redis is back. Found alive again, a process is no longer suspected."""
    client = global_client(settings)
    keys = GlobalKeys(settings.KEY_PREFIX)
    ids: list[str] = sorted(client.smembers(keys.processes))  # type: ignore[arg-type]
    suspects: dict[str, str] = client.hgetall(keys.process_suspects)  # type: ignore[assignment]
    if not ids and not suspects:
        return []
    pipe = client.pipeline(transaction=False)
    for pid in ids:
        pipe.exists(keys.process(pid))
    lost, new = [], {}
    cleared = [pid for pid in suspects if pid not in ids]
    for pid, alive in zip(ids, pipe.execute(), strict=True):
        if alive:
            if pid in suspects:
                cleared.append(pid)
        elif pid not in suspects:
            new[pid] = now
        elif now - float(suspects[pid]) >= settings.PROCESS_TTL_S / 2:
            lost.append(pid)
    pipe = client.pipeline(transaction=False)
    if new:
        pipe.hset(keys.process_suspects, mapping=new)  # type: ignore[arg-type]
    if cleared or lost:
        pipe.hdel(keys.process_suspects, *cleared, *lost)
    pipe.execute()
    return lost


def hand_over_lost_processes(settings: Settings, frontier: Frontier, now: float) -> dict[str, tuple[int, int]]:
    """Per lost fetch process: (hosts handed over, fetched URLs queued again); its
    session slots are freed, and its id forgotten."""
    out: dict[str, tuple[int, int]] = {}
    client = global_client(settings)
    for pid in lost_processes(settings, now):
        hosts, parked = _release(settings, frontier, pid, now)
        more, _ = _release_sessions(frontier, Control(settings).drop_sessions(pid), now)
        out[pid] = (hosts + more, parked)
        client.srem(GlobalKeys(settings.KEY_PREFIX).processes, pid)
    return out
