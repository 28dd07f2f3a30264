"""A dead fetch worker process or node costs seconds, and nothing it held is lost (issues
24 and 28).

Leases and parked URLs belong to the fetch process that renewed or parked them; each
process renews a heartbeat, and maintenance hands over what a process whose heartbeat
lapsed held: its hosts at once (after one request gap), its fetched pages that never
reached parse queued again, its pages handed to parse left alone. A lost node's page
groups its parse workers never had are fetched again (their bodies were in its spool).

``pytest -s tests/test_process_loss.py`` prints the takeover after a kill -9 of one
fetch worker of ``manage.py crawl``.
"""
from __future__ import annotations

import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest

from crawler_tasks.frontier import Discovered, Frontier
from crawler_tasks.keys import GlobalKeys, ShardKeys
from crawler_tasks.records import Action
from crawler_tasks.runtime.control import Control
from crawler_tasks.runtime.maintenance import run_maintenance
from crawler_tasks.runtime.nodes import NodeClaim, ProcessBeat
from testweb import TestWeb

ROOT = Path(__file__).resolve().parent.parent


def setup_two_processes(settings, hosts: int, urls_per_host: int = 3):
    s = dataclasses.replace(settings, SHARDS=1, LEASE_S=120, MIN_DELAY_S=0.5, PROCESS_TTL_S=3)
    beats = [ProcessBeat(s), ProcessBeat(s)]
    frontiers = []
    for beat in beats:
        beat.beat()
        f = Frontier(s)
        f.owner = beat.id
        frontiers.append(f)
    names = [f"h{i}.test" for i in range(hosts)]
    frontiers[0].put_discovered([Discovered(f"http://{h}/{k}", h) for h in names for k in range(urls_per_host)])
    leases = {lease.host: lease for lease in frontiers[0].get_urls(0, 50)}
    assert set(leases) == set(names)
    return s, beats, frontiers, leases


def dies(s, rclient, beat: ProcessBeat, now: float) -> None:
    """The process's heartbeat lapses; maintenance finds it so, and still so half a time to
    live later."""
    rclient.delete(GlobalKeys(s.KEY_PREFIX).process(beat.id))
    run_maintenance(s, now=now - s.PROCESS_TTL_S / 2)
    run_maintenance(s, now=now)


def test_a_lost_fetch_process_hands_over_its_hosts_and_unhanded_pages_at_once(settings, rclient):
    s, (beat_a, beat_b), (fa, fb), leases = setup_two_processes(settings, hosts=6)
    k = ShardKeys(s.KEY_PREFIX, 0)
    mine = [x for x in fa.renew([leases[h] for h in ("h0.test", "h1.test", "h2.test")]) if x]
    theirs = [x for x in fb.renew([leases[h] for h in ("h3.test", "h4.test", "h5.test")]) if x]
    assert len(mine) == 3 and len(theirs) == 3
    now = time.time()
    # a fetched h0's head and holds h0 for its next turn; its page waits in the session's group
    h0 = fa.finish(mine[0], te=now + 1, hold_until=now + 1 + s.LEASE_S, handoff_until=now + s.LEASE_S)
    assert h0.held is not None
    # a fetched h1's head and handed the page to parse: that one must not be fetched again
    fa.finish(mine[1], te=now + 1, hold_until=now + 1 + s.LEASE_S, handoff_until=now + s.LEASE_S)
    assert fa.ack(0, [mine[1].raw], "g-parsed") == 1
    rclient.hset(k.host_state("h2.test"), mapping={"crawl_delay_s": "7.0"})
    # b parked a page too: its process lives on
    fb.finish(theirs[0], te=now + 1, hold_until=now + 1 + s.LEASE_S, handoff_until=now + s.LEASE_S)
    queued = fa.queued(0)

    run_maintenance(s, now=now)
    assert fa.get_urls(0, 50, now=now + 60) == []                  # both alive: nothing moves
    dies(s, rclient, beat_a, now)
    ready = dict(rclient.zrange(k.ready, 0, -1, withscores=True))
    assert set(ready) == {"h0.test", "h1.test", "h2.test"}
    assert ready["h0.test"] == pytest.approx(now + 1, abs=0.01)      # held: at its next contact
    assert ready["h2.test"] == pytest.approx(now + 7, abs=0.01)      # its Crawl-delay holds
    assert [e.url for e in fa.host_queue(0, "h0.test")][:2] == ["http://h0.test/0", "http://h0.test/1"]
    assert [e.url for e in fa.host_queue(0, "h1.test")] == ["http://h1.test/1", "http://h1.test/2"]
    assert fa.queued(0) == queued and rclient.zcard(k.handoff) == 1   # b's parked page stays parked
    assert rclient.hgetall(k.handoff_owner) == {theirs[0].raw: beat_b.id}
    assert set(rclient.hgetall(k.lease_owner)) == {"h3.test", "h4.test", "h5.test"}
    assert all(x is None for x in fa.renew([h0.held, mine[2]]))    # a, were it alive, drops them
    assert all(x is not None for x in fb.renew(theirs[1:]))
    stats = Control(s).stats()
    assert stats["frontier/process_lost"] == 1 and stats["frontier/process_lost_hosts"] == 3
    assert stats["frontier/handoff_returned"] == 1
    assert rclient.smembers(GlobalKeys(s.KEY_PREFIX).processes) == {beat_b.id}
    run_maintenance(s, now=now)                                       # once
    assert Control(s).stats()["frontier/process_lost"] == 1


