"""Frontier invariants against a real redis-server."""
from __future__ import annotations

import dataclasses
import random
import time
from collections import Counter

import pytest

import crawler_tasks.frontier as frontier_module
from crawler_tasks.frontier import Discovered, Entry, Frontier, Verdict
from crawler_tasks.records import Action


def d(url: str, depth: int = 0, priority: int = 0, force: bool = False) -> Discovered:
    host = url.split("/")[2]
    return Discovered(url=url, host=host, depth=depth, priority=priority, force=force)


@pytest.fixture
def frontier(settings) -> Frontier:
    return Frontier(settings)


def drain(frontier: Frontier, now: float = 1000.0, max_rounds: int = 10_000) -> list[str]:
    """Lease and complete everything, host by host; returns URLs in fetch order."""
    fetched = []
    for _ in range(max_rounds):
        leases = [lease for s in range(frontier.shards) for lease in frontier.get_urls(s, 100, now=now)]
        if not leases:
            if all(frontier.sizes(s)["front"] + frontier.sizes(s)["back"] == 0 for s in range(frontier.shards)):
                return fetched
            now += 1
            continue
        for lease in leases:
            fetched.append(lease.entry.url)
            assert frontier.complete(lease, te=now)
    raise AssertionError("frontier did not drain")


def test_entry_roundtrip():
    e = Entry("http://a.example/x y", depth=3, tries=1, hops=2)
    assert Entry.decode(e.encode()) == e


def test_put_discovered_dedups(frontier):
    added = frontier.put_discovered([d("http://a.test/1"), d("http://a.test/2"), d("http://a.test/1")])
    assert added == [True, True, False]
    assert frontier.put_discovered([d("http://a.test/2")]) == [False]


def test_one_lease_per_host_and_fifo(frontier):
    urls = [f"http://a.test/{i}" for i in range(5)]
    frontier.put_discovered([d(u) for u in urls])
    shard = frontier.shard_of("a.test")
    first = frontier.get_urls(shard, 10, now=100.0)
    assert [lease.host for lease in first] == ["a.test"]
    assert first[0].entry.url == urls[0]
    # leased: not handed out again, even though more URLs wait
    assert frontier.get_urls(shard, 10, now=100.0) == []
    assert frontier.complete(first[0], te=105.0)
    # not ready before te
    assert frontier.get_urls(shard, 10, now=104.9) == []
    second = frontier.get_urls(shard, 10, now=105.0)
    assert second[0].entry.url == urls[1]
    frontier.complete(second[0], te=105.0)
    assert drain(frontier, now=200.0) == urls[2:]


def test_no_url_lost_across_many_hosts_and_shards(frontier):
    rng = random.Random(7)
    urls = [f"http://h{rng.randrange(40)}.test/p{i}" for i in range(600)]
    results = frontier.put_discovered([d(u, priority=rng.randrange(3)) for u in urls])
    assert all(results)
    fetched = drain(frontier)
    assert Counter(fetched) == Counter(urls)
    # per-host FIFO within a priority level is preserved by the back queues
    by_host: dict[str, list[str]] = {}
    for u in fetched:
        by_host.setdefault(u.split("/")[2], []).append(u)
    assert len(by_host) == 40


def test_active_hosts_bounded_and_refill(settings):
    frontier = Frontier(dataclasses.replace(settings, MAX_ACTIVE_HOSTS=3, SHARDS=1))
    frontier.put_discovered([d(f"http://h{i}.test/{j}") for i in range(10) for j in range(2)])
    leases = frontier.get_urls(0, 100, now=10.0)
    assert len(leases) == 3
    assert frontier.sizes(0)["active_hosts"] == 3
    for lease in leases:
        frontier.complete(lease, te=10.0)
    fetched = drain(frontier, now=20.0)
    assert len(fetched) + 3 == 20


def test_priority_weighting_favours_high_priority(settings):
    frontier = Frontier(dataclasses.replace(settings, MAX_ACTIVE_HOSTS=1, SHARDS=1))
    items = [d(f"http://hi{i}.test/", priority=0) for i in range(200)]
    items += [d(f"http://lo{i}.test/", priority=2) for i in range(200)]
    frontier.put_discovered(items)
    order = drain(frontier)
    first_half = order[:200]
    high = sum(1 for u in first_half if "//hi" in u)
    assert high > 140, high  # weights 4:1 -> ~80 % high priority while both are non-empty


