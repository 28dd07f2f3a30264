"""Tests for crawler_tasks.robots.rules: RFC 9309 semantics, Google-compatible leniency.

The case tables restate, in our own words, what RFC 9309 and Google's reference
parser (robotstxt) specify; each row is (robots.txt, agent, url, allowed).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crawler_tasks.robots.rules import (
    MAX_ROBOTS_BYTES,
    RobotsRules,
    Rule,
    Verdict,
    parse_robots,
    product_token,
)


def allowed(robots: str | bytes, agent: str, url: str) -> bool:
    return parse_robots(robots).is_allowed(url, agent)


def case(robots, agent, url, expected, id):
    return pytest.param(robots, agent, url, expected, id=id)


def run_table(robots, agent, url, expected):
    rules = parse_robots(robots)
    assert rules.is_allowed(url, agent) is expected
    assert rules.explain(url, agent).allowed is expected
    if isinstance(robots, str):  # the same file fetched as bytes decides the same
        assert parse_robots(robots.encode("utf-8")).is_allowed(url, agent) is expected


FOO_DISALLOW_ALL = "user-agent: FooBot\ndisallow: /\n"

GROUPS = (
    "allow: /foo/bar/\n"
    "\n"
    "user-agent: FooBot\n"
    "disallow: /\n"
    "allow: /x/\n"
    "user-agent: BarBot\n"
    "disallow: /\n"
    "allow: /y/\n"
    "\n"
    "\n"
    "allow: /w/\n"
    "user-agent: BazBot\n"
    "\n"
    "user-agent: FooBot\n"
    "allow: /z/\n"
    "disallow: /\n"
)

# RFC 9309 section 5.1, verbatim (the trailing "EOF" line is part of the figure
# and must be ignored as an unparseable line).
RFC_EXAMPLE = (
    "User-Agent: *\n"
    "Disallow: *.gif$\n"
    "Disallow: /example/\n"
    "Allow: /publications/\n"
    "\n"
    "User-Agent: foobot\n"
    "Disallow:/\n"
    "Allow:/example/page.html\n"
    "Allow:/example/allowed.gif\n"
    "\n"
    "User-Agent: barbot\n"
    "User-Agent: bazbot\n"
    "Disallow: /example/page.html\n"
    "\n"
    "User-Agent: quxbot\n"
    "\n"
    "EOF\n"
)

# RFC 9309 section 5.2.
RFC_LONGEST = (
    "User-Agent: foobot\n"
    "Allow: /example/page/\n"
    "Disallow: /example/page/disallowed.gif\n"
)

RFC_CASES = [
    case(RFC_EXAMPLE, "otherbot", "https://example.com/example/x", False, "rfc5.1-star-example"),
    case(RFC_EXAMPLE, "otherbot", "https://example.com/publications/a", True, "rfc5.1-star-publications"),
    case(RFC_EXAMPLE, "otherbot", "https://example.com/img/a.gif", False, "rfc5.1-star-gif"),
    case(RFC_EXAMPLE, "otherbot", "https://example.com/img/a.gif?x=1", True, "rfc5.1-star-gif-anchored"),
    case(RFC_EXAMPLE, "otherbot", "https://example.com/publications/a.gif", True,
         "rfc5.1-star-longer-allow-beats-gif"),
    case(RFC_EXAMPLE, "otherbot", "https://example.com/other", True, "rfc5.1-star-unmatched"),
    case(RFC_EXAMPLE, "foobot", "https://example.com/example/page.html", True, "rfc5.1-foobot-page"),
    case(RFC_EXAMPLE, "foobot", "https://example.com/example/allowed.gif", True, "rfc5.1-foobot-gif"),
    case(RFC_EXAMPLE, "foobot", "https://example.com/example/other", False, "rfc5.1-foobot-other"),
    case(RFC_EXAMPLE, "foobot", "https://example.com/publications/", False, "rfc5.1-foobot-not-star"),
    case(RFC_EXAMPLE, "FooBot", "https://example.com/", False, "rfc5.1-foobot-case"),
    case(RFC_EXAMPLE, "barbot", "https://example.com/example/page.html", False, "rfc5.1-barbot-page"),
    case(RFC_EXAMPLE, "barbot", "https://example.com/example/other", True, "rfc5.1-barbot-other"),
    case(RFC_EXAMPLE, "bazbot", "https://example.com/example/page.html", False, "rfc5.1-bazbot-shared"),
    case(RFC_EXAMPLE, "bazbot", "https://example.com/a.gif", True, "rfc5.1-bazbot-not-star"),
    case(RFC_EXAMPLE, "quxbot", "https://example.com/example/page.html", True, "rfc5.1-quxbot-empty"),
    case(RFC_LONGEST, "foobot", "https://example.com/example/page/disallowed.gif", False,
         "rfc5.2-longest-disallow"),
    case(RFC_LONGEST, "foobot", "https://example.com/example/page/other.gif", True,
         "rfc5.2-longest-allow"),
]

GROUP_CASES = [
    case("", "FooBot", "", True, "empty-file"),
    case(FOO_DISALLOW_ALL, "", "", True, "empty-agent-names-no-group"),
    case(FOO_DISALLOW_ALL, "FooBot", "", False, "empty-url-is-root"),
    case(GROUPS, "FooBot", "http://foo.bar/x/b", True, "groups-foo-x"),
    case(GROUPS, "FooBot", "http://foo.bar/z/d", True, "groups-foo-merged-z"),
    case(GROUPS, "FooBot", "http://foo.bar/y/c", False, "groups-foo-y"),
    case(GROUPS, "BarBot", "http://foo.bar/y/c", True, "groups-bar-y"),
    case(GROUPS, "BarBot", "http://foo.bar/w/a", True, "groups-blank-lines-do-not-end-group"),
    case(GROUPS, "BarBot", "http://foo.bar/z/d", False, "groups-bar-z"),
    case(GROUPS, "BazBot", "http://foo.bar/z/d", True, "groups-baz-shares-with-foo"),
    case(GROUPS, "FooBot", "http://foo.bar/foo/bar/", False, "groups-rule-before-agent-ignored"),
    case(GROUPS, "BazBot", "http://foo.bar/foo/bar/", False, "groups-rule-before-agent-ignored-2"),
    case("User-agent: BarBot\nSitemap: https://foo.bar/sitemap\nUser-agent: *\nDisallow: /\n",
         "BarBot", "http://foo.bar/", False, "sitemap-does-not-end-group"),
    case("User-agent: FooBot\nInvalid-Unknown-Line: unknown\nUser-agent: *\nDisallow: /\n",
         "FooBot", "http://foo.bar/", False, "unknown-line-does-not-end-group"),
    case("User-agent: FooBot\nCrawl-delay: 5\nUser-agent: *\nDisallow: /\n",
         "FooBot", "http://foo.bar/", False, "crawl-delay-does-not-end-group"),
    case("User-agent: a\nDisallow:\nUser-agent: b\nDisallow: /\n",
         "a", "http://foo.bar/x", True, "empty-disallow-ends-agent-lines"),
    case("user-agent: *\nallow: /\nuser-agent: FooBot\ndisallow: /\n",
         "FooBot", "http://foo.bar/x/y", False, "specific-beats-star"),
    case("user-agent: *\nallow: /\nuser-agent: FooBot\ndisallow: /\n",
         "BarBot", "http://foo.bar/x/y", True, "star-when-unnamed"),
    case("user-agent: FooBot\nallow: /\nuser-agent: BarBot\ndisallow: /\n",
         "QuxBot", "http://foo.bar/x/y", True, "no-match-no-star-allows"),
    case("User-agent: *\nDisallow: /x/\nUser-agent: FooBot\nDisallow: /y/\n",
         "FooBot", "http://foo.bar/x/page", True, "specific-group-replaces-star"),
    case("User-agent: *\nDisallow: /\nUser-agent: FooBot\nDisallow:\n",
         "FooBot", "http://foo.bar/x", True, "specific-group-with-empty-rule"),
    case("User-agent: *\nDisallow: /\nUser-agent: FooBot\n",
         "FooBot", "http://foo.bar/x", True, "specific-group-without-rules-last"),
    case("User-agent: *\nUser-agent: FooBot\nDisallow: /private\n",
         "OtherBot", "http://foo.bar/private", False, "shared-star-and-named-group"),
    case("user-agent: ExampleBot\ndisallow: /foo\ndisallow: /bar\n\n"
         "user-agent: ExampleBot\ndisallow: /baz\n",
         "ExampleBot", "http://e.com/baz/1", False, "rfc-merge-example"),
    case("user-agent: *\ndisallow: /foo\ndisallow: /bar\n\nuser-agent: BazBot\ndisallow: /baz\n",
         "ExampleBot", "http://e.com/baz", True, "rfc-star-example"),
    case("User-agent: *\nDisallow: /a\nUser-agent: *\nDisallow: /b\n",
         "x", "/b", False, "star-groups-merged"),
    case("User-agent: * # everyone\nDisallow: /\n", "x", "/a", False, "star-with-comment"),
    case("User-agent: * bots\nDisallow: /\n", "x", "/a", False, "star-then-space-is-global"),
    case("User-agent: *bot\nDisallow: /\n", "x", "/a", True, "star-glued-is-not-global"),
]

AGENT_CASES = [
    case("User-Agent: FOO BAR\nAllow: /x/\nDisallow: /\n", "Foo", "http://foo.bar/x/y", True,
         "ua-value-upper"),
    case("User-Agent: foo bar\nAllow: /x/\nDisallow: /\n", "foo", "http://foo.bar/a/b", False,
         "ua-value-lower"),
    case("User-Agent: FoO bAr\nAllow: /x/\nDisallow: /\n", "FOO", "http://foo.bar/x/y", True,
         "ua-value-camel"),
    case("User-Agent: *\nDisallow: /\nUser-Agent: Foo Bar\nAllow: /x/\nDisallow: /\n",
         "Foo", "http://foo.bar/x/y", True, "ua-line-cut-at-space"),
    case("User-Agent: *\nDisallow: /\nUser-Agent: Foo Bar\nAllow: /x/\nDisallow: /\n",
         "Foo Bar", "http://foo.bar/x/y", False, "agent-with-space-is-not-a-token"),
    case("User-agent: Foo\nDisallow: /\n", "FooBot", "/x", True, "line-token-is-not-a-prefix"),
    case("User-agent: FooBot\nDisallow: /\n", "Foo", "/x", True, "agent-token-is-not-a-prefix"),
    case("User-agent: FooBot/1.2\nDisallow: /\n", "foobot", "/x", False, "line-version-stripped"),
    case("User-agent: FooBot\nDisallow: /\n", "FooBot/2.1 (+http://foo.bar/bot)", "/x", False,
         "full-ua-string-agent"),
    case("User-agent: FooBot\nDisallow: /\n", "FooBot (+http://foo.bar/bot)", "/x", False,
         "ua-string-with-comment-only"),
    case("User-agent: Mozilla\nDisallow: /\n",
         "Mozilla/5.0 (compatible; FooBot/2.1)", "/x", False, "ua-leading-product-counts"),
    case("User-agent: foo-bot_x\nDisallow: /\n", "FOO-BOT_X", "/x", False, "token-hyphen-underscore"),
    case("User-agent: FooBot*\nDisallow: /\n", "foobot", "/x", False, "line-trailing-star-cut"),
    case("User-agent: *\nDisallow: /\n", "ツ", "/x", False, "non-token-agent-gets-star"),
]

SYNTAX_CASES = [
    case("user-agent: FooBot\ndisallow: /\n", "FooBot", "http://foo.bar/x/y", False, "syntax-plain"),
    case("foo: FooBot\nbar: /\n", "FooBot", "http://foo.bar/x/y", True, "syntax-unknown-keys"),
    case("user-agent FooBot\ndisallow /\n", "FooBot", "http://foo.bar/x/y", False, "missing-colon"),
    case("user-agent FooBot\ndisallow /x /y\n", "FooBot", "http://foo.bar/x/y", True,
         "missing-colon-three-words-ignored"),
    case("USER-AGENT: FooBot\nALLOW: /x/\nDISALLOW: /\n", "FooBot", "http://foo.bar/a", False,
         "keys-upper"),
    case("uSeR-aGeNt: FooBot\nAlLoW: /x/\ndIsAlLoW: /\n", "FooBot", "http://foo.bar/x/y", True,
         "keys-camel"),
    case("useragent: FooBot\ndisallow: /\n", "FooBot", "/a", False, "typo-useragent"),
    case("user agent: FooBot\ndisallow: /\n", "FooBot", "/a", False, "typo-user-space-agent"),
    case("user-agent: FooBot\ndissallow: /a\n", "FooBot", "/a", False, "typo-dissallow"),
    case("user-agent: FooBot\ndissalow: /a\n", "FooBot", "/a", False, "typo-dissalow"),
    case("user-agent: FooBot\ndisalow: /a\n", "FooBot", "/a", False, "typo-disalow"),
    case("user-agent: FooBot\ndiasllow: /a\n", "FooBot", "/a", False, "typo-diasllow"),
    case("user-agent: FooBot\ndisallaw: /a\n", "FooBot", "/a", False, "typo-disallaw"),
    case("user-agent: FooBot\ndisalow /a\n", "FooBot", "/a", False, "typo-and-missing-colon"),
    case("  \t User-agent \t :  FooBot \t\nDisallow\t:\t/a  # c\n", "FooBot", "/a", False,
         "whitespace-around"),
    case("User-agent: FooBot\r\nDisallow: /a\r\n", "FooBot", "/a", False, "crlf"),
    case("User-agent: FooBot\rDisallow: /a\r", "FooBot", "/a", False, "cr-only"),
    case("User-agent: FooBot\nAllow: /b\r\nDisallow: /a\rDisallow: /c", "FooBot", "/c", False,
         "mixed-line-ends"),
    case("\ufeffUser-agent: FooBot\nDisallow: /a\n", "FooBot", "/a", False, "bom-str"),
    case(b"\xef\xbb\xbfUser-agent: FooBot\nDisallow: /a\n", "FooBot", "/a", False, "bom-bytes"),
    case(b"\xef\xbbUser-agent: FooBot\nDisallow: /a\n", "FooBot", "/a", False, "bom-partial"),
    case(b"\xef\x11\xbfUser-agent: FooBot\nDisallow: /a\n", "FooBot", "/a", True,
         "bom-broken-first-line-garbage"),
    case(b"User-agent: FooBot\n\xef\xbb\xbfDisallow: /a\n", "FooBot", "/a", True,
         "bom-mid-file-not-skipped"),
    case("# Disallow: /\nUser-agent: FooBot # me\n# only a comment\nDisallow: /quz#qux\nAllow: /\n",
         "FooBot", "http://foo.bar/quz", False, "comments"),
    case("User-agent: FooBot\nDisallow: /quz#qux\nAllow: /\n", "FooBot", "http://foo.bar/bar", True,
         "comments-value-ends-at-hash"),
    case(b"User-agent: FooBot\nDisallow: /\xff\xfe\nDisallow: /b\n", "FooBot", "/b", False,
         "invalid-utf8-tolerated"),
    case(b"User-agent: FooBot\nDisallow: /a\x00/zzz\n", "FooBot", "/a/b", False, "nul-ends-line"),
    case(b"\x00\x01\x02junk\xff\nUser-agent: FooBot\nDisallow: /a\n", "FooBot", "/a", False,
         "binary-junk-line"),
]

MATCH_CASES = [
    case("user-agent: FooBot\ndisallow: /x/\n", "FooBot", "http://foo.bar/x/y", False, "case-sensitive-lower"),
    case("user-agent: FooBot\ndisallow: /X/\n", "FooBot", "http://foo.bar/x/y", True, "case-sensitive-upper"),
    case("user-agent: FooBot\ndisallow: /x/page.html\nallow: /x/\n", "FooBot",
         "http://foo.bar/x/page.html", False, "longest-disallow"),
    case("user-agent: FooBot\nallow: /x/page.html\ndisallow: /x/\n", "FooBot",
         "http://foo.bar/x/page.html", True, "longest-allow"),
    case("user-agent: FooBot\nallow: /x/page.html\ndisallow: /x/\n", "FooBot",
         "http://foo.bar/x/", False, "longest-only-shorter-matches"),
    case("user-agent: FooBot\ndisallow: \nallow: \n", "FooBot", "http://foo.bar/x/page.html", True,
         "empty-rules"),
    case("user-agent: FooBot\ndisallow: /\nallow: /\n", "FooBot", "http://foo.bar/x", True,
         "tie-allow-wins"),
    case("user-agent: FooBot\ndisallow: /x/page.html\nallow: /x/page.html\n", "FooBot",
         "http://foo.bar/x/page.html", True, "tie-allow-wins-long"),
    case("user-agent: FooBot\ndisallow: /x\nallow: /x/\n", "FooBot", "http://foo.bar/x", False,
         "disallow-x"),
    case("user-agent: FooBot\ndisallow: /x\nallow: /x/\n", "FooBot", "http://foo.bar/x/", True,
         "allow-x-slash"),
    case("user-agent: FooBot\nallow: /page\ndisallow: /*.html\n", "FooBot",
         "http://foo.bar/page.html", False, "wildcard-longer-wins"),
    case("user-agent: FooBot\nallow: /page\ndisallow: /*.html\n", "FooBot",
         "http://foo.bar/page", True, "wildcard-not-matching"),
    case("user-agent: FooBot\nallow: /x/page.\ndisallow: /*.html\n", "FooBot",
         "http://foo.bar/x/page.html", True, "literal-longer-wins"),
    case("user-agent: FooBot\nallow: /$\ndisallow: /\n", "FooBot", "http://example.com/", True,
         "root-only-allow"),
    case("user-agent: FooBot\nallow: /$\ndisallow: /\n", "FooBot", "http://example.com/page.html", False,
         "root-only-allow-2"),
    case("user-agent: FooBot\nallow: /folder\ndisallow: /folder\n", "FooBot",
         "http://example.com/folder/page", True, "same-pattern-allow"),
    case("User-agent: FooBot\nDisallow: /foo/bar/quz\nAllow: /foo/*/qux\n", "FooBot",
         "http://foo.bar/foo/bar/quz", False, "star-middle-1"),
    case("User-agent: FooBot\nDisallow: /\nAllow: /foo/*/qux\n", "FooBot",
         "http://foo.bar/foo//qux", True, "star-matches-empty"),
    case("User-agent: FooBot\nDisallow: /\nAllow: /foo/*/qux\n", "FooBot",
         "http://foo.bar/foo/a/b/c/qux?x", True, "star-matches-slashes"),
    case("User-agent: FooBot\nDisallow: /foo/bar$\nAllow: /foo/bar/qux\n", "FooBot",
         "http://foo.bar/foo/bar", False, "dollar-anchor"),
    case("User-agent: FooBot\nDisallow: /foo/bar$\n", "FooBot", "http://foo.bar/foo/bar/", True,
         "dollar-anchor-longer-path"),
    case("User-agent: FooBot\nDisallow: /foo/bar$\n", "FooBot", "http://foo.bar/foo/bar?q", True,
         "dollar-anchor-query"),
    case("User-agent: FooBot\nDisallow: /a$b\n", "FooBot", "http://foo.bar/a$b/c", False,
         "dollar-mid-is-literal"),
    case("User-agent: FooBot\nDisallow: /a$b\n", "FooBot", "http://foo.bar/ab", True,
         "dollar-mid-is-not-anchor"),
    case("User-agent: FooBot\nDisallow: /a$$\n", "FooBot", "http://foo.bar/a$", False,
         "dollar-literal-then-anchor"),
    case("User-agent: FooBot\nDisallow: /***a**b***$\n", "FooBot", "/xxaYYb", False, "many-stars"),
    case("User-agent: FooBot\nDisallow: /***a**b***$\n", "FooBot", "/xxbYYa", True, "many-stars-order"),
    case("User-agent: FooBot\nDisallow: *\n", "FooBot", "/anything", False, "lone-star"),
    case("User-agent: FooBot\nDisallow: foo\n", "FooBot", "/foo", True, "no-leading-slash-never-matches"),
    case("User-agent: FooBot\nDisallow: /\nAllow: fish\n", "FooBot", "/fish", False,
         "no-leading-slash-allow-never-matches"),
    case("user-agent: FooBot\ndisallow: /\nallow: /fish\n", "FooBot", "http://foo.bar/fish.html?id=anything",
         True, "doc-fish-query"),
    case("user-agent: FooBot\ndisallow: /\nallow: /fish\n", "FooBot", "http://foo.bar/catfish", False,
         "doc-catfish"),
    case("user-agent: FooBot\ndisallow: /\nallow: /fish\n", "FooBot", "http://foo.bar/?id=fish", False,
         "doc-query-fish"),
    case("user-agent: FooBot\ndisallow: /\nallow: /fish*\n", "FooBot", "http://foo.bar/fishheads", True,
         "doc-fish-star"),
    case("user-agent: FooBot\ndisallow: /\nallow: /fish/\n", "FooBot", "http://foo.bar/fish", False,
         "doc-fish-slash"),
    case("user-agent: FooBot\ndisallow: /\nallow: /*.php\n", "FooBot",
         "http://foo.bar/index?f=filename.php/", True, "doc-php-in-query"),
    case("user-agent: FooBot\ndisallow: /\nallow: /*.php\n", "FooBot", "http://foo.bar/windows.PHP", False,
         "doc-php-case"),
    case("user-agent: FooBot\ndisallow: /\nallow: /*.php$\n", "FooBot", "http://foo.bar/filename.php5", False,
         "doc-php-dollar"),
    case("user-agent: FooBot\ndisallow: /\nallow: /*.php$\n", "FooBot", "http://foo.bar/folder/filename.php",
         True, "doc-php-dollar-folder"),
    case("user-agent: FooBot\ndisallow: /\nallow: /fish*.php\n", "FooBot",
         "http://foo.bar/fishheads/catfish.php?parameters", True, "doc-fish-star-php"),
    case("User-Agent: *\nAllow: /allowed-slash/index.html\nDisallow: /\n", "foobot",
         "http://foo.com/allowed-slash/", True, "index-html-is-directory"),
    case("User-Agent: *\nAllow: /allowed-slash/index.html\nDisallow: /\n", "foobot",
         "http://foo.com/allowed-slash/index.htm", False, "index-htm-not-exact"),
    case("User-Agent: *\nAllow: /allowed-slash/index.html\nDisallow: /\n", "foobot",
         "http://foo.com/allowed-slash/other", False, "index-html-only-directory"),
    case("User-agent: *\nDisallow: /\n", "x", "http://foo.bar/robots.txt", True, "robots-txt-allowed"),
    case("User-agent: *\nDisallow: /robots.txt\n", "x", "/robots.txt", True, "robots-txt-always"),
]

URL_CASES = [
    case("User-agent: *\nDisallow: /a\n", "x", "/a?q=1", False, "path-only-url"),
    case("User-agent: *\nDisallow: /a\n", "x", "//host/a", False, "scheme-relative-url"),
    case("User-agent: *\nDisallow: /a\n", "x", "host.example/a/b", False, "schemeless-url"),
    case("User-agent: *\nDisallow: /$\n", "x", "http://foo.bar", False, "no-path-is-root"),
    case("User-agent: *\nDisallow: /?\n", "x", "http://foo.bar?x", False, "query-without-path"),
    case("User-agent: *\nDisallow: /a$\n", "x", "http://foo.bar/a#frag", False, "fragment-dropped"),
    case("User-agent: *\nDisallow: /x#/a\n", "x", "http://foo.bar/a", True, "hash-starts-comment"),
    case("User-agent: *\nDisallow: /a;\n", "x", "http://foo.bar/a;p=1", False, "params-kept"),
    case("User-agent: *\nDisallow: /a/b?c=http://d.e/\n", "x", "http://www.example.com/a/b?c=http://d.e/",
         False, "url-in-query"),
    case("User-agent: *\nDisallow: /\nAllow: /foo/bar?qux=taz&baz=http://foo.bar?tar&par\n", "x",
         "http://foo.bar/foo/bar?qux=taz&baz=http://foo.bar?tar&par", True, "reserved-stay-literal"),
]

ENCODING_CASES = [
    case("User-agent: *\nDisallow: /\nAllow: /foo/bar/ツ\n", "x", "http://foo.bar/foo/bar/%E3%83%84", True,
         "utf8-pattern-encoded-url"),
    case("User-agent: *\nDisallow: /\nAllow: /foo/bar/ツ\n", "x", "http://foo.bar/foo/bar/ツ", True,
         "utf8-pattern-raw-url"),
    case("User-agent: *\nDisallow: /\nAllow: /foo/bar/%E3%83%84\n", "x", "http://foo.bar/foo/bar/ツ", True,
         "encoded-pattern-raw-url"),
    case("User-agent: *\nDisallow: /\nAllow: /foo/bar/%e3%83%84\n", "x", "http://foo.bar/foo/bar/%E3%83%84",
         True, "lowercase-hex-pattern"),
    case("User-agent: *\nDisallow: /\nAllow: /ä\n", "x", "/%c3%a4", True, "lowercase-hex-url"),
    case("User-agent: *\nDisallow: /\nAllow: /foo/bar/%62%61%7A\n", "x", "http://foo.bar/foo/bar/baz", True,
         "unreserved-decoded-pattern"),
    case("User-agent: *\nDisallow: /\nAllow: /foo/bar/baz\n", "x", "http://foo.bar/foo/bar/%62%61%7A", True,
         "unreserved-decoded-url"),
    case("User-agent: *\nDisallow: /\nAllow: /~user\n", "x", "/%7Euser", True, "tilde-unreserved"),
    case("User-agent: *\nDisallow: /a%2Fb\n", "x", "/a/b", True, "encoded-slash-distinct"),
    case("User-agent: *\nDisallow: /a%2fb\n", "x", "/a%2Fb", False, "encoded-slash-matches-itself"),
    case("User-agent: *\nDisallow: /a/b\n", "x", "/a%2Fb", True, "slash-not-encoded-slash"),
    case("User-agent: *\nDisallow: /path/file-with-a-%2A.html\n", "x",
         "https://www.example.com/path/file-with-a-*.html", False, "rfc-encoded-star"),
    case("User-agent: *\nDisallow: /path/foo-%24\n", "x", "https://www.example.com/path/foo-$", False,
         "rfc-encoded-dollar"),
    case("User-agent: *\nDisallow: /a b\n", "x", "/a%20b", False, "space-encoded"),
    case(b"User-agent: *\nDisallow: /caf\xe9\n", "x", "/caf%E9", False, "latin1-byte-encoded-as-is"),
    case("User-agent: *\nDisallow: /50%\n", "x", "/50%25", False, "stray-percent"),
]

ALL_CASES = RFC_CASES + GROUP_CASES + AGENT_CASES + SYNTAX_CASES + MATCH_CASES + URL_CASES + ENCODING_CASES


@pytest.mark.parametrize("robots, agent, url, expected", ALL_CASES)
def test_case_table(robots, agent, url, expected):
    run_table(robots, agent, url, expected)


def test_case_table_is_big_enough():
    assert len(ALL_CASES) >= 60


# --- product_token -----------------------------------------------------------

@pytest.mark.parametrize("ua, token", [
    ("simbot/1.0 (+http://example.com/bot)", "simbot"),
    ("simbot", "simbot"),
    ("SimBot", "SimBot"),
    ("Foobot-Bar", "Foobot-Bar"),
    ("Foo_Bar/2", "Foo_Bar"),
    ("Foo Bar", "Foo"),
    ("  Foobot  ", "Foobot"),
    ("Foobot*", "Foobot"),
    ("Mozilla/5.0 (compatible; ExampleBot/0.1; https://www.example.com/bot.html)", "Mozilla"),
    ("sim2bot/1", "sim"),
    ("ツ", ""),
    ("", ""),
    ("/1.0", ""),
])
def test_product_token(ua, token):
    assert product_token(ua) == token


# --- crawl-delay and sitemaps --------------------------------------------------

@pytest.mark.parametrize("robots, agent, delay", [
    ("User-agent: *\nCrawl-delay: 5\n", "x", 5.0),
    ("User-agent: *\nCrawl-delay: 0.5\n", "x", 0.5),
    ("User-agent: *\nCrawl-delay: 0\n", "x", 0.0),
    ("User-agent: *\ncrawl-delay: 2 # two\n", "x", 2.0),
    ("User-agent: *\nCrawl-delay: -1\n", "x", None),
    ("User-agent: *\nCrawl-delay: soon\n", "x", None),
    ("User-agent: *\nCrawl-delay: nan\n", "x", None),
    ("User-agent: *\nCrawl-delay: inf\n", "x", None),
    ("User-agent: *\nCrawl-delay: 1e3\n", "x", None),
    ("User-agent: *\nCrawl-delay:\n", "x", None),
    ("User-agent: *\nDisallow: /\n", "x", None),
    ("Crawl-delay: 7\nUser-agent: *\n", "x", None),
    ("User-agent: *\nCrawl-delay: 9\nUser-agent: a\nCrawl-delay: 3\nDisallow: /\n", "a", 9.0),
    ("User-agent: a\nCrawl-delay: bad\nDisallow: /\nUser-agent: a\nCrawl-delay: 4\nCrawl-delay: 8\n", "a", 4.0),
    ("User-agent: *\nCrawl-delay: 9\nUser-agent: a\nDisallow: /\n", "a", 9.0),  # one group
    ("User-agent: *\nCrawl-delay: 9\nDisallow: /x\nUser-agent: a\nDisallow: /\n", "a", None),
    ("User-agent: *\nCrawl-delay: 9\nDisallow: /x\nUser-agent: a\nDisallow: /\n", "b", 9.0),
    ("User-agent: a\nCrawl-delay: 1.5\n", "a/2.0 (+http://a)", 1.5),
])
def test_crawl_delay(robots, agent, delay):
    assert parse_robots(robots).crawl_delay(agent) == delay


def test_sitemaps_anywhere_in_order():
    robots = (
        "Sitemap: http://foo.bar/one.xml\n"
        "User-Agent: foo\n"
        "Allow: /some/path\n"
        "site-map: http://foo.bar/two.xml # comment\n"
        "User-Agent: bar\n"
        "\n"
        "sitemap http://foo.bar/three.xml\n"
        "Sitemap:\n"
    )
    rules = parse_robots(robots)
    assert rules.sitemaps == ["http://foo.bar/one.xml", "http://foo.bar/two.xml", "http://foo.bar/three.xml"]
    rules.sitemaps.append("mutating the copy changes nothing")
    assert len(rules.sitemaps) == 3
    assert parse_robots("").sitemaps == []


# --- explain -------------------------------------------------------------------

def test_explain_names_rule_and_group():
    robots = (
        "User-Agent: foo\n"          # 1
        "Allow: /some/path\n"        # 2
        "User-Agent: bar\n"          # 3
        "\n"                          # 4
        "\n"                          # 5
        "Disallow: /\n"               # 6
        "User-agent: *\n"            # 7
        "Disallow: /x\n"              # 8
    )
    for text in (robots, robots.replace("\n", "\r\n"), robots.replace("\n", "\r")):
        verdict = parse_robots(text).explain("http://foo.bar/a", "bar")
        assert verdict == Verdict(
            allowed=False, rule=Rule("disallow", "/", 6, "/"), group=("bar",), group_lines=(3,),
            path="/a", agent="bar",
        )
    rules = parse_robots(robots)
    v = rules.explain("/some/path/x", "foo")
    assert v.allowed and v.rule == Rule("allow", "/some/path", 2, "/some/path")
    assert "line 2" in v.reason
    v = rules.explain("/y", "other/1.0")
    assert v.allowed and v.rule is None and v.group == ("*",) and v.group_lines == (7,)
    assert v.agent == "other"
    v = rules.explain("/x", "other")
    assert not v.allowed and v.rule.kind == "disallow" and v.rule.line == 8
    v = rules.explain("/robots.txt", "bar")
    assert v.allowed and v.rule is None and "robots.txt" in v.reason


def test_explain_merged_groups_and_normalized_pattern():
    robots = "User-agent: A\nUser-agent: B\nDisallow: /ä\n\nUser-agent: a\nAllow: /%c3%a4/ok\n"
    v = parse_robots(robots).explain("/ä/ok", "a")
    assert v.group == ("A", "B", "a") and v.group_lines == (1, 2, 5)
    assert v.rule == Rule("allow", "/%C3%A4/ok", 6, "/%c3%a4/ok")
    v = parse_robots(robots).explain("/ä/no", "A")
    assert not v.allowed and v.rule.pattern == "/%C3%A4" and v.rule.raw == "/ä"
    assert v.path == "/%C3%A4/no"


def test_explain_without_any_group():
    v = parse_robots("User-agent: a\nDisallow: /\n").explain("/x", "b")
    assert v.allowed and v.rule is None and v.group == () and "no group" in v.reason


def test_verdict_is_frozen_and_slotted():
    v = parse_robots("").explain("/", "a")
    with pytest.raises(AttributeError):
        v.allowed = False  # type: ignore[misc]
    assert not hasattr(v, "__dict__")


def test_index_html_synthetic_rule_in_explain():
    v = parse_robots("User-Agent: *\nAllow: /d/index.html\nDisallow: /\n").explain("/d/", "x")
    assert v.allowed and v.rule == Rule("allow", "/d/$", 2, "/d/index.html")


# --- allow_all / disallow_all ----------------------------------------------------

def test_allow_all():
    rules = RobotsRules.allow_all()
    assert rules.is_allowed("http://h/anything?x", "simbot")
    assert rules.crawl_delay("simbot") is None and rules.sitemaps == []
    assert rules.explain("/a", "simbot").rule is None


def test_disallow_all():
    rules = RobotsRules.disallow_all()
    for agent in ("simbot", "simbot/1.0 (+http://x)", "", "*"):
        assert not rules.is_allowed("http://h/", agent)
        assert not rules.is_allowed("/a/b?c", agent)
    assert rules.is_allowed("/robots.txt", "simbot")  # so it can be re-fetched
    v = rules.explain("/a", "simbot")
    assert v.rule == Rule("disallow", "/", 0, "/") and v.group == ("*",)
    assert rules.crawl_delay("simbot") is None


def test_rules_pickle_round_trip():
    import pickle

    rules = parse_robots(RFC_EXAMPLE + "Sitemap: http://x/s.xml\n")
    rules.is_allowed("/", "foobot")  # populate the caches too
    copy = pickle.loads(pickle.dumps(rules))
    assert copy.sitemaps == ["http://x/s.xml"]
    for agent in ("foobot", "barbot", "other"):
        for url in ("/example/page.html", "/a.gif", "/publications/x"):
            assert copy.is_allowed(url, agent) is rules.is_allowed(url, agent)


# --- size limits -------------------------------------------------------------------

def _padded(tail_rules: str, fill_to: int) -> str:
    head = "User-agent: *\n"
    pad = fill_to - len(head)
    filler = ("#" * 99 + "\n") * (pad // 100)
    if pad % 100:
        filler += "#" * (pad % 100 - 1) + "\n"
    text = head + filler
    assert len(text) == fill_to
    return text + tail_rules


def test_only_first_500_kib_are_parsed():
    inside = "Disallow: /inside\n"
    text = _padded(inside + "Disallow: /outside\n", MAX_ROBOTS_BYTES - len(inside))
    assert len(text.encode()) > MAX_ROBOTS_BYTES
    for body in (text, text.encode()):
        rules = parse_robots(body)
        assert not rules.is_allowed("/inside", "x")
        assert rules.is_allowed("/outside", "x")


def test_line_cut_by_the_limit_is_dropped():
    # "Allow: /a" would be cut to "Allow: /": a broader allow than written.
    text = _padded("Disallow: /\nAllow: /abcdef\n", MAX_ROBOTS_BYTES - len("Disallow: /\nAllow: /"))
    rules = parse_robots(text)
    assert not rules.is_allowed("/other", "x")
    assert not rules.is_allowed("/abcdef", "x")
    assert rules.explain("/other", "x").rule.pattern == "/"


def test_long_lines_are_cut_like_google():
    max_line = 2083 * 8
    longline = "/x/" + "a" * (max_line - 3 - len("disallow: ") + 1 - 3)
    rules = parse_robots("user-agent: FooBot\ndisallow: " + longline + "/qux\n")
    assert rules.is_allowed("http://foo.bar/fux", "FooBot")
    assert not rules.is_allowed("http://foo.bar" + longline + "/fux", "FooBot")

    longline_a = "/x/" + "a" * (max_line - 3 - len("allow: ") + 1 - 3)
    longline_b = "/x/" + "b" * (max_line - 3 - len("allow: ") + 1 - 3)
    rules = parse_robots("user-agent: FooBot\ndisallow: /\n"
                         f"allow: {longline_a}/qux\nallow: {longline_b}/qux\n")
    assert not rules.is_allowed("http://foo.bar/", "FooBot")
    assert rules.is_allowed("http://foo.bar" + longline_a + "/qux", "FooBot")
    assert rules.is_allowed("http://foo.bar" + longline_b + "/fux", "FooBot")


# --- safety and speed ---------------------------------------------------------------

@pytest.mark.timeout(20)  # a hang guard: exponential backtracking would never finish
def test_no_catastrophic_backtracking():
    path = "/" + "a" * 10_000
    pattern = "/" + "*a" * 50 + "*b"
    rules = parse_robots(f"User-agent: *\nDisallow: {pattern}\nDisallow: /{'*a' * 50}*b$\n")
    for _ in range(20):
        assert rules.is_allowed(path, "x")
    assert rules.is_allowed(path + "b", "x") is False


def _big_file(size: int) -> str:
    lines = ["User-agent: simbot"]
    total, i = 0, 0
    while total < size:
        line = f"Disallow: /dir{i}/*.php$" if i % 3 == 0 else f"Allow: /page{i}/sub"
        lines.append(line)
        total += len(line) + 1
        i += 1
    return "\n".join(lines)


def test_parse_500_kib_file():
    rules = parse_robots(_big_file(MAX_ROBOTS_BYTES))
    assert not rules.is_allowed("/dir3/x.php", "simbot")


def test_is_allowed_with_1000_rules():
    text = "User-agent: simbot\n" + "\n".join(
        f"Disallow: /dir{i}/*.php$" if i % 3 == 0 else f"Allow: /page{i}/sub" for i in range(1000))
    rules = parse_robots(text)
    urls = [f"http://h/page{i}/sub/x?y={i}" for i in range(500)] + [f"/dir{i}/a.php" for i in range(500)]
    verdicts = [rules.is_allowed(url, "simbot") for url in urls]
    assert verdicts == [True] * 500 + [i % 3 != 0 for i in range(500)]
    assert not rules.is_allowed("/dir3/a.php", "simbot") and rules.is_allowed("/page1/sub", "simbot")


# --- properties ----------------------------------------------------------------------

def reference_match(pattern: str, path: str) -> bool:
    """Slow, obviously-correct matcher: the set of path positions each pattern prefix can reach."""
    anchored = pattern.endswith("$")
    body = pattern[:-1] if anchored else pattern
    positions = {0}
    for ch in body:
        if ch == "*":
            positions = set(range(min(positions), len(path) + 1))
        else:
            positions = {p + 1 for p in positions if p < len(path) and path[p] == ch}
        if not positions:
            return False
    return len(path) in positions if anchored else True


FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(st.binary(max_size=2000))
def test_parse_any_bytes_never_raises(data):
    rules = parse_robots(data)
    assert isinstance(rules.is_allowed("/", "simbot"), bool)
    rules.crawl_delay("simbot")
    assert isinstance(rules.sitemaps, list)


@FAST
@given(st.lists(st.sampled_from([
    "User-agent: *", "User-agent: simbot", "user agent simbot/1", "Disallow: /", "Allow: /a*",
    "Disallow: *$", "Disallow:", "Crawl-delay: 1", "Sitemap: x", "\ufeff", "#", "", "\x00",
    "Disallow: /%", "Allow: /%zz$", "Disallow: /ä", "dissallow /b",
]), max_size=12), st.text(max_size=40), st.text(max_size=40))
def test_structured_files_and_any_text_never_raise(lines, url, agent):
    rules = parse_robots("\r\n".join(lines))
    assert isinstance(rules.is_allowed(url, agent), bool)
    verdict = rules.explain(url, agent)
    assert verdict.allowed is rules.is_allowed(url, agent)
    assert verdict.path.startswith("/")
    rules.crawl_delay(agent)


@FAST
@given(st.text(max_size=300), st.text(max_size=300), st.text(max_size=60))
def test_is_allowed_any_text_never_raises(robots, url, agent):
    rules = parse_robots(robots)
    assert isinstance(rules.is_allowed(url, agent), bool)
    assert isinstance(rules.explain(url, agent), Verdict)
    assert isinstance(product_token(agent), str)


@FAST
@given(st.text(alphabet="ab/*", max_size=12), st.booleans(), st.text(alphabet="ab/", max_size=14))
def test_matcher_agrees_with_reference(body, anchored, tail):
    pattern = body + ("$" if anchored else "")
    path = "/" + tail
    expected = bool(pattern) and reference_match(pattern, path)
    rules = parse_robots(f"User-agent: *\nDisallow: {pattern}\n")
    assert rules.is_allowed("http://h" + path, "x") is (not expected)


@FAST
@given(st.lists(st.tuples(st.booleans(), st.text(alphabet="ab/*", min_size=1, max_size=6),
                          st.booleans()), max_size=8),
       st.text(alphabet="ab/", max_size=10))
def test_longest_match_agrees_with_reference(rules_spec, tail):
    path = "/" + tail
    lines = ["User-agent: *"]
    best = None  # (length, is_allow)
    for is_allow, body, anchored in rules_spec:
        pattern = "/" + body + ("$" if anchored else "")
        lines.append(("Allow: " if is_allow else "Disallow: ") + pattern)
        if reference_match(pattern, path):
            cand = (len(pattern), is_allow)
            best = cand if best is None else max(best, cand)
    expected = best is None or best[1]
    assert parse_robots("\n".join(lines)).is_allowed("http://h" + path, "x") is expected


@FAST
@given(st.text(max_size=30))
def test_path_normalization_is_idempotent(segment):
    # A URL whose path was already normalised decides the same as the raw one.
    rules = parse_robots("User-agent: *\nDisallow: /\nAllow: /ok" + segment.replace("#", "").replace("\n", "")
                         .replace("\r", "").replace("\x00", "") + "\n")
    raw = "/ok" + segment.replace("#", "").replace("?", "")
    normalized = rules.explain(raw, "x").path
    assert rules.explain(normalized, "x").path == normalized
    assert rules.is_allowed(normalized, "x") is rules.is_allowed(raw, "x")
