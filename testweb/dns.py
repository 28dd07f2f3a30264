"""An authoritative DNS server on loopback for one zone, with the real web's DNS shape.

Why: the crawler runs its own resolver (Mercator's design), and what makes resolving hard
on the web is not on loopback: answers take tens of milliseconds, some names never answer,
some servers fail, dead names answer NXDOMAIN with a negative TTL.  This server gives the
resolver's tests and the benches all of that, from one thread and at little CPU.

- A zone is data: name -> :class:`Entry` (addresses answered as A and AAAA by family, a TTL,
  a CNAME, or a behaviour: SERVFAIL, REFUSED, NXDOMAIN, SILENT = never answers).  A name under
  the zone's suffix that the zone lacks answers NXDOMAIN; a name that lacks the asked type
  answers NODATA (NOERROR, no answer); both carry the zone's SOA in the authority section,
  whose TTL and MINIMUM set the negative TTL (RFC 2308).  Names outside the suffix: REFUSED.
- Cheap (~30 µs a query): the common answers (addresses, NODATA, NXDOMAIN) are written
  directly, records pointing at the question as asked; the others (CNAME, truncation,
  REFUSED, ...) dnspython renders once per name and type, and the id and the question are
  patched in.  Queries are read on one selector thread; an answer's latency is a timer in
  a heap, so thousands of slow answers cost a heap entry each.
- Latency is :class:`testweb.shape.Latency`, keyed by (query type, name): the same name and
  type wait as long in every run and on every try, so two resolvers meet the same DNS.
- No EDNS: UDP answers fit 512 bytes or come with the TC bit and no records, so a client
  repeats the query over TCP (same port, length-prefixed, RFC 7766: answers in any order).
- :meth:`DnsServer.log` holds every query received, with the rcode sent or ``"silent"``:
  the evidence for lookups per name.
"""

from __future__ import annotations

import functools
import heapq
import io
import ipaddress
import selectors
import socket
import struct
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset

from testweb.shape import Latency

__all__ = ["Behaviour", "DnsServer", "Entry", "QueryRecord"]

_UDP_MAX = 512                 # no EDNS: RFC 1035's limit for answers over UDP
_RCVBUF = 4 * 1024 * 1024      # a burst of a thousand queries must not overflow the socket
_MAX_TCP_BUF = 64 * 1024
_CNAME_HOPS = 8


class Behaviour(StrEnum):
    """What a name does when asked."""

    ANSWER = "answer"      # its records (NODATA for a type it lacks)
    SERVFAIL = "servfail"
    REFUSED = "refused"
    NXDOMAIN = "nxdomain"  # as if it were not in the zone
    SILENT = "silent"      # never answers: the query is logged and dropped


@dataclass(frozen=True, slots=True)
class Entry:
    """One name of the zone.  ``addresses`` mixes IPv4 (answered as A) and IPv6 (AAAA);
    ``ttl_s`` None takes the server's default; ``cname`` makes the name an alias, answered
    with the target's records when the target is in the zone."""

    addresses: tuple[str, ...] = ()
    ttl_s: int | None = None
    behaviour: Behaviour = Behaviour.ANSWER
    cname: str | None = None


@dataclass(frozen=True, slots=True)
class QueryRecord:
    """One query as the server received it."""

    t: float                  # time.time() when it was read
    name: str                 # lower-case, no trailing dot
    qtype: str                # "A", "AAAA", ... (the number for unknown types)
    rcode: str                # "NOERROR", "NXDOMAIN", "SERVFAIL", "REFUSED", "FORMERR" or "silent"
    transport: str            # "udp" or "tcp"
    client: tuple[str, int]
    qid: int


@dataclass(frozen=True, slots=True)
class _Question:
    qid: int
    rd: bool
    name: str         # lower-case, no trailing dot
    labels: tuple[bytes, ...]
    qtype: int
    qclass: int
    raw: bytes        # the question section as asked (case kept)


