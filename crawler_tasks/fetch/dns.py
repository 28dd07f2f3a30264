"""The crawler's own DNS stub resolver: asynchronous, with TTL and negative caching.

Why (Mercator's design): glibc's ``getaddrinfo`` holds a thread for the whole lookup, and
a name that never answers holds it 2 x 5 s. On a web of 1,000 names whose DNS answered in
~30 ms, 107 live hosts were never fetched: lookups queued behind 8 threads. Here a lookup
is a socket and a timer on one thread per process, and callers are called back.

- **One selector thread per process**, started on first use; a forked child gets a fresh
  lock, keeps the cache, forgets the parent's lookups and sockets, and starts its own
  thread (at-fork hook, and a pid guard). Callers are threads; ``done`` runs on the
  resolver thread and must only queue.
- **Queries**: UDP, a socket per query (the kernel picks a random source port; the socket
  is connected, so only the server's datagrams reach it), a random 16-bit id, RD set, no
  EDNS. An answer must match the id and the question, else it is ignored (counted). An
  answer with the TC bit is asked again over TCP within the same try's timer.
- **The wire format is written and read here** (RFC 1035: a query is a header and the
  labels; of an answer we read the question, the answer and authority records, bounded
  and checked against dnspython by a property test): dnspython's parse took 80 µs a
  lookup, a third of the resolver's CPU.
- **A first; AAAA only when A is NODATA**: the crawler prefers IPv4, so the common web
  costs one query per name. CNAME chains in an answer are followed (the TTL is the
  chain's minimum); a chain that ends without an address is NODATA.
- **Tries**: try k (from 0) waits ``timeout_s`` x 2^k. A timeout, SERVFAIL, REFUSED, a
  refused port or an unreadable answer moves on to the next try at once, rotating over the
  servers, which are taken in order of fewest recent timeouts (a dead first server costs
  the first lookups only). Bound: a lookup ends at most ``timeout_s`` x (2^tries - 1) after
  its first query (7 s by default) and sends at most ``tries`` failed queries plus four
  answered ones (A, AAAA, each NXDOMAIN's confirmation). A query that timed out keeps its
  socket until the lookup ends: a server that answers late (a burst of thousands of new
  hosts) still answers the lookup, where closing it made each try time out in turn. Queries
  beyond ``max_sockets`` in flight wait for a socket before their timer starts (file
  descriptors are bounded).
- **NXDOMAIN is confirmed** by one more query (the next server, or the same one) before it
  is reported: one lost or odd NXDOMAIN must not kill a live host. Unconfirmed when the
  tries run out: TEMPORARY.
- **Caching** (wall-clock expiry, so answers kept elsewhere can be seeded with
  ``remember``): positive answers for the RRset's TTL clamped to 5 min .. 6 h (a CDN's
  20 s TTL would re-ask every host each minute, and a CDN's old addresses keep serving for
  minutes; Heritrix keeps addresses at least 6 h, we at most 6 h so a long crawl sees a
  move); NXDOMAIN and NODATA for min(SOA TTL, SOA MINIMUM) (RFC 2308 section 5) clamped to
  5 s .. 3 h (RFC 2308: one to three hours work well), or 60 s when no SOA came. TEMPORARY
  is never cached: the caller owns retries across lookups. LRU bound on entries.
- IP literals answer OK at once; invalid names (empty, over 253 characters, a label empty
  or over 63, a character outside [a-z0-9_-]: IDNA is the caller's) answer NXDOMAIN at once
  with "invalid host name". No /etc/hosts, no search list: the crawler asks for full names.
- Nothing the network or a server does raises to a caller; ``close`` answers every lookup
  in flight with TEMPORARY "resolver closed" and closes every socket.
"""

from __future__ import annotations

import errno
import heapq
import ipaddress
import logging
import os
import secrets
import selectors
import socket
import struct
import threading
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum

__all__ = ["Answer", "AnswerKind", "Resolver", "nameservers"]

log = logging.getLogger(__name__)

