"""The loopback DNS server: answers by type, negative answers with the SOA, behaviours per
name, truncation and TCP, latency held by a timer, and the query log. dnspython is the client."""
from __future__ import annotations

import socket
import struct
import threading
import time

import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import pytest

from testweb.dns import Behaviour, DnsServer, Entry
from testweb.shape import Latency

ZONE: dict[str, Entry | list[str]] = {
    "a.test": ["127.0.0.5", "::5"],
    "v6.test": ["::6"],
    "short.test": Entry(("127.0.0.7",), ttl_s=7),
    "empty.test": Entry(()),
    "sf.test": Entry(behaviour=Behaviour.SERVFAIL),
    "ref.test": Entry(behaviour=Behaviour.REFUSED),
    "gone.test": Entry(("127.0.0.8",), behaviour=Behaviour.NXDOMAIN),
    "quiet.test": Entry(("127.0.0.9",), behaviour=Behaviour.SILENT),
    "www.test": Entry(cname="a.test", ttl_s=30),
    "dangling.test": Entry(cname="missing.test"),
    "big.test": [f"127.0.1.{i}" for i in range(60)],
}


@pytest.fixture(scope="module")
def server():
    with DnsServer(ZONE, soa_ttl_s=900, soa_minimum_s=45) as srv:
        yield srv


def ask(server: DnsServer, name: str, rdtype: str = "A", tcp: bool = False) -> dns.message.Message:
    query = dns.message.make_query(name, rdtype)
    ip, port = server.address
    if tcp:
        return dns.query.tcp(query, ip, port=port, timeout=2)
    return dns.query.udp(query, ip, port=port, timeout=2)


def test_binds_a_free_loopback_port_for_udp_and_tcp(server):
    ip, port = server.address
    assert ip == "127.0.0.1" and port > 0
    assert [str(r) for r in ask(server, "a.test", tcp=True).answer] == ["a.test. 300 IN A 127.0.0.5"]


def test_answers_each_family_by_type_with_the_ttl(server):
    assert [str(r) for r in ask(server, "a.test").answer] == ["a.test. 300 IN A 127.0.0.5"]
    assert [str(r) for r in ask(server, "a.test", "AAAA").answer] == ["a.test. 300 IN AAAA ::5"]
    assert [str(r) for r in ask(server, "short.test").answer] == ["short.test. 7 IN A 127.0.0.7"]
    response = ask(server, "a.test")
    assert response.flags & dns.flags.AA and response.rcode() == dns.rcode.NOERROR


def test_echoes_the_question_as_asked_and_the_id():
    with DnsServer(ZONE) as srv:
        query = dns.message.make_query("WwW.TeSt", "A")
        response = dns.query.udp(query, *srv.address[:1], port=srv.address[1], timeout=2)
        assert response.id == query.id
        assert response.question[0].name.to_text() == "WwW.TeSt."
        # names compressed against the question come back in its case: DNS names are case-blind
        assert [str(r).lower() for r in response.answer] == ["www.test. 30 in cname a.test.",
                                                              "a.test. 300 in a 127.0.0.5"]
        assert srv.log()[0].name == "www.test"


def test_nxdomain_and_nodata_carry_the_soa(server):
    nx = ask(server, "nothing.test")
    assert nx.rcode() == dns.rcode.NXDOMAIN and not nx.answer
    soa = nx.authority[0]
    assert soa.rdtype == dns.rdatatype.SOA and soa.ttl == 900 and soa[0].minimum == 45
    for name, rdtype in [("v6.test", "A"), ("a.test", "MX"), ("empty.test", "AAAA")]:
        nodata = ask(server, name, rdtype)
        assert nodata.rcode() == dns.rcode.NOERROR and not nodata.answer
        assert nodata.authority[0].rdtype == dns.rdatatype.SOA
    gone = ask(server, "gone.test")
    assert gone.rcode() == dns.rcode.NXDOMAIN
    dangling = ask(server, "dangling.test")
    assert dangling.rcode() == dns.rcode.NXDOMAIN and str(dangling.answer[0]).startswith("dangling.test. 300 IN CNAME")


def test_behaviours_and_names_outside_the_zone(server):
    assert ask(server, "sf.test").rcode() == dns.rcode.SERVFAIL
    assert ask(server, "ref.test").rcode() == dns.rcode.REFUSED
    assert ask(server, "example.com").rcode() == dns.rcode.REFUSED
    with pytest.raises(dns.exception.Timeout):
        dns.query.udp(dns.message.make_query("quiet.test", "A"), server.address[0], port=server.address[1],
                      timeout=0.3)
    assert [(r.name, r.rcode) for r in server.log() if r.name == "quiet.test"] == [("quiet.test", "silent")]


