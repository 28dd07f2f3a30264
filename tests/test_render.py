"""App-shell detection (pure) and rendering in a real headless Chromium whose every
request must come through the test's fetch callback (a real Fetcher with its own UA)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
import pytest

from crawler_tasks.render import RenderPolicy, chromium_path, needs_render
from crawler_tasks.settings import Settings
from tests import realpages

CHROMIUM = chromium_path()
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary (apt-get install chromium)")
FETCH_UA = "render-test-fetcher/1.0"
REPO = Path(__file__).resolve().parent.parent

# --- detection -----------------------------------------------------------------------------

CRA_SHELL = """<!doctype html><html><head><title>React App</title>
<script defer src="/static/js/main.3f2a.js"></script></head>
<body><noscript>You need to enable JavaScript to run this app.</noscript><div id="root"></div></body></html>"""
NEXT_SHELL = '<html><body><div id="__next"></div><script src="/_next/main.js"></script></body></html>'
NUXT_SHELL = '<html><body><div id="__nuxt"><!-- --></div><script src="/_nuxt/app.js"></script></body></html>'
ANGULAR_SHELL = "<html><body><app-root></app-root><script src=main.js type=module></script></body></html>"
NOSCRIPT_SHELL = ("<html><body><div class=wrap><noscript>This site requires JavaScript.</noscript></div>"
                  "<script src=/bundle.js></script></body></html>")
THIN_SHELL = "<html><body><div class=x></div><script src=/a.js></script><script src=/b.js></script></body></html>"
HEAVY_SHELL = ("<html><body><h1>Shop</h1><p>" + "Loading the catalogue of our shop. " * 10 + "</p><script>"
               + "var state = {items: []};" * 800
               + "</script><a href=/a>a</a></body></html>")
ARTICLE = ("<html><head><script src=/analytics.js></script></head><body><div id=app>"
           + "<p>" + "Static article text that is readable without any script. " * 60 + "</p>"
           + "".join(f"<a href=/p{i}>page {i}</a>" for i in range(20)) + "</div></body></html>")
ASCIIDOC = ("<html><head><title>git-stage(1)</title><script>" + "var asciidoc = {toc: function(levels) {}};" * 140
            + "</script></head><body><h1>git-stage(1)</h1><div id=content><p>git-stage - Add file contents "
            "to the staging area. This command is a synonym for git-add. Part of the git suite; see "
            "the manual page of git-add for its options and the examples of its use.</p></div>"
            "<a href=git-add.html>git-add(1)</a></body></html>")
SSR_NEXT = ('<html><body><div id="__next"><main><h1>Title</h1><p>' + "Rendered on the server. " * 80
            + '</p></main></div><script id="__NEXT_DATA__" type="application/json">{"props":{}}</script>'
            '<script src="/_next/main.js"></script></body></html>')
NO_SCRIPT_AT_ALL = '<html><body><div id="root"></div></body></html>'
WIDGET_MOUNT = ("<html><body><article>" + "<p>Long article paragraph with plenty of words in it.</p>" * 40
                + '</article><div id="app"></div><script src=/comments.js></script></body></html>')


@pytest.mark.parametrize("html,reason", [
    (CRA_SHELL, "empty-mount:#root"), (NEXT_SHELL, "empty-mount:#__next"), (NUXT_SHELL, "empty-mount:#__nuxt"),
    (ANGULAR_SHELL, "empty-mount:app-root"), (NOSCRIPT_SHELL, "noscript"), (THIN_SHELL, "thin"),
    (HEAVY_SHELL, "script-heavy"),
])
def test_app_shells_are_flagged(html, reason):
    assert needs_render(html) == reason
    assert needs_render(html.encode()) == reason


@pytest.mark.parametrize("html", [ARTICLE, ASCIIDOC, SSR_NEXT, NO_SCRIPT_AT_ALL, WIDGET_MOUNT, "", "<html>", b"\xff\xfe<script"])
def test_static_pages_are_not_flagged(html):
    assert needs_render(html) is None


def test_caller_counts_are_used():
    # the caller's parser saw plenty of text and links (say, the shell is fine after all)
    assert needs_render(THIN_SHELL, parsed_text_chars=5000, n_links=40) is None
    assert needs_render(ARTICLE, parsed_text_chars=10, n_links=0) == "thin"


@pytest.mark.parametrize("part", realpages.PARTS)
def test_real_documentation_is_never_sent_to_the_browser(part):
    """Every page of the pinned corpus is taken as it is (its search page included)."""
    scripted = 0
    for path in realpages.corpus(part):
        data = path.read_bytes()
        scripted += b"<script" in data.lower()
        assert needs_render(data) is None, path
    # pages with scripts, so the signals were really tried (PostgreSQL's DocBook pages have none)
    assert scripted > 0 or part == "postgresql-doc-15"


SPHINX_SEARCH = """<!DOCTYPE html><html><head><title>Search</title>
<script src="_static/jquery.js"></script><script src="_static/searchtools.js"></script>
<script src="searchindex.js" defer></script></head><body><div class="body" role="main">
<h1 id="search-documentation">Search</h1>
<noscript><div class="admonition warning"><p>Please activate JavaScript to enable the search
functionality.</p></div></noscript>
<p>Searching for multiple words only shows matches that contain all words.</p>
<form action="" method="get"><input type="text" name="q" value=""/><input type="submit" value="search"/></form>
<div id="search-results"></div></div></body></html>"""


def test_a_script_driven_search_page_is_taken_as_it_is():
    """Decided: its results need a query the crawler does not have, so a render adds nothing
    to crawl; but an app that mounts into an empty root is still one, search box or not."""
    assert needs_render(SPHINX_SEARCH) is None
    django = Path("/usr/share/doc/python-django-doc/html/search.html")
    if django.is_file():  # Debian's Django docs: the page that was flagged "noscript"
        assert needs_render(django.read_bytes()) is None
    search_app = SPHINX_SEARCH.replace('<div id="search-results"></div>', '<div id="root"></div>')
    assert needs_render(search_app) == "empty-mount:#root"
    assert needs_render(SPHINX_SEARCH.replace("to enable the search\nfunctionality", "to run this app")) == "noscript"


def test_policy_hosts_budget_and_mode(tmp_path):
    fake = tmp_path / "chromium"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    policy = RenderPolicy(Settings(CHROMIUM_PATH=str(fake), RENDER_HOSTS=("spa.example",), RENDER_MAX_PER_HOST=2))
    assert policy.reason("www.spa.example", "text/html; charset=utf-8", ARTICLE) == "host"
    assert policy.reason("other.example", "text/html", ARTICLE) is None
    assert policy.reason("other.example", "application/json", CRA_SHELL) is None
    assert policy.reason("other.example", "text/html", CRA_SHELL) == "empty-mount:#root"
    assert policy.reason("other.example", "text/html", CRA_SHELL) == "empty-mount:#root"
    assert policy.reason("other.example", "text/html", CRA_SHELL) is None  # budget of 2 spent
    always = RenderPolicy(Settings(CHROMIUM_PATH=str(fake), RENDER="always"))
    assert always.reason("a.example", "text/html", ARTICLE) == "always"


def test_policy_off_without_chromium(tmp_path, caplog):
    policy = RenderPolicy(Settings(CHROMIUM_PATH=str(tmp_path / "missing"), RENDER="always"))
    assert not policy.enabled and policy.pool() is None
    assert policy.reason("a.example", "text/html", CRA_SHELL) is None
    assert sum("rendering off" in r.getMessage() for r in caplog.records) == 1
    assert not RenderPolicy(Settings(RENDER="never")).enabled


# --- rendering -----------------------------------------------------------------------------

APP_JS = """
const root = document.getElementById('root');
const p = document.createElement('p');
p.textContent = 'Hello from the script, this text exists only after rendering.';
root.appendChild(p);
for (let i = 0; i < 10; i++) {
  const a = document.createElement('a'); a.href = '/item/' + i; a.textContent = 'item ' + i; root.appendChild(a);
}
"""
PAGES: dict[str, tuple[str, str]] = {
    "/shell.html": ("text/html", '<html><body><div id="root"></div><img src="/logo.png">'
                                 '<script src="/app.js"></script></body></html>'),
    "/app.js": ("application/javascript", APP_JS),
    "/xhr.html": ("text/html", """<html><body><div id="out"></div><script>
