"""The crawler's DNS resolver against the loopback DNS server (testweb.dns), and against a
raw UDP socket of the test where an answer must be forged. Every count of queries is read
from the server's log."""
from __future__ import annotations

import multiprocessing
import os
import socket
import threading
import time

import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler_tasks.fetch.dns import Answer, AnswerKind, QType, Resolver, _interpret, _Malformed, _parse, nameservers
from testweb.dns import Behaviour, DnsServer, Entry
from testweb.shape import Latency

ZONE: dict[str, Entry | list[str]] = {
    "ttl10.test": Entry(("127.0.0.10",), ttl_s=10),
    "ttl1000.test": Entry(("127.0.0.11", "127.0.0.12"), ttl_s=1000),
    "ttl1d.test": Entry(("127.0.0.13",), ttl_s=86400),
    "v6only.test": ["::7"],
    "dual.test": ["::8", "127.0.0.8"],
    "empty.test": Entry(()),
    "sf.test": Entry(behaviour=Behaviour.SERVFAIL),
    "www.test": Entry(cname="ttl1000.test", ttl_s=500),
    "big.test": [f"127.0.1.{i}" for i in range(60)],
    "cached.test": ["127.0.0.14"],
    "fork.test": ["127.0.0.15"],
    "afterfork.test": ["127.0.0.16"],
    "raises.test": ["127.0.0.17"],
    "after.test": ["127.0.0.18"],
    **{f"quiet{i}.test": Entry(behaviour=Behaviour.SILENT) for i in range(8)},
}
LIVE = [f"l{i}.test" for i in range(1200)]


@pytest.fixture(scope="module")
def server():
    with DnsServer(ZONE, soa_ttl_s=900, soa_minimum_s=45) as srv:
        yield srv


@pytest.fixture(scope="module")
def slow_server():
    """Answers held a lognormal time: median 30 ms, capped at 0.5 s."""
    zone: dict[str, Entry | list[str]] = {n: [f"127.0.{2 + i // 256}.{i % 256}"] for i, n in enumerate(LIVE)}
    zone["silent.test"] = Entry(behaviour=Behaviour.SILENT)
    with DnsServer(zone, latency=Latency(0.030, 0.5, max_s=0.5, seed=11)) as srv:
        yield srv


@pytest.fixture
def resolver(server):
    r = Resolver([server.address], timeout_s=0.2, tries=3)
    yield r
    r.close()


class Collector:
    """done callbacks that record each answer and when it came."""

    def __init__(self, expected: int) -> None:
        self.answers: dict[str, Answer] = {}
        self.times: dict[str, float] = {}
        self.calls = 0
        self.start = time.monotonic()
        self.expected = expected
        self._lock = threading.Lock()
        self.all_in = threading.Event()

    def __call__(self, answer: Answer) -> None:
        with self._lock:
            self.calls += 1
            self.answers[answer.host] = answer
            self.times[answer.host] = time.monotonic() - self.start
            if self.calls >= self.expected:
                self.all_in.set()


# -- answers ------------------------------------------------------------------------

def test_an_address_with_its_ttl_clamped(resolver, server):
    low, mid, high = (resolver.resolve(h, 5) for h in ("ttl10.test", "ttl1000.test", "ttl1d.test"))
    assert (low.kind, low.addresses, low.reason, low.queries) == (AnswerKind.OK, ("127.0.0.10",), "", 1)
    assert low.ttl_s == resolver.min_ttl_s == 300
    assert sorted(mid.addresses) == ["127.0.0.11", "127.0.0.12"] and mid.ttl_s == 1000
    assert high.ttl_s == resolver.max_ttl_s == 6 * 3600
    assert server.counts()["ttl10.test"] == 1


def test_an_ipv6_only_name_asks_a_then_aaaa(resolver, server):
    answer = resolver.resolve("v6only.test", 5)
    assert (answer.kind, answer.addresses, answer.queries) == (AnswerKind.OK, ("::7",), 2)
    assert [r.qtype for r in server.log() if r.name == "v6only.test"] == ["A", "AAAA"]


def test_a_dual_stack_name_costs_one_query_and_gives_ipv4(resolver, server):
    answer = resolver.resolve("Dual.Test.", 5)
    assert (answer.host, answer.addresses, answer.queries) == ("dual.test", ("127.0.0.8",), 1)
    assert server.counts()["dual.test"] == 1