def test_heartbeats_lapsed_by_a_redis_outage_are_not_taken_for_dead_processes(settings, rclient):
    """Redis was down (or restarted): every heartbeat lapsed at once. Maintenance only
    suspects them until they beat again, and nothing moves."""
    s, beats, (fa, fb), leases = setup_two_processes(settings, hosts=2)
    assert all(fa.renew([leases["h0.test"]])) and all(fb.renew([leases["h1.test"]]))
    now = time.time()
    for beat in beats:
        rclient.delete(GlobalKeys(s.KEY_PREFIX).process(beat.id))
    run_maintenance(s, now=now)
    assert all(not beat.beat() for beat in beats)      # back within a quarter of their time to live
    run_maintenance(s, now=now + s.PROCESS_TTL_S)
    assert rclient.zcard(ShardKeys(s.KEY_PREFIX, 0).lease) == 2
    assert rclient.hlen(GlobalKeys(s.KEY_PREFIX).process_suspects) == 0
    assert "frontier/process_lost" not in Control(s).stats()


def test_urls_handed_back_to_a_host_another_process_holds_go_after_the_url_it_is_fetching(settings, rclient):
    """a parks h0's first URL and dies; b has meanwhile leased h0 and is fetching its next
    head: the parked URL goes right after that head, so b's turn consumes what it fetched
    (pushed in front, the head would stay queued and be fetched a second time)."""
    s, (beat_a, beat_b), (fa, fb), leases = setup_two_processes(settings, hosts=1)
    (mine,) = [x for x in fa.renew([leases["h0.test"]]) if x]
    now = time.time()
    assert fa.finish(mine, te=now, handoff_until=now + s.LEASE_S).ok     # a gives h0 back between turns
    (theirs,) = fb.get_urls(0, 5, now=now + 1, owner=beat_b.id)
    assert theirs.entry.url == "http://h0.test/1"
    dies(s, rclient, beat_a, now + 1)
    done = fb.finish(theirs, te=now + 2, hold_until=now + 2 + s.LEASE_S)
    assert done.held is not None and done.held.entry.url == "http://h0.test/0"
    assert [e.url for e in fb.host_queue(0, "h0.test")] == ["http://h0.test/0", "http://h0.test/2"]


def test_a_dead_processes_session_slots_and_the_hosts_wake_leased_for_them_are_freed(settings, rclient):
    """Wake leases hosts for a session; the process that takes it dies before its first
    renewal: the hosts still name the session, and go back with its slot. A process
    taken for dead that was alive after all beats again, and is watched again."""
    s, (beat_a, beat_b), _, leases = setup_two_processes(settings, hosts=4)
    f = Frontier(s)
    control = Control(s)
    control.start()
    for session, beat, hosts in (("sa", beat_a, ["h0.test", "h1.test"]), ("sb", beat_b, ["h2.test", "h3.test"])):
        control.begin_session(0, session, time.time() + 600)
        f.own_leases(0, hosts, control.session(0, session))
        control.own_session(0, session, beat.id)
    fb = Frontier(s)
    fb.owner = beat_b.id
    assert all(fb.renew([leases["h2.test"], leases["h3.test"]]))   # b's session started
    dies(s, rclient, beat_a, time.time())
    assert control.sessions_by_shard() == {0: 1}
    assert rclient.hgetall(control.keys.session_owner) == {"0/sb": beat_b.id}
    assert {lease.host for lease in f.get_urls(0, 50, now=time.time() + 5)} == {"h0.test", "h1.test"}
    assert Control(s).stats()["frontier/process_lost_hosts"] == 2
    assert not beat_a.beat() and beat_a.beat()     # it was alive after all: it says so, and is watched again
    assert beat_a.id in rclient.smembers(GlobalKeys(s.KEY_PREFIX).processes)