def _parse_question(wire: bytes) -> _Question | None:
    """The one question of a standard query, or None when the message is not one."""
    if len(wire) < 12:
        return None
    qid, flags, qdcount = struct.unpack_from("!HHH", wire)
    if flags & 0x8000 or (flags >> 11) & 0xF or qdcount != 1:
        return None
    pos, labels = 12, []
    while True:
        if pos >= len(wire):
            return None
        length = wire[pos]
        if length == 0:
            pos += 1
            break
        if length > 63 or pos + 1 + length > len(wire):
            return None  # also refuses compression pointers, which a question never needs
        labels.append(wire[pos + 1: pos + 1 + length].lower())
        pos += 1 + length
    if pos + 4 > len(wire) or pos - 12 > 255:
        return None
    qtype, qclass = struct.unpack_from("!HH", wire, pos)
    name = b".".join(labels).decode("latin-1")
    return _Question(qid, bool(flags & 0x0100), name, tuple(labels), qtype, qclass, wire[12: pos + 4])


def _header_only(wire: bytes, rcode: int) -> bytes:
    """An answer with no question for a query that could not be read (FORMERR)."""
    qid, flags = struct.unpack_from("!HH", wire)
    return struct.pack("!HHHHHH", qid, 0x8000 | (flags & 0x0100) | rcode, 0, 0, 0, 0)


class _TcpConn:
    __slots__ = ("buf", "out", "peer", "sock")

    def __init__(self, sock: socket.socket, peer: tuple[str, int]) -> None:
        self.sock = sock
        self.peer = peer
        self.buf = bytearray()
        self.out = bytearray()


