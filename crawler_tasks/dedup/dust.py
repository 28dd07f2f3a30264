"""Learned URL equivalence ("Do Not Crawl in the DUST", Bar-Yossef, Keidar, Schonfeld,
WWW 2007) and URL shapes for trap budgets: the pure rule logic, no Redis.

A rule maps a URL of one host to a shorter spelling of it; the family is small on
purpose, each rule a removal (so applying rules always ends, and the result is the
spelling a site's own links most likely use):

==================  ====================================================  ===============
``q:<name>``        drop every query parameter ``name``                   ``?ref=nav``
``p:<segment>``     strip the first path segment (``/print/a`` -> ``/a``)  print, amp, m
``i:<file>``        strip a trailing index file (``/d/index.html`` -> ``/d/``)
``m:<name>``        strip a path parameter (``/a;cid=7`` -> ``/a``)       ``;jsessionid=``
==================  ====================================================  ===============

Evidence comes in pairs of fetched URLs of one host with the same content (exact
fingerprint, near-duplicate simhash, or one naming the other as canonical) that one
rule relates; ``dedup.rules`` counts it and applies rules that passed the bar.

*Priors* spare each host the fetches that teach it what most hosts share. A rule is a
prior when the web is known to use it (``known_prior``: query and path parameters of
courlan's tracker list, the list trafilatura strips, less the identifiers in it that
select content; print and AMP prefixes; ``index.*`` and ``default.asp[x]`` files) or when
it is in force on several hosts (``dedup.rules``). A prior applies from a host's first
link, except on the hosts ``checks_prior`` samples: those learn it from their own pairs,
and one counter-example there withdraws it on that host. An index file is a prior only
on a host that has served a page at a directory URL (``/``, ``/d/``): whether ``/d/``
serves ``/d/index.html`` is the server's choice (a bucket of files may answer 404). No other
file is one, nor becomes one by being in force elsewhere: ``default.html`` is as often a
page of its own (Django's documentation has ``topics/auth/default.html``, which its
directory does not serve).

A URL's *shape* is its path with digit runs replaced by ``#`` plus the sorted set of
its query parameter names: ``/cal/2024/05?view=m`` -> ``/cal/#/#?view``. Calendars
and facet shops produce endless URLs of few shapes.
"""
from __future__ import annotations

import re
import zlib
from collections.abc import Iterable
from dataclasses import dataclass

from courlan.clean import TRACKERS_RE

INDEX_FILE = re.compile(r"^(index|default)\.(html?|php|aspx?|jsp|shtml|cgi)$", re.IGNORECASE)
PREFIX_SEGMENT = re.compile(r"^[A-Za-z][A-Za-z_-]{0,15}$")   # print, amp, m, mobile ...
DIGITS = re.compile(r"\d+")
NEAR_BITS = 3          # simhash distance of a near-duplicate (as dedup.nearindex)
EXACT_UNITS = 2        # evidence units of a same-fingerprint or canonical pair
NEAR_UNITS = 1         # of a near-duplicate pair: such rules need twice the pairs
RULE_KINDS = ("m", "q", "i", "p")   # the order rules are applied in
PRIOR_PREFIXES = frozenset({"print", "amp"})
INDEX_PRIOR = re.compile(r"^(index\.(html?|php|shtml|jsp|aspx?|cgi)|default\.aspx?)$", re.IGNORECASE)
# names the tracker list matches that usually select content: an id, a source, a search
CONTENT_NAMES = re.compile(r"[a-z]?id|cat_?id|source|src|kwd|keyword", re.IGNORECASE)
# the list's match must end a word of the name: ``ref``, not ``reference``
_TRACKER_WORD = re.compile(f"(?:{TRACKERS_RE.pattern})(?:(?<=_)|$|[_-])")


@dataclass(frozen=True, slots=True)
class Url:
    """A normalized URL split the way the rules need it."""
    origin: str          # scheme://authority
    path: str
    query: str

    @classmethod
    def split(cls, url: str) -> "Url | None":
        """None for anything that is not ``scheme://authority/path[?query]``."""
        scheme, sep, rest = url.partition("://")
        if not sep:
            return None
        rest = rest.split("#", 1)[0]
        slash = rest.find("/")
        if slash < 0:
            return cls(f"{scheme}://{rest.split('?', 1)[0]}", "/", rest.partition("?")[2])
        path, _, query = rest[slash:].partition("?")
        return cls(f"{scheme}://{rest[:slash]}", path, query)

    def join(self) -> str:
        return self.origin + self.path + ("?" + self.query if self.query else "")


def _param_name(pair: str) -> str:
    return pair.partition("=")[0]


def applicable(url: str) -> list[tuple[str, str]]:
    """Every (rule, rewritten URL) of the family that changes ``url``: the candidates a
    pair can confirm or refute."""
    u = Url.split(url)
    if u is None:
        return []
    out: list[tuple[str, str]] = []
    segments = u.path.split("/")
    names: set[str] = set()
    for seg in segments:
        for param in seg.split(";")[1:]:
            name = _param_name(param)
            if name and name not in names:
                names.add(name)
                out.append((f"m:{name}", _apply_one(u, "m", name).join()))
    pairs = [p for p in u.query.split("&") if p] if u.query else []
    for name in dict.fromkeys(_param_name(p) for p in pairs):
        if name:
            out.append((f"q:{name}", _apply_one(u, "q", name).join()))
    last = segments[-1].split(";")[0]
    if INDEX_FILE.match(last):
        out.append((f"i:{last}", _apply_one(u, "i", last).join()))
    if len(segments) > 2 and segments[2] and PREFIX_SEGMENT.match(segments[1]):
        out.append((f"p:{segments[1]}", _apply_one(u, "p", segments[1]).join()))
    return out