fetch('/api/data.json').then(r => r.json()).then(d => {
  document.getElementById('out').textContent = d.text;
  const x = new XMLHttpRequest(); x.open('GET', '/api/more.txt');
  x.onload = () => { const s = document.createElement('span'); s.id = 'more'; s.textContent = x.responseText;
                     document.body.appendChild(s); };
  x.send();
});
</script></body></html>"""),
    "/api/data.json": ("application/json", json.dumps({"text": "Loaded by fetch() from the same host"})),
    "/api/more.txt": ("text/plain", "and more by XMLHttpRequest"),
    "/blocked.html": ("text/html", '<html><body><p id="p">static</p><script src="/private/secret.js"></script>'
                                   '<script>document.getElementById("p").textContent += " after";</script></body></html>'),
    "/private/secret.js": ("application/javascript", "document.body.dataset.leak = 'yes';"),
    "/escape.html": ("text/html", """<html><body><p>escape attempts</p><script>
try { new WebSocket('ws://' + location.host + '/ws'); } catch (e) {}
try { navigator.sendBeacon('/beacon', 'x'); } catch (e) {}
try { fetch('/post', {method: 'POST', body: 'x'}); } catch (e) {}
try { navigator.serviceWorker && navigator.serviceWorker.register('/sw.js'); } catch (e) {}
const l = document.createElement('link'); l.rel = 'prefetch'; l.href = '/prefetched.html'; document.head.appendChild(l);
const i = document.createElement('iframe'); i.src = '/app.js'; document.body.appendChild(i);
</script></body></html>"""),
    "/many.html": ("text/html", "<html><body><script>" + "".join(
        f"fetch('/api/more.txt?n={i}').catch(() => {{}});" for i in range(30)) + "</script></body></html>"),
    "/spin.html": ("text/html", "<html><body><p>spin</p><script>while (true) {}</script></body></html>"),
}


class _Server:
    def __init__(self, host: str) -> None:
        self.requests: list[tuple[str, str, str]] = []   # (method, path, user agent)
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                with outer.lock:
                    outer.requests.append((self.command, self.path, self.headers.get("User-Agent", "")))
                path = self.path.split("?")[0]
                if path not in PAGES:
                    body, ctype, status = b"missing", "text/plain", 404
                else:
                    ctype, text = PAGES[path]
                    body, status = text.encode(), 200
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _serve  # noqa: N815

            def log_message(self, *args: object) -> None:
                pass

        self.srv = ThreadingHTTPServer((host, 0), Handler)
        self.base = f"http://{host}:{self.srv.server_address[1]}"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def paths(self) -> list[str]:
        with self.lock:
            return [p for _, p, _ in self.requests]


@pytest.fixture(scope="module")
def server():
    srv = _Server("127.0.0.9")
    yield srv
    srv.srv.shutdown()
    srv.srv.server_close()


@pytest.fixture(scope="module")
def fetcher():
    from crawler_tasks.fetch.http import Fetcher

    f = Fetcher(Settings(ALLOW_PRIVATE=True, USER_AGENT=FETCH_UA))
    yield f
    f.close()


@pytest.fixture(scope="module")
def renderer():
    if CHROMIUM is None:
        pytest.skip("no chromium binary (apt-get install chromium)")
    from crawler_tasks.render.browser import Renderer

    r = Renderer(CHROMIUM, timeout_s=10.0, max_requests=20)
    yield r
    r.close()


class Recorder:
    """The test's fetch callback: robots-disallows /private/, fetches the rest."""

    def __init__(self, fetcher) -> None:
        self.fetcher = fetcher
        self.calls: list[tuple[str, str]] = []

    def __call__(self, url: str, resource_type: str):
        self.calls.append((url, resource_type))
        if "/private/" in url:
            return None
        return self.fetcher.fetch(url)