def test_lease_expiry_returns_host_and_stale_complete_is_refused(frontier):
    frontier.put_discovered([d("http://a.test/1"), d("http://a.test/2")])
    shard = frontier.shard_of("a.test")
    lease = frontier.get_urls(shard, 10, lease_s=30, now=100.0)[0]
    assert frontier.expire(shard, now=129.0) == []
    assert frontier.expire(shard, now=131.0) == ["a.test"]
    again = frontier.get_urls(shard, 10, now=131.0)
    assert again and again[0].entry.url == "http://a.test/1"  # the URL was not lost
    assert not frontier.complete(lease, te=131.0)  # the dead worker's late answer is ignored
    assert frontier.complete(again[0], te=131.0)
    assert drain(frontier, now=140.0) == ["http://a.test/2"]


def test_renew(frontier):
    frontier.put_discovered([d("http://a.test/1")])
    shard = frontier.shard_of("a.test")
    lease = frontier.get_urls(shard, 10, lease_s=10, now=100.0)[0]
    renewed = frontier.renew([lease], lease_s=50, now=105.0)[0]
    assert renewed is not None
    assert frontier.expire(shard, now=120.0) == []
    assert frontier.renew([lease], now=106.0) == [None]  # old token no longer valid
    assert frontier.complete(renewed, te=106.0)


def test_retry_moves_url_to_tail_and_keep_keeps_it(frontier):
    frontier.put_discovered([d("http://a.test/1"), d("http://a.test/2")])
    shard = frontier.shard_of("a.test")
    lease = frontier.get_urls(shard, 1, now=1.0)[0]
    assert frontier.complete(lease, te=1.0, action="keep")
    lease = frontier.get_urls(shard, 1, now=1.0)[0]
    assert lease.entry.url == "http://a.test/1"
    assert frontier.complete(lease, te=1.0, action="retry")
    queue = frontier.host_queue(shard, "a.test")
    assert [e.url for e in queue] == ["http://a.test/2", "http://a.test/1"]
    assert queue[1].tries == 1


def test_te_remembered_when_host_leaves_and_returns(frontier):
    frontier.put_discovered([d("http://a.test/1")])
    shard = frontier.shard_of("a.test")
    lease = frontier.get_urls(shard, 1, now=1.0)[0]
    frontier.complete(lease, te=50.0)  # back queue empty -> host inactive, te kept
    assert frontier.sizes(shard)["active_hosts"] == 0
    frontier.put_discovered([d("http://a.test/2")])
    assert frontier.get_urls(shard, 1, now=49.0) == []
    assert frontier.get_urls(shard, 1, now=50.0)[0].entry.url == "http://a.test/2"


def test_forced_seeds_use_exact_set(settings):
    # a tiny Bloom filter saturates: non-forced URLs get false positives, seeds never do
    frontier = Frontier(dataclasses.replace(settings, BLOOM_EXPECTED_URLS=1, SHARDS=1))
    frontier.put_discovered([d(f"http://a.test/{i}") for i in range(500)])
    seeds = [d(f"http://seed.test/{i}", force=True) for i in range(100)]
    assert all(frontier.put_discovered(seeds))
    assert not any(frontier.put_discovered(seeds))


def test_a_batch_past_redis_argument_limit_is_chunked_and_fully_accounted_for(settings):
    # 200k URLs of one batch for one shard: 8 arguments each would be 1.6M arguments in one call,
    # past Redis's limit of 1,048,576 (the whole batch used to fail, then be dropped).
    s = dataclasses.replace(settings, SHARDS=1, BLOOM_EXPECTED_URLS=2_000_000, MAX_PAGES_PER_HOST=0)
    frontier = Frontier(s)
    urls = [f"http://h{i % 997}.test/p{i}" for i in range(200_000)]
    # repeats of URLs from the first chunk, placed in later chunks: must come back Verdict.SEEN
    batch = urls[:150_000] + urls[:5] + urls[150_000:] + urls[10:12]
    verdicts = frontier.put_discovered([d(u) for u in batch])
    assert len(verdicts) == len(batch)
    assert set(verdicts) <= {Verdict.ENQUEUED, Verdict.SEEN}
    assert verdicts[150_000:150_005] == [Verdict.SEEN] * 5 and verdicts[-2:] == [Verdict.SEEN, Verdict.SEEN]
    enqueued = [u for u, v in zip(batch, verdicts) if v == Verdict.ENQUEUED]
    assert len(enqueued) >= 199_000  # all but Bloom false positives (~0.01 % here)
    queued = []
    for shard in range(frontier.shards):
        client = frontier.client(shard)
        front = [Entry.decode(raw).url for raw in client.lrange(frontier.keys(shard).front(0), 0, -1)]
        assert front == [u for u in enqueued if frontier.shard_of(u.split("/")[2]) == shard]  # input order
        assert int(client.get(frontier.keys(shard).queued)) == len(front)
        queued += front
    assert len(queued) == len(enqueued)


