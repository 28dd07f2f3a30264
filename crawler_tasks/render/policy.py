"""Which fetched pages get rendered, from the RENDER* settings (pure: no browser).

Off as a whole when RENDER=never, when no Chromium is found, or when Playwright is
not installed; each of the last two is said once in the log. The per-host budget
(RENDER_MAX_PER_HOST) is counted per worker process: an approximate cap that needs no
shared state, which is enough to keep one app-shell site from eating the browsers.
"""
from __future__ import annotations

import atexit
import importlib.util
import logging
import os
import shutil
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

from crawler_tasks.render.detect import needs_render
from crawler_tasks.settings import Settings

if TYPE_CHECKING:
    from crawler_tasks.render.browser import RenderPool

log = logging.getLogger(__name__)

HTML_TYPES = ("text/html", "application/xhtml+xml")
MAX_COUNTED_HOSTS = 100_000   # per-host render counts kept (least recent forgotten)


class RenderPolicy:
    """``reason(...)`` says why a page is to be rendered (and charges its host's
    budget), or None; ``pool()`` builds the browsers when rendering is on."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.executable = _usable_chromium(settings)
        self.enabled = self.executable is not None
        self._hosts = tuple(h.lower().strip(".") for h in settings.RENDER_HOSTS)
        self._counts: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()
        self._pool: RenderPool | None = None

    def reason(self, host: str, content_type: str, html: bytes | str,
               text_chars: int | None = None, n_links: int | None = None, mode: str | None = None) -> str | None:
        """"host" (a RENDER_HOSTS host), "always" (RENDER=always, or ``mode``, the job's
        rule for the host, says so) or the app-shell reason of detect.needs_render; None:
        take the page as fetched (``mode`` "never": always)."""
        if not self.enabled or content_type.split(";")[0].strip().lower() not in HTML_TYPES or mode == "never":
            return None
        host = host.lower().strip(".")
        if any(host == h or host.endswith("." + h) for h in self._hosts):
            why: str | None = "host"
        elif (mode or self.settings.RENDER) == "always":
            why = "always"
        else:
            why = needs_render(html, text_chars, n_links)
        if why is None or not self._charge(host):
            return None
        return why

    def pool(self) -> RenderPool | None:
        """The process's renderers, started on first use and closed at exit (None when
        rendering is off)."""
        if self.executable is None:
            return None
        with self._lock:
            if self._pool is None:
                from crawler_tasks.render.browser import Renderer, RenderPool

                path, settings = self.executable, self.settings
                self._pool = RenderPool(lambda: Renderer.from_settings(settings, path),
                                        size=settings.RENDER_BROWSERS, queue_wait_s=settings.RENDER_TIMEOUT_S,
                                        idle_s=settings.RENDER_IDLE_S)
                atexit.register(self._pool.close)
            return self._pool

    def _charge(self, host: str) -> bool:
        cap = self.settings.RENDER_MAX_PER_HOST
        with self._lock:
            used = self._counts.pop(host, 0)
            self._counts[host] = used + 1 if not cap or used < cap else used
            while len(self._counts) > MAX_COUNTED_HOSTS:
                self._counts.popitem(last=False)
        return not cap or used < cap


def chromium_path(configured: str = "") -> str | None:
    """The Chromium to drive: the configured path, else ``chromium`` on PATH, else
    /usr/bin/chromium; None if none is executable."""
    for candidate in (configured,) if configured else (shutil.which("chromium"), "/usr/bin/chromium"):
        if candidate and os.access(candidate, os.X_OK) and os.path.isfile(candidate):
            return candidate
    return None


def _usable_chromium(settings: Settings) -> str | None:
    if settings.RENDER == "never":
        return None
    path = chromium_path(settings.CHROMIUM_PATH)
    if path is None:
        log.warning("rendering off: no Chromium at %s (set CHROMIUM_PATH or RENDER=never)",
                    settings.CHROMIUM_PATH or "PATH or /usr/bin/chromium")
        return None
    if importlib.util.find_spec("playwright") is None:
        log.warning("rendering off: the playwright package is not installed (pip install -r requirements.txt)")
        return None
    return path
