"""The crawl job file (ops/job.py): read, checked line by line, run by ``crawl --job``,
and written back as the effective job to OUT/job.toml and each WARC file's warcinfo."""
from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from crawler_tasks.exceptions import ConfigError
from crawler_tasks.ops.job import effective_job, read_job
from crawler_tasks.settings import Settings
from testweb import TestWeb

from .test_manage import ROOT, UA, manage

JOB = """\
# a documentation crawl
seeds = ["http://127.0.0.1:1/"]
user_agent = "docbot/1.0 (+https://example.org/bot)"
out = "crawl-out"

[scope]
include = ['/$', '/p/\\d+\\.html$']
exclude = ['/p/1\\d*\\.html$']
max_depth = 5

[limits]
max_pages = 500
max_seconds = 60.0

[politeness]
min_delay = 0.5

[settings]
SOFT404_PROBE = false
"""


def write(tmp_path: Path, text: str, name: str = "crawl.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_job_file_maps_onto_the_settings(tmp_path):
    job = read_job(write(tmp_path, JOB))
    assert job.seeds == ["http://127.0.0.1:1/"]
    assert job.overrides["INCLUDE_PATTERNS"] == ("/$", r"/p/\d+\.html$")
    assert job.overrides["MAX_PAGES"] == 500 and job.overrides["MIN_DELAY_S"] == 0.5
    assert job.overrides["SOFT404_PROBE"] is False
    assert job.overrides["OUT_DIR"] == str(tmp_path / "crawl-out")   # beside the file, from any folder


def test_the_effective_job_reads_back_as_the_same_job(tmp_path):
    job = read_job(write(tmp_path, JOB))
    settings = Settings.from_env({}, **job.overrides)
    text = effective_job(settings, job.seeds)
    again = read_job(write(tmp_path, text, "effective.toml"))
    assert Settings.from_env({}, **again.overrides) == Settings.from_env({}, **{**job.overrides,
                                                                            "OUT_DIR": settings.OUT_DIR})
    assert again.seeds == job.seeds
    assert "SOFT404_PROBE = false" in text and tomllib.loads(text)["limits"]["max_pages"] == 500


def test_the_effective_job_never_holds_a_password(tmp_path):
    settings = Settings.from_env({}, REDIS_URL="redis://:hunter2@127.0.0.1:6379/0")
    text = effective_job(settings, [])
    assert "hunter2" not in text and "REDIS_URL" in text


@pytest.mark.parametrize("text, message", [
    ("[limits]\nmax_pages = 'lots'\n", "crawl.toml:2: limits.max_pages must be an integer, got 'lots'"),
    ("seeds = []\n\n[politeness]\nmin_delay = 'fast'\n", "crawl.toml:4: politeness.min_delay must be a number, got 'fast'"),
    ("[limits]\nmax_page = 5\n", "crawl.toml:2: unknown key 'max_page' in [limits] (did you mean 'max_pages'?)"),
    ("seed = ['http://a/']\n", "crawl.toml:1: unknown key 'seed' (did you mean 'seeds'?)"),
    ("[scope]\ninclude = ['ok', 'docs/(']\n",
     "crawl.toml:2: scope.include[1]: 'docs/(' is not a regular expression: missing ), unterminated subpattern"),
    ("[settings]\nDUST_PRIOR = true\n", "crawl.toml:2: unknown setting 'DUST_PRIOR' (did you mean 'DUST_PRIORS'?)"),
    ("[limits]\nmax_pages = 5\nmax_pages = 6\n", "crawl.toml:3: not TOML: Cannot overwrite a value"),
    ("[politeness]\nmin_delay = -1\n", "crawl.toml: MIN_DELAY_S must be >= 0"),
    ("[[sites]]\ndomain = 'a.org'\n", "crawl.toml:2: sites[0]: unknown key 'domain'"),
    ("seeds = ['http://a.org/']\n[scope]\ninclude = ['/docs/']\n",
     "crawl.toml:3: scope.include matches none of the seeds: the crawl would fetch nothing"),
    ("[scope]\nallow_domains = ['a.org']\n[[sites]]\nmatch = 'b.org'\nmin_delay = 2\n",
     "crawl.toml:4: sites[0]: 'b.org' is outside scope.allow_domains: the rule matches nothing"),
])
def test_a_bad_job_file_is_one_line_naming_file_line_and_key(tmp_path, text, message):
    with pytest.raises(ConfigError) as err:
        read_job(write(tmp_path, text))
    assert str(err.value).replace(str(tmp_path) + "/", "").startswith(message), str(err.value)
    assert "\n" not in str(err.value)


def test_job_check_prints_the_effective_job_and_refuses_a_bad_one(tmp_path):
    good = manage("job", "check", str(write(tmp_path, JOB)), timeout=60)
    assert good.returncode == 0 and "OK, 1 seed(s)" in good.stderr, good.stderr
    assert tomllib.loads(good.stdout)["scope"]["max_depth"] == 5
    bad = manage("job", "check", str(write(tmp_path, "[limits]\nmax_pages = 'x'\n", "bad.toml")), timeout=60)
    assert bad.returncode == 2 and re.search(r"bad.toml:2: limits.max_pages must be an integer", bad.stderr)
    assert "Traceback" not in bad.stderr


def test_crawl_job_runs_as_written_and_records_the_effective_job(tmp_path):
    with TestWeb(n_hosts=1, pages_per_host=12, seed=3) as web:
        text = JOB.replace("http://127.0.0.1:1/", web.url(0, "/")).replace("min_delay = 0.5", "min_delay = 0.0")
        job = write(tmp_path, text + "ALLOW_PRIVATE = true\n")
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        proc = manage("crawl", "--job", str(job), *UA, "--max-pages", "400", cwd=elsewhere)
        assert proc.returncode == 0, proc.stderr[-2000:]
        fetched = {r.path for r in web.requests if r.path != "/robots.txt"}
    out = tmp_path / "crawl-out"   # the job's out, beside the job file
    assert (out / "pages.jsonl").exists() and not (elsewhere / "crawl-out").exists()
    assert all(p == "/" or (p.startswith("/p/") and not p.startswith("/p/1")) for p in fetched), fetched
    effective = tomllib.loads((out / "job.toml").read_text())
    assert effective["limits"]["max_pages"] == 400          # the flag overrides the file
    assert effective["user_agent"] == UA[1]
    assert effective["scope"]["exclude"] == [r"/p/1\d*\.html$"] and effective["seeds"] == [web.url(0, "/")]
    warcs = sorted((out / "warc").glob("*.warc.gz"))
    assert warcs
    with gzip.open(warcs[0], "rb") as f:
        head = f.read(200_000).decode("utf-8", "replace")
    found = re.search(r"crawl-job: (\".*\")\r\n", head)
    assert found and json.loads(found[1]) == (out / "job.toml").read_text()


def test_per_site_rules_act_on_a_local_multi_host_web(tmp_path):
    """Three hosts, three rules: a slow site and a fast one show their own gaps at the
    server, the fast one's requests carry its header, and the third, in scope only
    under a prefix, fetches nothing outside it."""
    with TestWeb(n_hosts=3, pages_per_host=10, seed=8, cross_host_ratio=0.0) as web:
        slow, fast, docs = web.hosts
        job = write(tmp_path, f"""\
seeds = {json.dumps([web.url(0, "/"), web.url(1, "/"), web.url(2, "/"), web.url(2, "/p/0.html")])}
out = "out"
[politeness]
min_delay = 0.5
[settings]
ALLOW_PRIVATE = true
SOFT404_PROBE = false
PROBE_SITEMAP_XML = false
[[sites]]
match = "http://{slow}/"
min_delay = 0.8
max_depth = 1
[[sites]]
match = "http://{fast}/"
min_delay = 0.05
headers = {{Accept-Language = "fr"}}
[[sites]]
match = "{docs.split(':')[0]}"
in_scope = false
[[sites]]
match = "http://{docs}/p/"
exclude = ['/p/1\\d*\\.html$']
""")
        proc = manage("crawl", "--job", str(job), *UA, "--max-seconds", "40")
        assert proc.returncode == 0, proc.stderr[-2000:]
        requests = list(web.requests)
    recs = [json.loads(line) for line in (tmp_path / "out" / "pages.jsonl").read_text().splitlines()]
    by_host: dict[str, list] = {}
    for r in requests:
        by_host.setdefault(r.host, []).append(r)

    def gaps(host: str) -> list[float]:
        reqs = sorted(by_host[host], key=lambda r: r.start)
        return [b.start - a.end for a, b in zip(reqs, reqs[1:])]

    assert len(by_host[slow]) >= 5 and min(gaps(slow)) >= 0.8 - 0.02, gaps(slow)
    assert len(by_host[fast]) >= 5 and min(gaps(fast)) >= 0.05 - 0.02 and sorted(gaps(fast))[len(gaps(fast)) // 2] < 0.5
    assert all(r.headers.get("accept-language") == "fr" for r in by_host[fast] if r.path != "/robots.txt")
    assert not any("accept-language" in r.headers for r in by_host[slow])
    docs_paths = {r.path for r in by_host.get(docs, [])}
    assert all(p.startswith("/p/") or p == "/robots.txt" for p in docs_paths), docs_paths
    assert not any(re.fullmatch(r"/p/1\d*\.html", p) for p in docs_paths), docs_paths   # its exclude
    depths = {r["url"]: r["depth"] for r in recs if r["url"].startswith(f"http://{slow}/") and r.get("status")}
    assert depths and max(depths.values()) <= 1, depths   # its max_depth
    assert len(docs_paths) >= 4, docs_paths   # its pages under the prefix, from the seed there
    assert not any(r["url"].startswith(f"http://{docs}/") and not r["url"].startswith(f"http://{docs}/p/")
                   and r.get("status") for r in recs)
    effective = tomllib.loads((tmp_path / "out" / "job.toml").read_text())
    assert [s["match"] for s in effective["sites"]][:2] == [f"http://{slow}/", f"http://{fast}/"]


def test_a_bad_site_rule_is_one_line_with_its_line(tmp_path):
    text = "seeds = []\n\n[[sites]]\nmatch = 'a.org'\n\n[[sites]]\nmatch = 'b.org'\nmin_delay = 'fast'\n"
    with pytest.raises(ConfigError) as err:
        read_job(write(tmp_path, text))
    assert str(err.value).endswith("crawl.toml:8: sites[1]: min_delay must be a number of seconds, got 'fast'")
    with pytest.raises(ConfigError) as err:
        read_job(write(tmp_path, "[[sites]]\nmatch = 'a.org'\ndelay = 2\n"))
    assert str(err.value).endswith("crawl.toml:3: sites[0]: unknown key 'delay' (did you mean 'min_delay'?)")


def test_job_apply_takes_a_site_out_of_a_running_crawl_within_seconds(tmp_path):
    """A crawl of three hosts runs from a job; a changed job takes one host out of scope
    and slows another: within 5 s nothing more is asked of the first, its queued URLs get
    a record saying why, a change that cannot be live is refused with its reason, and the
    applied version is kept."""
    with TestWeb(n_hosts=3, pages_per_host=40, seed=9, cross_host_ratio=0.0) as web:
        a, b, c = web.hosts
        head = f"""\
seeds = {json.dumps([web.url(h, "/") for h in range(3)])}
out = "out"
user_agent = "testbot/1.0 (+http://127.0.0.1/bot)"
[politeness]
min_delay = 0.4
[settings]
ALLOW_PRIVATE = true
SOFT404_PROBE = false
PROBE_SITEMAP_XML = false
"""
        job = write(tmp_path, head)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")}
        crawl = subprocess.Popen([sys.executable, str(ROOT / "manage.py"), "crawl", "--job", str(job),
                                  "--max-seconds", "60"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        try:
            out = tmp_path / "out"
            deadline = time.time() + 30
            while time.time() < deadline and sum(r.host == a for r in web.requests) < 6:
                time.sleep(0.1)
            # a prefix names host a with its port (a domain rule would name every port of its address)
            changed = write(tmp_path, head.replace("min_delay = 0.4", "min_delay = 0.4\n[output]\ntext_mode = 'body'")
                            + f'[[sites]]\nmatch = "http://{a}/"\nin_scope = false\n', "changed.toml")
            applied = manage("job", "apply", str(changed), "--out", str(out), timeout=60)
            applied_at = time.time()
            assert applied.returncode == 3, applied.stderr
            assert "applied (job version 1): SITES" in applied.stdout, applied.stdout
            assert "refused: TEXT_MODE: fixed while the crawl runs" in applied.stderr, applied.stderr
            time.sleep(8)
        finally:
            crawl.terminate()
            crawl.communicate(timeout=60)
        late = [r for r in web.requests if r.host == a and r.start > applied_at + 5]
        assert not late, [r.path for r in late]
        assert sum(r.host == b for r in web.requests if r.start > applied_at + 1) >= 3   # the others go on
    recs = [json.loads(line) for line in (out / "pages.jsonl").read_text().splitlines()]
    dropped = [r for r in recs if r["url"].startswith(f"http://{a}/") and r.get("error_kind") == "filtered"]
    assert dropped and all("out of the crawl's scope since job version 1 (site_out_of_scope)" in r["error"]
                           for r in dropped), dropped[:2]
    assert len({r["url"] for r in recs}) == len(recs)   # one record per URL
    history = sorted((out / "job-history").glob("v0001-*.toml"))
    assert len(history) == 1 and "in_scope = false" in history[0].read_text()
    assert tomllib.loads((out / "job.toml").read_text())["sites"][0]["in_scope"] is False


def test_job_apply_reaches_every_node_of_a_two_node_crawl(tmp_path, settings):
    """The production shape, two nodes (plain Celery workers, a Redis of their own), each
    fetching one shard: a job applied with ``--redis-url`` takes a host of each shard out
    of scope, and within 5 s neither node asks anything of them; each records its own
    host's queued URLs."""
    import dataclasses

    from crawler_tasks.keys import shard_of
    from crawler_tasks.ops.embedded import EmbeddedRedis
    from crawler_tasks.settings import Settings

    from .test_production_cluster import COMMON, Crawl
    from .test_production_cluster import UA as CLUSTER_UA

    logs = tmp_path / "logs"
    logs.mkdir()
    with EmbeddedRedis(tmp_path / "redis", save="") as server, \
            TestWeb(n_hosts=6, pages_per_host=40, seed=12, cross_host_ratio=0.0, first_ip=60) as web:
        by_shard = {shard: [h for h in web.hosts if shard_of(h, 2) == shard] for shard in (0, 1)}
        assert all(len(hosts) >= 2 for hosts in by_shard.values()), by_shard
        gone = [by_shard[0][0], by_shard[1][0]]
        base = dataclasses.replace(Settings(), REDIS_URL=server.url, SHARDS=2, MIN_DELAY_S=0.4, ALLOW_PRIVATE=True,
                                   METRICS_PORT=-1, USER_AGENT=CLUSTER_UA, MAX_FETCH_SESSIONS=4,
                                   SOFT404_PROBE=False, PROBE_SITEMAP_XML=False)
        crawl = Crawl(base, "j2", logs)
        try:
            for node, shard in (("na", 0), ("nb", 1)):   # each node fetches one shard's hosts
                crawl.start(f"fetch-{node}", node, ["worker", "-Q", f"crawl.fetch.{shard}", "-P", "threads", "-c", "4",
                                                    "-n", f"fetch-{node}@%h", *COMMON])
                crawl.start(f"parse-{node}", node, ["worker", "-Q", f"crawl.parse.{node},crawl.enqueue", "-P", "solo",
                                                    "-n", f"parse-{node}@%h", *COMMON])
            crawl.start("control", "na", ["worker", "-Q", "crawl.control", "-P", "solo", "-n", "control@%h", *COMMON])
            crawl.start("beat", "na", ["beat", "-s", str(logs / "j2-beat"), "-l", "INFO"])
            crawl.seed("na", [f"http://{h}/" for h in web.hosts])
            deadline = time.time() + 90
            while time.time() < deadline and min(sum(r.host == h for r in web.requests) for h in gone) < 4:
                time.sleep(0.2)
            rules = "".join(f'[[sites]]\nmatch = "http://{h}/"\nin_scope = false\n' for h in gone)
            job = write(tmp_path, rules)
            env = {**crawl.env("na"), "CRAWLER_OUT_DIR": str(tmp_path / "apply-out")}
            applied = subprocess.run([sys.executable, str(ROOT / "manage.py"), "job", "apply", str(job),
                                      "--redis-url", server.url], capture_output=True, text=True, env=env, timeout=60)
            applied_at = time.time()
            assert applied.returncode == 0, applied.stdout + applied.stderr
            time.sleep(8)
            late = [(r.host, r.path) for r in web.requests if r.host in gone and r.start > applied_at + 5]
            others = [r for r in web.requests if r.host not in gone and r.start > applied_at + 1]
        finally:
            crawl.stop()
    assert not late, late
    assert len(others) >= 5
    recs = crawl.records()
    for host, node in zip(gone, ("na", "nb"), strict=True):
        dropped = [r for r in recs if r["url"].startswith(f"http://{host}/") and r.get("error_kind") == "filtered"]
        assert dropped and {r["node"] for r in dropped} == {node}, (host, node, len(dropped))
    assert len({r["url"] for r in recs}) == len(recs)


def test_a_sites_budget_and_ignore_robots(tmp_path):
    """A site with a page budget of 4 gets 4 pages; a site the operator owns and marks
    ignore_robots is crawled without robots.txt (its /private/ page too), and the job that
    says so is in the WARC; the third host keeps the crawl's rules."""
    with TestWeb(n_hosts=3, pages_per_host=20, seed=14, cross_host_ratio=0.0, first_ip=70) as web:
        small, owned, other = web.hosts
        job = write(tmp_path, f"""\
seeds = {json.dumps([web.url(h, "/") for h in range(3)])}
out = "out"
[politeness]
min_delay = 0.0
[settings]
ALLOW_PRIVATE = true
SOFT404_PROBE = false
PROBE_SITEMAP_XML = false
[[sites]]
match = "http://{small}/"
max_pages = 4
[[sites]]
match = "http://{owned}/"
ignore_robots = true
""")
        proc = manage("crawl", "--job", str(job), *UA, "--max-seconds", "40")
        assert proc.returncode == 0, proc.stderr[-2000:]
        paths: dict[str, list[str]] = {}
        for r in web.requests:
            paths.setdefault(r.host, []).append(r.path)
    assert len([p for p in paths[small] if p != "/robots.txt"]) == 4, paths[small]
    assert "/robots.txt" not in paths[owned] and "/private/x.html" in paths[owned], sorted(paths[owned])
    assert "/robots.txt" in paths[other] and "/private/x.html" not in paths[other]
    assert len(paths[other]) > 10
    warc = sorted((tmp_path / "out" / "warc").glob("*.warc.gz"))[0]
    with gzip.open(warc, "rb") as f:
        head = f.read(200_000).decode("utf-8", "replace")
    assert "ignore_robots = true" in json.loads(re.search(r"crawl-job: (\".*\")\r\n", head)[1])


def test_a_sites_revisit_bounds_and_rendering_in_a_continuous_crawl(tmp_path):
    """Two hosts revisited for 12 s: one whose rule holds its pages 100 s at least is
    fetched once, the other again and again; with Chromium here, the first host's pages
    are rendered (render = "always") and the second's are not."""
    from crawler_tasks.render import chromium_path

    with TestWeb(n_hosts=2, pages_per_host=2, seed=15, cross_host_ratio=0.0, first_ip=80) as web:
        slow, free = web.hosts
        job = write(tmp_path, f"""\
seeds = {json.dumps([web.url(0, "/"), web.url(1, "/")])}
out = "out"
[politeness]
min_delay = 0.1
[recrawl]
continuous = true
min_interval = 1.0
[settings]
ALLOW_PRIVATE = true
RECRAWL_INITIAL_S = 1.0
RECRAWL_CHECK_S = 0.5
SOFT404_PROBE = false
PROBE_SITEMAP_XML = false
[[sites]]
match = "http://{slow}/"
recrawl_min = 100.0
render = "always"
""")
        proc = manage("crawl", "--job", str(job), *UA, "--max-seconds", "12")
        assert proc.returncode == 0, proc.stderr[-2000:]
    recs = [json.loads(line) for line in (tmp_path / "out" / "pages.jsonl").read_text().splitlines()]
    homes = {host: [r for r in recs if r["url"] == f"http://{host}/"] for host in (slow, free)}
    assert len(homes[slow]) == 1 and len(homes[free]) >= 2, {h: len(v) for h, v in homes.items()}
    if chromium_path() is not None:
        assert all(r.get("rendered") == "always" for r in homes[slow]), homes[slow]
        assert not any(r.get("rendered") for r in homes[free])