def test_a_cname_chain_is_followed_with_its_smallest_ttl(resolver):
    answer = resolver.resolve("www.test", 5)
    assert sorted(answer.addresses) == ["127.0.0.11", "127.0.0.12"] and answer.ttl_s == 500


def test_a_big_answer_comes_over_tcp(resolver, server):
    answer = resolver.resolve("big.test", 5)
    assert sorted(answer.addresses) == sorted(f"127.0.1.{i}" for i in range(60))
    assert [r.transport for r in server.log() if r.name == "big.test"] == ["udp", "tcp"]
    assert resolver.stats["tcp"] == 1


def test_nxdomain_is_confirmed_and_cached_for_the_soa_minimum(resolver, server):
    answer = resolver.resolve("nowhere.test", 5)
    assert (answer.kind, answer.reason, answer.queries) == (AnswerKind.NXDOMAIN, "NXDOMAIN (confirmed)", 2)
    assert answer.ttl_s == 45                                   # min(SOA TTL 900, MINIMUM 45)
    assert server.counts()["nowhere.test"] == 2
    assert resolver.lookup("nowhere.test", lambda a: None) is answer   # cached: no query
    assert server.counts()["nowhere.test"] == 2
    assert resolver.cached("nowhere.test", now=time.time() + 40) is answer
    assert resolver.cached("nowhere.test", now=time.time() + 46) is None


def test_nodata_after_a_and_aaaa(resolver, server):
    answer = resolver.resolve("empty.test", 5)
    assert (answer.kind, answer.addresses, answer.ttl_s, answer.queries) == (AnswerKind.NODATA, (), 45, 2)
    assert [r.qtype for r in server.log() if r.name == "empty.test"] == ["A", "AAAA"]


def test_servfail_is_temporary_after_the_tries_and_not_cached(resolver, server):
    answer = resolver.resolve("sf.test", 5)
    assert answer.kind is AnswerKind.TEMPORARY and answer.ttl_s == 0 and answer.queries == 3
    assert answer.reason.startswith(f"SERVFAIL from 127.0.0.1:{server.address[1]} (3 tries")
    assert resolver.cached("sf.test") is None
    assert resolver.stats["servfail"] == 3 and server.counts()["sf.test"] == 3


def test_a_name_outside_the_servers_zone_is_refused(resolver):
    answer = resolver.resolve("example.com", 5)
    assert answer.kind is AnswerKind.TEMPORARY and answer.reason.startswith("REFUSED from")


def test_a_silent_name_is_temporary_after_the_bounded_time(resolver, server):
    start = time.monotonic()
    answer = resolver.resolve("quiet0.test", 10)
    spent = time.monotonic() - start
    bound = 0.2 * (2 ** 3 - 1)                        # 0.2 + 0.4 + 0.8 s
    assert bound - 0.01 <= spent < bound + 1.0
    assert answer.kind is AnswerKind.TEMPORARY and answer.queries == 3
    assert answer.reason == f"no answer from 127.0.0.1:{server.address[1]} in 3 tries ({bound:.1f} s)"
    assert server.counts()["quiet0.test"] == 3 and resolver.stats["timeouts"] == 3


def test_resolve_gives_up_at_its_own_timeout(server):
    r = Resolver([server.address], timeout_s=2.0)
    try:
        answer = r.resolve("quiet1.test", 0.1)
        assert answer.kind is AnswerKind.TEMPORARY and answer.reason == "no answer within 0.1 s"
        assert r.stats["in_flight"] == 1                # the lookup goes on
    finally:
        r.close()


def test_literals_and_invalid_names_send_nothing(resolver):
    assert resolver.lookup("127.0.0.1", lambda a: None).addresses == ("127.0.0.1",)
    assert resolver.resolve("[::1]", 1).addresses == ("::1",)
    for bad, why in [("", "empty"), ("a..test", "an empty label"), ("x" * 64 + ".test", "a label of 64"),
                     ("a" * 250 + ".test", "255 characters"), ("bad host.test", "a character outside")]:
        answer = resolver.lookup(bad, lambda a: None)
        assert answer is not None and answer.kind is AnswerKind.NXDOMAIN and answer.queries == 0
        assert answer.reason.startswith("invalid host name") and why in answer.reason
    assert resolver.stats["queries"] == 0 and resolver.stats["invalid"] == 5