def test_a_big_answer_is_truncated_over_udp_and_whole_over_tcp(server):
    udp = ask(server, "big.test")
    assert udp.flags & dns.flags.TC and not udp.answer
    tcp = ask(server, "big.test", tcp=True)
    assert not tcp.flags & dns.flags.TC
    assert sorted(r.address for r in tcp.answer[0]) == sorted(f"127.0.1.{i}" for i in range(60))
    transports = [r.transport for r in server.log() if r.name == "big.test"]
    assert transports == ["udp", "tcp"]


def test_tcp_answers_several_queries_on_one_connection(server):
    with socket.create_connection(server.address, timeout=2) as sock:
        ids = []
        for name in ("a.test", "short.test", "nothing.test"):
            query = dns.message.make_query(name, "A")
            ids.append(query.id)
            wire = query.to_wire()
            sock.sendall(struct.pack("!H", len(wire)) + wire)
        got = []
        buf = b""
        while len(got) < 3:
            buf += sock.recv(4096)
            while len(buf) >= 2 and len(buf) >= 2 + struct.unpack("!H", buf[:2])[0]:
                size = struct.unpack("!H", buf[:2])[0]
                got.append(dns.message.from_wire(buf[2: 2 + size]).id)
                buf = buf[2 + size:]
    assert sorted(got) == sorted(ids)


def test_the_log_records_every_query_with_its_rcode(server):
    server.clear_log()
    ask(server, "a.test")
    ask(server, "a.test", "AAAA")
    ask(server, "nothing.test")
    ask(server, "sf.test")
    records = server.log()
    assert [(r.name, r.qtype, r.rcode, r.transport) for r in records] == [
        ("a.test", "A", "NOERROR", "udp"), ("a.test", "AAAA", "NOERROR", "udp"),
        ("nothing.test", "A", "NXDOMAIN", "udp"), ("sf.test", "A", "SERVFAIL", "udp")]
    assert records[0].client[0] == "127.0.0.1" and records[0].t <= time.time()
    assert server.counts() == {"a.test": 2, "nothing.test": 1, "sf.test": 1}
    assert server.counts("AAAA") == {"a.test": 1}


def test_malformed_queries_get_formerr_or_nothing(server):
    server.clear_log()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(2)
        sock.sendto(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07trunc", server.address)
        answer = sock.recv(512)
        assert answer[:2] == b"\x12\x34" and answer[3] & 0x0F == dns.rcode.FORMERR
        sock.sendto(b"junk", server.address)
        sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            sock.recv(512)
    assert [r.rcode for r in server.log()] == ["FORMERR"]


def test_latency_holds_each_answer_without_holding_the_others():
    latency = Latency(0.05, 1.5, max_s=2.0, seed=3)
    names = [f"h{i}.test" for i in range(40)]
    zone = {n: [f"127.0.2.{i}"] for i, n in enumerate(names)}
    with DnsServer(zone, latency=latency) as srv:
        arrived: dict[str, float] = {}
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.settimeout(5)
        start = time.monotonic()
        for n in names:
            sock.sendto(dns.message.make_query(n, "A").to_wire(), srv.address)
        while len(arrived) < len(names):   # by the answer's question: random ids may collide
            response = dns.message.from_wire(sock.recv(512))
            arrived[response.question[0].name.to_text(omit_final_dot=True)] = time.monotonic() - start
        sock.close()
    wanted = {n: srv.latency_of(n) for n in names}
    assert len(set(wanted.values())) == len(names)        # a function of the name
    for n in names:
        assert arrived[n] >= wanted[n] - 0.005            # held at least its own time
    slowest = max(names, key=wanted.__getitem__)
    fast = [n for n in names if wanted[n] < wanted[slowest] - 0.5]
    assert wanted[slowest] > 0.6 and len(fast) > 30
    assert all(arrived[n] < arrived[slowest] for n in fast)   # the slow one held nobody else


def test_a_burst_of_two_thousand_queries_is_answered_whole():
    names = [f"n{i}.test" for i in range(2000)]
    with DnsServer({n: ["127.0.3.1"] for n in names}) as srv:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
        sock.settimeout(5)
        got = set()

        def read() -> None:
            while len(got) < len(names):
                got.add(dns.message.from_wire(sock.recv(512)).question[0].name.to_text())

        reader = threading.Thread(target=read)
        reader.start()
        for n in names:
            sock.sendto(dns.message.make_query(n, "A").to_wire(), srv.address)
        reader.join(10)
        sock.close()
        assert len(got) == len(names)
        assert sum(srv.counts().values()) == len(names)
        print(f"server CPU for {len(names)} queries: {srv.cpu_seconds() * 1e3:.0f} ms")


def test_the_zone_is_checked_when_built():
    with pytest.raises(ValueError, match="not in the zone"):
        DnsServer({"a.example": ["127.0.0.1"]})
    with pytest.raises(ValueError):
        DnsServer({"a.test": ["not-an-address"]})


def test_stop_twice_and_no_restart():
    srv = DnsServer(ZONE)
    srv.start()
    srv.stop()
    srv.stop()
    with pytest.raises(RuntimeError):
        srv.start()
