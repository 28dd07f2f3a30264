#!/usr/bin/env python3
"""The operator's tool.

    python manage.py crawl URL... [--seeds-file F] [--out DIR] [--max-pages N] [--max-seconds S]
                               [--min-delay S] [--user-agent UA] [--allow-private] [--workers N]
                               [--ca-bundle PATH]
                               [--resume | --restore FILE|latest | --overwrite]
    python manage.py seed URL... [--out DIR | --redis-url URL]     add URLs to a crawl (starts or revives it)
    python manage.py pause | resume [--out DIR | --redis-url URL]  hold a running crawl / let it go on
    python manage.py stop [--out DIR | --redis-url URL]            stop a crawl (production shape)
    python manage.py stats [--out DIR | --redis-url URL] [--watch]
    python manage.py hosts HOST [--out DIR]                        one host's frontier state
    python manage.py robots URL [--agent A]                        robots.txt verdict and matching rule
    python manage.py dupes [--out DIR] [--threshold 0.9]           near-duplicate clusters of a crawl
    python manage.py report [--out DIR] [--redis-url URL]          OUT/report.html: plots and tables of a crawl
    python manage.py overlap OUT_A OUT_B [--sample N] [--seed S]   relative size of two crawls (capture-recapture)
    python manage.py snapshot [--out DIR] | restore FILE [--out DIR] [--replace]   checkpoints
    python manage.py testweb [--hosts N] [--pages P]               a local synthetic web for demos

Settings: every flag overrides the matching CRAWLER_* environment variable, which
overrides the defaults documented in crawler_tasks/settings.py.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crawler_tasks.exceptions import ConfigError, CrawlerError
from crawler_tasks.settings import Settings, reset_settings
from crawler_tasks.urls.sites import parse_sites

if TYPE_CHECKING:
    from crawler_tasks.ops.child import ForkServer
    from crawler_tasks.ops.job import Job
    from crawler_tasks.runtime.control import Control


def _settings_from(args: argparse.Namespace, **extra: object) -> Settings:
    job = getattr(args, "job_file", None)
    overrides: dict[str, Any] = {
        "OUT_DIR": getattr(args, "out", None),
        "REDIS_URL": getattr(args, "redis_url", None),
        "MAX_PAGES": getattr(args, "max_pages", None),
        "MAX_SECONDS": getattr(args, "max_seconds", None),
        "MIN_DELAY_S": getattr(args, "min_delay", None),
        "USER_AGENT": getattr(args, "user_agent", None),
        "SHARDS": getattr(args, "shards", None),
        "MAX_DEPTH": getattr(args, "max_depth", None),
        "MAX_PAGES_PER_HOST": getattr(args, "max_pages_per_host", None),
        "ALLOWED_DOMAINS": tuple(args.allow_domain) if getattr(args, "allow_domain", None) else None,
        "INCLUDE_PATTERNS": tuple(args.include) if getattr(args, "include", None) else None,
        "EXCLUDE_PATTERNS": tuple(args.exclude) if getattr(args, "exclude", None) else None,
        "RESOLVE": tuple(args.resolve) if getattr(args, "resolve", None) else None,
        "ALLOW_PRIVATE": True if getattr(args, "allow_private", False) else None,
        "ALLOW_METADATA_ADDRESSES": tuple(args.allow_metadata) if getattr(args, "allow_metadata", None) else None,
        "OBEY_ROBOTS": False if getattr(args, "ignore_robots", False) else None,
        "METRICS_PORT": getattr(args, "metrics_port", None),
        "CONTINUOUS": True if getattr(args, "continuous", False) else None,
        "CA_BUNDLE": os.pathsep.join(args.ca_bundle) if getattr(args, "ca_bundle", None) else None,
        "PROXY_URL": getattr(args, "proxy", None),
        **extra,
    }
    # resolved once, here: the worker and redis-server children run in other folders
    if os.environ.get("SSL_CERT_FILE"):   # the children inherit the environment
        os.environ["SSL_CERT_FILE"] = os.path.abspath(os.environ["SSL_CERT_FILE"])
    if os.environ.get("SSL_CERT_DIR"):
        os.environ["SSL_CERT_DIR"] = _absolute_paths(os.environ["SSL_CERT_DIR"])
    if job is not None:   # flags override the job file, which overrides CRAWLER_* variables
        overrides = {**job.overrides, **{k: v for k, v in overrides.items() if v is not None}}
    settings = Settings.from_env(**overrides)
    try:
        parse_sites(settings.SITES)   # the per-site rules (a job's [[sites]], or CRAWLER_SITES)
    except ValueError as exc:
        raise ConfigError(f"SITES: {exc}") from None
    settings = dataclasses.replace(settings, OUT_DIR=str(Path(settings.OUT_DIR).resolve()),
                                   CA_BUNDLE=_absolute_paths(settings.CA_BUNDLE))
    if hasattr(args, "proxy"):   # a crawl: a bad proxy variable stops it here, not in each fetch worker
        from crawler_tasks.fetch.proxy import ProxyRules
        ProxyRules.from_settings(settings)
    reset_settings(settings)
    return settings


def _absolute_paths(paths: str) -> str:
    """``os.pathsep``-separated paths made absolute (empty stays empty)."""
    return os.pathsep.join(os.path.abspath(p) for p in paths.split(os.pathsep) if p)


@contextlib.contextmanager
def _attach(args: argparse.Namespace) -> Iterator[Settings]:
    with _attached(args) as (settings, _live):
        yield settings


@contextlib.contextmanager
def _attached(args: argparse.Namespace) -> Iterator[tuple[Settings, bool]]:
    """Settings of a crawl that runs (or ran) elsewhere: from --redis-url or OUT/crawl.json,
    and whether its Redis is live (False: a finished embedded crawl, reopened from its
    data folder for the duration, with no process of it running)."""
    extra: dict[str, object] = {}
    server = None
    if not getattr(args, "redis_url", None) and not os.environ.get("CRAWLER_REDIS_URL"):
        out = Path(args.out or Settings.from_env().OUT_DIR).resolve()
        state = out / "crawl.json"
        if not state.exists():
            raise ConfigError(f"no crawl found: {state} does not exist (give --out DIR or --redis-url)")
        try:
            info = json.loads(state.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read {state}: {exc}") from None
        extra = {"KEY_PREFIX": info["key_prefix"], "SHARDS": info["shards"], "REDIS_URL": info["redis_url"],
                 "OUT_DIR": str(out)}
        for field, name in (("priority_levels", "PRIORITY_LEVELS"), ("bloom_expected_urls", "BLOOM_EXPECTED_URLS"),
                            ("bloom_error_rate", "BLOOM_ERROR_RATE")):
            if field in info:
                extra[name] = info[field]
        if info.get("redis_shard_urls"):
            extra["REDIS_SHARD_URLS"] = tuple(info["redis_shard_urls"])
        import redis

        from crawler_tasks.connection import ping_once, redact

        try:  # one attempt: a finished crawl's Redis is gone, and that is the common case
            ping_once(info["redis_url"], timeout_s=2.0)
        except redis.RedisError:
            if not (out / "redis").is_dir():
                raise ConfigError(f"the crawl's Redis {redact(info['redis_url'])} is unreachable") from None
            from crawler_tasks.ops.embedded import AOF_FILE, EmbeddedRedis

            # its append-only file, when it has one, is its full state (an RDB save may have failed)
            server = EmbeddedRedis(out / "redis", appendonly=(out / "redis" / AOF_FILE).exists()).start()
            extra["REDIS_URL"] = server.url
    try:
        yield _settings_from(args, **extra), server is None
    finally:
        if server is not None:
            server.stop()


def cmd_crawl(args: argparse.Namespace) -> int:
    from crawler_tasks.ops.child import ForkServer
    from crawler_tasks.ops.job import read_job

    # a bad setting, job file or a missing seed is said before anything starts
    args.job_file = read_job(args.job) if args.job else None
    settings = _settings_from(args)
    if not (args.urls or args.seeds_file or args.resume or args.restore or (args.job_file and args.job_file.seeds)):
        raise ConfigError("no seed URLs: give URLs, --seeds-file or a job file's seeds")
    # then: the crawl's processes are forked from it once it has imported their modules,
    # which it does while this process imports its own and prepares the crawl
    forks = ForkServer(str(Path(__file__).resolve().parent))
    try:
        return _crawl(args, settings, forks)
    finally:
        forks.stop()


def _crawl(args: argparse.Namespace, settings: Settings, forks: ForkServer) -> int:
    from crawler_tasks.ops.job import effective_job
    from crawler_tasks.ops.runner import CrawlRunner, read_seeds_file

    seeds = list(args.urls)
    if args.seeds_file:
        seeds += read_seeds_file(args.seeds_file)
    if not seeds and args.job_file is not None:   # seeds on the command line replace the job's
        seeds = list(args.job_file.seeds)
    if settings.uses_default_contact:
        print("warning: using the default user agent; set --user-agent 'name/1.0 (+https://your.site/bot)' "
              "so site owners can reach you", file=sys.stderr)
    if not settings.ALLOW_PRIVATE:
        print("note: private and loopback addresses are refused (use --allow-private for local webs)",
              file=sys.stderr)
    runner = CrawlRunner(settings, seeds=seeds, workers=args.workers, parsers=args.parsers,
                         resume=args.resume or bool(args.restore), restore_from=args.restore, forks=forks,
                         overwrite=args.overwrite, job=effective_job(settings, seeds))
    return runner.run()


def cmd_seed(args: argparse.Namespace) -> int:
    """Seeds start a crawl whose workers wait for them, and revive one that finished for
    lack of work; a crawl that is paused, stopping, stopped at a limit or not running
    keeps them queued, and the note says what fetches them."""
    from crawler_tasks.ops.messages import listed
    from crawler_tasks.ops.runner import read_seeds_file
    from crawler_tasks.ops.seeds import seed_urls
    from crawler_tasks.runtime.control import Control, CrawlState

    urls = list(args.urls) + (read_seeds_file(args.seeds_file) if args.seeds_file else [])
    if not urls:
        raise ConfigError("no seed URLs: give URLs or --seeds-file")
    with _attached(args) as (settings, live):
        control = Control(settings)
        before = control.read()
        added, rejected, waiting = seed_urls(settings, urls)
        after = control.read()
        note = ""
        if added and not live:
            note = (f"the crawl is not running ({after.state} {after.reason}".rstrip() + "): "
                    f"`manage.py crawl --resume --out {settings.OUT_DIR}` fetches them")
        elif added and after.state == CrawlState.FINISHED and after.idle and control.revive():
            note = f"the crawl had finished ({after.reason}); it runs again with them"
        elif added and after.state == CrawlState.FINISHED:
            note = (f"the crawl is finished ({after.reason}), so nothing fetches them now: "
                    "`manage.py crawl --resume` continues it (with its limits given again)")
        elif added and after.state == CrawlState.PAUSED:
            note = "the crawl is paused: they are fetched after `manage.py resume`"
        elif added and after.state == CrawlState.STOPPING:
            note = f"the crawl is stopping ({after.reason}): they wait for `manage.py crawl --resume`"
        elif added and not before.exists:
            note = f"a new crawl (prefix {settings.KEY_PREFIX!r}) starts with them"
        unattended = control.unattended_s(after, settings.MAINTENANCE_INTERVAL_S) if added and live else None
        if unattended is not None and after.state in (CrawlState.RUNNING, CrawlState.PAUSED):
            note += ("; " if note else "") + _unattended(unattended)
    for message in listed(rejected):
        print(f"skipped: {message}", file=sys.stderr)
    for line in listed([repr(url[:200]) for url in waiting]):
        print(f"already queued: {line}", file=sys.stderr)
    print(f"{added} URL(s) added" + (f", {len(rejected):,} skipped" if rejected else "")
          + (f", {len(waiting):,} already queued (each fetched once, when its turn comes)" if waiting else ""))
    if note:
        print(f"note: {note}", file=sys.stderr)
    return 0 if added or waiting or not rejected else 2


def cmd_pause(args: argparse.Namespace) -> int:
    """Exchanges in flight finish; wake starts nothing and sessions take no new turn."""
    from crawler_tasks.runtime.control import CrawlState

    with _attached(args) as (settings, live):
        control = _control_of(settings)
        if not live:
            raise ConfigError("the crawl is not running (its Redis was reopened from its folder): nothing to pause")
        previous, moved = control.move(CrawlState.PAUSED, "by manage.py pause", (CrawlState.RUNNING,))
        state = control.read()
    if moved:
        print("paused: exchanges in flight finish, nothing new starts; `manage.py resume` lets it go on")
    elif previous == CrawlState.PAUSED:
        print(f"already paused for {_ago(state.at)}")
    else:
        raise ConfigError(f"the crawl is {previous} {state.reason}".rstrip() + ": only a running crawl can be paused")
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    from crawler_tasks.runtime.control import CrawlState

    with _attached(args) as (settings, live):
        control = _control_of(settings)
        held = control.read()
        previous, moved = control.move(CrawlState.RUNNING, "", (CrawlState.PAUSED,))
    if moved:
        print(f"resumed after {_ago(held.at)} paused"
              + ("" if live else f"; `manage.py crawl --resume --out {settings.OUT_DIR}` runs it"))
    elif previous == CrawlState.RUNNING:
        print("the crawl is not paused: it is running")
    else:
        raise ConfigError(f"the crawl is {previous} {held.reason}".rstrip() + ": `manage.py resume` lets a paused "
                          "crawl go on; `manage.py crawl --resume` continues a stopped one")
    return 0


def _unattended(since_s: float) -> str:
    since = "ever" if since_s == float("inf") else f"for {since_s:.0f} s"
    return (f"no maintenance has run {since}: start a control worker "
            f"(celery -A crawler_tasks worker -Q crawl.control) and beat (celery -A crawler_tasks beat)")


def cmd_stop(args: argparse.Namespace) -> int:
    """The production shape's Ctrl-C: nothing new starts, sessions give their hosts back
    (exchanges in flight are cut and stay queued), maintenance finishes the crawl."""
    from crawler_tasks.runtime.control import CrawlState

    with _attached(args) as (settings, live):
        control = _control_of(settings)
        if not live:
            raise ConfigError("the crawl is not running (its Redis was reopened from its folder): nothing to stop")
        previous, moved = control.move(CrawlState.STOPPING, "stopped by manage.py stop",
                                       (CrawlState.RUNNING, CrawlState.PAUSED))
        held = control.read()
    if moved:
        print("stopping: the crawl finishes once the exchanges in flight are through; "
              "`manage.py crawl --resume` continues it")
    else:
        print(f"the crawl is {previous} {held.reason}".rstrip())
    return 0


def _control_of(settings: Settings) -> Control:
    from crawler_tasks.runtime.control import Control

    control = Control(settings)
    if not control.exists():
        raise ConfigError(f"no crawl under prefix {settings.KEY_PREFIX!r} (`manage.py seed URL` starts one)")
    return control


def _ago(at: float | None) -> str:
    from crawler_tasks.ops.progress import clock

    return clock(time.time() - at) if at else "a while"


def _stats_lines(settings: Settings, live: bool = True) -> tuple[list[str], bool]:
    """The stats report, and whether the crawl is finished."""
    from crawler_tasks.frontier import Frontier
    from crawler_tasks.ops.waiting import WaitReason, describe, waiting_hosts
    from crawler_tasks.runtime.control import Control, CrawlState
    from crawler_tasks.runtime.maintenance import read_progress

    p = read_progress(settings)
    control = Control(settings)
    c = control.read()
    if not p.started:
        state = f"state waiting for seeds: no crawl under prefix {settings.KEY_PREFIX!r} yet (`manage.py seed URL`)"
    elif p.state == CrawlState.PAUSED:
        state = f"state paused for {_ago(c.at)} (`manage.py resume` lets it go on)"
    else:
        state = f"state {p.state} {p.reason}".rstrip()
    unattended = control.unattended_s(c, settings.MAINTENANCE_INTERVAL_S) \
        if live and p.state in (CrawlState.RUNNING, CrawlState.PAUSED, CrawlState.STOPPING) else None
    if unattended is not None:   # a running state that nothing runs: say what to start
        state += f"\nwarning: {_unattended(unattended)}"
    lines = [state, f"pages {p.pages}  queued {p.queued}  leased hosts {p.leased}  batches in flight {p.inflight}"]
    for i, shard in enumerate(p.shards):
        lines.append(f"  shard {i}: " + "  ".join(f"{k} {v}" for k, v in shard.items()))
    frontier = Frontier(settings)
    bloom = frontier.bloom_fill()
    lines.append(f"URL-seen Bloom filter: {bloom.bits_set / frontier.bloom.bits / settings.SHARDS:.1%} full, "
                 f"{bloom.describe()} ({frontier.bloom.bytes * settings.SHARDS / 2**20:.1f} MiB for "
                 f"{settings.BLOOM_EXPECTED_URLS} URLs at {settings.BLOOM_ERROR_RATE:g})")
    top = frontier.top_hosts()
    if top:
        lines.append("top hosts by URLs enqueued: " + ", ".join(f"{h} {n}" for h, n in top))
    unreachable = [h for h in waiting_hosts(frontier) if h.reason == WaitReason.ROBOTS]
    if unreachable:
        lines.append(f"hosts unreachable: {len(unreachable)}")
        lines += [f"  {describe(h)}" for h in unreachable[:20]]
    if settings.CONTINUOUS or "recrawl/revisits" in p.stats:
        from crawler_tasks.frontier.recrawl import recrawl_lines
        from crawler_tasks.runtime.control import Control

        lines += recrawl_lines(settings, p.stats, Control(settings).running_s())
    lines += [f"  {key:40s} {p.stats[key]}" for key in sorted(p.stats)]
    return lines, p.state == CrawlState.FINISHED


def cmd_stats(args: argparse.Namespace) -> int:
    """--watch: redrawn every 2 s in a terminal, a new report every 10 s in a log; ends
    when the crawl does."""
    tty = sys.stdout.isatty()
    with _attached(args) as (settings, live):
        while True:
            lines, finished = _stats_lines(settings, live)
            if args.watch and tty:
                sys.stdout.write("\x1b[H\x1b[2J")  # home, clear screen
            print("\n".join(lines), flush=True)
            if not args.watch or finished:
                return 0
            time.sleep(2.0 if tty else 10.0)
            if not tty:
                print(flush=True)


def cmd_hosts(args: argparse.Namespace) -> int:
    """A host is named as in its URLs, with its port when not the default; given without
    one, the only host of that name is shown, or the candidates are listed."""
    from crawler_tasks.frontier import Frontier
    from crawler_tasks.ops.waiting import known, matching_hosts

    with _attach(args) as settings:
        frontier = Frontier(settings)
        name = args.host.lower()
        info = frontier.host_info(name)
        if not known(info):
            candidates = matching_hosts(frontier, name)
            if len(candidates) != 1:
                print(f"host {name} is not in this crawl" + (
                    "; hosts of that name: " + ", ".join(candidates) if candidates else ""), file=sys.stderr)
                return 1
            info = frontier.host_info(candidates[0])
        now = time.time()
        print(f"host {info.host}  shard {info.shard}  active {info.active}  queued {len(info.queue)}")
        print(_contact_line(info.next_contact, info.leased_until, bool(info.queue), now))
        print(f"pages enqueued {info.enqueued}  duplicates {info.duplicates}/{info.pages}")
        robots = info.robots
        if robots:
            expires = float(robots.get("expires", 0)) - now
            print(f"robots.txt {robots.get('kind')} (status {robots.get('status') or '-'}), "
                  + (f"expires in {expires:.0f} s" if expires > 0 else f"expired {-expires:.0f} s ago")
                  + f" {robots.get('error') or ''}".rstrip())
        if info.politeness:
            print("politeness " + "  ".join(f"{key} {value}" for key, value in sorted(info.politeness.items())))
        _print_url_rules(settings, info.host)
        _print_site_rules(settings, info.host)
        for entry in info.queue[: args.show]:
            print(f"  depth {entry.depth} tries {entry.tries} {entry.url}")
    return 0


def _contact_line(te: float | None, leased_until: float | None, queued: bool, now: float) -> str:
    """Next contact and lease as a person reads them: never a negative wait."""
    if te is None:
        line = "next contact not scheduled"
    elif te > now:
        line = f"next contact in {te - now:.1f} s"
    elif queued:
        line = f"next contact now (due for {now - te:.1f} s)"
    else:
        line = f"no URL queued (its delay ended {now - te:.1f} s ago)"
    if leased_until is not None:
        line += (f"  leased for {leased_until - now:.1f} s more" if leased_until > now
                 else f"  lease expired {now - leased_until:.1f} s ago")
    return line


def _print_site_rules(settings: Settings, host: str) -> None:
    """The job's per-site rules that name the host, most specific first, and which one sets
    its delay and headers (urls/sites.py)."""
    from crawler_tasks.connection import global_client
    from crawler_tasks.keys import GlobalKeys
    from crawler_tasks.urls.sites import parse_sites

    recorded = global_client(settings).hget(GlobalKeys(settings.KEY_PREFIX).settings, "SITES")   # the crawl's own
    try:
        sites = parse_sites(recorded if isinstance(recorded, str) else settings.SITES)
    except ValueError:
        sites = parse_sites("")
    own = sites.for_host(host) if sites else None
    for site in sites.matching(host) if sites else []:
        why = "sets its delay and headers; " if site is own else ""
        scope = "its URLs under the prefix" if site.is_prefix else "its URLs unless a more specific rule matches"
        print(f"site rule {site.describe()}  ({why}applies to {scope})")
    if sites and own is None and not sites.matching(host):
        print("site rules: none names this host (the job's defaults apply)")


def _print_url_rules(settings: Settings, host: str) -> None:
    """The host's learned URL rules with their evidence, and its trap shapes (dedup/rules.py)."""
    from crawler_tasks.dedup.rules import UrlRules

    rules, traps = UrlRules(settings).host_rules(host)
    for r in rules:
        state = "in force" if r.active else ("blocked" if r.counter_examples else "learning")
        print(f"url rule {r.rule:<24} {state:<8}  evidence {r.units} units from {r.pairs} pairs"
              f"  counter-examples {r.counter_examples}" + (f" (first: {r.why})" if r.why else ""))
    for shape, reason in sorted(traps.items()):
        print(f"trap shape {shape}  ({reason})")


