"""Fetching through an HTTP proxy: which proxy a URL takes (curl's and requests' rules), a
real proxy (Debian's tinyproxy, started here on 127.0.0.1 with a generated config) for
http:// (absolute form) and https:// (CONNECT, then TLS to the target), its refusals as
records, credentials never shown, the address gate in front of the proxy, a proxied
connection kept per target, and a whole ``manage.py crawl --proxy`` of a TestWeb.

Every target is an IP literal on loopback: tinyproxy resolves what it is sent, and a
name would send a DNS query off the machine. The proxy's environment variables are
removed for every test (a machine may set them) and set only by the tests about them."""
from __future__ import annotations

import base64
import dataclasses
import gzip
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import trustme

from crawler_tasks.exceptions import ConfigError
from crawler_tasks.fetch.http import Fetcher
from crawler_tasks.fetch.proxy import Proxy, ProxyRules, parse_no_proxy, parse_proxy_url, redact_proxy_url
from crawler_tasks.records import ErrorKind
from crawler_tasks.runtime.maintenance import safe_value
from crawler_tasks.settings import Settings
from testweb import TestWeb
from testweb.evidence import check_politeness

ROOT = Path(__file__).resolve().parent.parent
TINYPROXY = shutil.which("tinyproxy")
needs_tinyproxy = pytest.mark.skipif(TINYPROXY is None, reason="tinyproxy is not installed (apt-get install tinyproxy)")
USER, PASSWORD = "crawler", "pr0xy-s3cret"
PAGE = b"<!doctype html><title>t</title><p>through</p>"
PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


@pytest.fixture(autouse=True)
def no_proxy_environment(monkeypatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)


def settings(**changes: Any) -> Settings:
    base = dataclasses.replace(Settings(), ALLOW_PRIVATE=True, CONNECT_TIMEOUT_S=2.0, READ_TIMEOUT_S=2.0,
                               TOTAL_TIMEOUT_S=5.0)
    return dataclasses.replace(base, **changes)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- which proxy, as curl and requests read it --------------------------------------------

def test_a_proxy_url_gives_basic_credentials_that_are_never_shown():
    proxy = parse_proxy_url(f"http://{USER}:{PASSWORD}@127.0.0.1:3128")
    assert (proxy.host, proxy.port, proxy.label) == ("127.0.0.1", 3128, "http://127.0.0.1:3128")
    assert proxy.authorization == "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    assert PASSWORD not in repr(proxy) and PASSWORD not in str(proxy) and USER not in str(proxy)
    # percent-encoded credentials are decoded; no scheme means http://, as in curl
    assert parse_proxy_url("a%40b:p%2Fw@proxy.example:8080").authorization == \
        "Basic " + base64.b64encode(b"a@b:p/w").decode()
    assert parse_proxy_url("[::1]:3128").label == "http://[::1]:3128"


@pytest.mark.parametrize("url, message", [
    (f"socks5://{USER}:{PASSWORD}@127.0.0.1:1080", "not an http:// proxy"),
    (f"https://{USER}:{PASSWORD}@127.0.0.1:3128", "not an http:// proxy"),
    (f"http://{USER}:{PASSWORD}@127.0.0.1", "host and a port"),
    (f"http://{USER}:{PASSWORD}@127.0.0.1:3128/path", "no path"),
    (f"http://{USER}:{PASSWORD}#x@127.0.0.1:3128", "cannot read"),
])
def test_a_bad_proxy_url_is_a_config_error_without_its_password(url, message):
    with pytest.raises(ConfigError) as info:
        parse_proxy_url(url, "HTTPS_PROXY")
    assert message in str(info.value) and str(info.value).startswith("HTTPS_PROXY: ")
    assert PASSWORD not in str(info.value) and "***@" in str(info.value)


@pytest.mark.parametrize("url", [f"socks5://u:{PASSWORD}@h:1", f"u:{PASSWORD}@h:3128", f"http://u:{PASSWORD}@h",
                                 f"http://u:{PASSWORD}/x@h:3128", f"http://u:{PASSWORD}@h:3128/x"])
