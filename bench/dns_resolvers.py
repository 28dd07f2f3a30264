#!/usr/bin/env python3
"""DNS stub resolvers side by side against the loopback DNS server (testweb.dns).

Each candidate runs in its own fresh process, so its CPU figure (``time.process_time``:
every thread of the process, c-ares's own thread included) is the client's alone; the
server runs in another process. Figures:

- sequential: lookups of distinct names one after another, server without latency:
  client CPU and wall per lookup;
- concurrent: N distinct names asked at once, answers held a lognormal time (median 30 ms,
  sigma 0.5, cap 1 s): wall time until the last answer, client CPU, answers OK, and the
  server's queries per name (1.0 = no retries).

Candidates: ``ours`` (crawler_tasks.fetch.dns.Resolver: one selector thread, dnspython only
to parse answers), ``dnspython`` (dns.asyncquery.udp on an asyncio loop), ``aiodns``
(pycares on an asyncio loop), ``pycares`` (c-ares's own event thread, callbacks). All ask
A only, timeout 1 s, 3 tries. aiodns and pycares are not requirements of the project: a
candidate whose package is missing is skipped with a note.

    python bench/dns_resolvers.py [--seq 2000] [--conc 1000] [--rounds 3] [--smoke]

``--smoke``: 20 lookups one at a time, 50 at once, one round (seconds).
"""
from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import multiprocessing as mp
import statistics
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

NAMES = 200_000
Server = tuple[str, int]


def name(i: int) -> str:
    return f"h{i}.bench.test"


def serve(conn: Connection) -> None:
    """The server process: one DnsServer without latency, one with; answers commands."""
    from testweb.dns import DnsServer
    from testweb.shape import Latency

    zone = {name(i): [f"127.{1 + i // 65536}.{i // 256 % 256}.{i % 256}"] for i in range(NAMES)}
    fast = DnsServer(zone, ttl_s=600)
    slow = DnsServer(zone, ttl_s=600, latency=Latency(0.030, 0.5, max_s=1.0, seed=7))
    fast.start()
    slow.start()
    conn.send((fast.address, slow.address))
    while True:
        command = conn.recv()
        if command == "stop":
            break
        counts = fast.counts() + slow.counts()
        fast.clear_log()
        slow.clear_log()
        conn.send((sum(counts.values()), max(counts.values(), default=0), len(counts)))
    fast.stop()
    slow.stop()


# -- the candidates: (server, names) -> number of OK answers ---------------------------

def run_ours(server: Server, names: list[str], concurrent: bool) -> int:
    from crawler_tasks.fetch.dns import AnswerKind, Resolver

    resolver = Resolver([server], timeout_s=1.0, tries=3)
    try:
        if not concurrent:
            return sum(resolver.resolve(n, 10.0).kind is AnswerKind.OK for n in names)
        left = len(names)
        ok = 0
        finished = threading.Event()
        lock = threading.Lock()

        def done(answer: object) -> None:
            nonlocal left, ok
            with lock:
                left -= 1
                ok += getattr(answer, "kind", None) is AnswerKind.OK
                if left == 0:
                    finished.set()

        for n in names:
            resolver.lookup(n, done)
        finished.wait(60)
        return ok
    finally:
        resolver.close()


def run_dnspython(server: Server, names: list[str], concurrent: bool) -> int:
    import dns.asyncquery
    import dns.exception
    import dns.message
    import dns.rcode
    import dns.rdatatype

    async def one(n: str) -> bool:
        for _ in range(3):
            query = dns.message.make_query(n, dns.rdatatype.A)
            try:
                response = await dns.asyncquery.udp(query, server[0], port=server[1], timeout=1.0)
            except dns.exception.Timeout:
                continue
            rrset = response.get_rrset(response.answer, query.question[0].name, 1, dns.rdatatype.A)
            return response.rcode() == dns.rcode.NOERROR and rrset is not None and rrset.ttl > 0
        return False

    async def main() -> int:
        if concurrent:
            return sum(await asyncio.gather(*(one(n) for n in names)))
        return sum([await one(n) for n in names])

    return asyncio.run(main())


def run_aiodns(server: Server, names: list[str], concurrent: bool) -> int:
    import aiodns

    async def main() -> int:
        resolver = aiodns.DNSResolver(nameservers=[f"{server[0]}:{server[1]}"], timeout=1.0, tries=3)

        async def one(n: str) -> bool:
            try:
                result = await resolver.query_dns(n, "A")
            except aiodns.error.DNSError:
                return False
            return bool(result.answer) and result.answer[0].ttl > 0

        try:
            if concurrent:
                return sum(await asyncio.gather(*(one(n) for n in names)))
            return sum([await one(n) for n in names])
        finally:
            await resolver.close()

    return asyncio.run(main())


