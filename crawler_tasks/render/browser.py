"""Render one page in headless Chromium, every byte it loads coming through our fetcher.

Why this shape: the fetch stage owns politeness (one connection per host, the host's
delay, robots.txt, private-address refusal, body caps). A browser that opened its own
connections would break all of it. So every request Chromium makes is intercepted
(``context.route("**/*")``) and answered from the caller's ``fetch(url, resource_type)``
callback, or aborted; the callback runs on the rendering thread while the caller's
host thread waits for the render, so the host turn is never shared. As a second wall,
Chromium is started with a proxy whose name never resolves and loopback un-bypassed:
a request that escaped interception (WebSocket, service worker, prefetch, WebRTC)
fails inside the browser instead of reaching a server. Service workers are blocked,
WebSockets answered by a mock that closes at once.

Bounds: a render deadline (``timeout_s``; checked before every subresource fetch, and
a watchdog kills the browser if a page wedges it, e.g. ``while(true){}``), at most
``max_requests`` subresources, a fresh browser context per host or after
``pages_per_context`` pages, the browser relaunched after ``pages_per_browser``
renders or when it crashed.

Process lifetime: Playwright runs Chromium under its node driver, talking over a pipe;
the driver exits when our end of its stdin closes (this process died, even by
SIGKILL) and Chromium exits when the pipe to the driver closes (both checked in
tests/test_render.py). ``close()`` also kills Chromium's process group (Playwright
starts it as a group leader), found by a marker switch on its command line.

Threads: Playwright's sync objects belong to the thread that made them, so a
``Renderer`` is confined to one thread (checked; ``RenderPool`` runs renderers on
their own threads and is safe to call from any number of host threads).

Policy: ``render`` never raises for anything a page does; ``Rendered.error`` says
what went wrong and ``html`` holds what the DOM had by then (may be "").
"""
from __future__ import annotations

import concurrent.futures
import logging
import os
import queue
import signal
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import sync_playwright

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, Page, Playwright, Request, Route, WebSocketRoute

    from crawler_tasks.fetch.http import FetchResult
    from crawler_tasks.settings import Settings

log = logging.getLogger(__name__)

# fetch(url, resource_type) -> the answer to give the page, or None to refuse the request
FetchFn = Callable[[str, str], "FetchResult | None"]

LAUNCH_ARGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
    "--disable-crash-reporter", "--disable-breakpad", "--mute-audio",
    # anything that escapes interception goes to a proxy that does not exist
    "--proxy-server=http://render-no-network.invalid:9", "--proxy-bypass-list=<-loopback>",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
)
# images, fonts, media and styles change no text or link of the DOM but each costs a
# fetch (and a host delay); the rest are channels we do not serve.
DEFAULT_BLOCKED_TYPES = frozenset({"image", "media", "font", "stylesheet", "texttrack", "eventsource",
                                   "websocket", "manifest", "other"})
# not passed on to the page: connection-level, or wrong for a decoded body
DROP_HEADERS = frozenset({"connection", "keep-alive", "proxy-connection", "proxy-authenticate",
                          "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade",
                          "content-encoding", "content-length", "set-cookie", "alt-svc",
                          "strict-transport-security"})
SETTLE_S = 0.3          # after "load": the page is done once no request was seen for this long
WATCHDOG_GRACE_S = 5.0  # a render past its deadline by this much kills the browser
_MARKER = "--crawler-render-id="


@dataclass(slots=True)
class Exchange:
    """One request the page made. ``outcome``: fetched, document (the caller's page),
    refused (the callback said no), blocked-type, method (not GET), scheme, budget,
    deadline, or error:<what>."""

    url: str
    resource_type: str
    status: int | None
    outcome: str


@dataclass(slots=True)
class Rendered:
    url: str
    html: str = ""                      # the DOM after scripts ran (page.content())
    exchanges: list[Exchange] = field(default_factory=list)
    elapsed_s: float = 0.0
    error: str | None = None            # "timeout", "crash: ...", "unavailable: ..."

    @property
    def fetched(self) -> int:
        return sum(1 for e in self.exchanges if e.outcome == "fetched")


