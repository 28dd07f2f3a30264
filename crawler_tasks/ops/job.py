"""A crawl job written down: one TOML file that says what ``manage.py crawl`` flags and
``CRAWLER_*`` variables say, so that a crawl can be reviewed, versioned and run again.

The file maps onto the settings (``crawler_tasks/settings.py``, whose names stay the one
vocabulary): named sections for what an operator sets most (seeds, scope, limits,
politeness, rendering, recrawl, output), ``[settings]`` for any other setting by its
name, and ``[[sites]]`` for per-site rules (``urls/sites.py``, carried by the ``SITES``
setting). Layers, weakest first: defaults, ``CRAWLER_*`` variables, the job file, command-line
flags. Relative paths in the file (``seeds_file``, ``out``) are read from the file's
folder, so a job runs the same from any working directory.

Errors name the file, the line and the key, one line each ("crawl.toml:14:
limits.max_pages must be an integer, got 'lots'"); an unknown key names the closest known
one. ``tomllib`` gives no positions, so lines come from a scan of the text's table headers
and ``key =`` lines (enough for the plain tables a job uses).

The effective job (file, flags and defaults merged) is written back as TOML to
``OUT/job.toml`` and into each WARC file's ``warcinfo`` record (``output.warc``): what
ran, whatever produced it. Its ``[settings]`` lists every setting that is not its
default, passwords removed; its ``[[sites]]``, the per-site rules (``urls/sites.py``).
"""
from __future__ import annotations

import difflib
import json
import re
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from crawler_tasks.connection import redact
from crawler_tasks.exceptions import ConfigError
from crawler_tasks.output.jsonl import JOB_FILE
from crawler_tasks.runtime.livejob import LIVE
from crawler_tasks.settings import Settings
from crawler_tasks.urls.sites import KEYS as SITE_KEYS
from crawler_tasks.urls.sites import parse_sites, site_from

__all__ = ["JOB_FILE", "ApplyPlan", "Job", "effective_job", "history_name", "plan_apply", "read_job"]


# section -> key -> setting; each key's type is its setting's
SECTIONS: dict[str, dict[str, str]] = {
    "scope": {"allow_domains": "ALLOWED_DOMAINS", "block_domains": "BLOCKED_DOMAINS", "include": "INCLUDE_PATTERNS",
              "exclude": "EXCLUDE_PATTERNS", "max_depth": "MAX_DEPTH", "allow_private": "ALLOW_PRIVATE",
              "skip_extensions": "SKIP_EXTENSIONS"},
    "limits": {"max_pages": "MAX_PAGES", "max_seconds": "MAX_SECONDS", "max_pages_per_host": "MAX_PAGES_PER_HOST",
               "max_body_bytes": "MAX_BODY_BYTES"},
    "politeness": {"min_delay": "MIN_DELAY_S", "obey_robots": "OBEY_ROBOTS", "per_ip": "PER_IP_POLITENESS",
                   "delay_factor": "DELAY_FACTOR"},
    "rendering": {"mode": "RENDER"},
    "recrawl": {"continuous": "CONTINUOUS", "min_interval": "RECRAWL_MIN_S", "max_interval": "RECRAWL_MAX_S"},
    "output": {"text_mode": "TEXT_MODE"},
}
TOP = {"seeds": "", "seeds_file": "", "out": "OUT_DIR", "user_agent": "USER_AGENT"}
SECRET = re.compile(r"PASSWORD|SECRET|TOKEN", re.IGNORECASE)
_HEADER = re.compile(r"^\s*\[\s*([A-Za-z0-9_.\-]+)\s*\]")
_ARRAY = re.compile(r"^\s*\[\[\s*([A-Za-z0-9_.\-]+)\s*\]\]")
_KEY = re.compile(r"^\s*([A-Za-z0-9_\-]+)\s*=")


@dataclass(frozen=True, slots=True)
class Job:
    """A job file read and checked: the settings it sets, its seeds, where it came from."""
    path: Path
    overrides: dict[str, Any]
    seeds: list[str]


def _lines(text: str) -> dict[tuple[str, str], int]:
    """(table, key) -> line number, for the messages ("" is the top table)."""
    out: dict[tuple[str, str], int] = {}
    table = ""
    arrays: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if array := _ARRAY.match(line):   # [[sites]]: sites[0], sites[1] ...
            arrays[array[1]] = arrays.get(array[1], -1) + 1
            table = f"{array[1]}[{arrays[array[1]]}]"
            out.setdefault((table, ""), number)
            out.setdefault((array[1], ""), number)
        elif header := _HEADER.match(line):
            table = header[1]
            out.setdefault((table, ""), number)
        elif key := _KEY.match(line):
            out.setdefault((table, key[1]), number)
    return out