def run_pycares(server: Server, names: list[str], concurrent: bool) -> int:
    import pycares

    channel = pycares.Channel(servers=[f"{server[0]}:{server[1]}"], timeout=1.0, tries=3)
    lock = threading.Lock()
    ok = 0
    left = 0
    finished = threading.Event()

    def done(result: pycares.DNSResult | None, error: int | None) -> None:
        nonlocal ok, left
        with lock:
            ok += error is None and result is not None and bool(result.answer)
            left -= 1
            if left == 0:
                finished.set()

    def ask(batch: list[str]) -> None:
        nonlocal left
        finished.clear()
        with lock:
            left = len(batch)
        for n in batch:
            channel.query(n, pycares.QUERY_TYPE_A, callback=done)
        finished.wait(60)

    if concurrent:
        ask(names)
    else:
        for n in names:
            ask([n])
    channel.close()
    return ok


CANDIDATES: dict[str, Callable[[Server, list[str], bool], int]] = {
    "ours": run_ours, "dnspython": run_dnspython, "aiodns": run_aiodns, "pycares": run_pycares,
}


IMPORTS = {"ours": ["crawler_tasks.fetch.dns"], "dnspython": ["dns.asyncquery", "dns.message"],
           "aiodns": ["aiodns"], "pycares": ["pycares"]}


def measure(candidate: str, server: Server, names: list[str], concurrent: bool, out: Connection) -> None:
    for module in IMPORTS[candidate]:   # imports are not the lookups' cost
        importlib.import_module(module)
    c0, w0 = time.process_time(), time.perf_counter()
    ok = CANDIDATES[candidate](server, names, concurrent)
    out.send((ok, time.process_time() - c0, time.perf_counter() - w0))


def in_child(ctx: mp.context.SpawnContext, *args: object) -> tuple[int, float, float]:
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=measure, args=(*args, child))
    proc.start()
    result: tuple[int, float, float] = parent.recv()
    proc.join()
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seq", type=int, default=2000, help="sequential lookups per round")
    ap.add_argument("--conc", type=int, default=1000, help="names asked at once")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", nargs="*", choices=sorted(CANDIDATES), default=list(CANDIDATES))
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: a few seconds")
    args = ap.parse_args()
    if args.smoke:
        args.seq, args.conc, args.rounds = 20, 50, 1

    missing = [c for c in args.only for m in IMPORTS[c] if importlib.util.find_spec(m.split(".")[0]) is None]
    for candidate in dict.fromkeys(missing):
        print(f"{candidate}: not installed here (.venv/bin/pip install {candidate}); skipped")
    args.only = [c for c in args.only if c not in missing]
    ctx = mp.get_context("spawn")
    control, server_end = ctx.Pipe()
    server = ctx.Process(target=serve, args=(server_end,), daemon=True)
    server.start()
    fast, slow = control.recv()
    next_name = 0

    def names(n: int) -> list[str]:
        nonlocal next_name
        next_name += n
        return [name(i) for i in range(next_name - n, next_name)]

    print(f"{'candidate':<10} {'seq CPU µs/lookup':>18} {'seq wall µs':>12} | "
          f"{'conc wall s':>11} {'conc CPU ms':>11} {'OK':>6} {'queries/name':>12}")
    try:
        for candidate in args.only:
            seq_cpu, seq_wall, conc_wall, conc_cpu, oks, qpn = [], [], [], [], [], []
            for _ in range(args.rounds):
                control.send("clear")
                control.recv()
                ok, cpu, wall = in_child(ctx, candidate, fast, names(args.seq), False)
                seq_cpu.append(cpu / args.seq * 1e6)
                seq_wall.append(wall / args.seq * 1e6)
                control.send("counts")
                control.recv()
                ok, cpu, wall = in_child(ctx, candidate, slow, names(args.conc), True)
                control.send("counts")
                queries, _, distinct = control.recv()
                conc_wall.append(wall)
                conc_cpu.append(cpu * 1e3)
                oks.append(ok)
                qpn.append(queries / max(1, distinct))
            med = statistics.median
            print(f"{candidate:<10} {med(seq_cpu):>18.0f} {med(seq_wall):>12.0f} | {med(conc_wall):>11.2f} "
                  f"{med(conc_cpu):>11.0f} {min(oks):>6} {max(qpn):>12.2f}", flush=True)
    finally:
        control.send("stop")
        server.join(10)


if __name__ == "__main__":
    main()
