"""End to end with host names: `manage.py crawl` against a web whose hosts are DNS names,
answered by a DNS server on loopback (CRAWLER_DNS_SERVERS), a third of them on HTTPS from
the web's own CA (CRAWLER_CA_BUNDLE), with dead names among the seeds and links: NXDOMAIN,
SERVFAIL, and one that never answers. Evidence from the web's and the DNS server's logs."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from testweb import TestWeb
from testweb.dns import Behaviour, DnsServer, Entry
from testweb.evidence import check_politeness
from testweb.shape import Latency

ROOT = Path(__file__).resolve().parent.parent
MIN_DELAY = 0.2
SUFFIX = "web.test"


@pytest.fixture(scope="module")
def crawled(tmp_path_factory):
    out = tmp_path_factory.mktemp("names") / "out"
    with TestWeb(n_hosts=6, pages_per_host=5, seed=11, mean_page_bytes=4000, names=SUFFIX, dead_names=4,
                 dead_link_share=0.3, https_share=1 / 3) as web:
        nxdomain, servfail, silent, gone = web.dead_names   # gone: not in the zone at all
        zone: dict[str, Entry | list[str]] = {name: [address] for name, address in web.zone.items()}
        zone[nxdomain] = Entry(behaviour=Behaviour.NXDOMAIN)
        zone[servfail] = Entry(behaviour=Behaviour.SERVFAIL)
        zone[silent] = Entry(behaviour=Behaviour.SILENT)
        with DnsServer(zone, suffix=SUFFIX, soa_minimum_s=30, latency=Latency(0.02, 0.9, 0.2, seed=3)) as dns:
            ip, port = dns.address
            env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")}
            env.update({"CRAWLER_DNS_SERVERS": f"{ip}:{port}", "CRAWLER_DNS_TIMEOUT_S": "0.2",
                        "CRAWLER_DNS_RETRY_BASE_S": "0.3",
                        "CRAWLER_CA_BUNDLE": str(web.ca_pem)})
            seeds = web.seeds(all_hosts=True, dead=True)
            started = time.time()
            proc = subprocess.run(
                [sys.executable, str(ROOT / "manage.py"), "crawl", *seeds, "--out", str(out), "--allow-private",
                 "--min-delay", str(MIN_DELAY), "--user-agent", "testbot/1.0 (+http://127.0.0.1/bot)"],
                capture_output=True, text=True, timeout=180, cwd=ROOT, env=env)
            took = time.time() - started
            queries = dns.log()
        pages = [json.loads(line) for line in (out / "pages.jsonl").read_text().splitlines()]
        yield {"web": web, "proc": proc, "pages": pages, "queries": queries, "took": took, "seeds": seeds,
               "dead": {"nxdomain": nxdomain, "servfail": servfail, "silent": silent, "gone": gone},
               "requests": web.requests, "connections": web.connections}


def test_the_crawl_ends_by_itself(crawled):
    proc = crawled["proc"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "frontier exhausted" in proc.stderr


def test_every_reachable_page_on_every_name_is_fetched_once(crawled):
    web, pages = crawled["web"], crawled["pages"]
    fetched = [p["url"] for p in pages if p.get("status") == 200]
    assert len(fetched) == len(set(fetched))
    missing = web.reachable(web.seeds(all_hosts=True)) - set(fetched)
    assert not missing, sorted(missing)[:5]
    assert any(url.startswith("https://") for url in fetched) and any(url.startswith("http://") for url in fetched)


def test_each_dead_name_gets_a_dns_record_per_url(crawled):
    pages, dead = crawled["pages"], crawled["dead"]
    by_host: dict[str, list[dict]] = {}
    for p in pages:
        by_host.setdefault(p["url"].split("/")[2], []).append(p)
    for kind, name in dead.items():
        records = by_host.get(name, [])
        assert records, f"no record for the {kind} name {name}"
        assert all(r["error_kind"] == "dns" and r.get("status") is None for r in records), records
        reasons = " ".join(r["error"] for r in records)
        if kind in ("nxdomain", "gone"):
            assert "NXDOMAIN" in reasons, reasons
        else:
            assert "gave up after 2 lookups" in reasons, reasons
    seeded = {url for url in crawled["seeds"] if url.split("/")[2] in dead.values()}
    assert seeded <= {p["url"] for p in pages}


def test_a_live_name_is_looked_up_once_and_a_dead_one_a_bounded_number_of_times(crawled):
    queries, web, dead = crawled["queries"], crawled["web"], crawled["dead"]
    asked = Counter(q.name for q in queries if q.qtype == "A")
    for name in web.zone:
        assert asked[name] == 1, (name, asked[name])
    assert asked[dead["nxdomain"]] == 2 and asked[dead["gone"]] == 2   # each NXDOMAIN confirmed once
    for name in (dead["servfail"], dead["silent"]):   # 2 lookups of 2 tries each
        assert asked[name] == 4, (name, asked[name])


def test_politeness_holds_on_names(crawled):
    web = crawled["web"]
    verdict = check_politeness(crawled["requests"], crawled["connections"], dict.fromkeys(web.hosts, MIN_DELAY))
    assert verdict.violations == 0, verdict.examples
    assert verdict.hosts == len(web.hosts)


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """120 names on 3 addresses (shared hosting), plain HTTP: a gap and a connection per address."""
    out = tmp_path_factory.mktemp("shared") / "out"
    with TestWeb(n_hosts=120, pages_per_host=1, seed=5, mean_page_bytes=2000, names=SUFFIX, addresses=3) as web:
        with DnsServer({name: [address] for name, address in web.zone.items()}, suffix=SUFFIX) as dns:
            ip, port = dns.address
            env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")}
            env["CRAWLER_DNS_SERVERS"] = f"{ip}:{port}"
            proc = subprocess.run(
                [sys.executable, str(ROOT / "manage.py"), "crawl", *web.seeds(all_hosts=True), "--out", str(out),
                 "--allow-private", "--min-delay", "0.05", "--user-agent", "testbot/1.0 (+http://127.0.0.1/bot)"],
                capture_output=True, text=True, timeout=240, cwd=ROOT, env=env)
        yield web, proc, web.requests, web.connections


def test_names_on_one_address_share_its_gap_and_one_connection(shared):
    web, proc, requests, connections = shared
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert {f"{r.host}{r.path}" for r in requests if r.status == 200} >= {
        url.split("://", 1)[1] for url in web.reachable(web.seeds(all_hosts=True))}
    verdict = check_politeness(requests, connections, dict.fromkeys(web.hosts, 0.05), per_address=True)
    assert verdict.violations == 0 and verdict.multi_conn_addresses == 0, verdict.examples
    by_address: dict[str, list] = {}
    for r in requests:
        by_address.setdefault(web.zone[r.host.rsplit(":", 1)[0]], []).append(r)
    assert len(by_address) == 3
    for address, rs in by_address.items():
        rs.sort(key=lambda r: r.start)
        gaps = [b.start - a.end for a, b in zip(rs, rs[1:])]
        assert min(gaps) >= 0.05 - 0.001, (address, min(gaps))   # one request at a time, the delay between


def test_each_lookup_is_archived_as_heritrix_does(crawled):
    """One dns: response record a live name (text/dns: a timestamp line, then the A record)."""
    out = Path(crawled["proc"].args[crawled["proc"].args.index("--out") + 1])
    answers = {}
    for path in sorted((out / "warc").glob("*.warc.gz")):
        with open(path, "rb") as f:
            for record in ArchiveIterator(f):
                uri = record.rec_headers.get_header("WARC-Target-URI") or ""
                if uri.startswith("dns:"):
                    assert record.rec_type == "response"
                    assert record.rec_headers.get_header("Content-Type") == "text/dns"
                    answers.setdefault(uri[4:], []).append(record.content_stream().read().decode())
    zone = crawled["web"].zone
    assert set(answers) == set(zone)
    for name, bodies in answers.items():
        assert len(bodies) == 1
        stamp, line, _ = bodies[0].split("\n")
        assert len(stamp) == 14 and stamp.isdigit() and line.split("\t") == [f"{name}.", "300", "IN", "A", zone[name]]
