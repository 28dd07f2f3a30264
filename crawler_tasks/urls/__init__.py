"""URLs: one normalizer (``normalize``) and the crawl's URL filters (``filters``).

``normalize_url(href, base)`` is the public entry point; ``Resolver(base).link(href)``
is the same normalization for the many links of one page.
"""
from crawler_tasks.urls.normalize import (
    DEFAULT_SESSION_PARAMS,
    DEFAULT_TRACKING_PARAMS,
    MAX_LINK_CHARS,
    Resolver,
    host_key,
    normalize_url,
)

__all__ = [
    "DEFAULT_SESSION_PARAMS", "DEFAULT_TRACKING_PARAMS", "MAX_LINK_CHARS", "Resolver", "host_key",
    "normalize_url",
]