def test_settings_refuse_a_bad_proxy_url_without_its_password(url):
    with pytest.raises(ConfigError) as info:
        Settings.from_env({}, PROXY_URL=url)
    assert str(info.value).startswith("PROXY_URL: ") and PASSWORD not in str(info.value)


def test_redaction_keeps_no_part_of_the_credentials():
    assert redact_proxy_url(f"http://{USER}:{PASSWORD}@h:1") == "http://***@h:1"
    assert redact_proxy_url(f"{USER}:{PASSWORD}@h:1") == "***@h:1"
    assert redact_proxy_url(f"http://{USER}:pa/ss@x@h:1") == "http://***@h:1"   # up to the last @
    assert redact_proxy_url("http://h:1") == "http://h:1"


def test_the_settings_hash_and_repr_hold_no_proxy_password():
    s = Settings.from_env({}, PROXY_URL=f"http://{USER}:{PASSWORD}@127.0.0.1:3128")
    recorded = {name: safe_value(v) for name, v in s.to_env().items()}   # what record_settings stores
    assert recorded["CRAWLER_PROXY_URL"] == "http://127.0.0.1:3128"
    assert not any(PASSWORD in v for v in recorded.values())
    assert PASSWORD not in repr(s)


@pytest.mark.parametrize("entries, host, port, direct", [
    ("example.com", "example.com", 80, True),
    ("example.com", "www.example.com", 443, True),
    (".example.com", "example.com", 80, True),           # curl: the leading dot is ignored
    ("*.example.com", "a.b.example.com", 80, True),
    ("example.com", "badexample.com", 80, False),         # a suffix on a label boundary only
    ("EXAMPLE.com.", "www.Example.COM", 80, True),
    ("example.com:8080", "example.com", 8080, True),
    ("example.com:8080", "example.com", 80, False),
    ("*", "anything.test", 1, True),
    ("10.0.0.0/8, 192.168.1.1", "10.2.3.4", 80, True),
    ("10.0.0.0/8 192.168.1.1", "192.168.1.1", 80, True),
    ("10.0.0.0/8", "11.0.0.1", 80, False),
    ("10.0.0.0/8", "ten.example", 80, False),             # no name is resolved for an IP entry
    ("[::1]:8080,fd00::/8", "::1", 8080, True),
    ("[::1]:8080", "::1", 80, False),
    ("fd00::/8", "fd12::1", 80, True),
    ("example.com:http, ,", "example.com", 80, False),    # an entry that means nothing is skipped
    ("", "example.com", 80, False),
])
def test_no_proxy_follows_curl(entries, host, port, direct):
    assert parse_no_proxy(entries).matches(host, port) is direct


def test_environment_variables_lower_case_first_and_per_scheme():
    s = Settings()
    env = {"HTTP_PROXY": "http://upper:1", "http_proxy": "http://lower:1", "HTTPS_PROXY": "secure:2",
           "NO_PROXY": "skip.test"}
    rules = ProxyRules.from_settings(s, env)
    assert rules is not None
    assert rules.proxy_for("http", "a.test", 80) == Proxy("lower", 1)
    assert rules.proxy_for("https", "a.test", 443) == Proxy("secure", 2)
    assert rules.proxy_for("https", "www.skip.test", 443) is None
    only_all = ProxyRules.from_settings(s, {"ALL_PROXY": "http://every:3", "https_proxy": "http://tls:4"})
    assert only_all is not None and only_all.http == Proxy("every", 3) and only_all.https == Proxy("tls", 4)
    assert ProxyRules.from_settings(s, {"NO_PROXY": "*"}) is None                     # no proxy at all
    assert ProxyRules.from_settings(dataclasses.replace(s, PROXY_FROM_ENV=False), env) is None
    with pytest.raises(ConfigError, match="^https_proxy: 'socks5://\\*\\*\\*@h:1'"):
        ProxyRules.from_settings(s, {"https_proxy": f"socks5://u:{PASSWORD}@h:1"})