LITERAL_TTL_S = 365 * 86400.0       # an IP literal never changes
RESOLV_CONF = "/etc/resolv.conf"
_MAX_NAMESERVERS = 3                 # glibc's MAXNS
_CNAME_HOPS = 8
_POINTER_HOPS = 64                   # compression pointers followed in one name (loops end)
_CNAME, _SOA, _IN = 5, 6, 1
_RCODES = {0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED"}
_ALLOWED = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_")
_COUNTERS = ("lookups", "queries", "answers_ok", "nxdomain", "nodata", "temporary", "invalid",
             "servfail", "refused", "timeouts", "errors", "tcp", "ignored", "cache_hits", "joined")

Server = tuple[str, int]
Done = Callable[["Answer"], None]


class AnswerKind(StrEnum):
    OK = "ok"
    NXDOMAIN = "nxdomain"     # the name does not exist (confirmed), or is not a valid name
    NODATA = "nodata"         # the name exists and has no address
    TEMPORARY = "temporary"   # timeout, SERVFAIL, REFUSED, network error, resolver closed


@dataclass(frozen=True, slots=True)
class Answer:
    """The outcome of one lookup, as cached and as given to every caller that asked."""

    host: str                      # as asked: lower-case, no trailing dot
    kind: AnswerKind
    addresses: tuple[str, ...]     # OK only: the A records as answered, or the AAAA ones when there is no A
    ttl_s: float                   # how long it may be cached (clamped); TEMPORARY: 0
    reason: str                    # '' for OK; else a short reason for the crawl log
    queries: int                   # queries this lookup sent (0: literal, invalid, cached)


def nameservers(path: str = RESOLV_CONF) -> list[Server]:
    """The ``nameserver`` lines of resolv.conf (at most three, port 53); 127.0.0.1:53 when
    there are none or the file cannot be read, as glibc does."""
    found: list[Server] = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    for line in lines:
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "nameserver" and len(found) < _MAX_NAMESERVERS:
            try:
                found.append((str(ipaddress.ip_address(parts[1])), 53))
            except ValueError:
                continue
    return found or [("127.0.0.1", 53)]


def _invalid(host: str) -> str | None:
    """Why ``host`` (lower-case, no trailing dot) is not a name we can ask, or None."""
    if not host:
        return "empty"
    if len(host) > 253:
        return f"{len(host)} characters (at most 253)"
    for label in host.split("."):
        if not label:
            return "an empty label"
        if len(label) > 63:
            return f"a label of {len(label)} characters (at most 63)"
        if not _ALLOWED.issuperset(label):
            return f"a character outside a-z 0-9 - _ in {label!r}"
    return None


def _query_wire(qid: int, host: str, qtype: int) -> bytes:
    """A standard query with RD for a valid ``host`` (dnspython took 80 µs for it)."""
    labels = b"".join(bytes((len(label),)) + label.encode("ascii") for label in host.split("."))
    return struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0) + labels + struct.pack("!BHH", 0, qtype, 1)


class QType(IntEnum):
    A = 1
    AAAA = 28


class _Malformed(Exception):
    """An answer we cannot read: the try failed."""


@dataclass(frozen=True, slots=True)
class _Record:
    name: bytes        # owner, lower-case, dotted, no trailing dot
    rtype: int
    rclass: int
    ttl: int
    start: int         # rdata offset in the message
    length: int


@dataclass(frozen=True, slots=True)
class _Message:
    """The parts of an answer the resolver reads (RFC 1035 section 4)."""

    flags: int
    qname: bytes
    qtype: int
    qclass: int
    answer: list[_Record]
    authority: list[_Record]
    wire: bytes

    @property
    def rcode(self) -> int:
        return self.flags & 0x0F


def _read_name(wire: bytes, pos: int) -> tuple[bytes, int]:
    """The name at ``pos`` (compression pointers followed, a bounded number of times) and the
    offset just after it where it is written."""
    labels: list[bytes] = []
    after: int | None = None
    size = 0
    for _ in range(_POINTER_HOPS):
        while True:
            if pos + 1 >= len(wire):   # a name ends with its 0 byte or a 2-byte pointer, then more
                raise _Malformed("a name past the message")
            length = wire[pos]
            if length >= 0xC0:
                if after is None:
                    after = pos + 2
                pos = (length & 0x3F) << 8 | wire[pos + 1]
                break
            if length > 63:
                raise _Malformed("a label type RFC 1035 does not know")
            if length == 0:
                return b".".join(labels).lower(), pos + 1 if after is None else after
            size += length + 1
            if size > 255 or pos + 1 + length > len(wire):
                raise _Malformed("a name past 255 bytes or past the message")
            labels.append(wire[pos + 1: pos + 1 + length])
            pos += 1 + length
    raise _Malformed("a compression loop")


