"""The components a stage worker process holds: clients, caches, writers.

Built once per process after fork (sockets are never shared), handed to every stage
call. Stages call these components; none of them builds a Redis key itself.
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from crawler_tasks.counters import Counters
from crawler_tasks.dedup.content import ContentIndex
from crawler_tasks.dedup.rules import UrlRules
from crawler_tasks.fetch.addresses import AddressGate
from crawler_tasks.fetch.http import Fetcher
from crawler_tasks.fetch.politeness import PolitenessPolicy
from crawler_tasks.fetch.pool import ExchangePool
from crawler_tasks.frontier import Frontier
from crawler_tasks.frontier.recrawl import Recrawler
from crawler_tasks.output.jsonl import FeedWriter
from crawler_tasks.output.warc import WarcStore
from crawler_tasks.parse.sandbox import ParseSandbox
from crawler_tasks.render.policy import RenderPolicy
from crawler_tasks.robots.cache import RobotsCache
from crawler_tasks.robots.rules import product_token
from crawler_tasks.runtime.control import Control
from crawler_tasks.runtime.livejob import LiveSettings
from crawler_tasks.settings import Settings
from crawler_tasks.stages.gate import UrlGate
from crawler_tasks.urls.sites import Site, parse_sites

log = logging.getLogger(__name__)



@dataclass(slots=True)
class Worker:
    settings: Settings
    frontier: Frontier
    control: Control
    fetcher: Fetcher
    robots: RobotsCache
    warc: WarcStore
    gate: UrlGate
    policy: PolitenessPolicy
    content: ContentIndex
    feed: FeedWriter
    recrawler: Recrawler
    sandbox: ParseSandbox | None
    render: RenderPolicy
    rules: UrlRules
    exchanges: ExchangePool   # the threads that run host turns, shared by the fetch sessions
    robots_agent: str         # our name in robots.txt: ROBOTS_AGENT, or USER_AGENT's product token
    addresses: AddressGate = field(default_factory=AddressGate)   # names sharing an address take turns
    live: LiveSettings | None = None   # the applied job's live values (runtime/livejob.py)
    job_version: int = 0

    @classmethod
    def create(cls, settings: Settings) -> "Worker":
        frontier = Frontier(settings)
        rules = UrlRules(settings)
        return cls(settings, frontier, Control(settings), Fetcher(settings),
                   RobotsCache(settings.ROBOTS_TTL_S, settings.ROBOTS_ERROR_TTL_S),
                   WarcStore(settings.OUT_DIR, settings.WARC_MAX_BYTES, operator=settings.USER_AGENT,
                             gzip_level=settings.WARC_GZIP_LEVEL),
                   UrlGate(settings, rules), politeness_policy(settings),
                   ContentIndex(settings), FeedWriter(settings), Recrawler(settings, frontier),
                   ParseSandbox(settings.PARSE_TIMEOUT_S, settings.PARSE_MEMORY_MB) if settings.PARSE_TIMEOUT_S else None,
                   RenderPolicy(settings), rules, ExchangePool.for_settings(settings),
                   settings.ROBOTS_AGENT or product_token(settings.USER_AGENT), live=LiveSettings(settings))

    def count(self, counters: Counters) -> None:
        self.control.count(counters)

    def normalize(self, href: str, base: str | None = None) -> str | None:
        return self.gate.normalize(href, base)

    def refresh(self) -> int:
        """Follow ``manage.py job apply`` (at most every few seconds): the settings, the URL
        gate and the politeness policy take the applied job's live values. Returns the
        job's version (0: the job the crawl started with)."""
        if self.live is not None:
            settings, version = self.live.get()
            if version != self.job_version:
                self.settings, self.gate = settings, UrlGate(settings, self.rules)
                self.policy, self.job_version = politeness_policy(settings), version
                self.frontier.settings = self.recrawler.settings = settings   # site budgets, revisit bounds
        return self.job_version

    def policy_for(self, host: str) -> PolitenessPolicy:
        """The host's politeness: its site rule's min_delay in place of MIN_DELAY_S (a job's
        per-site rules, urls/sites.py); robots.txt and the server still lengthen it."""
        return _site_policy(self.policy, self.settings.SITES, host) if self.settings.SITES else self.policy

    def site(self, host: str) -> Site | None:
        """The job's rule for the host (urls/sites.py), None without one."""
        return parse_sites(self.settings.SITES).for_host(host) if self.settings.SITES else None

    def site_headers(self, host: str) -> dict[str, str]:
        """The request headers the host's site rule adds (Accept-Language ...)."""
        site = self.site(host)
        return dict(site.headers) if site is not None else {}

    def obeys_robots(self, host: str) -> bool:
        """OBEY_ROBOTS, unless the job names the host's site ``ignore_robots`` (one the
        operator owns; the job, with that rule, is in every WARC file's warcinfo)."""
        site = self.site(host)
        return self.settings.OBEY_ROBOTS and not (site is not None and site.ignore_robots)


@lru_cache(maxsize=4096)
def _site_policy(policy: PolitenessPolicy, sites: str, host: str) -> PolitenessPolicy:
    site = parse_sites(sites).for_host(host)
    return policy if site is None or site.min_delay is None else dataclasses.replace(policy, min_delay_s=site.min_delay)


def politeness_policy(settings: Settings) -> PolitenessPolicy:
    """The policy from the settings of the same names (``min_delay_s`` is MIN_DELAY_S): no
    hand mapping to keep in step; tests/test_politeness.py checks the defaults agree."""
    return PolitenessPolicy(**{f.name: getattr(settings, f.name.upper()) for f in dataclasses.fields(PolitenessPolicy)
                               if hasattr(settings, f.name.upper())})


_errors_logged: set[str] = set()


def log_once(kind: str, message: str, *args: Any) -> None:
    """A noisy failure is logged once per kind, then only counted."""
    if kind not in _errors_logged:
        _errors_logged.add(kind)
        log.exception(message, *args)