def _only_our_fetcher(server) -> None:
    with server.lock:
        agents = {ua for _, _, ua in server.requests}
        methods = {m for m, _, _ in server.requests}
    assert agents <= {FETCH_UA}, agents
    assert methods <= {"GET"}, methods


@needs_chromium
def test_app_shell_script_writes_text_and_links(server, fetcher, renderer):
    fetch = Recorder(fetcher)
    document = fetcher.fetch(server.base + "/shell.html")
    assert needs_render(document.content) == "empty-mount:#root"
    before = len(server.requests)
    out = renderer.render(server.base + "/shell.html", fetch, document=document)
    assert out.error is None, out.error
    assert "Hello from the script" in out.html
    assert sum(f'href="/item/{i}"' in out.html for i in range(10)) == 10
    assert needs_render(out.html) is None
    assert [c[0] for c in fetch.calls] == [server.base + "/app.js"]  # document given, image blocked
    assert server.paths()[before:] == ["/app.js"]
    outcomes = {(e.url.rsplit("/", 1)[1], e.outcome) for e in out.exchanges}
    assert outcomes == {("shell.html", "document"), ("app.js", "fetched"), ("logo.png", "blocked-type")}
    assert 0 < out.elapsed_s < 10
    _only_our_fetcher(server)


@needs_chromium
def test_content_fetched_by_xhr_and_fetch(server, fetcher, renderer):
    fetch = Recorder(fetcher)
    out = renderer.render(server.base + "/xhr.html", fetch)  # no document: the callback fetches it too
    assert out.error is None, out.error
    assert "Loaded by fetch() from the same host" in out.html
    assert '<span id="more">and more by XMLHttpRequest</span>' in out.html
    assert [(u.rsplit("/", 1)[1], t) for u, t in fetch.calls] == [
        ("xhr.html", "document"), ("data.json", "fetch"), ("more.txt", "xhr")]
    _only_our_fetcher(server)