def _parse(wire: bytes) -> _Message:
    """Header, the one question, and the answer and authority records (the additional
    section is not read). Raises _Malformed for anything that does not add up."""
    try:
        flags, qdcount, ancount, nscount = struct.unpack_from("!4H", wire, 2)
        if qdcount != 1:
            raise _Malformed(f"{qdcount} questions")
        qname, pos = _read_name(wire, 12)
        qtype, qclass = struct.unpack_from("!HH", wire, pos)
        pos += 4
        sections: list[list[_Record]] = [[], []]
        for section, count in zip(sections, (ancount, nscount), strict=True):
            for _ in range(count):
                name, pos = _read_name(wire, pos)
                rtype, rclass, ttl, length = struct.unpack_from("!HHIH", wire, pos)
                pos += 10
                if pos + length > len(wire):
                    raise _Malformed("a record past the message")
                section.append(_Record(name, rtype, rclass, ttl if ttl < 2**31 else 0, pos, length))  # RFC 2181 8
                pos += length
    except (struct.error, IndexError) as exc:
        raise _Malformed("a message cut short") from exc
    return _Message(flags, qname, qtype, qclass, sections[0], sections[1], wire)


@dataclass(frozen=True, slots=True)
class _Reply:
    """What one server's answer says, before tries and confirmation."""

    kind: AnswerKind                  # TEMPORARY: this server failed this try
    addresses: tuple[str, ...] = ()
    ttl_s: float | None = None        # record TTL, or the negative TTL from the SOA (None: no SOA)
    reason: str = ""


def _negative_ttl(message: _Message) -> float | None:
    """min(SOA TTL, SOA MINIMUM) of the first SOA in the authority section (RFC 2308 section 5)."""
    for record in message.authority:
        if record.rtype == _SOA and record.length >= 22:   # two names of >= 1 byte, five numbers
            minimum = struct.unpack_from("!I", message.wire, record.start + record.length - 4)[0]
            return float(min(record.ttl, minimum))
    return None


def _interpret(message: _Message, qname: bytes, qtype: int, server: str) -> _Reply:
    if message.rcode == 3:
        return _Reply(AnswerKind.NXDOMAIN, ttl_s=_negative_ttl(message))
    if message.rcode != 0:
        return _Reply(AnswerKind.TEMPORARY, reason=f"{_RCODES.get(message.rcode, message.rcode)} from {server}")
    family, size = (socket.AF_INET, 4) if qtype == QType.A else (socket.AF_INET6, 16)
    name, ttl = qname, float("inf")
    for _ in range(_CNAME_HOPS):
        found = [r for r in message.answer if r.name == name and r.rtype == qtype and r.rclass == _IN]
        if found:
            if any(r.length != size for r in found):
                raise _Malformed("an address of the wrong size")
            addresses = tuple(dict.fromkeys(
                socket.inet_ntop(family, message.wire[r.start: r.start + size]) for r in found))
            return _Reply(AnswerKind.OK, addresses, min(ttl, min(float(r.ttl) for r in found)))
        alias = next((r for r in message.answer if r.name == name and r.rtype == _CNAME and r.rclass == _IN), None)
        if alias is None:
            break
        ttl = min(ttl, float(alias.ttl))
        name, end = _read_name(message.wire, alias.start)
        if end > alias.start + alias.length:
            raise _Malformed("a CNAME past its record")
    return _Reply(AnswerKind.NODATA, ttl_s=_negative_ttl(message))


@dataclass(slots=True, eq=False)
class _Lookup:
    """One name being resolved, with every caller waiting for it."""

    host: str
    waiters: list[Done]
    qname: bytes                  # the host as asked on the wire, to match the answer's question
    order: list[int] = field(default_factory=list)   # server indexes, healthiest first
    qtype: QType = QType.A
    sent: int = 0                 # queries sent (also the rotation over ``order``)
    failures: int = 0             # tries used up: timeouts and failed answers
    all_timeouts: bool = True
    last_failure: str = ""
    unconfirmed: str | None = None   # the server whose NXDOMAIN awaits confirmation
    negative_ttl_s: float | None = None
    first_sent: float = 0.0       # monotonic time of the first query
    deadline: float = 0.0
    queries: list[_Query] = field(default_factory=list)   # every query sent, closed at the end
    done: bool = False