def test_budgets_hold_across_chunk_boundaries(settings, monkeypatch):
    monkeypatch.setattr(frontier_module, "ADD_CHUNK_URLS", 3)
    frontier = Frontier(dataclasses.replace(settings, MAX_PAGES_PER_HOST=5))
    urls = [f"http://a.test/{i}" for i in range(10)] + ["http://a.test/0"]
    verdicts = frontier.put_discovered([d(u) for u in urls])
    assert verdicts == [Verdict.ENQUEUED] * 5 + [Verdict.OVER_HOST_BUDGET] * 5 + [Verdict.SEEN]
    shard = frontier.shard_of("a.test")
    front = frontier.client(shard).lrange(frontier.keys(shard).front(0), 0, -1)
    assert [Entry.decode(raw).url for raw in front] == urls[:5]


def test_a_fetched_url_stays_parked_until_its_page_is_handed_on(settings):
    """finish(handoff_until) keeps a done URL counted and parked; ack drops it; a parked
    URL whose worker died comes back at the head of its host's queue."""
    from crawler_tasks.records import Action

    s = dataclasses.replace(settings, SHARDS=1)
    f = Frontier(s)
    f.put_discovered([Discovered(url=f"http://h.test/{i}", host="h.test") for i in range(3)])
    lease = f.get_urls(0, 1)[0]
    now = time.time()
    done = f.finish(lease, te=now, action=Action.DONE, hold_until=now + 60, handoff_until=now + 30)
    assert done.ok and done.held is not None and done.held.entry.url == "http://h.test/1"
    assert f.sizes(0)["back"] == 3 == f.queued(0)   # the fetched one still counts as queued
    assert f.ack(0, [lease.raw], "g1") == 1 and f.ack(0, [lease.raw], "g1") == 0
    assert f.sizes(0)["back"] == 2 == f.queued(0)
    # the next one is parked, and its worker dies before handing the page on
    second = done.held
    f.finish(second, te=now, action=Action.DONE, handoff_until=now + 1)
    assert f.return_handoffs(0, now=now) == 0      # not yet due
    assert f.return_handoffs(0, now=now + 2) == 1
    assert [e.url for e in f.host_queue(0, "h.test")] == ["http://h.test/1", "http://h.test/2"]
    assert f.sizes(0)["back"] == 2


def test_a_finish_sent_again_after_its_reply_was_lost_answers_as_its_first_run(settings):
    """redis-py sends a script again when a Redis restart (or a dropped connection) lost
    its reply, and complete.lua then finds its own work done. It answers as its first run
    did, so that the turn's page is handed on with its parked entry: answered "lease
    lost", the entry stayed parked, came back after its deadline and was fetched and
    recorded twice (a kill -9 of Redis, 1 run in ~20 of the fault test)."""
    from crawler_tasks.frontier import Lease
    from crawler_tasks.records import Action

    s = dataclasses.replace(settings, SHARDS=1)
    f = Frontier(s)
    f.put_discovered([Discovered(url=f"http://r.test/{i}", host="r.test") for i in range(2)])
    lease = f.get_urls(0, 1)[0]
    now = time.time()
    stale = Lease(lease.shard, lease.host, lease.raw, str(float(lease.token) - 5))
    assert not f.finish(stale, te=now, action=Action.DONE, handoff_until=now + 30).ok   # not parked: refused
    first = f.finish(lease, te=now, action=Action.DONE, hold_until=now + 60, handoff_until=now + 30)
    again = f.finish(lease, te=now, action=Action.DONE, hold_until=now + 60, handoff_until=now + 30)
    assert first.held is not None and first.held.entry.url == "http://r.test/1"
    assert again == first
    assert f.queued(0) == 2 and f.ack(0, [lease.raw], "g1") == 1   # parked once, handed on once
    # the last URL: the host is given back and the entry parked; sent again, the same
    gone = f.finish(first.held, te=now, action=Action.DONE, hold_until=now + 60, handoff_until=now + 30)
    assert gone.ok and gone.held is None
    owner, f.owner = f.owner, "another process"   # whose call finds no entry of its own: refused
    assert not f.finish(first.held, te=now, action=Action.DONE, handoff_until=now + 30).ok
    f.owner = owner
    assert f.finish(first.held, te=now, action=Action.DONE, hold_until=now + 60, handoff_until=now + 30) == gone
    assert f.ack(0, [first.held.raw], "g2") == 1 and f.queued(0) == 0