def cmd_job(args: argparse.Namespace) -> int:
    """``check``: the job file checked as ``crawl --job`` reads it; the effective job
    printed. ``apply``: what a running crawl can take of it, taken (runtime/livejob.py)."""
    from crawler_tasks.ops.job import effective_job, read_job

    job = read_job(args.file)
    if args.action == "apply":
        return _job_apply(args, job)
    settings = Settings.from_env(**job.overrides)
    print(f"{args.file}: OK, {len(job.seeds)} seed(s); the effective job (with this environment's CRAWLER_* "
          "variables):", file=sys.stderr)
    print(effective_job(settings, job.seeds), end="")
    return 0


def _job_apply(args: argparse.Namespace, job: Job) -> int:
    import tomllib

    from crawler_tasks.connection import global_client
    from crawler_tasks.keys import GlobalKeys
    from crawler_tasks.ops.job import effective_job, history_name, plan_apply
    from crawler_tasks.output.jsonl import JOB_FILE
    from crawler_tasks.runtime import livejob
    from crawler_tasks.settings import ENV_PREFIX

    with _attached(args) as (settings, live):
        if not live:
            raise ConfigError("the crawl is not running: nothing to apply to (`crawl --job` starts one)")
        recorded: dict[str, str] = global_client(settings).hgetall(  # type: ignore[assignment]  # decoded replies
            GlobalKeys(settings.KEY_PREFIX).settings)
        if not recorded:
            raise ConfigError("the crawl's settings are not recorded yet (its control worker has not run): try again")
        running = Settings.from_env({ENV_PREFIX + k: v for k, v in recorded.items() if k != "REDIS_URL"},
                                    REDIS_URL=settings.REDIS_URL)
        version, values = livejob.read(settings)
        running = livejob.overlay(running, values)
        out = Path(settings.OUT_DIR)
        try:
            seeds = list(tomllib.loads((out / JOB_FILE).read_text()).get("seeds", []))
        except (OSError, ValueError):
            seeds = []
        plan = plan_apply(job, running, seeds)
        if plan.applied:
            version = livejob.publish(settings, plan.applied)
            history = out / "job-history"
            try:   # the applied versions are kept beside the crawl's outputs
                history.mkdir(parents=True, exist_ok=True)
                (history / history_name(version)).write_text(job.path.read_text())
                (out / JOB_FILE).write_text(effective_job(livejob.overlay(running, plan.applied), seeds))
            except OSError as exc:
                print(f"warning: applied, but not kept in {history}: {exc}", file=sys.stderr)
    for name, value in plan.applied.items():
        print(f"applied (job version {version}): {name} = {value!r}"[:300])
    for line in plan.refused:
        print(f"refused: {line}", file=sys.stderr)
    if not plan.applied and not plan.refused:
        print("nothing to apply: the running crawl already has this job")
    return 3 if plan.refused else 0