def test_a_lost_nodes_unparsed_page_groups_are_fetched_again_and_finished_groups_forgotten(settings, tmp_path,
                                                                                          rclient):
    s, _, (fa, _), leases = setup_two_processes(settings, hosts=3)
    na = dataclasses.replace(s, NODE_NAME="na", OUT_DIR=str(tmp_path / "a"))
    nb = dataclasses.replace(s, NODE_NAME="nb", OUT_DIR=str(tmp_path / "b"))
    NodeClaim(na).claim()
    NodeClaim(nb).claim()
    k = ShardKeys(s.KEY_PREFIX, 0)
    control = Control(s)
    control.start()
    now = time.time()
    groups = {"g-na": ("h0.test", "na"), "g-na-parsed": ("h1.test", "na"), "g-nb": ("h2.test", "nb")}
    for group, (host, node) in groups.items():
        (lease,) = [x for x in fa.renew([leases[host]]) if x]
        fa.finish(lease, te=now, action=Action.DONE, handoff_until=now + s.LEASE_S)
        control.begin_batches([group], now + 600, node)
        assert fa.ack(0, [lease.raw], group) == 1
    assert control.claim_group("g-na-parsed", "nb")   # parsed, and nb's enqueue worker took it
    queued = fa.queued(0)
    assert queued == 6 and set(rclient.hkeys(k.parsing)) == set(groups)
    rclient.delete(GlobalKeys(s.KEY_PREFIX).node("na"))
    run_maintenance(s, now=now)
    assert [e.url for e in fa.host_queue(0, "h0.test")] == ["http://h0.test/0", "http://h0.test/1",
                                                           "http://h0.test/2"]
    assert [e.url for e in fa.host_queue(0, "h1.test")] == ["http://h1.test/1", "http://h1.test/2"]
    assert fa.queued(0) == queued + 1
    assert set(rclient.hkeys(k.parsing)) == {"g-na-parsed", "g-nb"}
    # its parse message, taken by a worker that died or waiting for na, turns up: skipped
    assert not control.claim_group("g-na", "na") and control.claim_group("g-nb", "nb")
    control.end_batch("g-na-parsed")          # enqueued: its URLs are kept no longer
    run_maintenance(s, now=now)
    assert set(rclient.hkeys(k.parsing)) == {"g-nb"}


def test_a_stale_page_group_whose_worker_died_with_its_message_is_delivered_again(settings, tmp_path):
    """A parse worker killed in its task leaves the group's message unacknowledged, and
    the run may have written the group's feed lines. Past the group's deadline the
    message goes back to its queue (run again, it writes nothing twice), rather than the
    group given up and its pages fetched and written again; a message taken just now
    stays with its worker; one delivered again MAX_REDELIVERIES times is given up."""
    from kombu import Connection, Exchange, Queue

    from crawler_tasks.broker import broker_options
    from crawler_tasks.connection import broker_url
    from crawler_tasks.queues import parse_queue
    from crawler_tasks.runtime.maintenance import MAX_REDELIVERIES

    s = dataclasses.replace(settings, BATCH_TIMEOUT_S=20.0)
    control = Control(s)
    control.start()
    name = parse_queue(s.node_name)
    with Connection(broker_url(s), transport_options=broker_options(s)) as conn:
        queue = Queue(name, Exchange(name), routing_key=name)
        producer = conn.Producer()
        channel = conn.channel()

        def send(group: str) -> None:   # as Celery sends it: [args, kwargs, embed]
            producer.publish([[[{"url": f"http://a.test/{group}"}], group], {}, {}], exchange=queue.exchange,
                             routing_key=name, declare=[queue], headers={"task": "crawler.parse"},
                             serializer="json")
            control.begin_batches([group], time.time() - 1, s.node_name)

        def take() -> str:   # a worker takes the message; it never acknowledges it
            message = queue(channel).get(no_ack=False)
            assert message is not None
            return message.payload[0][1]

        send("g-dead")
        assert take() == "g-dead"
        t0 = time.time()
        run_maintenance(s, now=t0)   # just taken: it is the worker's, which only now got to it
        assert control.stale_groups(t0) == {} and control.stats().get("frontier/group_redelivered", 0) == 0
        assert queue(conn.channel()).get(no_ack=True) is None   # not queued again
        for times in range(1, MAX_REDELIVERIES + 1):   # its worker died: queued again, each time
            later = time.time() + (s.batch_timeout_s + 1) * times
            run_maintenance(s, now=later)
            assert control.stats()["frontier/group_redelivered"] == times
            assert "g-dead" in control.inflight_groups() and not control.stale_groups(later)
            assert take() == "g-dead"   # and taken again by the next worker, which dies too
        send("g-queued")   # past its deadline, still in its queue: nobody holds it
        run_maintenance(s, now=time.time() + (s.batch_timeout_s + 1) * (MAX_REDELIVERIES + 1))
        assert control.stats()["frontier/group_redelivered"] == MAX_REDELIVERIES
        assert not control.inflight_groups()
        assert not control.claim_group("g-dead", s.node_name)   # given up: should it turn up, skipped
        assert not control.claim_group("g-queued", s.node_name)


