"""robots.txt of a test host, and what a robots-obeying crawler may fetch there.

Matching is the crawler's own (``crawler_tasks.robots.parse_robots``), not a
second implementation: RFC 9309 matching has subtle cases (percent-encoding
normalisation, ``$`` and ``*``, agent tokens, the 500 KiB cut) that two
implementations would answer differently, and then the crawler's end-to-end
tests would fail on the test web's bugs.  The matcher has its own case tables
in tests/test_robots.py; tests/test_testweb.py checks ``reachable()`` against
a real crawl that uses the standard library's parser.  What this module models
independently is the fetch policy: which answer to /robots.txt means which rules.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urljoin, urlsplit

from crawler_tasks.robots import RobotsRules, parse_robots
from testweb.responses import NOT_FOUND, Resp, make_resp

DEFAULT_ROBOTS_TXT = "User-agent: *\nDisallow: /private/\n"
MAX_REDIRECTS = 5  # RFC 9309 2.3.1.2: follow at least five

# What the web answers for an absolute URL: (status, header fields lower-cased,
# body), or None for a URL outside the web (unreachable).
Answer = Callable[[str], tuple[int, dict[str, str], bytes] | None]


def robots_resp(text: str | None, status: int) -> Resp:
    """What /robots.txt serves: ``text`` as text/plain with ``status``, or a 404 when None."""
    if text is None:
        return NOT_FOUND
    return make_resp(status, [("Content-Type", "text/plain; charset=utf-8")], text.encode())


def robots_rules(url: str, answer: Answer) -> RobotsRules:
    """The rules a crawler derives from fetching ``url`` (a /robots.txt), per RFC 9309 2.3.1.

    2xx: the parsed body; 4xx except 429: allow all; 429, 5xx or a redirect
    out of the web (unreachable): disallow all; more than MAX_REDIRECTS
    redirects, one without Location or to another scheme: allow all (unavailable).
    """
    for _ in range(MAX_REDIRECTS + 1):
        if urlsplit(url).scheme not in ("http", "https"):
            break
        got = answer(url)
        if got is None:
            return RobotsRules.disallow_all()
        status, fields, body = got
        if 300 <= status < 400:
            location = fields.get("location")
            if not location:
                break
            url = urljoin(url, location)
            continue
        if 200 <= status < 300:
            return parse_robots(body)
        if status >= 500 or status == 429:
            return RobotsRules.disallow_all()
        return RobotsRules.allow_all()
    return RobotsRules.allow_all()