class DnsServer:
    """The zone's server on ``host``:``port`` (0: a free port), UDP and TCP, on one thread.

    ``suffix`` is the zone ("test": every name must end in ".test"); ``ttl_s`` the TTL of
    records whose entry gives none; ``soa_ttl_s`` and ``soa_minimum_s`` the SOA's TTL and
    MINIMUM field sent with negative answers; ``latency`` the time each answer is held.
    """

    def __init__(
        self,
        zone: Mapping[str, Entry | Sequence[str]],
        *,
        suffix: str = "test",
        ttl_s: int = 300,
        soa_ttl_s: int = 3600,
        soa_minimum_s: int = 60,
        latency: Latency | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.suffix = suffix.lower().strip(".")
        self._origin = dns.name.from_text(self.suffix)
        self._zone: dict[str, Entry] = {}
        self._packed: dict[str, dict[int, tuple[bytes, ...]]] = {}   # name -> qtype -> addresses
        for name, value in zone.items():
            key = name.lower().rstrip(".")
            if not (key == self.suffix or key.endswith("." + self.suffix)):
                raise ValueError(f"{name!r} is not in the zone {self.suffix!r}")
            entry = value if isinstance(value, Entry) else Entry(tuple(value))
            self._zone[key] = entry
            self._packed[key] = {}
            for address in entry.addresses:
                ip = ipaddress.ip_address(address)  # ValueError for a bad one, now rather than per query
                qtype = dns.rdatatype.A if ip.version == 4 else dns.rdatatype.AAAA
                self._packed[key][qtype] = (*self._packed[key].get(qtype, ()), ip.packed)
        self._ttl_s = ttl_s
        self._soa = dns.rrset.from_text(
            self._origin, soa_ttl_s, "IN", "SOA",
            f"ns.{self.suffix}. hostmaster.{self.suffix}. 1 3600 600 86400 {soa_minimum_s}",
        )
        soa_wire = io.BytesIO()
        self._soa.to_wire(soa_wire)   # uncompressed: it follows any question
        self._soa_wire = soa_wire.getvalue()
        self._latency = latency
        self._bind = (host, port)
        self.address: tuple[str, int] = (host, 0)   # the bound (ip, port), once started
        self._rendered: dict[tuple[str, int, bool, bool], tuple[int, bytes]] = {}
        self._log: list[QueryRecord] = []
        self._log_lock = threading.Lock()
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._timer_seq = 0
        self._sel: selectors.BaseSelector | None = None
        self._udp: socket.socket | None = None
        self._tcp: socket.socket | None = None
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._conns: set[_TcpConn] = set()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._cpu_final: float | None = None

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> tuple[str, int]:
        """Bind UDP and TCP on one port and start serving; returns the bound (ip, port)."""
        if self._thread is not None or self._stopped:
            raise RuntimeError("a DnsServer can be started only once")
        host, port = self._bind
        for _ in range(20):  # port 0: the free UDP port may be taken for TCP; try another
            udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                udp.bind((host, port))
                tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                tcp.bind((host, udp.getsockname()[1]))
                break
            except OSError:
                udp.close()
                tcp.close()
                if port:
                    raise
        else:
            raise OSError(f"no port on {host} free for both UDP and TCP")
        udp.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _RCVBUF)
        udp.setblocking(False)
        tcp.listen(256)
        tcp.setblocking(False)
        self._udp, self._tcp = udp, tcp
        self.address = (host, udp.getsockname()[1])
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        sel = selectors.DefaultSelector()
        sel.register(udp, selectors.EVENT_READ, "udp")
        sel.register(tcp, selectors.EVENT_READ, "accept")
        sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._sel = sel
        self._thread = threading.Thread(target=self._loop, name="testweb-dns", daemon=True)
        self._thread.start()
        return self.address

    def stop(self) -> None:
        """Close every socket and join the thread; safe to call twice."""
        if self._stopped:
            return
        self._stopped = True
        if self._thread is not None and self._wake_w is not None:
            try:
                self._wake_w.send(b"x")
            except OSError:
                pass
            self._thread.join()

    def __enter__(self) -> DnsServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the evidence ------------------------------------------------------------

    def log(self) -> list[QueryRecord]:
        """The queries received so far, in the order they were read."""
        with self._log_lock:
            return list(self._log)

    def counts(self, qtype: str | None = None) -> Counter[str]:
        """Queries received per name (of one type, or of all)."""
        return Counter(r.name for r in self.log() if qtype is None or r.qtype == qtype)

    def clear_log(self) -> None:
        with self._log_lock:
            self._log.clear()

    def cpu_seconds(self) -> float:
        """CPU time used by the serving thread so far."""
        if self._cpu_final is not None:
            return self._cpu_final
        t = self._thread
        if t is None or t.ident is None:
            return 0.0
        return time.clock_gettime(time.pthread_getcpuclockid(t.ident))

    # -- answers -----------------------------------------------------------------

    def _rendered_answer(self, q: _Question, tcp: bool) -> tuple[int, bytes] | None:
        """(rcode, wire with a zero id) of the answer to ``q``, or None for a silent name."""
        entry = self._zone.get(q.name)
        if entry is not None and entry.behaviour is Behaviour.SILENT:
            return None
        fast = self._plain(q, entry, tcp)
        if fast is not None:
            return fast
        key = (q.name, q.qtype, q.rd, tcp)
        hit = self._rendered.get(key)
        if hit is None:
            hit = self._rendered[key] = self._render(q, tcp)
        return hit

    def _plain(self, q: _Question, entry: Entry | None, tcp: bool) -> tuple[int, bytes] | None:
        """The common answers (addresses, NODATA, NXDOMAIN) written directly: a thousand new
        names must not cost a thousand dnspython renders (~150 µs each). None: not one of them."""
        if q.qclass != dns.rdataclass.IN or not q.name.endswith("." + self.suffix):
            return None
        if entry is None or entry.behaviour is Behaviour.NXDOMAIN:
            rcode, answers, records = dns.rcode.NXDOMAIN, 0, self._soa_wire
        elif entry.behaviour is Behaviour.ANSWER and entry.cname is None:
            packed = self._packed[q.name].get(q.qtype, ())
            ttl = self._ttl_s if entry.ttl_s is None else entry.ttl_s
            rcode, answers = dns.rcode.NOERROR, len(packed)
            records = b"".join(struct.pack("!HHHIH", 0xC00C, q.qtype, 1, ttl, len(a)) + a for a in packed)
            if not packed:
                records = self._soa_wire   # NODATA
        else:
            return None
        flags = 0x8400 | (0x0100 if q.rd else 0) | rcode   # QR, AA, RD as asked
        wire = struct.pack("!6H", 0, flags, 1, answers, 0 if answers else 1, 0) + q.raw + records
        return None if len(wire) > _UDP_MAX and not tcp else (rcode, wire)

    def _render(self, q: _Question, tcp: bool) -> tuple[int, bytes]:
        query = dns.message.make_query(dns.name.Name([*q.labels, b""]), dns.rdatatype.RdataType.make(q.qtype),
                                       dns.rdataclass.RdataClass.make(q.qclass), use_edns=False)
        query.id = 0
        query.flags = dns.flags.RD if q.rd else dns.flags.Flag(0)
        response = dns.message.make_response(query)
        response.flags |= dns.flags.AA
        rcode = self._fill(response, q)
        response.set_rcode(rcode)
        wire = response.to_wire()
        if len(wire) > _UDP_MAX and not tcp:
            response.answer.clear()
            response.authority.clear()
            response.flags |= dns.flags.TC
            wire = response.to_wire()
        return rcode, wire

    def _fill(self, response: dns.message.Message, q: _Question) -> dns.rcode.Rcode:
        in_zone = q.name == self.suffix or q.name.endswith("." + self.suffix)
        if not in_zone or q.qclass != dns.rdataclass.IN:
            return dns.rcode.REFUSED
        name = q.name
        for _ in range(_CNAME_HOPS):
            entry = self._zone.get(name)
            if entry is None or entry.behaviour is Behaviour.NXDOMAIN:
                if name == self.suffix:
                    return self._apex(response, q)
                response.authority.append(self._soa)
                return dns.rcode.NXDOMAIN
            if entry.behaviour is Behaviour.SERVFAIL:
                return dns.rcode.SERVFAIL
            if entry.behaviour is Behaviour.REFUSED:
                return dns.rcode.REFUSED
            ttl = self._ttl_s if entry.ttl_s is None else entry.ttl_s
            if entry.cname is not None and q.qtype != dns.rdatatype.CNAME:
                target = entry.cname.lower().rstrip(".")
                response.answer.append(dns.rrset.from_text(name + ".", ttl, "IN", "CNAME", target + "."))
                if not target.endswith("." + self.suffix) or target not in self._zone:
                    if target.endswith("." + self.suffix):   # in the zone and absent: NXDOMAIN
                        response.authority.append(self._soa)
                        return dns.rcode.NXDOMAIN
                    return dns.rcode.NOERROR                  # outside: the client follows it
                name = target
                continue
            family = {int(dns.rdatatype.A): 4, int(dns.rdatatype.AAAA): 6}.get(q.qtype)
            found = [a for a in entry.addresses if ipaddress.ip_address(a).version == family]
            if found:
                response.answer.append(dns.rrset.from_text_list(
                    name + ".", ttl, "IN", dns.rdatatype.RdataType(q.qtype), found))
            elif not response.answer:
                response.authority.append(self._soa)
            return dns.rcode.NOERROR
        return dns.rcode.SERVFAIL  # a CNAME loop

    def _apex(self, response: dns.message.Message, q: _Question) -> dns.rcode.Rcode:
        if q.qtype == dns.rdatatype.SOA:
            response.answer.append(self._soa)
        else:
            response.authority.append(self._soa)
        return dns.rcode.NOERROR

    def _answer(self, wire: bytes, client: tuple[str, int], tcp: bool) -> bytes | None:
        """The bytes to send back for one query (None: nothing), logged; held by the caller."""
        q = _parse_question(wire)
        if q is None:
            if len(wire) < 12 or wire[2] & 0x80:
                return None  # not even a query header: nothing to answer to
            self._record(client, tcp, "", "?", "FORMERR", struct.unpack_from("!H", wire)[0])
            return _header_only(wire, dns.rcode.FORMERR)
        rendered = self._rendered_answer(q, tcp)
        qtype = dns.rdatatype.to_text(dns.rdatatype.RdataType.make(q.qtype))
        if rendered is None:
            self._record(client, tcp, q.name, qtype, "silent", q.qid)
            return None
        rcode, template = rendered
        self._record(client, tcp, q.name, qtype, dns.rcode.to_text(dns.rcode.Rcode(rcode)), q.qid)
        end = 12 + len(q.raw)
        return struct.pack("!H", q.qid) + template[2:12] + q.raw + template[end:]

    def _record(self, client: tuple[str, int], tcp: bool, name: str, qtype: str, rcode: str, qid: int) -> None:
        record = QueryRecord(time.time(), name, qtype, rcode, "tcp" if tcp else "udp", client, qid)
        with self._log_lock:
            self._log.append(record)

    def latency_of(self, name: str, qtype: str = "A") -> float:
        """The time an answer to (name, qtype) is held: the Latency at (type number, name)."""
        if self._latency is None:
            return 0.0
        return self._latency(int(dns.rdatatype.from_text(qtype)), name.lower().rstrip("."))

    def _delay(self, wire: bytes) -> float:
        if self._latency is None:
            return 0.0
        q = _parse_question(wire)
        return 0.0 if q is None else self._latency(q.qtype, q.name)

    def _later(self, delay: float, fn: Callable[[], None]) -> None:
        if delay <= 0:
            fn()
            return
        self._timer_seq += 1
        heapq.heappush(self._timers, (time.monotonic() + delay, self._timer_seq, fn))

    # -- the loop ----------------------------------------------------------------

    def _loop(self) -> None:
        sel = self._sel
        assert sel is not None
        timers = self._timers
        try:
            while not self._stopped:
                timeout = max(0.0, timers[0][0] - time.monotonic()) if timers else None
                for key, mask in sel.select(timeout):
                    try:
                        if key.data == "udp":
                            self._on_udp()
                        elif key.data == "accept":
                            self._accept()
                        elif isinstance(key.data, _TcpConn):
                            self._on_tcp(key.data, mask)
                    except Exception:  # noqa: BLE001 - a bug must not take the zone down
                        traceback.print_exc()
                now = time.monotonic()
                while timers and timers[0][0] <= now:
                    fn = heapq.heappop(timers)[2]
                    try:
                        fn()
                    except Exception:  # noqa: BLE001 - as above
                        traceback.print_exc()
        finally:
            self._cpu_final = time.thread_time()
            for conn in list(self._conns):
                self._close(conn)
            for s in (self._udp, self._tcp, self._wake_r, self._wake_w):
                if s is not None:
                    s.close()
            sel.close()

    def _on_udp(self) -> None:
        udp = self._udp
        assert udp is not None
        for _ in range(256):  # drain a burst, but let timers and TCP have their turn
            try:
                wire, client = udp.recvfrom(4096)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # an ICMP error for an earlier answer: the client went away
                continue
            out = self._answer(wire, client, tcp=False)
            if out is not None:
                self._later(self._delay(wire), functools.partial(self._sendto, out, client))

    def _sendto(self, out: bytes, client: tuple[str, int]) -> None:
        assert self._udp is not None
        try:
            self._udp.sendto(out, client)
        except OSError:
            pass  # the client's port is gone: UDP loses it, as the network would

    def _accept(self) -> None:
        assert self._tcp is not None and self._sel is not None
        while True:
            try:
                sock, peer = self._tcp.accept()
            except OSError:
                return
            sock.setblocking(False)
            conn = _TcpConn(sock, peer)
            self._conns.add(conn)
            self._sel.register(sock, selectors.EVENT_READ, conn)

    def _on_tcp(self, conn: _TcpConn, mask: int) -> None:
        if mask & selectors.EVENT_WRITE:
            self._flush(conn)
        if not mask & selectors.EVENT_READ or conn not in self._conns:
            return
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data or len(conn.buf) + len(data) > _MAX_TCP_BUF:
            self._close(conn)
            return
        conn.buf += data
        while len(conn.buf) >= 2:
            size = struct.unpack_from("!H", conn.buf)[0]
            if len(conn.buf) < 2 + size:
                break
            wire = bytes(conn.buf[2: 2 + size])
            del conn.buf[: 2 + size]
            out = self._answer(wire, conn.peer, tcp=True)
            if out is not None:
                framed = struct.pack("!H", len(out)) + out
                self._later(self._delay(wire), functools.partial(self._queue, conn, framed))

    def _queue(self, conn: _TcpConn, framed: bytes) -> None:
        if conn in self._conns:
            conn.out += framed
            self._flush(conn)

    def _flush(self, conn: _TcpConn) -> None:
        assert self._sel is not None
        try:
            sent = conn.sock.send(conn.out)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self._close(conn)
            return
        del conn.out[:sent]
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.out else 0)
        self._sel.modify(conn.sock, events, conn)

    def _close(self, conn: _TcpConn) -> None:
        if conn in self._conns:
            self._conns.discard(conn)
            assert self._sel is not None
            self._sel.unregister(conn.sock)
            conn.sock.close()
