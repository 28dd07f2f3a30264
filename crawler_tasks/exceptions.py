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


class MessageError(CrawlerError, ValueError):
    """A task message does not match the records schema (forged, corrupt or from another
    version); the task refuses it, logs it and counts ``error/message``."""