def test_a_stage_worker_restarted_under_its_name_puts_back_at_once_what_its_dead_predecessor_took(settings):
    """``manage.py crawl`` (or a service manager) restarts a dead parse worker under its
    name: at start it puts back the messages its predecessor had taken, whose groups would
    wait for their deadline otherwise; not those of another worker, nor its own, nor a
    group's past MAX_REDELIVERIES."""
    from kombu import Connection, Exchange, Queue

    from crawler_tasks.broker import broker_options
    from crawler_tasks.connection import broker_url
    from crawler_tasks.queues import PARSE_TASK, parse_queue
    from crawler_tasks.runtime.maintenance import MAX_REDELIVERIES, redeliver_predecessor

    s = settings
    control = Control(s)
    name = parse_queue(s.node_name)
    with Connection(broker_url(s), transport_options=broker_options(s)) as conn:
        queue = Queue(name, Exchange(name), routing_key=name)
        producer = conn.Producer()
        channel = conn.channel()

        def taken_by(worker: str, group: str) -> None:
            producer.publish([[[{"url": f"http://a.test/{group}"}], group], {}, {}], exchange=queue.exchange,
                             routing_key=name, declare=[queue], headers={"task": PARSE_TASK}, serializer="json")
            message = queue(channel).get(no_ack=False)
            assert message.payload[0][1] == group
            control.begin_batches([group], time.time() + 600, s.node_name)
            control.work_on_group(group, PARSE_TASK, worker)

        taken_by("process0-1@vm", "g-dead")
        taken_by("process1-1@vm", "g-sibling")
        taken_by("process0-1@vm", "g-poison")
        control.count_redelivered(["g-poison"] * MAX_REDELIVERIES)
        time.sleep(0.01)
        started = time.time()
        time.sleep(0.01)
        taken_by("process0-1@vm", "g-own")   # the new worker's own, taken since it started
        assert redeliver_predecessor(s, "process0-1@vm", started) == 1
        assert queue(conn.channel()).get(no_ack=True).payload[0][1] == "g-dead"
        assert queue(conn.channel()).get(no_ack=True) is None
        assert control.stats()["frontier/group_redelivered"] == 1
        assert redeliver_predecessor(s, "process9-1@vm", started) == 0


def test_a_fetch_session_taken_by_a_worker_that_died_before_starting_it_frees_its_slot_and_hosts(settings):
    """A fetch worker killed between taking a session's message and starting the session:
    no process or node owns the session, so only its deadline (BATCH_TIMEOUT_S) freed its
    slot and only LEASE_S its hosts, and a shard with one slot stopped fetching meanwhile
    (CI: a two-node cluster crawl stalled with 180 URLs queued). Once the message is
    1.5 x PROCESS_TTL_S old its hosts and slot go back; a session still queued, or
    started, stays."""
    from kombu import Connection, Exchange, Queue

    from crawler_tasks.broker import broker_options
    from crawler_tasks.connection import broker_url
    from crawler_tasks.queues import fetch_queue
    from crawler_tasks.stages.wake import plan_wake

    s = dataclasses.replace(settings, SHARDS=1, MAX_FETCH_SESSIONS=3, FETCH_BATCH=2, PROCESS_TTL_S=3)
    control = Control(s)
    control.start()
    frontier = Frontier(s)
    frontier.put_discovered([Discovered(f"http://h{i}.test/", f"h{i}.test") for i in range(6)])
    starts = plan_wake(s, frontier)
    assert len(starts) == 3 and frontier.leased_hosts() == 6
    dead, queued, started = starts
    control.own_session(0, started.session_id, "n1/123.abc")   # its task began
    name = fetch_queue(0)
    with Connection(broker_url(s), transport_options=broker_options(s)) as conn:
        queue = Queue(name, Exchange(name), routing_key=name)
        producer = conn.Producer()
        for start in (dead, queued):   # as Celery sends them: [args, kwargs, embed]
            leases = [[lease.host, lease.raw, lease.token] for lease in start.leases]
            producer.publish([[0, start.session_id, leases], {}, {}], exchange=queue.exchange, routing_key=name,
                             declare=[queue], headers={"task": "crawler.fetch"}, serializer="json")
        assert queue(conn.channel()).get(no_ack=False).payload[0][1] == dead.session_id   # its worker dies now
        run_maintenance(s, frontier, now=time.time() + 1)   # not yet: a live worker may start it still
        assert sum(control.sessions_by_shard().values()) == 3
        later = time.time() + 1.5 * s.PROCESS_TTL_S + 1
        run_maintenance(s, frontier, now=later)
        assert sum(control.sessions_by_shard().values()) == 2
        assert control.stats()["frontier/session_unstarted"] == 1
        assert frontier.leased_hosts() == 4   # the dead session's two hosts are ready again
        again = frontier.get_urls(0, 10, now=later + s.MIN_DELAY_S + 1)
        assert {lease.host for lease in again} == {lease.host for lease in dead.leases}
        assert conn.default_channel.client.hlen(conn.default_channel.qos.unacked_key) == 0   # not delivered again
        assert queue(conn.channel()).get(no_ack=True).payload[0][1] == queued.session_id   # still waits for a worker