def _apply_one(u: Url, kind: str, arg: str) -> Url:
    if kind == "q":
        kept = [p for p in u.query.split("&") if p and _param_name(p) != arg]
        return Url(u.origin, u.path, "&".join(kept))
    if kind == "m":
        segs = [";".join([s.split(";")[0], *(p for p in s.split(";")[1:] if _param_name(p) != arg)])
                for s in u.path.split("/")]
        return Url(u.origin, "/".join(segs), u.query)
    if kind == "i":
        head, _, last = u.path.rpartition("/")
        return Url(u.origin, head + "/", u.query) if last.split(";")[0] == arg else u
    if kind == "p":
        segs = u.path.split("/")
        if len(segs) > 2 and segs[1] == arg and segs[2]:
            return Url(u.origin, "/" + "/".join(segs[2:]), u.query)
    return u


def apply_rules(url: str, rules: frozenset[str] | set[str]) -> str:
    """``url`` rewritten by the host's rules (unchanged when none applies). Prefix rules
    repeat (``/m/print/a``); every rule removes something, so this ends."""
    if not rules:
        return url
    u = Url.split(url)
    if u is None:
        return url
    for _ in range(4):
        before = u
        for kind in RULE_KINDS:
            for rule in rules:
                if rule[0] == kind:
                    u = _apply_one(u, kind, rule[2:])
        if u == before:
            break
    return u.join()


def candidate_rules(a: str, b: str) -> set[str]:
    """Rules that relate two URLs of one host: one rule rewrites one URL into the other,
    or both into the same URL (a parameter with another value: ``?ref=a`` / ``?ref=b``)."""
    if a == b:
        return set()
    ra, rb = dict(applicable(a)), dict(applicable(b))
    out = {r for r, t in ra.items() if t == b} | {r for r, t in rb.items() if t == a}
    out |= {r for r, t in ra.items() if r[0] == "q" and rb.get(r) == t}
    return out


def known_prior(rule: str) -> bool:
    """A rule the web is known to use (see the module doc): a prior for every host."""
    kind, name = rule[:1], rule[2:]
    if kind == "i":
        return INDEX_PRIOR.match(name) is not None
    if kind == "p":
        return name.lower() in PRIOR_PREFIXES
    if kind not in ("q", "m") or CONTENT_NAMES.fullmatch(name):
        return False
    return _TRACKER_WORD.search(name.lower()) is not None


def checks_prior(host: str, rule: str, every: int) -> bool:
    """Whether this host checks the prior by its own pairs instead of applying it: one
    host in ``every`` (a stable draw per host and rule, the same on every node)."""
    return every <= 1 or zlib.crc32(f"{rule} {host}".encode("utf-8", "surrogatepass")) % every == 0


def hamming(a: str | None, b: str | None) -> int | None:
    """Distance of two hex simhashes, None when either is missing."""
    if not a or not b:
        return None
    return bin(int(a, 16) ^ int(b, 16)).count("1")


def same_content(fp_a: str, sim_a: str | None, fp_b: str, sim_b: str | None) -> int:
    """Evidence units a pair of pages gives (EXACT_UNITS, NEAR_UNITS), 0 for a
    counter-example: other content."""
    if fp_a == fp_b:
        return EXACT_UNITS
    distance = hamming(sim_a, sim_b)
    return NEAR_UNITS if distance is not None and distance <= NEAR_BITS else 0


def shape(url: str) -> str | None:
    """Path with digits masked plus the sorted query parameter names (no origin)."""
    u = Url.split(url)
    if u is None:
        return None
    names = sorted({_param_name(p) for p in u.query.split("&") if p}) if u.query else []
    return DIGITS.sub("#", u.path) + ("?" + "&".join(names) if names else "")


def facet_shape(url: str) -> str | None:
    """One shape for every combination of two or more parameters on one path (a facet
    shop's ``?color=red&size=m``, ``?size=m&sort=asc`` ...), None for fewer."""
    u = Url.split(url)
    if u is None or not u.query:
        return None
    names = {_param_name(p) for p in u.query.split("&") if p}
    return DIGITS.sub("#", u.path) + "?&" if len(names) >= 2 else None


def numbers(url: str) -> list[int]:
    u = Url.split(url)
    if u is None:
        return []
    return [int(n) for n in DIGITS.findall(u.path + "?" + u.query)][:16]


def is_walk_step(page: str, link: str) -> bool:
    """``link`` has the page's shape and its first differing number is one step away:
    month 5 -> 6, 2024/12 -> 2025/1, ?page=2 -> 3. A calendar or pager walks this way."""
    return walks(page, [link])


def walks(page: str, links: Iterable[str]) -> bool:
    """Whether any of the links is a walk step from the page (``is_walk_step``); the
    page's shape and numbers are worked out once, not once per link."""
    page_shape = shape(page)
    if page_shape is None:
        return False
    mine: list[int] | None = None
    for link in links:
        if link == page or shape(link) != page_shape:
            continue
        if mine is None:
            mine = numbers(page)
            if not mine:
                return False
        theirs = numbers(link)
        if len(theirs) != len(mine):
            continue
        for x, y in zip(mine, theirs, strict=True):
            if x != y:
                if abs(x - y) == 1:
                    return True
                break
    return False
