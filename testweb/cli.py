"""``python -m testweb`` / ``manage.py testweb``: serve a web until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import signal
import sys

from testweb.web import TestWeb


def main(argv: list[str] | None = None) -> int:
    """Print each host's home URL, one a line, then serve until SIGINT/SIGTERM."""
    ap = argparse.ArgumentParser(prog="python -m testweb",
                                 description="Serve a generated multi-host web on loopback.")
    ap.add_argument("--hosts", type=int, default=5)
    ap.add_argument("--pages", type=int, default=20, help="pages per host")
    ap.add_argument("--mean-bytes", type=int, default=8_000)
    ap.add_argument("--sigma", type=float, default=0.6, help="log-normal sigma of page sizes")
    ap.add_argument("--max-bytes", type=int, default=400_000)
    ap.add_argument("--links", type=int, default=8, help="links per page")
    ap.add_argument("--cross-ratio", type=float, default=0.2, help="share of links to other hosts")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--first-ip", type=int, default=2, help="host 0 is 127.0.0.<first-ip>")
    args = ap.parse_args(argv)
    # A real handler replaces an inherited SIG_IGN (shells start background jobs
    # that way), and blocking before the server thread exists means only
    # sigwait below ever receives the signals.
    sigs = {signal.SIGINT, signal.SIGTERM}
    for sig in sigs:
        signal.signal(sig, lambda signum, frame: None)
    signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    web = TestWeb(
        args.hosts, args.pages, seed=args.seed, mean_page_bytes=args.mean_bytes,
        size_sigma=args.sigma, max_page_bytes=args.max_bytes, links_per_page=args.links,
        cross_host_ratio=args.cross_ratio, first_ip=args.first_ip,
    ).start()
    try:
        sys.stdout.write("".join(u + "\n" for u in web.seeds(all_hosts=True)))
        sys.stdout.flush()
        signal.sigwait(sigs)
    finally:
        web.stop()
    return 0