def cmd_robots(args: argparse.Namespace) -> int:
    """The crawler's own decision (same cache policy, redirects, status semantics)."""
    from urllib.parse import urlsplit

    from crawler_tasks.fetch.http import Fetcher
    from crawler_tasks.robots import product_token
    from crawler_tasks.robots.cache import ALLOW, UNREACHABLE, MemoryRobotsStore, RobotsCache

    settings = _settings_from(args)
    agent = product_token(args.agent or settings.ROBOTS_AGENT or settings.USER_AGENT)
    parts = urlsplit(args.url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"not an http(s) URL: {args.url!r}")
    cache = RobotsCache(settings.ROBOTS_TTL_S, settings.ROBOTS_ERROR_TTL_S)
    answer = cache.check(MemoryRobotsStore(), Fetcher(settings), args.url, agent, explain=True)
    robots_url = f"{parts.scheme}://{parts.netloc}/robots.txt"
    entry, status = answer.entry, answer.entry.status
    if entry.kind == UNREACHABLE:
        print(f"{robots_url} unreachable ({entry.error or status}): disallow all")
        print(f"agent {agent!r}: DISALLOWED {args.url}")
        return 3
    note = f": allow all ({entry.error})" if entry.kind == ALLOW and entry.error else (
        ": allow all" if entry.kind == ALLOW else "")
    print(f"{robots_url} answered {status}{note}")
    assert answer.verdict is not None
    verdict = answer.verdict
    print(f"agent {agent!r}: {'ALLOWED' if verdict.allowed else 'DISALLOWED'} {args.url}")
    group = f"group user-agent {', '.join(verdict.group)} (line {', '.join(map(str, verdict.group_lines))})" \
        if verdict.group else "no group for this agent"
    print(f"  {verdict.reason}; {group}")
    return 0 if answer.verdict.allowed else 3