@needs_chromium
def test_refused_script_is_never_requested(server, fetcher, renderer):
    fetch = Recorder(fetcher)
    out = renderer.render(server.base + "/blocked.html", fetch)
    assert out.error is None, out.error
    assert "static after" in out.html and "leak" not in out.html  # the page went on without it
    assert (server.base + "/private/secret.js", "script") in fetch.calls
    assert [e.outcome for e in out.exchanges if "secret" in e.url] == ["refused"]
    assert "/private/secret.js" not in server.paths()
    _only_our_fetcher(server)


@needs_chromium
def test_no_request_escapes_interception(server, fetcher, renderer):
    fetch = Recorder(fetcher)
    before = len(server.requests)
    out = renderer.render(server.base + "/escape.html", fetch)
    assert out.error is None, out.error
    time.sleep(0.5)  # anything the browser sent on its own would have arrived by now
    seen = server.paths()[before:]
    assert "/ws" not in seen and "/beacon" not in seen and "/post" not in seen and "/sw.js" not in seen
    assert set(seen) <= {u.split(server.base, 1)[1] for u, _ in fetch.calls}
    refused = {e.url.rsplit("/", 1)[1]: e.outcome for e in out.exchanges}
    assert refused.get("post") == "method" and refused.get("beacon") == "method"
    _only_our_fetcher(server)


@needs_chromium
def test_request_budget(server, fetcher, renderer):
    fetch = Recorder(fetcher)
    out = renderer.render(server.base + "/many.html", fetch)
    assert len(fetch.calls) == 20  # max_requests of the fixture (the document counts)
    assert sum(e.outcome == "budget" for e in out.exchanges) == 11
    _only_our_fetcher(server)


@needs_chromium
def test_wedged_page_is_cut_and_browser_comes_back(server, fetcher, monkeypatch):
    from crawler_tasks.render import browser

    monkeypatch.setattr(browser, "WATCHDOG_GRACE_S", 1.0)

    def run() -> None:
        r = browser.Renderer(CHROMIUM, timeout_s=2.0)
        try:
            started = time.monotonic()
            out = r.render(server.base + "/spin.html", Recorder(fetcher))
            assert out.error is not None and time.monotonic() - started < 8
            again = r.render(server.base + "/shell.html", Recorder(fetcher))
            assert again.error is None and "Hello from the script" in again.html
            assert r.launches == 2
        finally:
            r.close()

    before = len(_marked_chromium())
    _in_thread(run)
    assert len(_marked_chromium()) == before