@dataclass(slots=True, eq=False)
class _Query:
    """One query on its own socket, UDP or (after TC) TCP."""

    lookup: _Lookup
    server_index: int
    qid: int
    wire: bytes
    sock: socket.socket
    due: float
    tcp: bool = False
    connected: bool = False
    buf: bytearray = field(default_factory=bytearray)
    over: bool = False
    late: bool = False   # timed out (its try is spent) but still listening: a late answer still counts


class Resolver:
    """Asynchronous stub resolver over ``servers`` (None: resolv.conf's nameservers).

    ``timeout_s`` is try 1's wait, doubled for each later try; ``tries`` the failed queries a
    lookup may spend. TTL bounds are in seconds; ``max_entries`` bounds the cache (LRU);
    ``max_sockets`` the queries in flight.
    """

    def __init__(
        self,
        servers: Sequence[Server] | None = None,
        *,
        timeout_s: float = 1.0,
        tries: int = 3,
        min_ttl_s: float = 300.0,
        max_ttl_s: float = 6 * 3600.0,
        min_negative_ttl_s: float = 5.0,
        max_negative_ttl_s: float = 3 * 3600.0,
        default_negative_ttl_s: float = 60.0,
        max_entries: int = 100_000,
        max_sockets: int = 256,
    ) -> None:
        self.servers: list[Server] = [(str(ipaddress.ip_address(ip)), int(port))
                                      for ip, port in (nameservers() if servers is None else servers)]
        if not self.servers:
            raise ValueError("a Resolver needs at least one server")
        if timeout_s <= 0 or tries < 1 or max_entries < 1 or max_sockets < 1:
            raise ValueError("timeout_s > 0, tries >= 1, max_entries >= 1 and max_sockets >= 1 are needed")
        if not (0 <= min_ttl_s <= max_ttl_s and 0 <= min_negative_ttl_s <= max_negative_ttl_s):
            raise ValueError("TTL bounds must be 0 <= min <= max")
        self.timeout_s, self.tries = timeout_s, tries
        self.min_ttl_s, self.max_ttl_s = min_ttl_s, max_ttl_s
        self.min_negative_ttl_s, self.max_negative_ttl_s = min_negative_ttl_s, max_negative_ttl_s
        self.default_negative_ttl_s = default_negative_ttl_s
        self.max_entries, self.max_sockets = max_entries, max_sockets
        self._names = [f"{ip}:{port}" for ip, port in self.servers]
        self._timeouts_in_row = [0] * len(self.servers)
        self._cache: OrderedDict[str, tuple[Answer, float]] = OrderedDict()
        self._counts = dict.fromkeys(_COUNTERS, 0)
        self._closed = False
        self._reset_process_state()
        _LIVE.add(self)

    def _reset_process_state(self) -> None:
        """The state a process owns alone: its lock, thread, selector and lookups."""
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._thread: threading.Thread | None = None
        self._sel: selectors.BaseSelector | None = None
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._woken = False
        self._inbox: deque[_Lookup] = deque()      # new lookups, for the thread
        self._pending: dict[str, _Lookup] = {}     # host -> lookup in flight
        self._queries: set[_Query] = set()         # on a socket (thread only)
        self._backlog: deque[_Lookup] = deque()    # waiting for a socket (thread only)
        self._timers: list[tuple[float, int, _Query]] = []
        self._seq = 0

    def _after_fork_in_child(self) -> None:
        """Drop the parent's thread state without touching the parent's sockets' registrations
        (the epoll set is shared across fork: closing our copies of the fds is safe, unregistering
        is not)."""
        for query in self._queries:
            query.sock.close()
        for s in (self._wake_r, self._wake_w):
            if s is not None:
                s.close()
        if self._sel is not None:
            self._sel.close()
        self._reset_process_state()

    # -- the callers' side -----------------------------------------------------------

    def lookup(self, host: str, done: Done) -> Answer | None:
        """A fresh cached (or literal, or invalid-name) answer at once, ``done`` not called;
        else None, and ``done(answer)`` is called once, later, on the resolver thread.
        Concurrent lookups of one name share its queries."""
        key = host.strip().lower().rstrip(".")
        with self._lock:
            self._counts["lookups"] += 1
            now_answer = self._at_once(key, time.time())
            if now_answer is not None:
                return now_answer
            if self._closed:
                return Answer(key, AnswerKind.TEMPORARY, (), 0.0, "resolver closed", 0)
            pending = self._pending.get(key)
            if pending is not None:
                pending.waiters.append(done)
                self._counts["joined"] += 1
                return None
            self._start_thread()
            lookup = _Lookup(key, [done], key.encode("ascii"))
            self._pending[key] = lookup
            self._inbox.append(lookup)
            self._wake()
        return None

    def resolve(self, host: str, timeout_s: float) -> Answer:
        """``lookup`` for code already on a thread (never the resolver's: it would wait for
        itself): waits at most ``timeout_s``; the lookup goes on and its answer is cached."""
        arrived = threading.Event()
        box: list[Answer] = []

        def done(answer: Answer) -> None:
            box.append(answer)
            arrived.set()

        now_answer = self.lookup(host, done)
        if now_answer is not None:
            return now_answer
        if arrived.wait(timeout_s):
            return box[0]
        key = host.strip().lower().rstrip(".")
        return Answer(key, AnswerKind.TEMPORARY, (), 0.0, f"no answer within {timeout_s:.1f} s", 0)

    def cached(self, host: str, now: float | None = None) -> Answer | None:
        """What ``lookup`` would answer at once (fresh cache entry, literal, invalid name),
        or None. ``now`` is epoch seconds."""
        key = host.strip().lower().rstrip(".")
        with self._lock:
            return self._at_once(key, time.time() if now is None else now, count=False)

    def remember(self, answer: Answer, expires: float) -> None:
        """Seed the cache with an answer kept elsewhere, fresh until ``expires`` (epoch seconds).
        TEMPORARY answers are not cached."""
        if answer.kind is not AnswerKind.TEMPORARY:
            with self._lock:
                self._store(answer, expires)

    @property
    def stats(self) -> dict[str, int]:
        """Counters. Per lookup: lookups (calls), cache_hits (answered at once from the cache),
        joined (joined a lookup in flight), answers_ok / nxdomain / nodata / temporary (outcomes
        of lookups that queried), invalid (names refused at once). Per query: queries, servfail,
        refused, timeouts, errors (refused port, unreadable answer), tcp (asked again over TCP),
        ignored (datagrams that were not the answer). Gauges: in_flight (names being looked
        up), cached (entries)."""
        with self._lock:
            return {**self._counts, "in_flight": len(self._pending), "cached": len(self._cache)}

    def close(self) -> None:
        """Stop the thread; lookups in flight get TEMPORARY "resolver closed". Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
            self._wake()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    # -- under the lock ----------------------------------------------------------------

    def _at_once(self, key: str, now: float, count: bool = True) -> Answer | None:
        entry = self._cache.get(key)
        if entry is not None and now < entry[1]:   # a stale entry waits to be replaced or evicted
            self._cache.move_to_end(key)
            if count:
                self._counts["cache_hits"] += 1
            return entry[0]
        try:
            address = ipaddress.ip_address(key[1:-1] if key.startswith("[") and key.endswith("]") else key)
        except ValueError:
            pass
        else:
            return Answer(key, AnswerKind.OK, (str(address),), LITERAL_TTL_S, "", 0)
        why = _invalid(key)
        if why is None:
            return None
        if count:
            self._counts["invalid"] += 1
        return Answer(key, AnswerKind.NXDOMAIN, (), 0.0, f"invalid host name {key[:80]!r}: {why}", 0)

    def _store(self, answer: Answer, expires: float) -> None:
        self._cache[answer.host] = (answer, expires)
        self._cache.move_to_end(answer.host)
        while len(self._cache) > self.max_entries:
            self._cache.popitem(last=False)

    def _start_thread(self) -> None:
        if self._pid != os.getpid():  # forked without the at-fork hook (it normally runs first)
            self._after_fork_in_child()
        if self._thread is not None:
            return
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._thread = threading.Thread(target=self._run, name="crawler-dns", daemon=True)
        self._thread.start()

    def _wake(self) -> None:
        if self._wake_w is not None and not self._woken:
            self._woken = True
            try:
                self._wake_w.send(b"x")
            except OSError:
                pass  # the buffer is full: the thread is awake already

    # -- the resolver thread -----------------------------------------------------------

    def _run(self) -> None:
        sel = self._sel
        assert sel is not None
        timers = self._timers
        try:
            while True:
                while timers and timers[0][2].over:   # answered queries' timers
                    heapq.heappop(timers)
                timeout = max(0.0, timers[0][0] - time.monotonic()) if timers else None
                events = sel.select(timeout)
                with self._lock:
                    closed = self._closed
                    new = list(self._inbox)
                    self._inbox.clear()
                if closed:
                    break
                try:
                    for key, mask in events:
                        if key.data is None:
                            self._drain_wake()
                        else:
                            self._on_ready(key.data, mask)
                    for lookup in new:
                        self._send(lookup)
                    self._fire_timers()
                    while self._backlog and len(self._queries) < self.max_sockets:
                        self._send(self._backlog.popleft())
                except Exception:  # a bug must not stop every lookup of the process
                    log.exception("DNS resolver loop")
        finally:
            self._shutdown()

    def _drain_wake(self) -> None:
        """Read the wake bytes, then clear the flag: a lookup queued in between is read from
        the inbox in this same turn of the loop."""
        assert self._wake_r is not None
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:
            pass
        with self._lock:
            self._woken = False

    def _fire_timers(self) -> None:
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            query = heapq.heappop(self._timers)[2]
            if not query.over:
                self._counts_add("timeouts")
                self._timeouts_in_row[query.server_index] += 1
                reason = f"no answer from {self._names[query.server_index]}"
                if query.tcp:
                    self._fail(query, reason, timeout=True)
                else:   # the next try goes, and this one keeps listening: a slow server's answer still counts
                    query.late = True
                    self._failed(query.lookup, reason, timeout=True)

    def _counts_add(self, name: str) -> None:
        with self._lock:
            self._counts[name] += 1

    def _send(self, lookup: _Lookup) -> None:
        """Send the lookup's next query, or finish it when its tries or time are spent."""
        now = time.monotonic()
        if lookup.done:
            return
        if lookup.sent and (lookup.failures >= self.tries or now >= lookup.deadline):
            self._give_up(lookup)
            return
        if len(self._queries) >= self.max_sockets:
            self._backlog.append(lookup)
            return
        if lookup.sent == 0:
            lookup.order = sorted(range(len(self.servers)), key=lambda i: (self._timeouts_in_row[i], i))
            lookup.first_sent = now
            lookup.deadline = now + self.timeout_s * (2 ** self.tries - 1)
        index = lookup.order[lookup.sent % len(lookup.order)]
        ip, port = self.servers[index]
        qid = secrets.randbits(16)
        wire = _query_wire(qid, lookup.host, lookup.qtype)
        lookup.sent += 1
        self._counts_add("queries")
        try:
            sock = socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET, socket.SOCK_DGRAM)
        except OSError as exc:   # out of file descriptors, most likely
            self._counts_add("errors")
            self._failed(lookup, f"no socket for {self._names[index]}: {exc.strerror or exc}")
            return
        due = min(lookup.deadline, now + self.timeout_s * 2 ** lookup.failures)
        query = _Query(lookup, index, qid, wire, sock, due)
        self._queries.add(query)
        lookup.queries.append(query)
        try:
            sock.setblocking(False)
            sock.connect((ip, port))
            sock.send(wire)
        except OSError as exc:
            self._counts_add("errors")
            self._fail(query, f"cannot send to {self._names[index]}: {exc.strerror or exc}")
            return
        assert self._sel is not None
        self._sel.register(sock, selectors.EVENT_READ, query)
        self._seq += 1
        heapq.heappush(self._timers, (due, self._seq, query))

    def _end_query(self, query: _Query) -> None:
        """Close the query's socket (a lookup waiting for one takes it at the end of the
        loop's turn)."""
        query.over = True
        self._queries.discard(query)
        try:
            assert self._sel is not None
            self._sel.unregister(query.sock)
        except (KeyError, ValueError):
            pass  # never registered: the send failed
        query.sock.close()

    def _on_ready(self, query: _Query, mask: int) -> None:
        if query.over:
            return
        if query.tcp:
            self._on_tcp(query, mask)
            return
        for _ in range(8):  # a few stray datagrams at most per wakeup
            try:
                wire = query.sock.recv(65535)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # ECONNREFUSED from an ICMP port unreachable, and the like
                self._counts_add("errors")
                self._fail(query, f"{exc.strerror or exc} from {self._names[query.server_index]}")
                return
            if len(wire) < 12 or struct.unpack_from("!H", wire)[0] != query.qid or not wire[2] & 0x80:
                self._counts_add("ignored")
                continue
            if wire[2] & 0x02:  # TC: the whole answer comes over TCP, on this try's timer
                self._to_tcp(query)
                return
            self._on_answer(query, wire)
            return

    def _to_tcp(self, query: _Query) -> None:
        self._counts_add("tcp")
        assert self._sel is not None
        self._sel.unregister(query.sock)
        query.sock.close()
        query.tcp = True
        ip, port = self.servers[query.server_index]
        try:
            query.sock = socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET, socket.SOCK_STREAM)
            query.sock.setblocking(False)
            code = query.sock.connect_ex((ip, port))
            if code not in (0, errno.EINPROGRESS):
                raise OSError(code, os.strerror(code))
        except OSError as exc:
            self._counts_add("errors")
            self._fail(query, f"TCP to {self._names[query.server_index]}: {exc.strerror or exc}")
            return
        self._sel.register(query.sock, selectors.EVENT_WRITE, query)

    def _on_tcp(self, query: _Query, mask: int) -> None:
        where = self._names[query.server_index]
        assert self._sel is not None
        if not query.connected:
            code = query.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            framed = struct.pack("!H", len(query.wire)) + query.wire
            try:
                if code or query.sock.send(framed) != len(framed):
                    raise OSError(code, os.strerror(code) if code else "short write")
            except OSError as exc:
                self._counts_add("errors")
                self._fail(query, f"TCP to {where}: {exc.strerror or exc}")
                return
            query.connected = True
            self._sel.modify(query.sock, selectors.EVENT_READ, query)
            return
        try:
            data = query.sock.recv(65537)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            data, reason = b"", f"TCP from {where}: {exc.strerror or exc}"
        else:
            reason = f"TCP connection closed by {where}"
        if not data:
            self._counts_add("errors")
            self._fail(query, reason)
            return
        query.buf += data
        if len(query.buf) >= 2 and len(query.buf) >= 2 + struct.unpack_from("!H", query.buf)[0]:
            wire = bytes(query.buf[2: 2 + struct.unpack_from("!H", query.buf)[0]])
            if len(wire) < 12 or struct.unpack_from("!H", wire)[0] != query.qid:
                self._counts_add("errors")
                self._fail(query, f"a mismatched answer over TCP from {where}")
                return
            self._on_answer(query, wire)

    def _on_answer(self, query: _Query, wire: bytes) -> None:
        lookup = query.lookup
        if lookup.done:
            self._end_query(query)
            return
        where = self._names[query.server_index]
        try:
            message = _parse(wire)
            matches = (message.qname == lookup.qname and message.qtype == lookup.qtype and message.qclass == _IN
                       and message.flags & 0xF800 == 0x8000)   # a response (QR) to a standard query
            reply = _interpret(message, lookup.qname, lookup.qtype, where) if matches else None
        except _Malformed as exc:
            self._counts_add("errors")
            self._fail(query, f"unreadable answer from {where}: {exc}")
            return
        if reply is None:
            if query.tcp:
                self._counts_add("errors")
                self._fail(query, f"a mismatched answer over TCP from {where}")
            else:
                self._counts_add("ignored")   # not our question: keep waiting for the answer
            return
        self._timeouts_in_row[query.server_index] = 0
        if reply.kind is AnswerKind.TEMPORARY:
            self._counts_add({2: "servfail", 5: "refused"}.get(message.rcode, "errors"))
            self._fail(query, reply.reason)
            return
        self._end_query(query)
        if reply.kind is AnswerKind.NXDOMAIN and lookup.unconfirmed is None:
            lookup.unconfirmed = where
            lookup.negative_ttl_s = reply.ttl_s
            self._send(lookup)
            return
        lookup.unconfirmed = None
        if reply.kind is AnswerKind.NODATA and lookup.qtype is QType.A:
            lookup.qtype = QType.AAAA
            lookup.negative_ttl_s = reply.ttl_s
            self._send(lookup)
            return
        self._succeed(lookup, reply)

    def _fail(self, query: _Query, reason: str, timeout: bool = False) -> None:
        """The query failed; its try is spent, unless it was spent already (a late one)."""
        self._end_query(query)
        if not query.late:
            self._failed(query.lookup, reason, timeout)

    def _failed(self, lookup: _Lookup, reason: str, timeout: bool = False) -> None:
        """A try is spent: the next one, or the end."""
        lookup.failures += 1
        lookup.all_timeouts = lookup.all_timeouts and timeout
        lookup.last_failure = reason
        self._send(lookup)

    def _give_up(self, lookup: _Lookup) -> None:
        spent = time.monotonic() - lookup.first_sent
        if lookup.all_timeouts:
            servers = ", ".join(dict.fromkeys(self._names[i] for i in lookup.order[: lookup.sent]))
            reason = f"no answer from {servers} in {lookup.failures} tries ({spent:.1f} s)"
        else:
            reason = f"{lookup.last_failure} ({lookup.failures} tries, {spent:.1f} s)"
        if lookup.unconfirmed is not None:
            reason = f"NXDOMAIN from {lookup.unconfirmed} not confirmed: {reason}"
        self._finish(lookup, Answer(lookup.host, AnswerKind.TEMPORARY, (), 0.0, reason, lookup.sent))

    def _succeed(self, lookup: _Lookup, reply: _Reply) -> None:
        if reply.kind is AnswerKind.OK:
            ttl = min(self.max_ttl_s, max(self.min_ttl_s, reply.ttl_s or 0.0))
            answer = Answer(lookup.host, AnswerKind.OK, reply.addresses, ttl, "", lookup.sent)
        else:
            ttls = [t for t in (reply.ttl_s, lookup.negative_ttl_s) if t is not None]
            raw = min(ttls) if ttls else self.default_negative_ttl_s
            ttl = min(self.max_negative_ttl_s, max(self.min_negative_ttl_s, raw))
            reason = "NXDOMAIN (confirmed)" if reply.kind is AnswerKind.NXDOMAIN else "no A or AAAA record"
            answer = Answer(lookup.host, reply.kind, (), ttl, reason, lookup.sent)
        self._finish(lookup, answer)

    def _finish(self, lookup: _Lookup, answer: Answer) -> None:
        lookup.done = True
        for query in lookup.queries:
            if not query.over:
                self._end_query(query)
        counter = {AnswerKind.OK: "answers_ok", AnswerKind.NXDOMAIN: "nxdomain",
                   AnswerKind.NODATA: "nodata", AnswerKind.TEMPORARY: "temporary"}[answer.kind]
        with self._lock:
            if self._pending.get(lookup.host) is lookup:
                del self._pending[lookup.host]
            self._counts[counter] += 1
            if answer.kind is not AnswerKind.TEMPORARY:
                self._store(answer, time.time() + answer.ttl_s)
            waiters = list(lookup.waiters)
        for done in waiters:
            try:
                done(answer)
            except Exception:  # a caller's bug must not stop the resolver
                log.exception("DNS callback for %s raised", lookup.host)

    def _shutdown(self) -> None:
        """Answer every lookup in flight with TEMPORARY and close every socket (on close)."""
        for query in list(self._queries):
            query.over = True
            query.sock.close()
        self._queries.clear()
        self._timers.clear()
        self._backlog.clear()
        with self._lock:
            lookups = list(self._pending.values())
            self._inbox.clear()
        for lookup in lookups:
            self._finish(lookup, Answer(lookup.host, AnswerKind.TEMPORARY, (), 0.0, "resolver closed", lookup.sent))
        if self._sel is not None:
            self._sel.close()
        for s in (self._wake_r, self._wake_w):
            if s is not None:
                s.close()


_LIVE: weakref.WeakSet[Resolver] = weakref.WeakSet()


def _after_fork() -> None:
    for resolver in list(_LIVE):
        resolver._after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork)