def test_a_parked_url_still_in_its_queue_is_not_queued_twice(settings):
    """A live snapshot can read a host's queue before a turn parks its head and the
    hand-off zset after: restored, the entry is in both. Returned, it must be queued once
    (twice, it would be fetched and recorded twice)."""
    from crawler_tasks.records import Action

    s = dataclasses.replace(settings, SHARDS=1)
    f = Frontier(s)
    f.put_discovered([Discovered(url=f"http://t.test/{i}", host="t.test") for i in range(2)])
    lease = f.get_urls(0, 1)[0]
    now = time.time()
    assert f.finish(lease, te=now, action=Action.DONE, handoff_until=now + 1).ok
    k = f.keys(0)
    f.client(0).lpush(k.queue("t.test"), lease.raw)    # the snapshot's copy, read before the turn
    assert f.return_handoffs(0, now=now + 2) == 0
    assert [e.url for e in f.host_queue(0, "t.test")] == ["http://t.test/0", "http://t.test/1"]
    assert f.client(0).zcard(k.handoff) == 0


def test_every_parked_url_comes_back_now_after_a_restore(settings):
    """A restore returns every parked entry, due or not; its host is ready now, not at
    the entry's deadline (a host whose queue ran dry waited for it a minute)."""
    from crawler_tasks.records import Action

    s = dataclasses.replace(settings, SHARDS=1)
    f = Frontier(s)
    f.put_discovered([Discovered(url="http://dry.test/0", host="dry.test")])
    lease = f.get_urls(0, 1)[0]
    now = time.time()
    assert f.finish(lease, te=now, action=Action.DONE, handoff_until=now + 60).ok
    assert not f.client(0).sismember(f.keys(0).active, "dry.test")
    f.client(0).hdel(f.keys(0).te, "dry.test")   # as restore's repair of a torn table leaves it
    assert f.return_handoffs(0, now=now) == 0          # not due
    assert f.return_handoffs(0, now=now, every=True) == 1
    assert [e.url for e in f.host_queue(0, "dry.test")] == ["http://dry.test/0"]
    assert f.host_te(0, "dry.test") <= now + 0.001


def test_a_url_fetched_again_skips_the_seen_test_and_the_host_budget(settings):
    frontier = Frontier(dataclasses.replace(settings, MAX_PAGES_PER_HOST=2, SHARDS=1))
    assert frontier.put_discovered([d("http://a.test/1"), d("http://a.test/2")]) == [Verdict.ENQUEUED, Verdict.ENQUEUED]
    assert frontier.put_discovered([d("http://a.test/3")]) == [Verdict.OVER_HOST_BUDGET]
    again = Discovered(url="http://a.test/1", host="a.test", again=True)
    assert frontier.put_discovered([again]) == [Verdict.ENQUEUED]
    assert frontier.put_discovered([d("http://a.test/1")]) == [Verdict.SEEN]
    assert Counter(drain(frontier)) == Counter({"http://a.test/1": 2, "http://a.test/2": 1})


def test_finish_queued_on_a_callers_pipeline_shares_its_round_trip(settings, rclient):
    """queue_finish on a pipeline with other commands gives what finish gives (held, then
    done), and still works when the server lost its scripts (SCRIPT FLUSH, a restart)."""
    from crawler_tasks.connection import global_client
    from crawler_tasks.records import Action

    s = dataclasses.replace(settings, SHARDS=1)
    f = Frontier(s)
    client = global_client(s)
    assert f.same_server(0, client)
    f.put_discovered([Discovered(url=f"http://q.test/{i}", host="q.test") for i in range(3)])
    lease = f.get_urls(0, 1)[0]
    now = time.time()
    pipe = client.pipeline(transaction=False)
    pipe.incr(f"{s.KEY_PREFIX}:probe")
    read = f.queue_finish(pipe, lease, now, Action.DONE, {"fails": "0"}, hold_until=now + 60)
    replies = pipe.execute(raise_on_error=False)
    assert replies[0] == 1
    held = read(replies)   # the reader finds its own reply among the pipeline's
    assert held.ok and held.held is not None and held.held.entry.url == "http://q.test/1"
    rclient.script_flush()
    pipe = client.pipeline(transaction=False)
    read = f.queue_finish(pipe, held.held, now, Action.DONE)
    done = read(pipe.execute(raise_on_error=False))
    assert done.ok and done.held is None
    assert [e.url for e in f.host_queue(0, "q.test")] == ["http://q.test/2"]