def test_proxy_url_is_for_every_scheme_and_no_proxy_adds_to_the_environment():
    s = dataclasses.replace(Settings(), PROXY_URL="http://p:9", NO_PROXY=("inside.test",))
    rules = ProxyRules.from_settings(s, {"HTTPS_PROXY": "http://other:1", "no_proxy": "10.0.0.0/8"})
    assert rules is not None
    assert rules.proxy_for("http", "a.test", 80) == rules.proxy_for("https", "a.test", 443) == Proxy("p", 9)
    assert rules.proxy_for("http", "inside.test", 80) is None and rules.proxy_for("http", "10.1.1.1", 80) is None


def test_a_fetcher_with_no_proxy_does_no_proxy_work():
    fetcher = Fetcher(settings())
    try:
        assert fetcher.proxy_for is None
    finally:
        fetcher.close()


# --- servers: a target that records what it saw, a real proxy -------------------------------

class _Seen(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 10

    def do_GET(self) -> None:
        self.server.seen.append((self.path, dict((k.lower(), v) for k, v in self.headers.items())))  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _Target(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, host: str, context: ssl.SSLContext | None = None) -> None:
        super().__init__((host, 0), _Seen)
        self.seen: list[tuple[str, dict[str, str]]] = []
        self.connections = 0
        self.context = context

    def finish_request(self, request: Any, client_address: Any) -> None:
        self.connections += 1
        if self.context is None:
            super().finish_request(request, client_address)
            return
        try:
            tls = self.context.wrap_socket(request, server_side=True)
        except OSError:
            return
        try:
            _Seen(tls, client_address, self)
        finally:
            tls.close()

    @property
    def port(self) -> int:
        return int(self.server_address[1])


@contextmanager
def target(host: str = "127.0.0.1", context: ssl.SSLContext | None = None) -> Iterator[_Target]:
    server = _Target(host, context)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@dataclasses.dataclass
class Tinyproxy:
    port: int
    log: Path
    url: str

    def requests(self) -> list[str]:
        """The request lines tinyproxy logged ("GET http://...", "CONNECT host:port")."""
        text = self.log.read_text() if self.log.exists() else ""
        return [line.split("): ", 1)[1].rsplit(" HTTP/", 1)[0] for line in text.splitlines() if "Request (file" in line]


@contextmanager
def tinyproxy(folder: Path, *, auth: bool = False, connect_ports: tuple[int, ...] = ()) -> Iterator[Tinyproxy]:
    assert TINYPROXY is not None
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = folder / "tinyproxy.log"
    lines = [f"Port {port}", "Listen 127.0.0.1", "Timeout 30", f'LogFile "{log}"', "LogLevel Connect",
             f'PidFile "{folder / "tinyproxy.pid"}"', "MaxClients 50", "Allow 127.0.0.1"]
    lines += [f"ConnectPort {p}" for p in connect_ports] or ["ConnectPort 1"]   # none: every CONNECT refused
    if auth:
        lines.append(f"BasicAuth {USER} {PASSWORD}")
    config = folder / "tinyproxy.conf"
    config.write_text("\n".join(lines) + "\n")
    proc = subprocess.Popen([TINYPROXY, "-d", "-c", str(config)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail(f"tinyproxy exited with {proc.returncode}: {config.read_text()}")
                time.sleep(0.05)
        credentials = f"{USER}:{PASSWORD}@" if auth else ""
        yield Tinyproxy(port, log, f"http://{credentials}127.0.0.1:{port}")
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def fetch(s: Settings, url: str):
    fetcher = Fetcher(s)
    try:
        return fetcher.fetch(url)
    finally:
        fetcher.close()


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def ca_pem(ca, tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("ca") / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


def tls_context(ca: trustme.CA, host: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert(host).configure_cert(context)
    return context


# --- through tinyproxy ----------------------------------------------------------------------

@needs_tinyproxy
def test_http_goes_through_the_proxy_with_credentials_the_target_never_sees(tmp_path):
    with target() as web, tinyproxy(tmp_path, auth=True) as proxy:
        result = fetch(settings(PROXY_URL=proxy.url), f"http://127.0.0.1:{web.port}/page?q=1")
        assert result.error is None and result.status == 200 and result.content == PAGE
        assert proxy.requests() == [f"GET http://127.0.0.1:{web.port}/page?q=1"]
        (path, headers), = web.seen
        assert path == "/page?q=1" and "tinyproxy" in headers.get("via", "")   # it came through the proxy
        assert "proxy-authorization" not in headers
        assert not any(name.lower() == "proxy-authorization" for name, _ in result.request_headers)  # WARC
        assert result.ip == "127.0.0.1"   # the target's vetted address


@needs_tinyproxy
def test_https_goes_through_a_connect_tunnel_with_tls_to_the_target(tmp_path, ca, ca_pem):
    with target(context=tls_context(ca, "127.0.0.1")) as web, \
            tinyproxy(tmp_path, auth=True, connect_ports=(web.port,)) as proxy:
        s = settings(PROXY_URL=proxy.url, CA_BUNDLE=ca_pem)
        result = fetch(s, f"https://127.0.0.1:{web.port}/secure")
        assert result.error is None and result.status == 200 and result.content == PAGE
        assert proxy.requests() == [f"CONNECT 127.0.0.1:{web.port}"]
        (path, headers), = web.seen
        assert path == "/secure" and "via" not in headers and "proxy-authorization" not in headers
        # the certificate is checked end to end: the proxy cannot stand in for the target
        unknown = fetch(settings(PROXY_URL=proxy.url), f"https://127.0.0.1:{web.port}/secure")
        assert unknown.error_kind == ErrorKind.TLS and "unknown certificate authority" in (unknown.error or "")


@needs_tinyproxy
@pytest.mark.parametrize("scheme", ["http", "https"])
def test_wrong_or_missing_credentials_are_a_record_naming_the_proxy(tmp_path, scheme, ca, ca_pem):
    context = tls_context(ca, "127.0.0.1") if scheme == "https" else None
    with target(context=context) as web, tinyproxy(tmp_path, auth=True, connect_ports=(web.port,)) as proxy:
        wrong = f"http://{USER}:wrong-{PASSWORD}@127.0.0.1:{proxy.port}"
        for url, hint in ((wrong, "credentials refused"), (f"http://127.0.0.1:{proxy.port}", "it asks for credentials")):
            result = fetch(settings(PROXY_URL=url, CA_BUNDLE=ca_pem), f"{scheme}://127.0.0.1:{web.port}/")
            assert PASSWORD not in repr(result)
            if scheme == "http" and url == wrong:
                # tinyproxy 1.11 answers bad credentials with its own 401 (WWW-Authenticate), which
                # nothing tells from the site's: recorded as the answer (only 407 is a proxy's alone)
                assert result.status == 401 and result.header("server") == "tinyproxy/1.11.1"
                continue
            assert result.error_kind == ErrorKind.CONNECT and result.status is None, result
            assert f"proxy http://127.0.0.1:{proxy.port} refused" in (result.error or "")
            assert hint in (result.error or "") and ("407" in (result.error or "") or scheme == "https")
        assert web.seen == []


@needs_tinyproxy
def test_a_connect_the_proxy_forbids_is_a_record(tmp_path, ca):
    with target(context=tls_context(ca, "127.0.0.1")) as web, tinyproxy(tmp_path) as proxy:   # no ConnectPort
        result = fetch(settings(PROXY_URL=proxy.url), f"https://127.0.0.1:{web.port}/")
    assert result.error_kind == ErrorKind.CONNECT
    assert (result.error or "").startswith(f"proxy http://127.0.0.1:{proxy.port} refused CONNECT to "
                                           f"127.0.0.1:{web.port}: 403")
    assert web.connections == 0


def test_an_unreachable_proxy_is_a_connect_record_without_credentials():
    port = free_port()   # nobody listens there
    result = fetch(settings(PROXY_URL=f"http://{USER}:{PASSWORD}@127.0.0.1:{port}"), "http://127.0.0.1:9/")
    assert result.error_kind == ErrorKind.CONNECT
    assert result.error == f"cannot connect to proxy http://127.0.0.1:{port}: Connection refused"


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_silent_proxy_is_a_timeout_naming_it(scheme):
    with socket.create_server(("127.0.0.1", 0)) as silent:   # accepts (the backlog), never answers
        port = silent.getsockname()[1]
        s = settings(PROXY_URL=f"http://{USER}:{PASSWORD}@127.0.0.1:{port}", READ_TIMEOUT_S=0.3)
        result = fetch(s, f"{scheme}://127.0.0.1:9/")
    assert result.error_kind == ErrorKind.TIMEOUT, result
    assert f"proxy http://127.0.0.1:{port}" in (result.error or "")
    assert PASSWORD not in (result.error or "")


# --- the address gate in front of the proxy -------------------------------------------------

@needs_tinyproxy
@pytest.mark.parametrize("url, changes", [
    ("http://127.0.0.1:{port}/", {}),                                              # a loopback literal
    ("https://127.0.0.1:{port}/", {}),
    ("http://intranet.test:{port}/", {"RESOLVE": ("intranet.test=10.1.2.3",)}),    # a name we resolve
    ("https://intranet.test:{port}/", {"RESOLVE": ("intranet.test=192.168.0.9",)}),
    ("http://169.254.169.254/latest/meta-data/", {"ALLOW_PRIVATE": True}),         # metadata: never
    ("http://metadata.test/", {"ALLOW_PRIVATE": True, "RESOLVE": ("metadata.test=169.254.169.254",)}),
])
def test_private_targets_are_refused_before_the_proxy_is_asked(tmp_path, url, changes):
    with target() as web, tinyproxy(tmp_path, connect_ports=(web.port,)) as proxy:
        s = settings(PROXY_URL=proxy.url, **{"ALLOW_PRIVATE": False, **changes})
        result = fetch(s, url.format(port=web.port))
        assert result.error_kind == ErrorKind.REFUSED, result
        assert proxy.requests() == [] and web.seen == []


@needs_tinyproxy
def test_allow_private_lets_a_loopback_target_through_the_proxy(tmp_path):
    with target() as web, tinyproxy(tmp_path) as proxy:
        result = fetch(settings(PROXY_URL=proxy.url, ALLOW_PRIVATE=True), f"http://127.0.0.1:{web.port}/")
        assert result.status == 200 and len(proxy.requests()) == 1


# --- one kept connection per (target, proxy) ------------------------------------------------

class _KeepAliveProxy(ThreadingHTTPServer):
    """A proxy that keeps its client connections open and answers absolute-form GETs
    itself: each connection and the targets asked on it are logged."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Answer)
        self.targets: dict[tuple[str, int], list[str]] = {}


class _Answer(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 10

    def do_GET(self) -> None:
        self.server.targets.setdefault(self.client_address, []).append(self.path)  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_a_proxied_connection_serves_one_target_host_only():
    server = _KeepAliveProxy()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    fetcher = Fetcher(settings(PROXY_URL=f"http://127.0.0.1:{server.server_address[1]}"))
    try:
        for url in ("http://127.0.0.2:8001/a", "http://127.0.0.3:8001/b", "http://127.0.0.2:8001/c",
                    "http://127.0.0.3:8001/d"):
            assert fetcher.fetch(url).status == 200
        by_connection = sorted(server.targets.values())
        assert by_connection == [["http://127.0.0.2:8001/a", "http://127.0.0.2:8001/c"],
                                 ["http://127.0.0.3:8001/b", "http://127.0.0.3:8001/d"]]
        fetcher.release("127.0.0.2:8001")   # a host given back: its proxied connection closes, not the other's
        assert fetcher.fetch("http://127.0.0.2:8001/e").status == 200
        assert fetcher.fetch("http://127.0.0.3:8001/f").status == 200
        assert len(server.targets) == 3 and ["http://127.0.0.2:8001/e"] in server.targets.values()
    finally:
        fetcher.close()
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_a_per_site_choice_given_to_the_fetcher_decides_per_target_host():
    server = _KeepAliveProxy()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    via = Proxy("127.0.0.1", int(server.server_address[1]))
    fetcher = Fetcher(settings(PROXY_URL="http://127.0.0.1:9"),   # the choice given wins over the settings'
                      proxy_for=lambda scheme, host, port: via if host == "127.0.0.2" else None)
    try:
        with target("127.0.0.3") as direct:
            assert fetcher.fetch("http://127.0.0.2:8001/site").status == 200
            assert fetcher.fetch(f"http://127.0.0.3:{direct.port}/other").status == 200
            assert [path for path, _ in direct.seen] == ["/other"]
        assert list(server.targets.values()) == [["http://127.0.0.2:8001/site"]]
    finally:
        fetcher.close()
        server.shutdown()
        server.server_close()
        thread.join(5)


# --- a whole crawl through tinyproxy ----------------------------------------------------------

def _files(folder: Path) -> Iterator[tuple[Path, bytes]]:
    """Every file's bytes, gzip members decompressed (WARC files are gzipped)."""
    for path in folder.rglob("*"):
        if not path.is_file():
            continue
        data = path.read_bytes()
        if data[:2] == b"\x1f\x8b":
            try:
                data = gzip.decompress(data)
            except (OSError, EOFError):
                pass
        yield path, data


@needs_tinyproxy
def test_a_crawl_through_tinyproxy_is_polite_per_host_and_never_shows_the_password(tmp_path):
    out = tmp_path / "out"
    delay = 0.3
    with TestWeb(4, 4, seed=11, mean_page_bytes=1500, links_per_page=4, cross_host_ratio=0.3,
                 https_share=0.5) as web:
        https_ports = tuple(e.port for e in web.endpoints if e.scheme == "https")
        assert https_ports and len(https_ports) < len(web.endpoints)
        with tinyproxy(tmp_path / "proxy", auth=True, connect_ports=https_ports) as proxy:
            env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")}
            proc = subprocess.run(
                [sys.executable, str(ROOT / "manage.py"), "crawl", *web.seeds(all_hosts=True), "--out", str(out),
                 "--proxy", proxy.url, "--allow-private", "--min-delay", str(delay), "--ca-bundle",
                 str(web.ca_pem), "--user-agent", "testbot/1.0 (+http://127.0.0.1/bot)", "--max-seconds", "120"],
                capture_output=True, text=True, timeout=240, cwd=ROOT, env=env)
            report = subprocess.run([sys.executable, str(ROOT / "manage.py"), "report", "--out", str(out)],
                                    capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
            requests, connections = list(web.requests), list(web.connections)
            proxied = proxy.requests()
    assert proc.returncode == 0, proc.stderr[-3000:]
    pages = [json.loads(line) for line in (out / "pages.jsonl").read_text().splitlines()]
    fetched = {p["url"] for p in pages if p.get("status") == 200}
    assert fetched >= web.reachable(web.seeds(all_hosts=True)), sorted(web.reachable(web.seeds(all_hosts=True)) - fetched)
    # every request the web saw came through the proxy: plain ones carry its Via header,
    # each TLS connection is a tunnel tinyproxy logged
    https_hosts = {web.hosts[i] for i, e in enumerate(web.endpoints) if e.scheme == "https"}
    plain = [r for r in requests if r.host not in https_hosts]
    assert plain and all("tinyproxy" in r.headers.get("via", "") for r in plain)
    tunnels = [line for line in proxied if line.startswith("CONNECT ")]
    tls_connections = [c for c in connections if c.tls]
    assert tls_connections and len(tunnels) >= len(tls_connections)
    assert sum(1 for line in proxied if line.startswith("GET http://")) == len(plain)
    print(f"pages {len(fetched)}, proxy log {len(proxied)} requests ({len(tunnels)} tunnels), web saw {len(requests)} "
          f"requests ({len(plain)} plain), {len(tls_connections)} TLS connections")
    verdict = check_politeness(requests, connections, dict.fromkeys(web.hosts, delay))
    assert verdict.violations == 0 and verdict.hosts == len(web.hosts), verdict.examples
    # the password nowhere: output folder (WARC decompressed, Redis files, report), messages
    assert report.returncode == 0, report.stderr[-2000:]
    secret = PASSWORD.encode()
    files = list(_files(out))
    assert any(b"PROXY_URL" in data for path, data in files if path.parent.name == "redis")   # the settings hash
    assert not [str(path) for path, data in files if secret in data]
    assert PASSWORD not in proc.stdout + proc.stderr + report.stdout + report.stderr
    assert f"127.0.0.1:{proxy.port}".encode() in (out / "report.html").read_bytes()   # PROXY_URL, redacted
