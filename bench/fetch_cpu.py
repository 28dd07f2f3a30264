#!/usr/bin/env python3
"""Client CPU per fetch of a 140 KB page over loopback keep-alive, with the Fetcher.

The page comes from the hostile test server's ``/page?size=N`` (threads of this
process), so the figure is the fetching thread's own CPU (``time.thread_time``),
not the server's. Reports the median of several rounds, per fetch, and the wall
time per fetch for reference.

With ``--tls`` the page comes over HTTPS with a chain as on the web (a trustme root,
an intermediate CA and a P-256 leaf; the server sends leaf and intermediate) that the
fetcher trusts the documented way (CA_BUNDLE = the root, besides certifi's roots): on a
new connection with a full handshake (no session kept), on a new connection resuming
the last one's TLS session, and on one kept-alive connection.

    python bench/fetch_cpu.py [--fetches 500] [--rounds 5] [--size 140000] [--tls] [--smoke]

``--smoke``: 20 fetches x 2 rounds (seconds).
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import trustme

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from crawler_tasks.fetch.http import Fetcher  # noqa: E402
from crawler_tasks.settings import Settings  # noqa: E402
from tests.hostile import HostileServer, start_hostile  # noqa: E402


def rounds(fetch: Callable[[], None], fetches: int, n: int) -> tuple[list[float], list[float]]:
    """CPU and wall seconds per fetch, one figure a round."""
    cpu, wall = [], []
    for _ in range(n):
        c0, w0 = time.thread_time(), time.perf_counter()
        for _ in range(fetches):
            fetch()
        cpu.append((time.thread_time() - c0) / fetches)
        wall.append((time.perf_counter() - w0) / fetches)
    return cpu, wall


def tls_main(args: argparse.Namespace) -> None:
    host = "127.0.0.6"
    with tempfile.TemporaryDirectory() as tmp:
        root = trustme.CA()
        chain, ca = str(Path(tmp) / "chain.pem"), str(Path(tmp) / "root.pem")
        root.create_child_ca().issue_cert(host).private_key_and_cert_chain_pem.write_to_path(chain)
        root.cert_pem.write_to_path(ca)
        srv: HostileServer = start_hostile(host, certfile=chain)
        fetcher = Fetcher(dataclasses.replace(Settings(), ALLOW_PRIVATE=True, CA_BUNDLE=ca))
        url, authority = f"{srv.base_url}/page?size={args.size}", f"{host}:{srv.sock.getsockname()[1]}"
        try:
            assert fetcher.fetch(url).status == 200

            def fresh(resume: bool) -> Callable[[], None]:
                def fetch() -> None:
                    fetcher.release(authority)   # the next fetch opens a new connection
                    if not resume:
                        fetcher._tls_sessions.clear()
                    res = fetcher.fetch(url)
                    assert res.status == 200, res.error
                return fetch

            before = (srv.connections, srv.tls_resumed)
            resumed = rounds(fresh(True), args.fetches, args.rounds)
            mid = (srv.connections, srv.tls_resumed)
            full = rounds(fresh(False), args.fetches, args.rounds)
            after = (srv.connections, srv.tls_resumed)
            kept = rounds(lambda: None if fetcher.fetch(url).status == 200 else None, args.fetches, args.rounds)
        finally:
            fetcher.close()
            srv.stop()
    print(f"HTTPS page of {args.size} bytes, {args.fetches} fetches x {args.rounds} rounds, client CPU per fetch (median):")
    print(f"  new connection, session resumed: {statistics.median(resumed[0]) * 1000:.3f} ms "
          f"(wall {statistics.median(resumed[1]) * 1000:.3f}; {mid[1] - before[1]} of {mid[0] - before[0]} resumed)")
    print(f"  new connection, full handshake:  {statistics.median(full[0]) * 1000:.3f} ms "
          f"(wall {statistics.median(full[1]) * 1000:.3f}; {after[1] - mid[1]} of {after[0] - mid[0]} resumed)")
    print(f"  kept-alive connection:           {statistics.median(kept[0]) * 1000:.3f} ms "
          f"(wall {statistics.median(kept[1]) * 1000:.3f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fetches", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--size", type=int, default=140_000)
    ap.add_argument("--tls", action="store_true", help="HTTPS: new connections, resumed vs full handshake")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: a few seconds")
    args = ap.parse_args()
    if args.smoke:
        args.fetches, args.rounds = 20, 2
    if args.tls:
        tls_main(args)
        return
    srv = start_hostile()
    fetcher = Fetcher(dataclasses.replace(Settings(), ALLOW_PRIVATE=True))
    url = f"{srv.base_url}/page?size={args.size}"
    try:
        first = fetcher.fetch(url)
        assert first.status == 200 and not first.error, (first.status, first.error)
        cpu, wall = rounds(lambda: None if fetcher.fetch(url) else None, args.fetches, args.rounds)
    finally:
        fetcher.close()
        srv.stop()
    print(f"page {len(first.content)} bytes, {args.fetches} fetches x {args.rounds} rounds, "
          f"{srv.connections} connection(s)")
    print(f"client CPU per fetch: median {statistics.median(cpu) * 1000:.3f} ms "
          f"(min {min(cpu) * 1000:.3f}, max {max(cpu) * 1000:.3f})")
    print(f"wall per fetch:       median {statistics.median(wall) * 1000:.3f} ms")


if __name__ == "__main__":
    main()
