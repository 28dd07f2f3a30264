"""RFC 9309 robots.txt parsing and matching.

Pure module: no I/O, no Redis, no Celery. ``parse_robots`` turns the body of a
robots.txt into a ``RobotsRules`` that answers "may this agent fetch this URL?"
exactly as RFC 9309 says, and like Google's reference parser (robotstxt, C++)
where the RFC is silent, because that parser is what site owners test against.

Decisions worth knowing (each has a test):

* Lines end at CR, LF or CRLF; a UTF-8 byte order mark (or a prefix of one) at
  the very start is skipped; a line is cut at a NUL byte and after 16,663 bytes
  (Google's 2083 * 8 line buffer); ``#`` starts a comment anywhere.
* Keys are case-insensitive and, as in Google's parser, matched by prefix with
  its typo list (``useragent``, ``user agent``, ``dissallow``, ``site-map``...).
  A missing colon is accepted when key and value are the only two words
  (``Disallow /x``); unlike Google, a known key followed by whitespace and one
  word wins over a colon inside that word (``Sitemap http://x/s.xml``).
* A group is one or more user-agent lines followed by rules; only an
  allow/disallow line (even an empty one) closes the run of user-agent lines,
  so blank lines, ``Sitemap``, ``Crawl-delay`` and unknown lines do not.
  Rules before the first user-agent line are ignored.
* A user-agent *line value* is reduced to its leading ``[A-Za-z_-]`` run
  (``FooBot/1.2`` -> ``FooBot``, ``Foo Bar`` -> ``Foo``); ``*`` (or ``*``
  followed by whitespace) is the global group. Matching is case-insensitive and
  exact on the token. All groups naming the agent are merged; the ``*`` groups
  apply only when none does; with neither, everything is allowed.
* The agent asked about may be a product token (``simbot``) or a User-Agent
  value (``simbot/1.0 (+http://x)``, ``simbot (+http://x)``), reduced to its
  token. Anything else (``Foo Bar``, ``Foobot*``) is not a product token and,
  as in Google's matcher, names no group: only ``*`` applies to it.
* Longest pattern (in octets, after normalisation) wins; on a tie allow wins.
  Empty values add no rule. A value that starts with neither ``/`` nor ``*``
  is kept as written, so it can never match (every path starts with ``/``),
  which is what Google's matcher does.
* ``*`` matches any run of characters, a final ``$`` anchors the end and any
  other ``$`` is literal. Matching is greedy-leftmost over the literal pieces
  (linear scans with ``str.find``), so no pattern can backtrack badly.
* Paths and patterns are normalised alike before comparing (RFC 9309 2.2.2):
  ``%XX`` of an unreserved character is decoded, other ``%xx`` get upper-case
  hex, and non-ASCII (as UTF-8 octets), controls, space and the characters
  that RFC 3986 forbids in a URI are percent-encoded. Reserved characters are
  never decoded (``%2F`` stays distinct from ``/``). Per RFC 9309 2.2.3 a
  literal ``*`` or ``$`` in the URL is the same as ``%2A``/``%24``, so a
  pattern can match them verbatim with ``%2A``/``%24``.
* Google's ``index.htm`` rule: ``Allow: /dir/index.html`` also allows
  ``/dir/`` (as if ``Allow: /dir/$`` were written on the same line).
* ``/robots.txt`` itself is always allowed.
* ``Crawl-delay`` (not in RFC 9309) is a non-negative decimal number in the
  applying group(s); invalid values are ignored and, across merged groups, the
  first valid one in file order wins.
* Only the first ``MAX_ROBOTS_BYTES`` are parsed; if the cut falls inside a
  line, that partial line is dropped, because a truncated ``Allow`` would
  allow more than the site owner wrote.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from operator import itemgetter
from typing import NamedTuple, cast

__all__ = [
    "MAX_ROBOTS_BYTES",
    "RobotsRules",
    "Rule",
    "Verdict",
    "parse_robots",
    "product_token",
]

#: RFC 9309 section 2.5: parse at least 500 KiB; we parse exactly that much.
MAX_ROBOTS_BYTES = 500 * 1024

# Google's parser keeps at most 2083 * 8 - 1 bytes of a line (C buffer + NUL).
_MAX_LINE_BYTES = 2083 * 8 - 1

# ASCII whitespace as C's isspace() sees it (what Google strips).
_WS = b" \t\n\v\f\r"
_WS_STR = " \t\n\v\f\r"

_BOM = b"\xef\xbb\xbf"

_LINE_SPLIT = re.compile(rb"\r\n|\r|\n")
_BLANK = re.compile(rb"[ \t]")

_UA_KEYS = (b"user-agent", b"useragent", b"user agent")
_ALLOW_KEYS = (b"allow",)
_DISALLOW_KEYS = (b"disallow", b"dissallow", b"dissalow", b"disalow", b"diasllow", b"disallaw")
_SITEMAP_KEYS = (b"sitemap", b"site-map")
_CRAWL_DELAY_KEYS = (b"crawl-delay", b"crawldelay", b"crawl delay", b"crawl_delay")
_ALL_KEYS = _UA_KEYS + _ALLOW_KEYS + _DISALLOW_KEYS + _SITEMAP_KEYS + _CRAWL_DELAY_KEYS

_TOKEN = re.compile(r"[A-Za-z_-]+")
_TOKEN_B = re.compile(rb"[A-Za-z_-]*")
_DELAY = re.compile(rb"[0-9]+(?:\.[0-9]*)?|\.[0-9]+")

# RFC 3986 unreserved + reserved: the only characters left literal.
_URI_OK = rb"A-Za-z0-9\-._~!$&'()*+,;=:@/?\[\]"
_URI_OK_BYTES = bytes(c for c in range(128) if re.match(rb"[" + _URI_OK + rb"]", bytes((c,))))
_NEEDS_NORM = re.compile(r"[^" + _URI_OK.decode() + r"]")
_NORM_B = re.compile(rb"%([0-9A-Fa-f]{2})|[^" + _URI_OK + rb"]")
_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_PATH_START = re.compile(r"[/?;]")

_sort_key = itemgetter(0)

# Compiled-pattern modes.
_PREFIX, _EXACT, _GLOB = 0, 1, 2

# A glob's data: (pieces between the *s, anchored by $, the longest piece).
_GlobData = tuple[tuple[str, ...], bool, str]


class _Entry(NamedTuple):
    """A compiled rule; a tuple so that sorting by ``key`` stays a C-level item lookup."""

    key: tuple[int, int, int]   # priority order (see _compile)
    mode: int                   # _PREFIX, _EXACT or _GLOB
    data: str | _GlobData       # the literal for prefix and exact rules, the glob's data
    allow: bool
    pattern: str
    line: int
    raw: bytes

# Bound on the per-agent caches (agents are few; this only stops abuse).
_CACHE_MAX = 512


def _norm_repl(m: re.Match[bytes]) -> bytes:
    hexdigits = m.group(1)
    if hexdigits is not None:
        value = int(hexdigits, 16)
        if value in _UNRESERVED:
            return bytes((value,))
        return b"%" + hexdigits.upper()
    return b"%%%02X" % m.group(0)[0]


def _normalize_bytes(raw: bytes) -> str:
    """Percent-normalise octets so equivalent spellings compare equal."""
    if not raw.translate(None, _URI_OK_BYTES):
        return raw.decode("ascii")
    return _NORM_B.sub(_norm_repl, raw).decode("ascii")


def _normalize_pattern(raw: bytes) -> str:
    """Normalise a rule value; a ``$`` that is not last becomes ``%24``."""
    pattern = _normalize_bytes(raw)
    if "$" in pattern[:-1]:
        pattern = pattern[:-1].replace("$", "%24") + pattern[-1]
    return pattern


def _normalize_path(path: str) -> str:
    """Normalise a URL path+query; literal ``*``/``$`` become ``%2A``/``%24``."""
    if not path.isascii() or _NEEDS_NORM.search(path) is not None:
        path = _normalize_bytes(path.encode("utf-8", "surrogatepass"))
    if "*" in path:
        path = path.replace("*", "%2A")
    if "$" in path:
        path = path.replace("$", "%24")
    return path


def _path_of(url: str) -> str:
    """Path, params and query of ``url`` (no fragment), always starting with ``/``.

    Same rules as Google's GetPathParamsQuery, so "//host/p", "host/p", "/p?q"
    and "http://host/p?q#f" all give the path the site owner meant.
    """
    start = 2 if url.startswith("//") else 0
    early = _PATH_START.search(url, start)
    proto = url.find("://", start)
    if proto != -1 and early is not None and early.start() < proto:
        proto = -1
    proto_end = start if proto == -1 else proto + 3
    found = _PATH_START.search(url, proto_end)
    if found is None:
        return "/"
    path_start = found.start()
    hash_pos = url.find("#", start)
    if hash_pos != -1 and hash_pos < path_start:
        return "/"
    path = url[path_start:] if hash_pos == -1 else url[path_start:hash_pos]
    return path if path[0] == "/" else "/" + path


def product_token(user_agent: str) -> str:
    """The RFC 9309 product token of a User-Agent string (its leading ``[A-Za-z_-]`` run).

    ``"simbot/1.0 (+http://example.com/bot)"`` -> ``"simbot"``. The token stops at
    the first other character, exactly as user-agent lines in robots.txt are
    reduced, so both sides of the comparison are cut the same way.
    """
    if not isinstance(user_agent, str):
        return ""
    m = _TOKEN.match(user_agent.lstrip(_WS_STR))
    return m.group() if m else ""


def _agent_key(agent: object) -> str:
    """Lower-case token used to pick groups; ``""`` means "only ``*`` applies".

    A bare token is used as is; a User-Agent header value (``token/version ...``
    or ``token (comment)``) gives its product token. Anything else (``"Foo Bar"``,
    ``"Foobot*"``) is not a product token and, like in Google's matcher, names no
    group.
    """
    if not isinstance(agent, str):
        return ""
    s = agent.strip(_WS_STR)
    m = _TOKEN.match(s)
    if m is None:
        return ""
    token = m.group()
    rest = s[len(token):]
    if not rest or rest[0] == "/" or rest.lstrip(_WS_STR).startswith("("):
        return token.lower()
    return ""


@dataclass(frozen=True, slots=True)
class Rule:
    """One allow/disallow line as it takes part in matching."""

    kind: str  # "allow" or "disallow"
    pattern: str  # normalised pattern; its length is the rule's priority
    line: int  # 1-based line in the file (0 for synthetic rules)
    raw: str = ""  # the value as written in the file


@dataclass(frozen=True, slots=True)
class Verdict:
    """Why a URL is allowed or not, for operators reading logs."""

    allowed: bool
    rule: Rule | None  # the deciding rule; None when no rule matched
    group: tuple[str, ...]  # user-agent values of the group(s) applied; () if none
    group_lines: tuple[int, ...]  # their line numbers
    path: str  # normalised path+query that was matched
    agent: str  # product token used to pick the group ("" = none, only "*")

    @property
    def reason(self) -> str:
        """One-line human summary."""
        if self.path == "/robots.txt":
            return "/robots.txt is always allowed"
        if self.rule is None:
            where = f"group {', '.join(self.group)}" if self.group else "no group applies"
            return f"allowed: no rule matches ({where})"
        verb = "allowed" if self.allowed else "disallowed"
        return f"{verb} by line {self.rule.line}: {self.rule.kind}: {self.rule.pattern}"


class _Group:
    """One group as written: its user-agent lines, rules and crawl delays."""

    __slots__ = ("agent_lines", "agents", "delays", "is_global", "rules", "tokens")

    def __init__(self) -> None:
        self.agents: list[str] = []
        self.agent_lines: list[int] = []
        self.tokens: set[str] = set()
        self.is_global = False
        # (line, is_allow, normalised pattern, value as written)
        self.rules: list[tuple[int, bool, str, bytes]] = []
        self.delays: list[float] = []


def _compile(line: int, is_allow: bool, pattern: str, raw: bytes) -> _Entry:
    """The matcher's entry for one rule.

    The sort key orders by priority: longest pattern first, allow before
    disallow on a tie (RFC 9309 2.2.2), then file order for a stable explain().
    """
    anchored = pattern.endswith("$")
    body = pattern[:-1] if anchored else pattern
    data: str | _GlobData
    if "*" not in body:
        mode, data = (_EXACT if anchored else _PREFIX), body
    else:
        pieces = tuple(body.split("*"))
        mode, data = _GLOB, (pieces, anchored, max(pieces, key=len))
    key = (-len(pattern), 0 if is_allow else 1, line)
    return _Entry(key, mode, data, is_allow, pattern, line, raw)


class _Resolved:
    """The merged rules that apply to one agent token, indexed for matching."""

    __slots__ = (
        "agent_lines",
        "agents",
        "delay",
        "exact",
        "glob_lengths",
        "globs",
        "lengths",
        "prefixes",
    )

    def __init__(self, rules: list[tuple[int, bool, str, bytes]], agents: tuple[str, ...],
                 agent_lines: tuple[int, ...], delay: float | None) -> None:
        self.prefixes: dict[str, _Entry] = {}
        self.exact: dict[str, _Entry] = {}
        self.globs: dict[str, list[_Entry]] = {}
        entries = [_compile(*rule) for rule in rules]
        entries.sort(key=_sort_key)
        for entry in entries:
            data = entry.data
            if not isinstance(data, str):  # a glob (mode _GLOB)
                self.globs.setdefault(data[0][0], []).append(entry)
            else:
                # Same pattern twice: the first in sort order (allow) wins.
                (self.prefixes if entry.mode == _PREFIX else self.exact).setdefault(data, entry)
        self.lengths = tuple(sorted({len(p) for p in self.prefixes}, reverse=True))
        self.glob_lengths = tuple(sorted({len(p) for p in self.globs}, reverse=True))
        self.agents = agents
        self.agent_lines = agent_lines
        self.delay = delay


def _glob_match(pieces: tuple[str, ...], anchored: bool, path: str) -> bool:
    """Match ``p0*p1*...*pn`` (anchored at the start, and at the end if ``anchored``).

    Placing each middle piece at its leftmost occurrence is optimal, so this is
    a handful of ``str.find`` scans: no backtracking whatever the pattern.
    """
    first = pieces[0]
    if not path.startswith(first):
        return False
    pos = len(first)
    for piece in pieces[1:-1]:
        found = path.find(piece, pos)
        if found == -1:
            return False
        pos = found + len(piece)
    last = pieces[-1]
    if anchored:
        return len(path) - len(last) >= pos and path.endswith(last)
    return path.find(last, pos) != -1


def _first_match(resolved: _Resolved, path: str) -> _Entry | None:
    """The deciding rule entry for ``path``: the matching one with the best sort key.

    Plain prefixes and exact (``$``) patterns are dictionary look-ups (one per
    distinct length); wildcard patterns are narrowed to those whose leading
    literal is a prefix of the path and tried in priority order, only while
    they could still beat the best match so far.
    """
    best = None
    size = len(path)
    prefixes = resolved.prefixes
    for length in resolved.lengths:
        if length <= size:
            best = prefixes.get(path[:length])
            if best is not None:
                break
    exact = resolved.exact.get(path)
    if exact is not None and (best is None or exact.key < best.key):
        best = exact
    if not resolved.glob_lengths:
        return best
    candidates: list[_Entry] = []
    globs = resolved.globs
    for length in resolved.glob_lengths:
        if length <= size:
            found = globs.get(path[:length])
            if found is not None:
                candidates.extend(found)
    if len(resolved.glob_lengths) > 1:
        candidates.sort(key=_sort_key)
    for entry in candidates:
        if best is not None and entry.key > best.key:
            break
        pieces, anchored, needle = cast(_GlobData, entry.data)  # only globs are indexed here
        if needle in path and _glob_match(pieces, anchored, path):
            return entry
    return best


def _rule_of(entry: _Entry | None) -> Rule | None:
    if entry is None:
        return None
    return Rule("allow" if entry.allow else "disallow", entry.pattern, entry.line,
                entry.raw.decode("utf-8", "replace"))


class RobotsRules:
    """Parsed robots.txt: answers per agent, caching the merged rules per token."""

    __slots__ = ("_by_agent", "_by_key", "_groups", "_sitemaps")

    def __init__(self, groups: list[_Group] | None = None, sitemaps: list[str] | None = None) -> None:
        self._groups: list[_Group] = groups or []
        self._sitemaps: list[str] = sitemaps or []
        self._by_key: dict[str, _Resolved] = {}
        self._by_agent: dict[str, _Resolved] = {}

    @classmethod
    def allow_all(cls) -> RobotsRules:
        """Rules for an unavailable robots.txt (4xx): everything may be fetched."""
        return cls()

    @classmethod
    def disallow_all(cls) -> RobotsRules:
        """Rules for an unreachable robots.txt (5xx, network error): nothing may be fetched.

        Shows up in explain() as ``Disallow: /`` at line 0 of a ``*`` group.
        """
        group = _Group()
        group.agents.append("*")
        group.agent_lines.append(0)
        group.is_global = True
        group.rules.append((0, False, "/", b"/"))
        return cls([group])

    @property
    def sitemaps(self) -> list[str]:
        """Every Sitemap URL in the file, in order (they belong to no group)."""
        return list(self._sitemaps)

    def _resolve(self, agent: str) -> _Resolved:
        cached = self._by_agent.get(agent) if isinstance(agent, str) else None
        if cached is not None:
            return cached
        key = _agent_key(agent)
        resolved = self._by_key.get(key)
        if resolved is None:
            resolved = self._build(key)
            if len(self._by_key) < _CACHE_MAX:
                self._by_key[key] = resolved
        if isinstance(agent, str) and len(self._by_agent) < _CACHE_MAX:
            self._by_agent[agent] = resolved
        return resolved

    def _build(self, key: str) -> _Resolved:
        groups = [g for g in self._groups if key in g.tokens] if key else []
        if not groups:
            groups = [g for g in self._groups if g.is_global]
        rules = [r for g in groups for r in g.rules]
        delay = next((g.delays[0] for g in groups if g.delays), None)
        agents = tuple(a for g in groups for a in g.agents)
        lines = tuple(n for g in groups for n in g.agent_lines)
        return _Resolved(rules, agents, lines, delay)

    def is_allowed(self, url: str, agent: str) -> bool:
        """May ``agent`` (product token or full User-Agent) fetch ``url`` (absolute or path)?"""
        path = _normalize_path(_path_of(url if isinstance(url, str) else str(url)))
        if path == "/robots.txt":
            return True
        entry = _first_match(self._resolve(agent), path)
        return entry is None or entry.allow

    def explain(self, url: str, agent: str) -> Verdict:
        """The decision for ``url`` with the rule and group behind it."""
        path = _normalize_path(_path_of(url if isinstance(url, str) else str(url)))
        resolved = self._resolve(agent)
        token = _agent_key(agent)
        if path == "/robots.txt":
            return Verdict(True, None, resolved.agents, resolved.agent_lines, path, token)
        entry = _first_match(resolved, path)
        allowed = entry is None or entry.allow
        return Verdict(allowed, _rule_of(entry), resolved.agents, resolved.agent_lines, path, token)

    def crawl_delay(self, agent: str) -> float | None:
        """Crawl-delay in seconds from the group(s) that apply to ``agent``, if any."""
        return self._resolve(agent).delay

    def __repr__(self) -> str:
        rules = sum(len(g.rules) for g in self._groups)
        return (f"RobotsRules(groups={len(self._groups)}, rules={rules}, "
                f"sitemaps={len(self._sitemaps)})")


def _to_bytes(text: object) -> bytes:
    if isinstance(text, str):
        return text.encode("utf-8", "surrogatepass")
    if isinstance(text, (bytes, bytearray, memoryview)):
        return bytes(text)
    return b""


def _limit(data: bytes) -> bytes:
    """First MAX_ROBOTS_BYTES, without a line the cut fell inside; BOM (prefix) removed."""
    if len(data) > MAX_ROBOTS_BYTES:
        whole = data[MAX_ROBOTS_BYTES] in b"\r\n"
        data = data[:MAX_ROBOTS_BYTES]
        if not whole:
            data = data[:max(data.rfind(b"\n"), data.rfind(b"\r")) + 1]
    skip = 0
    while skip < 3 and skip < len(data) and data[skip] == _BOM[skip]:
        skip += 1
    return data[skip:] if skip else data


def parse_robots(text: str | bytes) -> RobotsRules:
    """Parse a robots.txt body (bytes as fetched, or str); never raises."""
    groups: list[_Group] = []
    sitemaps: list[str] = []
    current: _Group | None = None
    in_rules = False
    ws = _WS
    blank = _BLANK

    for number, line in enumerate(_LINE_SPLIT.split(_limit(_to_bytes(text))), 1):
        if not line:
            continue
        if len(line) > _MAX_LINE_BYTES:
            line = line[:_MAX_LINE_BYTES]
        cut = line.find(b"\x00")
        if cut != -1:
            line = line[:cut]
        cut = line.find(b"#")
        if cut != -1:
            line = line[:cut]
        line = line.strip(ws)
        if not line:
            continue
        # Google's "key: value" split. The colon may be missing when key and
        # value are the only two words ("Disallow /x"); unlike Google we also
        # take "Sitemap http://x/s.xml" or "Disallow /a:b" that way (a known
        # key, whitespace, one word) instead of splitting at the value's colon.
        sep = line.find(b":")
        gap = blank.search(line)
        if gap is not None and (sep == -1 or (
                gap.start() < len(line[:sep].rstrip(ws))
                and line[:gap.start()].lower().startswith(_ALL_KEYS))):
            key, value = line[:gap.start()].rstrip(ws), line[gap.start():].lstrip(b" \t")
            if blank.search(value) is not None:
                continue
            value = value.strip(ws)
        elif sep != -1:
            key, value = line[:sep].rstrip(ws), line[sep + 1:].strip(ws)
        else:
            continue
        if not key:
            continue
        key = key.lower()

        if key.startswith(_UA_KEYS):
            if current is None or in_rules:
                current = _Group()
                groups.append(current)
                in_rules = False
            current.agents.append(value.decode("utf-8", "replace"))
            current.agent_lines.append(number)
            if value[:1] == b"*" and (len(value) == 1 or value[1:2] in ws):
                current.is_global = True
            else:
                token = _TOKEN_B.match(value).group()  # type: ignore[union-attr]
                if token:
                    current.tokens.add(token.decode("ascii").lower())
        elif key.startswith(_DISALLOW_KEYS) or key.startswith(_ALLOW_KEYS):
            if current is None:
                continue  # rules outside any group are ignored
            in_rules = True
            if not value:
                continue  # empty value: no rule, but it still ends the agent lines
            is_allow = key.startswith(_ALLOW_KEYS)
            pattern = _normalize_pattern(value)
            current.rules.append((number, is_allow, pattern, value))
            if is_allow:
                slash = pattern.rfind("/")
                if slash != -1 and pattern.startswith("/index.htm", slash):
                    current.rules.append((number, True, pattern[:slash + 1] + "$", value))
        elif key.startswith(_SITEMAP_KEYS):
            if value:
                sitemaps.append(value.decode("utf-8", "replace"))
        elif key.startswith(_CRAWL_DELAY_KEYS) and current is not None and _DELAY.fullmatch(value):
            delay = float(value)
            if math.isfinite(delay):
                current.delays.append(delay)
    return RobotsRules(groups, sitemaps)