@dataclass(slots=True)
class _Job:
    url: str
    fetch: FetchFn
    document: FetchResult | None
    deadline: float                     # time.monotonic()
    max_requests: int
    blocked_types: frozenset[str]
    exchanges: list[Exchange] = field(default_factory=list)
    requested: int = 0                  # subresources the callback was asked for
    pending: int = 0
    last_activity: float = 0.0


class Renderer:
    """One headless Chromium, used from one thread at a time (the thread that first
    called ``render``). Launched lazily; ``close()`` ends it for good."""

    def __init__(self, executable_path: str, timeout_s: float = 15.0, max_requests: int = 50,
                 pages_per_context: int = 20, pages_per_browser: int = 200,
                 blocked_types: frozenset[str] = DEFAULT_BLOCKED_TYPES, user_agent: str | None = None) -> None:
        self.executable_path = executable_path
        self.timeout_s = timeout_s
        self.max_requests = max_requests
        self.pages_per_context = pages_per_context
        self.pages_per_browser = pages_per_browser
        self.blocked_types = blocked_types
        self.user_agent = user_agent
        self._owner: int | None = None
        self._pw: Playwright | None = None
        self._browser: Browser | None = None
        self._context: BrowserContext | None = None
        self._context_host = ""
        self._context_pages = 0
        self._browser_pages = 0
        self._marker = ""
        self._job: _Job | None = None
        self._closed = False
        self.launches = 0

    @classmethod
    def from_settings(cls, settings: Settings, executable_path: str) -> Renderer:
        return cls(executable_path, timeout_s=settings.RENDER_TIMEOUT_S, max_requests=settings.RENDER_MAX_REQUESTS,
                   pages_per_context=settings.RENDER_PAGES_PER_CONTEXT,
                   pages_per_browser=settings.RENDER_PAGES_PER_BROWSER,
                   blocked_types=frozenset(settings.RENDER_BLOCK_TYPES), user_agent=settings.USER_AGENT)

    # --- the one public operation ---------------------------------------------------------

    def render(self, url: str, fetch: FetchFn, document: FetchResult | None = None) -> Rendered:
        """Load ``url`` with every request answered by ``fetch`` (the main document by
        ``document`` when given, so a page already fetched is not fetched again)."""
        self._check_thread()
        started = time.monotonic()
        out = Rendered(url=url)
        if self._closed:
            out.error = "unavailable: renderer closed"
            return out
        job = _Job(url=url, fetch=fetch, document=document, deadline=started + self.timeout_s,
                   max_requests=self.max_requests, blocked_types=self.blocked_types, exchanges=out.exchanges)
        watchdog = threading.Timer(self.timeout_s + WATCHDOG_GRACE_S, self._kill_browser)
        watchdog.daemon = True
        page: Page | None = None
        try:
            context = self._context_for(urlsplit(url).hostname or "")
            page = context.new_page()
            self._job = job
            watchdog.start()
            out.error = self._load(page, job)
            out.html = page.content()
        except PlaywrightError as exc:  # a dead or killed browser: relaunched on the next render
            out.error = out.error or f"crash: {_short(exc)}"
            self._drop_browser()
        finally:
            watchdog.cancel()
            self._job = None
            if page is not None:
                try:
                    page.close()
                except PlaywrightError:
                    self._drop_browser()
        out.elapsed_s = time.monotonic() - started
        return out

    def close(self) -> None:
        """Close the browser and stop the driver; Chromium's process group is killed too."""
        self._closed = True
        self.rest()

    def rest(self) -> None:
        """Close the browser and stop the driver until the next render launches them."""
        self._drop_browser()
        if self._pw is not None:
            try:
                self._pw.stop()
            except PlaywrightError as exc:
                log.debug("playwright stop: %s", exc)
            self._pw = None

    @property
    def browser_pid(self) -> int | None:
        """Chromium's main process (None when no browser is running)."""
        return _find_marked(self._marker) if self._marker else None

    # --- loading --------------------------------------------------------------------------

    def _load(self, page: Page, job: _Job) -> str | None:
        try:
            page.goto(job.url, wait_until="load", timeout=_ms(job.deadline))
        except PlaywrightTimeout:
            return "timeout"
        except PlaywrightError as exc:  # the document itself failed (refused, aborted)
            if not page.is_closed() and self._browser is not None and self._browser.is_connected():
                return f"load: {_short(exc)}"
            raise
        job.last_activity = max(job.last_activity, time.monotonic())
        while time.monotonic() < job.deadline:  # scripts may still be fetching content
            if job.pending == 0 and time.monotonic() - job.last_activity >= SETTLE_S:
                return None
            page.wait_for_timeout(50)
        return "timeout"

    def _on_route(self, route: Route, request: Request) -> None:
        job = self._job
        url, rtype = request.url, request.resource_type
        if job is None:
            _abort(route)
            return
        job.pending += 1
        job.last_activity = time.monotonic()
        try:
            self._answer(job, route, request, url, rtype)
        finally:
            job.pending -= 1
            job.last_activity = time.monotonic()

    def _answer(self, job: _Job, route: Route, request: Request, url: str, rtype: str) -> None:
        def refuse(outcome: str, status: int | None = None) -> None:
            job.exchanges.append(Exchange(url, rtype, status, outcome))
            _abort(route)

        if job.document is not None and request.is_navigation_request() and request.frame.parent_frame is None:
            result, job.document = job.document, None
            job.exchanges.append(Exchange(url, rtype, result.status, "document"))
            _fulfill(route, result)
            return
        if urlsplit(url).scheme not in ("http", "https"):
            return refuse("scheme")
        if request.method != "GET":
            return refuse("method")
        if rtype in job.blocked_types:
            return refuse("blocked-type")
        if time.monotonic() >= job.deadline:
            return refuse("deadline")
        if job.requested >= job.max_requests:
            return refuse("budget")
        job.requested += 1
        try:
            answer = job.fetch(url, rtype)
        except Exception as exc:  # noqa: BLE001 - the callback's bug must not wedge the page
            log.warning("render fetch callback failed for %s: %s", url, exc)
            return refuse(f"error:{type(exc).__name__}")
        if answer is None:
            return refuse("refused")
        if answer.status is None:
            return refuse(f"error:{answer.error_kind or 'no answer'}")
        job.exchanges.append(Exchange(url, rtype, answer.status, "fetched"))
        _fulfill(route, answer)

    # --- browser and contexts -------------------------------------------------------------

    def _context_for(self, host: str) -> BrowserContext:
        """A fresh context per host (no cookies or storage cross sites) or every
        ``pages_per_context`` pages; a new browser every ``pages_per_browser``."""
        if self._browser is None or not self._browser.is_connected() or self._browser_pages >= self.pages_per_browser:
            self._launch()
        assert self._browser is not None
        if self._context is None or self._context_host != host or self._context_pages >= self.pages_per_context:
            if self._context is not None:
                self._context.close()
            context = self._browser.new_context(service_workers="block", accept_downloads=False,
                                                java_script_enabled=True, user_agent=self.user_agent)
            context.route("**/*", self._on_route)
            context.route_web_socket("**/*", _close_websocket)
            self._context, self._context_host, self._context_pages = context, host, 0
        self._context_pages += 1
        self._browser_pages += 1
        return self._context

    def _launch(self) -> None:
        self._drop_browser()
        if self._pw is None:
            self._pw = sync_playwright().start()
        self._marker = uuid.uuid4().hex
        self._browser = self._pw.chromium.launch(executable_path=self.executable_path, headless=True,
                                                 args=[*LAUNCH_ARGS, _MARKER + self._marker],
                                                 handle_sigint=False, handle_sigterm=False, handle_sighup=False)
        self._browser_pages = 0
        self.launches += 1
        log.info("render: launched %s (pid %s)", self.executable_path, self.browser_pid)

    def _drop_browser(self) -> None:
        """Close context and browser, then make sure the process group is gone."""
        pid = self.browser_pid
        for closable in (self._context, self._browser):
            if closable is not None:
                try:
                    closable.close()
                except PlaywrightError as exc:
                    log.debug("render close: %s", exc)
        self._context = self._browser = None
        self._context_host = ""
        if pid is not None:
            _kill_group(pid)
        self._marker = ""

    def _kill_browser(self) -> None:
        """Watchdog (another thread): a wedged page makes every pending call fail."""
        pid = self.browser_pid
        if pid is not None:
            log.warning("render: %s past its deadline, killing the browser", self._job.url if self._job else "?")
            _kill_group(pid)

    def _check_thread(self) -> None:
        me = threading.get_ident()
        if self._owner is None:
            self._owner = me
        elif self._owner != me:
            raise RuntimeError("a Renderer is used from one thread only (use RenderPool)")