def cmd_snapshot(args: argparse.Namespace) -> int:
    from crawler_tasks.ops.snapshot import checkpoint, info_dict, snapshot

    with _attach(args) as settings:
        info = snapshot(settings, args.path) if args.path else checkpoint(settings, keep=args.keep)
    if info is None:
        print("another snapshot is being written to this folder; try again", file=sys.stderr)
        return 1
    print(json.dumps(info_dict(info), indent=1, default=str))
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    from crawler_tasks.connection import redact
    from crawler_tasks.ops.outdir import OutputLock
    from crawler_tasks.ops.reconcile import roll_back
    from crawler_tasks.ops.restore import restore
    from crawler_tasks.ops.snapshot import info_dict
    from crawler_tasks.runtime.control import Control, CrawlState

    with _attached(args) as (settings, live), contextlib.ExitStack() as held_lock:
        held = Control(settings).read()
        if held.exists and not args.replace:   # said here: the library's message names its own argument
            running = live and held.state in (CrawlState.RUNNING, CrawlState.PAUSED, CrawlState.STOPPING)
            raise ConfigError(
                f"{redact(settings.REDIS_URL)} holds a crawl under prefix {settings.KEY_PREFIX!r} "
                f"({held.state} {held.reason}".rstrip() + "); "
                + ("it looks running: stop it first, then " if running else "")
                + "add --replace to drop its keys and load the snapshot")
        out = Path(settings.OUT_DIR)
        outputs = (out / "pages.jsonl").exists()
        if outputs:   # no crawl may write there meanwhile
            held_lock.enter_context(OutputLock(out))
        info = restore(settings, args.file, replace=args.replace)
        if outputs:   # records of pages the restored state fetches again are rolled back
            info.repaired["records_rolled_back"] = roll_back(settings, out, float(info.header.get("created_epoch", 0)))
    print(json.dumps(info_dict(info), indent=1, default=str))
    return 0


