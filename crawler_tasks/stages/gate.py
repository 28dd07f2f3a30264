"""The URL gate: the one way into the frontier.

Links, sitemap entries and sitemap indexes, robots.txt ``Sitemap:`` lines, redirect
targets, canonicals and seeds all pass ``UrlGate.admit``: normalization (which refuses
control characters and anything that is not http(s)), then the URL filters (scope,
depth, extensions, length, traps), then the host's learned URL rules and trap shapes
(``dedup.rules``: a variant becomes the spelling already seen), each refusal counted as
``filter/<reason>``. A URL that a learned rule drops or respells is also handed back
with the rule and its evidence, for its record.
"""
from __future__ import annotations

from crawler_tasks.counters import Counters, bump
from crawler_tasks.dedup.rules import RuleDrop, UrlRules
from crawler_tasks.frontier import Discovered
from crawler_tasks.records import EntryKind
from crawler_tasks.settings import Settings
from crawler_tasks.urls import DEFAULT_SESSION_PARAMS, DEFAULT_TRACKING_PARAMS, host_key, normalize_url
from crawler_tasks.urls.filters import UrlFilter


def drop_params(settings: Settings) -> frozenset[str]:
    """Query parameters normalization drops: the settings' list, else urls' defaults."""
    return frozenset(p.lower() for p in settings.DROP_PARAMS) or (DEFAULT_TRACKING_PARAMS | DEFAULT_SESSION_PARAMS)


class UrlGate:
    """The one way into the frontier: normalize, filter, give a priority."""

    def __init__(self, settings: Settings, rules: UrlRules | None = None) -> None:
        self.settings = settings
        self.filter = UrlFilter(settings)
        self.drop = drop_params(settings)
        self.rules = rules   # learned per-host URL rules and trap shapes (dedup/rules.py)

    def admit(self, raw: str | None, depth: int, counters: Counters, *, base: str | None = None,
              hops: int = 0, check_depth: bool = True, priority: int | None = None,
              kind: EntryKind = EntryKind.PAGE, force: bool = False, normalized: bool = False,
              drops: list[RuleDrop] | None = None) -> Discovered | None:
        """A URL ready for the URL-seen test, or None (counted by reason). ``normalized``:
        the URL comes from this crawler's own parser, which normalized it with the same
        rules (links of a record; the task boundary checked they are printable http(s)),
        so it is not normalized twice. A URL dropped or respelled by a learned rule is
        appended to ``drops``."""
        url = raw if normalized else (normalize_url(raw, base, drop_params=self.drop) if raw else None)
        if not url:
            if raw:
                bump(counters, "filter/malformed")
            return None
        reason = self.filter.reason(url, depth, check_depth=check_depth, check_extension=kind != EntryKind.SITEMAP)
        if reason is not None:
            bump(counters, f"filter/{reason}")
            return None
        level = min(depth, self.settings.PRIORITY_LEVELS - 1) if priority is None else priority
        # a normalized URL is scheme://authority/path...: its authority is its politeness key
        host = url.split("/", 3)[2] if normalized else host_key(url)
        if self.rules is not None and not force and not hops:   # the host's learned spelling
            rewritten = self.rules.judge(url, host, counters, depth, drops)
            if rewritten is None:
                return None
            url = rewritten
        return Discovered(url=url, host=host, depth=depth, priority=level, hops=hops, kind=kind, force=force)

    def normalize(self, href: str, base: str | None = None) -> str | None:
        return normalize_url(href, base, drop_params=self.drop)

