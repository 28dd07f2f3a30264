"""``python -m testweb`` / ``manage.py testweb``: serve a web until SIGINT or SIGTERM.

The manifest (``--manifest``) is what a benchmark needs to set up around the web:
each host's home, name, address, port, scheme and Crawl-delay, the zone a DNS
server must answer, the dead names it must not, and the CA file to trust. With
``--dns`` the web answers its names itself (``testweb/dns.py``, on the same process).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import signal
import sys
from fractions import Fraction
from pathlib import Path

from testweb.dns import Behaviour, DnsServer, Entry
from testweb.evidence import write_log
from testweb.robots import DEFAULT_ROBOTS_TXT
from testweb.shape import Latency, host_delays, robots_with_delay
from testweb.tls import BadCert
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


def _share(text: str) -> float:
    """'0.25' or '1/3' -> a share in [0, 1]."""
    try:
        value = float(Fraction(text))
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(f"expected a share such as 0.25 or 1/3, got {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"a share is in [0, 1], got {text!r}")
    return value


def _bad_tls(text: str) -> tuple[int, BadCert]:
    """'7=expired' -> (7, BadCert.EXPIRED)."""
    host, _, kind = text.partition("=")
    try:
        return int(host), BadCert(kind)
    except ValueError:
        kinds = ", ".join(k.value for k in BadCert)
        raise argparse.ArgumentTypeError(f"expected HOST=KIND with KIND one of {kinds}, got {text!r}") from None


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
    ap.add_argument("--names", metavar="SUFFIX", help="name host i h<i>.SUFFIX (URLs carry names; a DNS "
                    "server answers them from the manifest's zone)")
    ap.add_argument("--addresses", type=int, default=0, metavar="K",
                    help="hosts share K addresses, one port per scheme (needs --names; 0 = one per host)")
    ap.add_argument("--https-share", type=_share, default=0.0, metavar="F",
                    help="serve this share of the hosts over TLS only, e.g. 1/3 (every third host)")
    ap.add_argument("--bad-tls", type=_bad_tls, action="append", default=[], metavar="HOST=KIND",
                    help="serve host HOST over TLS with a bad certificate: expired, wrong-name or unknown-ca")
    ap.add_argument("--ca-out", type=Path, metavar="PATH", help="write the web's CA certificate (PEM) here")
    ap.add_argument("--dead-names", type=int, default=0, metavar="N",
                    help="N more names h<hosts>..., served by nobody (needs --names)")
    ap.add_argument("--dead-link-share", type=_share, default=0.0, metavar="F",
                    help="share of cross-host links that go to the dead names")
    ap.add_argument("--dns", metavar="IP:PORT", help="answer the names from a DNS server here (port 0: a free "
                    "one, in the manifest): the zone's names, NXDOMAIN for the dead names but those below")
    ap.add_argument("--dead-servfail", type=int, default=0, metavar="N", help="the last N dead names answer SERVFAIL")
    ap.add_argument("--dead-silent", type=int, default=0, metavar="N",
                    help="the N dead names before those never answer")
    ap.add_argument("--dns-latency-median", type=float, default=0.03, help="median DNS answer time, s (lognormal)")
    ap.add_argument("--dns-ttl", type=int, default=300, help="TTL of the zone's records, s")
    ap.add_argument("--dns-log", type=Path, help="write the DNS server's query log here at exit (JSONL)")
    ap.add_argument("--seed-dead-names", action="store_true", help="print the dead names' homes among the seeds")
    ap.add_argument("--manifest", type=Path, help="write each host's home URL, name, address, port, scheme "
                    "and Crawl-delay, the zone, the dead names and the CA file here (JSON)")
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
    try:
        web = TestWeb(
            args.hosts, args.pages, seed=args.seed, mean_page_bytes=args.mean_bytes,
            size_sigma=args.sigma, max_page_bytes=args.max_bytes, links_per_page=args.links,
            cross_host_ratio=args.cross_ratio, first_ip=args.first_ip, host_specs=specs, latency=latency,
            names=args.names, addresses=args.addresses, https_share=args.https_share,
            bad_tls=dict(args.bad_tls), dead_names=args.dead_names, dead_link_share=args.dead_link_share,
        ).start()
    except ValueError as exc:
        ap.error(str(exc))
    dns = None
    try:
        if args.dns:
            dns = _dns_server(args, web)
        ca = web.ca_pem
        if ca is not None and args.ca_out:
            shutil.copyfile(ca, args.ca_out)
            ca = args.ca_out
        if args.manifest:
            hosts = [{"home": web.url(h, "/"), "host": web.hosts[h], "name": e.name, "address": e.address,
                      "port": e.port, "scheme": e.scheme, "crawl_delay": d}
                     for h, (e, d) in enumerate(zip(web.endpoints, delays, strict=True))]
            args.manifest.write_text(json.dumps({
                "hosts": hosts, "zone": web.zone, "dead_names": web.dead_names,
                "ca_pem": None if ca is None else str(ca),
                "dns": None if dns is None else f"{dns.address[0]}:{dns.address[1]}",
            }))
        sys.stdout.write("".join(u + "\n" for u in web.seeds(all_hosts=True, dead=args.seed_dead_names)))
        sys.stdout.flush()
        signal.sigwait(sigs)
    finally:
        web.stop()
        if dns is not None:
            dns.stop()
            if args.dns_log:
                with open(args.dns_log, "w") as f:
                    f.writelines(json.dumps(dataclasses.asdict(q)) + "\n" for q in dns.log())
        if args.log:
            write_log(args.log, web.requests, web.connections)
    return 0


def _dns_server(args: argparse.Namespace, web: TestWeb) -> DnsServer:
    """The web's names on a DNS server: live names answer their address after a lognormal
    wait, the dead names NXDOMAIN, but for the last ``--dead-servfail`` (SERVFAIL) and the
    ``--dead-silent`` before them (no answer)."""
    if not args.names:
        raise SystemExit("--dns needs --names")
    ip, _, port = args.dns.rpartition(":")
    zone: dict[str, Entry | list[str]] = {name: [address] for name, address in web.zone.items()}
    dead = web.dead_names
    silent_from = len(dead) - args.dead_servfail - args.dead_silent
    for i, name in enumerate(dead):
        if i >= len(dead) - args.dead_servfail:
            zone[name] = Entry(behaviour=Behaviour.SERVFAIL)
        elif i >= silent_from:
            zone[name] = Entry(behaviour=Behaviour.SILENT)
    latency = Latency(args.dns_latency_median, 0.9, 2.0, args.seed) if args.dns_latency_median else None
    server = DnsServer(zone, suffix=args.names, ttl_s=args.dns_ttl, latency=latency, host=ip or "127.0.0.1",
                       port=int(port or 0))
    server.start()
    return server