def cmd_dupes(args: argparse.Namespace) -> int:
    from crawler_tasks.ops import dupes

    return dupes.main(["--out", args.out or Settings.from_env().OUT_DIR, "--threshold", str(args.threshold)])


def cmd_report(args: argparse.Namespace) -> int:
    import redis

    from crawler_tasks.ops.report import CrawlInputs, read_inputs, write_report

    out = Path(args.out or Settings.from_env().OUT_DIR)
    if not (out / "pages.jsonl").exists():
        raise ConfigError(f"no crawl output in {out} (pages.jsonl missing; give --out DIR)")
    inputs = CrawlInputs()
    try:
        with _attach(args) as settings:
            inputs = read_inputs(settings)
            s = settings
    except (ConfigError, redis.RedisError) as exc:
        s = Settings.from_env()
        inputs.note = f"drawn from pages.jsonl only: {exc}"
    path = write_report(out, inputs, args.path, trap_min_pages=s.DUP_TRAP_MIN_PAGES, trap_ratio=s.DUP_TRAP_RATIO)
    if inputs.note:
        print(f"note: {inputs.note}", file=sys.stderr)
    print(path)
    return 0


def cmd_overlap(args: argparse.Namespace) -> int:
    from crawler_tasks.ops import overlap

    result = overlap.compare(Path(args.out_a), Path(args.out_b), sample=args.sample, seed=args.seed,
                             queries=args.queries)
    print(overlap.format_result(result))
    return 0