class RenderPool:
    """``size`` renderers on their own threads; ``render`` may be called from any
    thread and blocks until done. The callback runs on a render thread while the
    caller waits. A render still queued after ``queue_wait_s`` is given up; a renderer
    with no job for ``idle_s`` closes its browser (the next job launches it again)."""

    def __init__(self, make: Callable[[], Renderer], size: int = 1, queue_wait_s: float = 30.0,
                 idle_s: float = 60.0) -> None:
        self._jobs: queue.Queue[tuple[concurrent.futures.Future[Rendered], str, FetchFn, Any] | None] = queue.Queue()
        self.queue_wait_s = queue_wait_s
        self.idle_s = idle_s
        self._threads = [threading.Thread(target=self._worker, args=(make,), name=f"render-{i}", daemon=True)
                         for i in range(size)]
        for thread in self._threads:
            thread.start()

    def render(self, url: str, fetch: FetchFn, document: FetchResult | None = None) -> Rendered:
        future: concurrent.futures.Future[Rendered] = concurrent.futures.Future()
        self._jobs.put((future, url, fetch, document))
        waited = time.monotonic()
        while not future.running() and not future.done():
            if time.monotonic() - waited > self.queue_wait_s and future.cancel():
                return Rendered(url=url, error="unavailable: all renderers busy")
            time.sleep(0.01)
        return future.result()

    def close(self) -> None:
        for _ in self._threads:
            self._jobs.put(None)
        for thread in self._threads:
            thread.join(timeout=30)

    def _worker(self, make: Callable[[], Renderer]) -> None:
        renderer = make()
        try:
            while True:
                try:
                    item = self._jobs.get(timeout=self.idle_s)
                except queue.Empty:
                    renderer.rest()
                    continue
                if item is None:
                    break
                future, url, fetch, document = item
                if not future.set_running_or_notify_cancel():
                    continue
                try:
                    future.set_result(renderer.render(url, fetch, document))
                except Exception as exc:  # noqa: BLE001 - render() does not raise; a bug reaches the caller
                    future.set_exception(exc)
        finally:
            renderer.close()


