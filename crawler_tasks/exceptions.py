"""Domain errors of the crawler.

Policy: errors about one URL or one response are *recorded* on that URL's record
(``error`` field, ``error/<kind>`` counter) and never raised out of a task; only
errors that make the whole crawl impossible (bad configuration, Redis gone) are
raised to the operator.
"""
from __future__ import annotations


class CrawlerError(Exception):
    """Base class of the crawler's own errors."""


class ConfigError(CrawlerError):
    """A setting, flag or seed file cannot be used; the message says which and why."""


class FetchError(CrawlerError):
    """A fetch failed; ``kind`` is the short counter name (``timeout``, ``connect``...)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
