"""``python -m testweb`` / ``manage.py testweb``: serve a web until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

from testweb.evidence import write_log
from testweb.robots import DEFAULT_ROBOTS_TXT
from testweb.shape import Latency, host_delays, robots_with_delay
from testweb.web import HostSpec, TestWeb


def _delay_range(text: str) -> tuple[float, float]:
    """'2' or '1-5' (seconds) -> (low, high)."""
    low, _, high = text.partition("-")
    try:
        lo, hi = float(low), float(high or low)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected S or LOW-HIGH seconds, got {text!r}") from None
    if not 0 <= lo <= hi:
        raise argparse.ArgumentTypeError(f"expected 0 <= LOW <= HIGH, got {text!r}")
    return lo, hi


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
    ap.add_argument("--latency-median", type=float, default=0.0,
                    help="median time to first byte of every answer, s (lognormal; 0 = none)")
    ap.add_argument("--latency-sigma", type=float, default=0.9, help="lognormal sigma of answer times")
    ap.add_argument("--latency-max", type=float, default=30.0, help="cap of one answer's time, s")
    ap.add_argument("--crawl-delay", type=_delay_range, default=(0.0, 0.0), metavar="S|LOW-HIGH",
                    help="Crawl-delay in every host's robots.txt, s: one value, or per host uniform "
                         "in LOW-HIGH (0 = no line)")
    ap.add_argument("--manifest", type=Path, help="write each host's home URL and Crawl-delay here (JSON)")
    ap.add_argument("--log", type=Path, help="write the request and connection logs here at exit (JSONL)")
    args = ap.parse_args(argv)
    # A real handler replaces an inherited SIG_IGN (shells start background jobs
    # that way), and blocking before the server thread exists means only
    # sigwait below ever receives the signals.
    sigs = {signal.SIGINT, signal.SIGTERM}
    for sig in sigs:
        signal.signal(sig, lambda signum, frame: None)
    signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    low, high = args.crawl_delay
    delays = host_delays(args.hosts, low, high, seed=args.seed)
    specs = {h: HostSpec(robots_txt=robots_with_delay(DEFAULT_ROBOTS_TXT, d)) for h, d in enumerate(delays) if d}
    latency = Latency(args.latency_median, args.latency_sigma, args.latency_max, args.seed) \
        if args.latency_median else None
    web = TestWeb(
        args.hosts, args.pages, seed=args.seed, mean_page_bytes=args.mean_bytes,
        size_sigma=args.sigma, max_page_bytes=args.max_bytes, links_per_page=args.links,
        cross_host_ratio=args.cross_ratio, first_ip=args.first_ip, host_specs=specs, latency=latency,
    ).start()
    try:
        if args.manifest:
            hosts = [{"home": web.url(h, "/"), "host": web.hosts[h], "crawl_delay": d} for h, d in enumerate(delays)]
            args.manifest.write_text(json.dumps({"hosts": hosts}))
        sys.stdout.write("".join(u + "\n" for u in web.seeds(all_hosts=True)))
        sys.stdout.flush()
        signal.sigwait(sigs)
    finally:
        web.stop()
        if args.log:
            write_log(args.log, web.requests, web.connections)
    return 0