def _fulfill(route: Route, result: FetchResult) -> None:
    headers: dict[str, str] = {}
    for name, value in result.headers:
        key = name.lower()
        if key in DROP_HEADERS:
            continue
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    try:
        route.fulfill(status=result.status or 200, headers=headers, body=result.content)
    except PlaywrightError as exc:  # page gone, or a status Chromium refuses
        log.debug("render fulfill %s: %s", result.url, exc)
        _abort(route)


def _abort(route: Route) -> None:
    try:
        route.abort("blockedbyclient")
    except PlaywrightError as exc:  # the page is already gone
        log.debug("render abort: %s", exc)


def _close_websocket(ws: WebSocketRoute) -> None:
    ws.close(code=1008, reason="no sockets while rendering")


def _ms(deadline: float) -> float:
    return max(1.0, (deadline - time.monotonic()) * 1000.0)


def _short(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__


def _find_marked(marker: str) -> int | None:
    """The process whose command line carries our marker switch (Linux /proc)."""
    needle = (_MARKER + marker).encode()
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return None
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if needle in f.read().split(b"\0"):
                    return pid
        except OSError:
            continue
    return None


def _kill_group(pid: int) -> None:
    """SIGKILL Chromium and, when it leads its group (Playwright starts it so), its
    zygote and renderers with it."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