# -- kill -9 of one fetch worker of manage.py crawl: takeover time, measured -----------------
HOSTS, PAGES, DELAY = 8, 25, 0.5
UA = "lossbot/1.0 (+http://127.0.0.1/bot)"


def lines(path: Path) -> list[dict]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        return []


def test_kill_9_of_one_fetch_worker_costs_seconds(tmp_path):
    """Two fetch workers; one is killed mid-crawl. Printed: per host, the time from the kill
    to its next request (the dead worker's hosts wait longest: that is the takeover),
    pages fetched twice at the servers, records. LEASE_S is 30 s, so a takeover in
    seconds is the heartbeat's doing, not a lease expiring."""
    out = tmp_path / "out"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")},
           "CRAWLER_LEASE_S": "30", "CRAWLER_TOTAL_TIMEOUT_S": "10", "CRAWLER_METRICS_PORT": "-1"}
    with TestWeb(n_hosts=HOSTS, pages_per_host=PAGES, seed=31, mean_page_bytes=3000) as web:
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "crawl", *web.seeds(all_hosts=True), "--out", str(out),
             "--allow-private", "--min-delay", str(DELAY), "--user-agent", UA],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.time() + 90
            while time.time() < deadline and proc.poll() is None and len(lines(out / "pages.jsonl")) < 40:
                time.sleep(0.05)
            assert proc.poll() is None, "the crawl ended before the fault: " + proc.communicate()[1][-2000:]
            victim = next(p for p in psutil.process_iter(["cmdline"])
                          if f"fetch0-{proc.pid}@" in " ".join(p.info["cmdline"] or []))
            victim.kill()
            killed_at = time.time()
            _, err = proc.communicate(timeout=240)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode == 0, err[-3000:]
        reachable = web.reachable(web.seeds(all_hosts=True))
        gets = Counter(r.host + r.path for r in web.requests if r.method == "GET" and r.path != "/robots.txt")
        waits = {}
        for host in {r.host for r in web.requests}:
            after = [r.start for r in web.requests if r.host == host and r.start > killed_at]
            if after:
                waits[host] = min(after) - killed_at
    recs = lines(out / "pages.jsonl")
    urls = [r["url"] for r in recs]
    refetched = sum(n - 1 for n in gets.values() if n > 1)
    stats = subprocess.run([sys.executable, str(ROOT / "manage.py"), "stats", "--out", str(out)], cwd=ROOT,
                           env=env, capture_output=True, text=True, timeout=60).stdout
    lost = [ln.strip() for ln in stats.splitlines() if "process_lost" in ln or "handoff_returned" in ln
            or "lease_expired" in ln]
    print(f"\nkill -9 of 1 of 2 fetch workers, {HOSTS} hosts, delay {DELAY:g} s, LEASE_S 30: next request per host "
          f"after the kill: max {max(waits.values()):.1f} s, median {statistics.median(waits.values()):.1f} s; "
          f"fetched twice {refetched}; records {len(recs)} (reachable {len(reachable)}, duplicates "
          f"{len(urls) - len(set(urls))}); {'; '.join(lost)}")
    assert set(urls) >= reachable and len(urls) == len(set(urls))
    assert refetched <= HOSTS     # at most a page in flight per host held by the dead worker