def test_the_page_budget_holds_in_the_lease_and_hold_scripts(settings, rclient):
    """Every leased host is owed a page: lease.lua leases no more hosts than the budget has
    pages left after those counted and the hosts leased, and complete.lua holds a host for
    another page only within it (however many processes lease and finish at once)."""
    s = dataclasses.replace(settings, MAX_PAGES=10, SHARDS=2)
    frontier = Frontier(s)
    assert frontier.budget_in_scripts
    stats = f"{s.KEY_PREFIX}:{{g}}:stats"
    hosts = [f"h{i}.test" for i in range(12)]
    frontier.put_discovered([d(f"http://{h}/{k}") for h in hosts for k in range(3)])
    rclient.hset(stats, "fetch/pages", 4)
    leases = [lease for shard in range(2) for lease in frontier.get_urls(shard, 100, now=1000.0)]
    assert len(leases) == 6                           # 10 pages: 4 counted, 6 owed to leased hosts
    assert [lease for shard in range(2) for lease in frontier.get_urls(shard, 100, now=1000.0)] == []
    # a host that gives its turn back without a page frees what it was owed ...
    assert frontier.complete(leases[0], te=1000.0, action=Action.KEEP)
    # ... so the next host that fetches a page (counted first, as the fetch session does)
    # may be held for another: 5 counted + 5 leased
    rclient.hincrby(stats, "fetch/pages", 1)
    held = frontier.finish(leases[1], te=1000.0, hold_until=2000.0)
    assert held.held is not None and not held.spent
    # but not the one after it (6 + 5 would pass 10): it is given back, its URLs kept
    rclient.hincrby(stats, "fetch/pages", 1)
    given = frontier.finish(leases[2], te=1000.0, hold_until=2000.0)
    assert given.ok and given.held is None and given.spent
    assert frontier.leased_hosts() == 4 and frontier.host_queue(leases[2].shard, leases[2].host)
    # without a page budget nothing of this applies
    unbounded = Frontier(dataclasses.replace(s, MAX_PAGES=0))
    assert not unbounded.budget_in_scripts
    assert len([lease for shard in range(2) for lease in unbounded.get_urls(shard, 100, now=1000.0)]) == 8  # the rest


def test_the_page_a_finish_counts_is_counted_once_when_the_call_is_sent_again(settings, rclient):
    """Where complete.lua keeps the page budget it also counts the turn's page, so a
    pipeline that redis-py sends again after a lost reply counts it once (a HINCRBY beside
    the script counted it twice: the crawl stopped a page short). A turn whose lease ran
    out still fetched its page: that is counted."""
    from crawler_tasks.connection import global_client
    from crawler_tasks.frontier import Lease

    s = dataclasses.replace(settings, MAX_PAGES=100, SHARDS=1)
    f = Frontier(s)
    client = global_client(s)
    stats = f"{s.KEY_PREFIX}:{{g}}:stats"
    f.put_discovered([d(f"http://c.test/{k}") for k in range(3)] + [d("http://c2.test/0")])
    leases = {lease.host: lease for lease in f.get_urls(0, 10, now=1000.0)}
    now = time.time()

    def finish_sent_twice(lease: Lease, hold_until: float) -> list:
        pipe = client.pipeline(transaction=False)
        read = f.queue_finish(pipe, lease, now, Action.DONE, hold_until=hold_until, handoff_until=now + 30,
                              count_page=True)
        commands = list(pipe.command_stack)
        first = read(pipe.execute(raise_on_error=False))
        pipe.command_stack = commands          # what redis-py sends when the reply is lost
        return [first, read(pipe.execute(raise_on_error=False))]

    held, again = finish_sent_twice(leases["c.test"], hold_until=now + 60)
    assert held.held is not None and again == held
    assert int(rclient.hget(stats, "fetch/pages")) == 1
    first, again = finish_sent_twice(held.held, hold_until=0.0)   # given back, its entry parked
    assert first.ok and first.held is None and again == first
    assert int(rclient.hget(stats, "fetch/pages")) == 2
    lost = leases["c2.test"]
    stale = Lease(lost.shard, lost.host, lost.raw, str(float(lost.token) - 5))
    assert not f.finish(stale, te=now, action=Action.DONE).ok
    pipe = client.pipeline(transaction=False)
    read = f.queue_finish(pipe, stale, now, Action.DONE, count_page=True)
    assert not read(pipe.execute(raise_on_error=False)).ok
    assert int(rclient.hget(stats, "fetch/pages")) == 3
    # without the budget in the scripts the caller counts: the script refuses to
    with pytest.raises(ValueError):
        Frontier(dataclasses.replace(s, MAX_PAGES=0)).queue_finish(client.pipeline(), held.held, now,
                                                                     count_page=True)
