"""Render app-shell pages in headless Chromium, every request through our fetcher.

``RenderPolicy`` (which pages; no browser import) and ``needs_render`` are here; the
browser side (``Renderer``, ``RenderPool``, ``Rendered``) is ``render.browser``, which
needs Playwright.
"""
from __future__ import annotations

from crawler_tasks.render.detect import needs_render
from crawler_tasks.render.policy import RenderPolicy, chromium_path

__all__ = ["RenderPolicy", "chromium_path", "needs_render"]
