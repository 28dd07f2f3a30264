"""Node identity: one machine per node name, checked when a worker starts.

A node name routes parse work to the machine that holds the fetched bodies
(``crawl.parse.<node>`` reads that machine's spool). Two machines under one name each
take the other's parse tasks, cannot read the spool files, and fetch every page again:
double load on every site, nothing reported as an error. So the workers of one
machine claim the name in Redis for the machine's id (``OUT_DIR/node-id``, created
once, shared by the fetch and parse workers that share the spool folder) and renew
the claim while they run; a worker of another machine under a held name refuses to
start. The claim lapses ``NODE_TTL_S`` after the last worker of a machine is gone, so
a dead machine's name can be taken over by a replacement after that long, and
maintenance hands the hosts whose leases its sessions renewed last over to the other
nodes at once (``hand_over_lost``) instead of waiting out ``LEASE_S``. Only a machine
whose workers all stopped is lost: a live parse worker keeps renewing the claim.
"""
from __future__ import annotations

import contextlib
import logging
import os
import threading
import uuid
from pathlib import Path

import redis

from crawler_tasks.connection import global_client
from crawler_tasks.exceptions import ConfigError
from crawler_tasks.frontier import Frontier
from crawler_tasks.keys import GlobalKeys
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


def hand_over_lost(settings: Settings, frontier: Frontier, now: float) -> dict[str, int]:
    """Put back the leased hosts of lost nodes (per node: hosts put back), free their
    session slots and page groups, then forget those names; a node that comes back claims its
    name again."""
    out: dict[str, int] = {}
    client = global_client(settings)
    for name in lost_nodes(settings):
        out[name] = sum(len(frontier.expire_node(shard, name, now)) for shard in range(settings.SHARDS))
        sessions, groups = Control(settings).drop_node_work(name)
        log.info("node %r lost: %d sessions and %d unparsed page groups forgotten", name, sessions, groups)
        client.srem(GlobalKeys(settings.KEY_PREFIX).nodes, name)
    return out