def _closest(name: str, known: list[str]) -> str:
    match = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""


_DEFAULTS = Settings()


def _kind(setting: str) -> type:
    value = getattr(_DEFAULTS, setting)
    return tuple if isinstance(value, tuple) else type(value)


def _check(value: Any, setting: str, where: str) -> Any:
    """The value as its setting's type, or a ConfigError naming ``where``."""
    kind = _kind(setting)
    shown = repr(value)[:80]
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where} must be true or false, got {shown}")
    if kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{where} must be an integer, got {shown}")
    if kind is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"{where} must be a number, got {shown}")
    if kind is tuple:
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise ConfigError(f"{where} must be a list of strings, got {shown}")
    if isinstance(value, str):
        return value
    raise ConfigError(f"{where} must be a string, got {shown}")


def read_job(path: str | Path) -> Job:
    """Read and check a job file; ConfigError with file:line: for anything wrong in it."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the job file: {exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        found = re.search(r"\(at line (\d+), column \d+\)", str(exc))
        raise ConfigError(f"{path}:{found[1] if found else 1}: not TOML: {str(exc).split(' (at line')[0]}") from None
    lines = _lines(text)

    def at(table: str, key: str = "") -> str:
        return f"{path}:{lines.get((table, key), lines.get((table, ''), 1))}"

    overrides: dict[str, Any] = {}
    seeds: list[str] = []
    for key, value in data.items():
        if key in SECTIONS:
            if not isinstance(value, dict):
                raise ConfigError(f"{at('', key)}: {key} must be a table ([{key}])")
            for name, item in value.items():
                setting = SECTIONS[key].get(name)
                if setting is None:
                    raise ConfigError(f"{at(key, name)}: unknown key {name!r} in [{key}]"
                                      + _closest(name, list(SECTIONS[key])))
                overrides[setting] = _check(item, setting, f"{at(key, name)}: {key}.{name}")
        elif key == "settings":
            if not isinstance(value, dict):
                raise ConfigError(f"{at('', key)}: settings must be a table ([settings])")
            names = [f.name for f in fields(Settings)]
            for name, item in value.items():
                if name not in names:
                    raise ConfigError(f"{at(key, name)}: unknown setting {name!r}" + _closest(name, names))
                overrides[name] = _check(item, name, f"{at(key, name)}: settings.{name}")
        elif key == "seeds":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{at('', key)}: seeds must be a list of URLs, got {repr(value)[:80]}")
            seeds += value
        elif key == "seeds_file":
            if not isinstance(value, str):
                raise ConfigError(f"{at('', key)}: seeds_file must be a path, got {repr(value)[:80]}")
            from crawler_tasks.ops.runner import read_seeds_file

            seeds += read_seeds_file(str(path.resolve().parent / value))
        elif key in TOP:
            where = f"{at('', key)}: {key}"
            overrides[TOP[key]] = _check(value, TOP[key], where)
        elif key == "sites":
            overrides["SITES"] = _sites(value, at)
        else:
            raise ConfigError(f"{at('', key)}: unknown key {key!r}" + _closest(key, [*TOP, *SECTIONS, "settings"]))
    if "OUT_DIR" in overrides:
        overrides["OUT_DIR"] = str(path.resolve().parent / overrides["OUT_DIR"])
    for setting, place in (("INCLUDE_PATTERNS", ("scope", "include")), ("EXCLUDE_PATTERNS", ("scope", "exclude"))):
        for i, pattern in enumerate(overrides.get(setting, ())):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ConfigError(f"{at(*place)}: scope.{place[1]}[{i}]: {pattern[:200]!r} is not a regular "
                                  f"expression: {exc}") from None
    _matching_nothing(overrides, seeds, at)
    try:
        Settings.from_env({}, **overrides)   # what the settings themselves refuse (a negative delay ...)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return Job(path, overrides, seeds)


def _matching_nothing(overrides: dict[str, Any], seeds: list[str], at: Callable[..., str]) -> None:
    """A rule that can match nothing is a mistake, said as one: include patterns none of
    the seeds passes (the crawl would fetch nothing), a site outside allow_domains or
    inside block_domains (no URL of it is ever crawled)."""
    include = [re.compile(p) for p in overrides.get("INCLUDE_PATTERNS", ())]
    if include and seeds and not any(p.search(url) for url in seeds for p in include):
        raise ConfigError(f"{at('scope', 'include')}: scope.include matches none of the seeds: "
                          "the crawl would fetch nothing")
    allowed = overrides.get("ALLOWED_DOMAINS", ())
    blocked = overrides.get("BLOCKED_DOMAINS", ())
    for i, site in enumerate(parse_sites(overrides.get("SITES", "")).sites):
        name = (urlsplit(site.match).hostname or "") if site.is_prefix else site.match
        if allowed and not any(name == d or name.endswith("." + d) for d in allowed):
            raise ConfigError(f"{at(f'sites[{i}]', 'match')}: sites[{i}]: {site.match!r} is outside "
                              "scope.allow_domains: the rule matches nothing")
        if any(name == d or name.endswith("." + d) for d in blocked):
            raise ConfigError(f"{at(f'sites[{i}]', 'match')}: sites[{i}]: {site.match!r} is inside "
                              "scope.block_domains: the rule matches nothing")


def _sites(value: Any, at: Callable[..., str]) -> str:
    """The ``[[sites]]`` tables as the SITES setting (JSON), each checked (urls/sites.py)."""
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ConfigError(f"{at('sites')}: sites must be tables ([[sites]])")
    for i, item in enumerate(value):
        try:
            site_from(item)
        except ValueError as exc:
            key = next((k for k in item if str(exc).startswith((k, f"unknown key {k!r}"))), "")
            message = str(exc)
            if message.startswith("unknown key"):
                message += _closest(key, list(SITE_KEYS))
            raise ConfigError(f"{at(f'sites[{i}]', key)}: sites[{i}]: {message}") from None
    try:
        return json.dumps(value)
    except (TypeError, ValueError) as exc:   # a TOML date or time in a rule
        raise ConfigError(f"{at('sites')}: sites: {exc}") from None


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, tuple | list):
        return "[" + ", ".join(map(_toml, value)) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml(v)}" for k, v in value.items()) + "}"
    return json.dumps(str(value), ensure_ascii=False)   # a JSON string is a TOML basic string


def effective_job(settings: Settings, seeds: list[str]) -> str:
    """The job that runs, as TOML: its seeds, every section's keys with the values in
    force, and each other setting that is not its default (passwords removed)."""
    out = ["# the effective job of this crawl: file, flags and defaults merged", f"seeds = {_toml(seeds)}",
           f"user_agent = {_toml(settings.USER_AGENT)}", f"out = {_toml(settings.OUT_DIR)}", ""]
    shown = {"OUT_DIR", "USER_AGENT", "SITES"}
    for section, keys in SECTIONS.items():
        out.append(f"[{section}]")
        for key, setting in keys.items():
            out.append(f"{key} = {_toml(getattr(settings, setting))}")
            shown.add(setting)
        out.append("")
    rest = [f for f in fields(Settings) if f.name not in shown and getattr(settings, f.name) != getattr(_DEFAULTS, f.name)]
    out.append("[settings]")
    for f in rest:
        value = getattr(settings, f.name)
        if SECRET.search(f.name):
            continue
        out.append(f"{f.name} = {_toml(redact(value) if isinstance(value, str) and '://' in value else value)}")
    for site in json.loads(settings.SITES) if settings.SITES.strip() else []:
        out += ["", "[[sites]]", *(f"{k} = {_toml(v)}" for k, v in site.items())]
    return "\n".join(out) + "\n"


@dataclass(frozen=True, slots=True)
class ApplyPlan:
    """What ``job apply`` changes on a running crawl, and what it refuses (with why)."""
    applied: dict[str, Any]
    refused: list[str]


def plan_apply(job: Job, running: Settings, seeds: list[str]) -> ApplyPlan:
    """The job's settings that differ from the running crawl's (its start, with the live
    job overlaid): those a running crawl can take (``runtime.livejob.LIVE``), and the
    others refused, each with its reason. ``seeds``: the crawl's seeds."""
    applied: dict[str, Any] = {}
    refused: list[str] = []
    for name, value in job.overrides.items():
        now = getattr(running, name)
        if value == now or name == "OUT_DIR":
            continue
        if name in LIVE:
            applied[name] = value
        else:
            refused.append(f"{name}: fixed while the crawl runs (it started with {_toml(now)[:80]}); stop it and "
                           "`crawl --resume` to change it")
    added = [url for url in job.seeds if url not in seeds]
    if added:
        refused.append(f"seeds: {len(added)} new (first {added[0][:100]!r}): add them with `manage.py seed`")
    return ApplyPlan(applied, refused)


def history_name(version: int) -> str:
    """The file name a version of the job keeps in OUT/job-history/."""
    return f"v{version:04d}-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}.toml"