# -- sharing and caching ------------------------------------------------------------

def test_concurrent_lookups_of_one_name_send_one_query(slow_server):
    r = Resolver([slow_server.address], timeout_s=2.0)
    try:
        done = Collector(20)
        assert all(r.lookup("l5.test", done) is None for _ in range(20))
        assert done.all_in.wait(5) and done.calls == 20
        assert r.stats["joined"] == 19 and r.stats["queries"] == 1
        assert slow_server.counts()["l5.test"] == 1
    finally:
        r.close()


def test_a_cache_hit_sends_no_query(resolver, server):
    first = resolver.resolve("cached.test", 5)
    again = resolver.lookup("CACHED.test.", lambda a: pytest.fail("a cached answer is returned, not called back"))
    assert again is first and resolver.stats["cache_hits"] == 1
    assert server.counts()["cached.test"] == 1


def test_remember_seeds_the_cache_and_lru_bounds_it(server):
    r = Resolver([server.address], max_entries=2)
    try:
        now = time.time()
        for i in range(3):
            r.remember(Answer(f"seed{i}.test", AnswerKind.OK, (f"10.0.0.{i}",), 300, "", 1), now + 300)
        r.remember(Answer("temp.test", AnswerKind.TEMPORARY, (), 0, "x", 1), now + 300)
        assert r.cached("seed0.test") is None                        # the oldest went
        assert r.cached("seed2.test").addresses == ("10.0.0.2",)
        assert r.cached("temp.test") is None
        assert r.cached("seed2.test", now=now + 301) is None
        assert r.stats["queries"] == 0
    finally:
        r.close()


# -- many at once ---------------------------------------------------------------------

def test_a_thousand_names_at_once_each_queried_once(slow_server):
    names = LIVE[100:1100]
    r = Resolver([slow_server.address], timeout_s=2.0)
    try:
        done = Collector(len(names))
        for n in names:
            assert r.lookup(n, done) is None
        assert done.all_in.wait(20)
        assert all(done.answers[n].kind is AnswerKind.OK for n in names)
        assert done.answers["l300.test"].addresses == ("127.0.3.44",)
        counts = slow_server.counts()
        assert all(counts[n] == 1 for n in names)
        assert r.stats["queries"] == len(names) and r.stats["in_flight"] == 0
        print(f"1,000 lookups: last answer after {max(done.times.values()):.2f} s")
    finally:
        r.close()


def test_a_silent_name_delays_no_other(slow_server):
    names = LIVE[:100] + LIVE[1100:1200]
    r = Resolver([slow_server.address], timeout_s=1.0, tries=2)
    try:
        done = Collector(len(names))
        r.lookup("silent.test", done)
        for n in names:
            r.lookup(n, done)
        assert done.all_in.wait(10)
        assert "silent.test" not in done.answers and r.stats["in_flight"] == 1
        late = {n: done.times[n] - slow_server.latency_of(n) for n in names}
        assert max(late.values()) < 0.5, max(late.items(), key=lambda kv: kv[1])
    finally:
        r.close()


# -- servers that fail ----------------------------------------------------------------

def test_a_silent_first_server_hands_over_to_the_second():
    names = {"one.test": ["127.0.0.21"], "two.test": ["127.0.0.22"]}
    dead_zone = {n: Entry(behaviour=Behaviour.SILENT) for n in names}
    with DnsServer(dead_zone) as dead, DnsServer(names) as alive:
        r = Resolver([dead.address, alive.address], timeout_s=0.3, tries=3)
        try:
            first = r.resolve("one.test", 5)
            assert (first.addresses, first.queries) == (("127.0.0.21",), 2)
            second = r.resolve("two.test", 5)                 # the dead server is now asked last
            assert (second.addresses, second.queries) == (("127.0.0.22",), 1)
        finally:
            r.close()
        assert dead.counts() == {"one.test": 1} and alive.counts() == {"one.test": 1, "two.test": 1}