def _in_thread(fn):
    """Run ``fn`` on a thread of its own: Playwright allows one sync driver per thread,
    and the module's renderer holds the main thread's."""
    box: dict = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # re-raised in the test
            box["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    t.join(120)
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _live_in_group(pgid: int) -> list[int]:
    """Processes of a group that still run (a dead one may linger as a zombie until
    its new parent reaps it)."""
    live = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                live.append(proc.pid)
        except (psutil.NoSuchProcess, ProcessLookupError):
            continue
    return live


def _live_children(match) -> list[psutil.Process]:
    """Live (not zombie) descendants of this test process whose argv ``match`` accepts."""
    out = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and match(proc.cmdline()):
                out.append(proc)
        except psutil.NoSuchProcess:
            continue
    return out


def _marked_chromium() -> list[psutil.Process]:
    """Live Chromium main processes of this test process (they carry the marker)."""
    return _live_children(lambda argv: any(a.startswith("--crawler-render-id=") for a in argv))


def _driver_processes() -> list[psutil.Process]:
    """Playwright's node drivers started by this test process."""
    return _live_children(lambda argv: "run-driver" in argv)


@needs_chromium
def test_close_leaves_no_chromium(server, fetcher):
    from crawler_tasks.render.browser import Renderer

    before = len(_marked_chromium())

    def run() -> int:
        r = Renderer(CHROMIUM)
        out = r.render(server.base + "/shell.html", Recorder(fetcher))
        assert out.error is None
        pid = r.browser_pid
        assert pid is not None and psutil.pid_exists(pid) and len(_marked_chromium()) == before + 1
        r.close()
        assert r.browser_pid is None
        assert r.render(server.base + "/shell.html", Recorder(fetcher)).error == "unavailable: renderer closed"
        return pid

    pid = _in_thread(run)
    assert len(_marked_chromium()) == before
    assert not _live_in_group(pid)  # the closed one's whole group is gone (zombies aside)


@needs_chromium
def test_pool_from_threads(server, fetcher):
    from crawler_tasks.render.browser import Renderer, RenderPool

    before = len(_marked_chromium())
    pool = RenderPool(lambda: Renderer(CHROMIUM), size=1)
    results: list = []
    threads = [threading.Thread(target=lambda: results.append(pool.render(server.base + "/xhr.html", Recorder(fetcher))))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    pool.close()
    assert len(results) == 3 and all("XMLHttpRequest" in r.html for r in results)
    assert len(_marked_chromium()) == before


@needs_chromium
def test_an_idle_pool_gives_its_browser_back_and_renders_again(server, fetcher):
    """One app shell among thousands of pages kept a browser and its driver (~0.5 GB) to
    the end of the crawl: after ``idle_s`` without a render both are gone."""
    from crawler_tasks.render.browser import Renderer, RenderPool

    chromium, drivers = len(_marked_chromium()), len(_driver_processes())
    pool = RenderPool(lambda: Renderer(CHROMIUM), size=1, idle_s=0.5)
    try:
        assert "XMLHttpRequest" in pool.render(server.base + "/xhr.html", Recorder(fetcher)).html
        assert len(_marked_chromium()) == chromium + 1
        deadline = time.monotonic() + 20
        while (len(_marked_chromium()), len(_driver_processes())) != (chromium, drivers):
            assert time.monotonic() < deadline, "the idle browser was not closed"
            time.sleep(0.1)
        assert "XMLHttpRequest" in pool.render(server.base + "/xhr.html", Recorder(fetcher)).html
    finally:
        pool.close()
    assert len(_marked_chromium()) == chromium


CHILD = """
import sys, time
from crawler_tasks.render.browser import Renderer
from crawler_tasks.fetch.http import FetchResult
r = Renderer(sys.argv[1])
page = FetchResult(url="http://127.0.0.9:1/", started=0.0, status=200, headers=[("Content-Type", "text/html")],
                   content=b"<p id=x></p><script>x.textContent='ok'</script>")
out = r.render("http://127.0.0.9:1/", lambda url, kind: None, document=page)
print(r.browser_pid, "ok" in out.html, flush=True)
time.sleep(60)
"""


@needs_chromium
def test_chromium_dies_when_the_crawler_is_killed():
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(CHILD), CHROMIUM], cwd=REPO,
                             stdout=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline().split()
        assert line[1] == "True"
        pid = int(line[0])
        assert psutil.pid_exists(pid)
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        deadline = time.monotonic() + 10
        while _live_in_group(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _live_in_group(pid)  # Chromium and its whole group are gone
    finally:
        child.kill()
        child.wait()