def cmd_testweb(args: argparse.Namespace) -> int:
    import testweb

    argv = ["--hosts", str(args.hosts), "--pages", str(args.pages)]
    if args.mean_bytes:
        argv += ["--mean-bytes", str(args.mean_bytes)]
    return testweb.main(argv) or 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="manage.py", description="Operate the crawler.")
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("crawl", help="run a whole crawl on this machine (embedded Redis unless CRAWLER_REDIS_URL)")
    c.add_argument("urls", nargs="*", help="seed URLs")
    c.add_argument("--seeds-file", help="file with one seed URL per line (# comments)")
    c.add_argument("--job", metavar="FILE",
                   help="a job file (TOML: seeds, scope, limits, politeness, ...; README, 'The crawl job'); "
                        "flags override it")
    c.add_argument("--out", help="output folder (default crawl-out)")
    c.add_argument("--redis-url", help="use this Redis instead of an embedded one")
    c.add_argument("--max-pages", type=int, help="stop after N pages")
    c.add_argument("--max-seconds", type=float, help="stop after S seconds")
    c.add_argument("--max-depth", type=int, help="link depth limit from the seeds (-1 = none)")
    c.add_argument("--max-pages-per-host", type=int, help="per-host page budget (hosts of seeds get 10x; 0 = none)")
    c.add_argument("--min-delay", type=float, help="minimum seconds between two requests to one host")
    c.add_argument("--user-agent", help="user agent with a contact URL")
    c.add_argument("--allow-private", action="store_true", help="permit private/loopback targets (local webs)")
    c.add_argument("--allow-metadata", action="append", metavar="ADDR",
                   help="permit one cloud metadata address (refused even with --allow-private); repeatable")
    c.add_argument("--allow-domain", action="append", help="stay within this domain (repeatable)")
    c.add_argument("--include", action="append", metavar="REGEX",
                   help="crawl only URLs this regular expression finds (re.search; repeatable: any of them)")
    c.add_argument("--exclude", action="append", metavar="REGEX",
                   help="never crawl URLs this regular expression finds (repeatable)")
    c.add_argument("--resolve", action="append", help="static DNS answer host=addr (repeatable)")
    c.add_argument("--ca-bundle", action="append", metavar="PATH",
                   help="also trust the CA certificates of this PEM file or folder of hashed certificates, besides "
                        "certifi's and SSL_CERT_FILE/SSL_CERT_DIR's (repeatable)")
    c.add_argument("--proxy", metavar="URL",
                   help="fetch every URL through this HTTP proxy, http://[user:pass@]host:port (CONNECT for "
                        "https://); default: HTTPS_PROXY/HTTP_PROXY/NO_PROXY of the environment")
    c.add_argument("--ignore-robots", action="store_true", help="do not obey robots.txt (only for sites you own)")
    c.add_argument("--shards", type=int, help="frontier shards")
    c.add_argument("--workers", type=int,
                   help="fetch worker processes (default: one per 8 cores, at least one; one holds 10,000 hosts)")
    c.add_argument("--parsers", type=int, default=2, help="parse/dedup worker processes (default 2)")
    c.add_argument("--continuous", action="store_true",
                   help="revisit fetched URLs (sooner when they change) until a limit or Ctrl-C")
    c.add_argument("--resume", action="store_true",
                   help="start again a stopped crawl whose state is in --out / Redis (its processes are started "
                        "anew; to let a paused but running crawl go on, use `manage.py resume`)")
    c.add_argument("--restore", metavar="FILE|latest",
                   help="load a snapshot (OUT/snapshots/...) first, then resume from it")
    c.add_argument("--overwrite", action="store_true",
                   help="delete a previous crawl's output in --out first (without it, a crawl refuses such a folder "
                        "unless --resume or --restore continues it)")
    c.add_argument("--metrics-port", type=int, help="Prometheus endpoint port (0 = free port, -1 = off)")
    c.set_defaults(func=cmd_crawl)

    for name, func, text in (
            ("seed", cmd_seed, "add URLs to a crawl: starts one whose workers wait for seeds, revives one that "
                               "ran out of work; a stopped one keeps them for `crawl --resume`"),
            ("stats", cmd_stats, "print a running or finished crawl's counters"),
            ("pause", cmd_pause, "hold a running crawl: exchanges in flight finish, nothing new starts; "
                                 "lasts until `manage.py resume`, across restarts"),
            ("resume", cmd_resume, "let a paused crawl go on (not `crawl --resume`, which restarts a stopped "
                                   "crawl's processes)"),
            ("stop", cmd_stop, "stop a crawl run by plain Celery workers (the production shape); "
                               "its state stays for `crawl --resume`")):
        sp = sub.add_parser(name, help=text)
        if name == "seed":
            sp.add_argument("urls", nargs="*")
            sp.add_argument("--seeds-file")
        elif name == "stats":
            sp.add_argument("--watch", action="store_true",
                            help="refresh every 2 s (every 10 s when not a terminal) until the crawl ends")
        sp.add_argument("--out", help="the crawl's output folder (finds its Redis)")
        sp.add_argument("--redis-url")
        sp.set_defaults(func=func)

    jb = sub.add_parser("job", help="check a job file, or apply it to a running crawl")
    jb.add_argument("action", choices=["check", "apply"])
    jb.add_argument("file")
    jb.add_argument("--out", help="apply: the running crawl's output folder (finds its Redis)")
    jb.add_argument("--redis-url")
    jb.set_defaults(func=cmd_job)

    sn = sub.add_parser("snapshot", help="write a portable checkpoint of a crawl's Redis state")
    sn.add_argument("--out", help="the crawl's output folder (finds its Redis)")
    sn.add_argument("--redis-url")
    sn.add_argument("--path", help="file to write (default OUT/snapshots/snapshot-<time>.jsonl.gz)")
    sn.add_argument("--keep", type=int, default=3, help="snapshots kept in OUT/snapshots")
    sn.set_defaults(func=cmd_snapshot)

    rs = sub.add_parser("restore", help="load a snapshot into a crawl's Redis (then crawl --resume)")
    rs.add_argument("file")
    rs.add_argument("--out", help="the crawl's output folder (finds its Redis)")
    rs.add_argument("--redis-url")
    rs.add_argument("--replace", action="store_true", help="drop the crawl's current keys first")
    rs.set_defaults(func=cmd_restore)

    h = sub.add_parser("hosts", help="one host's frontier state: queue, next contact, robots, politeness")
    h.add_argument("host", help="host[:port] as in the URLs")
    h.add_argument("--show", type=int, default=5, help="queued URLs to list")
    h.add_argument("--out", help="the crawl's output folder (finds its Redis)")
    h.add_argument("--redis-url")
    h.set_defaults(func=cmd_hosts)

    r = sub.add_parser("robots", help="fetch a site's robots.txt and print the verdict for URL")
    r.add_argument("url")
    r.add_argument("--agent", help="product token or user agent (default: from settings)")
    r.add_argument("--allow-private", action="store_true")
    r.add_argument("--resolve", action="append")
    r.set_defaults(func=cmd_robots)

    dp = sub.add_parser("dupes", help="cluster near-duplicate pages of a finished crawl (MinHash)")
    dp.add_argument("--out", help="the crawl's output folder")
    dp.add_argument("--threshold", type=float, default=0.9, help="Jaccard similarity (default 0.9)")
    dp.set_defaults(func=cmd_dupes)

    rp = sub.add_parser("report", help="write OUT/report.html: progress plots, outcomes, hosts, duplicates")
    rp.add_argument("--out", help="the crawl's output folder (finds its Redis)")
    rp.add_argument("--redis-url")
    rp.add_argument("--path", help="file to write (default OUT/report.html)")
    rp.set_defaults(func=cmd_report)

    ov = sub.add_parser("overlap", help="estimate the relative size of two crawls by capture-recapture")
    ov.add_argument("out_a", help="output folder of crawl A")
    ov.add_argument("out_b", help="output folder of crawl B")
    ov.add_argument("--sample", type=int, default=1000, help="pages sampled from each crawl (default 1000)")
    ov.add_argument("--seed", type=int, default=0, help="random seed of the samples")
    ov.add_argument("--queries", type=int, default=200, help="rare-term queries per direction (default 200)")
    ov.set_defaults(func=cmd_overlap)

    t = sub.add_parser("testweb", help="serve a local synthetic web on 127.0.0.x until Ctrl-C")
    t.add_argument("--hosts", type=int, default=5)
    t.add_argument("--pages", type=int, default=20)
    t.add_argument("--mean-bytes", type=int, default=0)
    t.set_defaults(func=cmd_testweb)
    return p


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except CrawlerError as exc:  # ConfigError, SnapshotError: a clear message, no traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    from crawler_tasks.ops.child import exit_now

    exit_now(main())