def test_a_closed_port_fails_each_try_at_once():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()
    r = Resolver([closed], timeout_s=5.0, tries=2)
    try:
        answer = r.resolve("any.test", 3)
        assert answer.kind is AnswerKind.TEMPORARY and "refused" in answer.reason.lower()
        assert answer.queries == 2 and r.stats["errors"] == 2
    finally:
        r.close()


class FakeServer:
    """A raw UDP socket as the server: the test reads each query and writes what it likes."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(5)
        self.address = self.sock.getsockname()

    def query(self) -> tuple[dns.message.Message, tuple[str, int]]:
        wire, client = self.sock.recvfrom(512)
        return dns.message.from_wire(wire), client

    @staticmethod
    def answer(query: dns.message.Message, address: str = "", *, qid: int | None = None, name: str | None = None,
               rcode: dns.rcode.Rcode = dns.rcode.NOERROR, qr: bool = True) -> bytes:
        question = query.question[0]
        asked = dns.message.make_query(name or question.name, question.rdtype)
        asked.id = query.id if qid is None else qid
        response = dns.message.make_response(asked)
        response.set_rcode(rcode)
        if address:
            response.answer.append(dns.rrset.from_text(asked.question[0].name, 600, "IN", "A", address))
        if not qr:
            response.flags &= ~dns.flags.QR
        return response.to_wire()

    def close(self) -> None:
        self.sock.close()


def test_answers_that_are_not_the_answer_are_ignored():
    fake = FakeServer()
    r = Resolver([fake.address], timeout_s=3.0, tries=1)
    try:
        done = Collector(1)
        r.lookup("spoof.test", done)
        query, client = fake.query()
        fake.sock.sendto(fake.answer(query, "10.0.0.1", qid=(query.id + 1) % 65536), client)   # wrong id
        fake.sock.sendto(fake.answer(query, "10.0.0.2", name="other.test"), client)            # wrong question
        fake.sock.sendto(fake.answer(query, "10.0.0.3", qr=False), client)                     # not a response
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as stranger:                      # wrong source
            stranger.sendto(fake.answer(query, "10.0.0.4"), client)
        fake.sock.sendto(fake.answer(query, "10.0.0.9"), client)
        assert done.all_in.wait(5)
        assert done.answers["spoof.test"].addresses == ("10.0.0.9",)
        assert r.stats["ignored"] == 3 and r.stats["queries"] == 1
    finally:
        r.close()
        fake.close()


def test_one_odd_nxdomain_does_not_kill_a_live_name():
    fake = FakeServer()
    r = Resolver([fake.address], timeout_s=3.0, tries=2)
    try:
        done = Collector(1)
        r.lookup("flaky.test", done)
        query, client = fake.query()
        fake.sock.sendto(fake.answer(query, rcode=dns.rcode.NXDOMAIN), client)
        query, client = fake.query()                      # the confirmation, on a new port and id
        fake.sock.sendto(fake.answer(query, "10.0.0.5"), client)
        assert done.all_in.wait(5)
        answer = done.answers["flaky.test"]
        assert (answer.kind, answer.addresses, answer.queries) == (AnswerKind.OK, ("10.0.0.5",), 2)
    finally:
        r.close()
        fake.close()


def test_an_nxdomain_never_confirmed_is_temporary():
    fake = FakeServer()
    r = Resolver([fake.address], timeout_s=0.1, tries=2)
    try:
        done = Collector(1)
        r.lookup("once.test", done)
        query, client = fake.query()
        fake.sock.sendto(fake.answer(query, rcode=dns.rcode.NXDOMAIN), client)
        assert done.all_in.wait(5)
        answer = done.answers["once.test"]
        assert answer.kind is AnswerKind.TEMPORARY and answer.queries == 3
        assert answer.reason.startswith(f"NXDOMAIN from 127.0.0.1:{fake.address[1]} not confirmed: no answer")
    finally:
        r.close()
        fake.close()


def test_garbage_from_the_server_fails_the_try():
    fake = FakeServer()
    r = Resolver([fake.address], timeout_s=3.0, tries=1)
    try:
        done = Collector(1)
        r.lookup("junk.test", done)
        query, client = fake.query()
        good = fake.answer(query, "10.0.0.6")
        fake.sock.sendto(good[:12] + b"\x07junk", client)       # right id and flags, then nonsense
        assert done.all_in.wait(5)
        answer = done.answers["junk.test"]
        assert answer.kind is AnswerKind.TEMPORARY and answer.reason.startswith("unreadable answer from")
    finally:
        r.close()
        fake.close()


# -- the process: fork, callbacks, close ---------------------------------------------

def _in_child(resolver: Resolver, out: multiprocessing.Queue) -> None:
    before = resolver.stats["in_flight"]
    answer = resolver.resolve("fork.test", 5)
    thread = resolver._thread
    out.put((before, answer.kind.value, answer.addresses, thread is not None and thread.is_alive()))


def test_a_forked_child_resolves_on_its_own_thread(server):
    r = Resolver([server.address], timeout_s=2.0)
    try:
        r.resolve("ttl10.test", 5)
        r.lookup("quiet2.test", lambda a: None)         # in flight in the parent at the fork
        ctx = multiprocessing.get_context("fork")
        out = ctx.Queue()
        child = ctx.Process(target=_in_child, args=(r, out))
        child.start()
        before, kind, addresses, alive = out.get(timeout=10)
        child.join(10)
        assert child.exitcode == 0
        assert (before, kind, addresses, alive) == (0, "ok", ("127.0.0.15",), True)
        assert r.stats["in_flight"] == 1                 # the parent's lookup is its own
        assert r.resolve("afterfork.test", 5).addresses == ("127.0.0.16",)
    finally:
        r.close()


def test_a_callback_that_raises_stops_nothing(resolver, caplog):
    def bad(answer: Answer) -> None:
        raise RuntimeError("caller bug")

    assert resolver.lookup("raises.test", bad) is None
    assert resolver.resolve("after.test", 5).addresses == ("127.0.0.18",)
    assert any("raises.test" in record.getMessage() for record in caplog.records)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_close_answers_lookups_in_flight_and_leaks_nothing(server):
    fds = _open_fds()
    r = Resolver([server.address], timeout_s=5.0)
    done = Collector(3)
    for i in (3, 4, 5):
        assert r.lookup(f"quiet{i}.test", done) is None
    deadline = time.monotonic() + 5
    while sum(server.counts()[f"quiet{i}.test"] for i in (3, 4, 5)) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    r.close()
    assert done.all_in.is_set()
    assert {(a.kind, a.reason) for a in done.answers.values()} == {(AnswerKind.TEMPORARY, "resolver closed")}
    after = r.lookup("quiet6.test", lambda a: pytest.fail("closed: answered at once"))
    assert after is not None and after.reason == "resolver closed"
    assert _open_fds() == fds
    r.close()


def test_nameservers_from_resolv_conf(tmp_path):
    conf = tmp_path / "resolv.conf"
    conf.write_text("# comment\nsearch example.com\nnameserver 10.0.0.53\nnameserver fe80::1%eth0\n"
                    "nameserver not-an-ip\nnameserver 10.0.0.54\nnameserver 10.0.0.55\noptions timeout:1\n")
    assert nameservers(str(conf)) == [("10.0.0.53", 53), ("fe80::1%eth0", 53), ("10.0.0.54", 53)]
    conf.write_text("search example.com\n")
    assert nameservers(str(conf)) == [("127.0.0.1", 53)]
    assert nameservers(str(tmp_path / "missing")) == [("127.0.0.1", 53)]


# -- the parser: checked against dnspython ---------------------------------------------

def _reference(wire: bytes, qname: str, qtype: int) -> tuple[str, tuple[str, ...], float | None]:
    """What the answer says, read by dnspython."""
    response = dns.message.from_wire(wire)
    rcode = response.rcode()
    soa = next((r for r in response.authority if r.rdtype == dns.rdatatype.SOA), None)
    negative = None if soa is None else float(min(soa.ttl, soa[0].minimum))
    if rcode == dns.rcode.NXDOMAIN:
        return "nxdomain", (), negative
    if rcode != dns.rcode.NOERROR:
        return "temporary", (), None
    name, ttl = dns.name.from_text(qname), float("inf")
    for _ in range(8):
        rrset = response.get_rrset(response.answer, name, dns.rdataclass.IN, dns.rdatatype.RdataType.make(qtype))
        if rrset is not None:
            return "ok", tuple(r.address for r in rrset), min(ttl, float(rrset.ttl))
        alias = response.get_rrset(response.answer, name, dns.rdataclass.IN, dns.rdatatype.CNAME)
        if alias is None:
            break
        ttl, name = min(ttl, float(alias.ttl)), alias[0].target
    return "nodata", (), negative


LABEL = st.sampled_from(["a", "b", "www", "cdn", "x-1"])
NAME = st.lists(LABEL, min_size=1, max_size=3).map(lambda labels: ".".join(labels) + ".test")


@st.composite
def responses(draw: st.DrawFn) -> tuple[bytes, str, int]:
    qname = draw(NAME)
    qtype = draw(st.sampled_from([QType.A, QType.AAAA]))
    asked = qname if not draw(st.booleans()) else qname.upper()
    query = dns.message.make_query(asked, int(qtype))
    response = dns.message.make_response(query)
    response.set_rcode(draw(st.sampled_from([dns.rcode.NOERROR, dns.rcode.NOERROR, dns.rcode.NXDOMAIN,
                                             dns.rcode.SERVFAIL, dns.rcode.REFUSED])))
    owner = qname
    for target in draw(st.lists(NAME.filter(lambda n: n != qname), max_size=3, unique=True)):  # one CNAME a name
        response.answer.append(dns.rrset.from_text(owner + ".", draw(st.integers(0, 10**6)), "IN", "CNAME",
                                                   target + "."))
        owner = target
    for rdtype in draw(st.lists(st.sampled_from(["A", "AAAA"]), max_size=2, unique=True)):
        count = draw(st.integers(1, 4))
        addresses = [f"10.0.0.{i}" if rdtype == "A" else f"fd00::{i:x}" for i in range(count)]
        where = draw(st.sampled_from([owner, qname, "elsewhere.test"]))
        response.answer.append(dns.rrset.from_text_list(where + ".", draw(st.integers(0, 10**6)), "IN", rdtype,
                                                        addresses))
    if draw(st.booleans()):
        response.authority.append(dns.rrset.from_text(
            "test.", draw(st.integers(0, 10**5)), "IN", "SOA",
            f"ns.test. hostmaster.test. 1 2 3 4 {draw(st.integers(0, 10**5))}"))
    return response.to_wire(want_shuffle=False), qname, int(qtype)


@settings(max_examples=200, deadline=None)
@given(responses())
def test_the_parser_reads_what_dnspython_reads(case):
    wire, qname, qtype = case
    message = _parse(wire)
    assert message.qname == qname.encode() and message.qtype == qtype
    reply = _interpret(message, qname.encode(), qtype, "server")
    kind, addresses, ttl = _reference(wire, qname, qtype)
    assert (reply.kind.value, reply.addresses) == (kind, addresses)
    if kind != "temporary":
        assert reply.ttl_s == ttl


@settings(max_examples=300, deadline=None)
@given(responses(), st.lists(st.tuples(st.integers(0, 10**4), st.integers(0, 255)), min_size=1, max_size=6),
       st.integers(0, 40))
def test_the_parser_never_raises_anything_but_malformed(case, flips, cut):
    wire, qname, qtype = case
    mangled = bytearray(wire[: len(wire) - cut] if cut < len(wire) else wire)
    for where, value in flips:
        mangled[where % len(mangled)] = value
    try:
        _interpret(_parse(bytes(mangled)), qname.encode(), qtype, "server")
    except _Malformed:
        pass


def test_a_late_answer_to_a_timed_out_query_still_answers_the_lookup():
    """Every answer comes 0.5 s late; try 1 waits 0.3 s, try 2 0.6 s. The lookup ends with
    try 1's answer (at 0.5 s), not try 2's (at 0.8 s) nor a timeout: a loaded server's
    slow answers are not thrown away."""
    with DnsServer({"late.test": ["127.0.0.30"]}, latency=Latency(0.5, 0.0, max_s=1.0)) as srv:
        r = Resolver([srv.address], timeout_s=0.3, tries=2)
        try:
            started = time.monotonic()
            answer = r.resolve("late.test", timeout_s=5.0)
            took = time.monotonic() - started
        finally:
            r.close()
        assert answer.kind == AnswerKind.OK and answer.addresses == ("127.0.0.30",)
        assert answer.queries == 2 and srv.counts("A")["late.test"] == 2
        assert took < 0.75, took   # try 2's answer would come at 0.8 s
