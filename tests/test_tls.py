"""TLS as on the real web: whom the fetcher trusts (certifi's roots, CA_BUNDLE,
SSL_CERT_FILE / SSL_CERT_DIR) and how a certificate that fails reads in a record.

Real HTTPS servers on 127.0.0.x (http.server, the handshake in the handler's thread)
with certificates from a trustme CA; a CA that is trusted is one the fetcher was told
about, never one a test slipped into its context. SSL_CERT_FILE and SSL_CERT_DIR are
removed for every test (a machine may set them to its system store) and set only by
the tests about them."""
from __future__ import annotations

import dataclasses
import datetime
import socket
import ssl
import subprocess
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import certifi
import pytest
import trustme

from crawler_tasks.exceptions import ConfigError
from crawler_tasks.fetch.http import Fetcher, FetchResult
from crawler_tasks.records import Action, ErrorKind
from crawler_tasks.settings import Settings
from crawler_tasks.stages.fetch.outcome import retry_action
from tests.test_manage import UA, manage

HOST = "127.0.0.7"
PAGE = b"<!doctype html><title>tls</title><p>over TLS</p>"
UNKNOWN_CA = "unknown certificate authority"
NOW = datetime.datetime.now(datetime.UTC)
DAY = datetime.timedelta(days=1)


class _Page(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 10

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _HTTPSServer(ThreadingHTTPServer):
    """Each connection's handshake in its own thread; ``handshakes`` counts attempts."""

    daemon_threads = True

    def __init__(self, context: ssl.SSLContext) -> None:
        super().__init__((HOST, 0), _Page)
        self.context = context
        self.handshakes = 0

    def finish_request(self, request: socket.socket, client_address: tuple[str, int]) -> None:
        self.handshakes += 1
        try:
            tls = self.context.wrap_socket(request, server_side=True)
        except OSError:
            return   # the client refused the certificate: what most tests are about
        try:
            self.RequestHandlerClass(tls, client_address, self)
        finally:
            tls.close()


@contextmanager
def https(leaf: trustme.LeafCert, tune: Callable[[ssl.SSLContext], None] | None = None) -> Iterator[_HTTPSServer]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    leaf.configure_cert(context)   # the leaf and its chain up to (not with) the root
    if tune is not None:
        tune(context)
    server = _HTTPSServer(context)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def url(server: _HTTPSServer, host: str = HOST) -> str:
    return f"https://{host}:{server.server_address[1]}/page"


def fetch(settings: Settings, target: str) -> FetchResult:
    fetcher = Fetcher(settings)
    try:
        return fetcher.fetch(target)
    finally:
        fetcher.close()


@pytest.fixture(autouse=True)
def no_system_store(monkeypatch) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def ca_pem(ca, tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("ca") / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


@pytest.fixture(scope="module")
def leaf(ca) -> trustme.LeafCert:
    return ca.issue_cert(HOST, "good.test")


@pytest.fixture
def base() -> Settings:
    return dataclasses.replace(Settings(), ALLOW_PRIVATE=True, CONNECT_TIMEOUT_S=2.0, READ_TIMEOUT_S=2.0,
                               TOTAL_TIMEOUT_S=5.0)


def hashed_folder(pem: str, folder: Path) -> str:
    """A folder of one CA certificate under its OpenSSL hash name (``openssl rehash``)."""
    folder.mkdir()
    (folder / "ca.pem").write_bytes(Path(pem).read_bytes())
    subprocess.run(["openssl", "rehash", str(folder)], check=True, capture_output=True)
    return str(folder)


# --- whom the fetcher trusts ------------------------------------------------------------

def test_a_ca_not_named_is_unknown_and_the_record_says_so(base, leaf):
    with https(leaf) as server:
        res = fetch(base, url(server))
    assert res.status is None and res.error_kind == ErrorKind.TLS
    assert res.error == f"TLS with {HOST}: {UNKNOWN_CA} (untrusted CA or missing intermediate)"


def test_ca_bundle_trusts_the_ca_besides_certifi(base, leaf, ca_pem):
    settings = dataclasses.replace(base, CA_BUNDLE=ca_pem)
    with https(leaf) as server:
        res = fetch(settings, url(server))
    assert (res.status, res.content, res.error) == (200, PAGE, None)
    fetcher = Fetcher(settings)
    try:   # certifi's roots are all still there, and one more
        assert len(fetcher._tls.get_ca_certs()) == len(ssl.create_default_context(cafile=certifi.where())
                                                       .get_ca_certs()) + 1
    finally:
        fetcher.close()


def test_ca_bundle_takes_several_paths_and_hashed_folders(base, leaf, ca_pem, tmp_path):
    other = tmp_path / "other.pem"
    trustme.CA().cert_pem.write_to_path(str(other))
    folder = hashed_folder(ca_pem, tmp_path / "certs")
    with https(leaf) as server:
        for bundle in (f"{other}:{ca_pem}", f"{other}:{folder}"):
            res = fetch(dataclasses.replace(base, CA_BUNDLE=bundle), url(server))
            assert (res.status, res.error) == (200, None), bundle
        assert fetch(dataclasses.replace(base, CA_BUNDLE=str(other)), url(server)).error_kind == ErrorKind.TLS


def test_ssl_cert_file_and_dir_are_trusted_too(base, leaf, ca_pem, tmp_path, monkeypatch):
    folder = hashed_folder(ca_pem, tmp_path / "certs")
    with https(leaf) as server:
        monkeypatch.setenv("SSL_CERT_FILE", ca_pem)
        assert (fetch(base, url(server)).status, Settings.from_env({}).ca_paths()) == (200, [("SSL_CERT_FILE", ca_pem)])
        monkeypatch.delenv("SSL_CERT_FILE")
        monkeypatch.setenv("SSL_CERT_DIR", folder)
        assert fetch(base, url(server)).status == 200
        monkeypatch.delenv("SSL_CERT_DIR")
        assert fetch(base, url(server)).error_kind == ErrorKind.TLS


def test_an_intermediate_ca_can_be_trusted_without_its_root(base, ca, tmp_path):
    """A TLS-inspecting proxy's issuing CA, named alone (VERIFY_X509_PARTIAL_CHAIN)."""
    issuing = ca.create_child_ca()
    pem = tmp_path / "issuing.pem"
    issuing.cert_pem.write_to_path(str(pem))
    with https(issuing.issue_cert(HOST)) as server:
        res = fetch(dataclasses.replace(base, CA_BUNDLE=str(pem)), url(server))
    assert (res.status, res.error) == (200, None)


# --- a certificate that fails: its reason, once --------------------------------------------

@pytest.mark.parametrize(("window", "reason"), [
    ((NOW - 10 * DAY, NOW - DAY), "certificate expired"),
    ((NOW + DAY, NOW + 10 * DAY), "certificate not yet valid"),
])
def test_a_certificate_out_of_its_dates(base, ca, ca_pem, window, reason):
    leaf = ca.issue_cert(HOST, not_before=window[0], not_after=window[1])
    with https(leaf) as server:
        res = fetch(dataclasses.replace(base, CA_BUNDLE=ca_pem), url(server))
    assert (res.error_kind, res.error) == (ErrorKind.TLS, f"TLS with {HOST}: {reason}")


def test_a_certificate_for_another_name(base, ca, ca_pem):
    settings = dataclasses.replace(base, CA_BUNDLE=ca_pem, RESOLVE=(f"good.test={HOST}",))
    with https(ca.issue_cert("other.test")) as server:
        by_name = fetch(settings, url(server, "good.test"))
        by_address = fetch(settings, url(server))
    reason = "certificate for another name (wrong host name)"
    assert (by_name.error_kind, by_name.error) == (ErrorKind.TLS, f"TLS with good.test: {reason}")
    assert (by_address.error_kind, by_address.error) == (ErrorKind.TLS, f"TLS with {HOST}: {reason}")


def test_no_tls_version_in_common(base, leaf, ca_pem):
    def tls_1_1_only(context: ssl.SSLContext) -> None:
        context.set_ciphers("DEFAULT:@SECLEVEL=0")
        with warnings.catch_warnings():   # TLS 1.1 is deprecated: that is the point
            warnings.simplefilter("ignore", DeprecationWarning)
            context.minimum_version = context.maximum_version = ssl.TLSVersion.TLSv1_1

    with https(leaf, tls_1_1_only) as server:
        res = fetch(dataclasses.replace(base, CA_BUNDLE=ca_pem), url(server))
    assert (res.error_kind, res.error) == (ErrorKind.TLS, f"TLS with {HOST}: no TLS version in common (protocol version)")


@pytest.mark.parametrize(("reply", "reason"), [
    (b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
     "the port does not speak TLS (wrong version number)"),
    (b"", "the server hung up inside TLS (unexpected EOF)"),
])
def test_a_server_that_does_not_answer_in_tls(base, reply, reason):
    listener = socket.create_server((HOST, 0))

    def answer() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)   # the ClientHello
            conn.sendall(reply)
            conn.shutdown(socket.SHUT_WR)
            conn.recv(65536)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        res = fetch(base, f"https://{HOST}:{listener.getsockname()[1]}/")
    finally:
        thread.join(5)
        listener.close()
    assert (res.error_kind, res.error) == (ErrorKind.TLS, f"TLS with {HOST}: {reason}")


def test_a_certificate_error_is_not_retried(base, leaf):
    with https(leaf) as server:
        res = fetch(base, url(server))
    assert res.error_kind == ErrorKind.TLS and retry_action(res, 0, 2) == Action.DONE


def test_a_bad_certificate_ends_in_a_tls_record(settings, ca, ca_pem):
    """The crawl's stages in this process (tests/test_pipeline.py's way): the URL gets
    one record with its reason and the host one handshake (no retry). robots.txt is off:
    obeyed, its own TLS failure would keep the URL waiting for robots.txt."""
    from tests.test_pipeline import crawl_inline

    s = dataclasses.replace(settings, CA_BUNDLE=ca_pem, OBEY_ROBOTS=False, MAX_RETRIES=2)
    leaf = ca.issue_cert(HOST, not_before=NOW - 10 * DAY, not_after=NOW - DAY)
    with https(leaf) as server:
        records = crawl_inline(s, [url(server)], seconds=15)
        handshakes = server.handshakes
    assert [(r["url"], r.get("status"), r["error_kind"], r["error"]) for r in records] == [
        (url(server), None, "tls", f"TLS with {HOST}: certificate expired")]
    assert handshakes == 1


def test_robots_txt_failing_tls_ends_each_url_of_the_host_in_a_record(settings, ca, ca_pem):
    """robots.txt obeyed: its handshake fails on the certificate, which every URL of the host
    would meet too, so each URL gets the reason at once (not a 600 s wait as after a 5xx),
    and the host sees that one handshake only."""
    from tests.test_pipeline import crawl_inline

    s = dataclasses.replace(settings, CA_BUNDLE=ca_pem, MAX_RETRIES=2)
    leaf = ca.issue_cert(HOST, not_before=NOW - 10 * DAY, not_after=NOW - DAY)
    with https(leaf) as server:
        seeds = [url(server), url(server) + "other.html"]
        records = crawl_inline(s, seeds, seconds=15)
        handshakes = server.handshakes
    assert sorted((r["url"], r.get("status"), r["error_kind"], r["error"]) for r in records) == sorted(
        (u, None, "tls", f"TLS with {HOST}: certificate expired (robots.txt)") for u in seeds)
    assert handshakes == 1


# --- settings -----------------------------------------------------------------------------

def test_a_ca_bundle_that_gives_no_certificate_is_a_settings_error(tmp_path, ca_pem, monkeypatch):
    empty = tmp_path / "empty.pem"
    empty.write_text("not a certificate\n")
    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "ca.pem").write_bytes(Path(ca_pem).read_bytes())   # not rehashed
    cases = {str(tmp_path / "missing.pem"): "does not exist", str(empty): "holds no PEM certificate",
             str(folder): "holds no hashed certificate names"}
    for path, problem in cases.items():
        with pytest.raises(ConfigError, match=f"^CA_BUNDLE: {path} {problem}"):
            Settings.from_env({"CRAWLER_CA_BUNDLE": f"{ca_pem}:{path}"})
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "gone.pem"))
    with pytest.raises(ConfigError, match="^SSL_CERT_FILE: .*gone.pem does not exist"):
        Settings.from_env({})
    monkeypatch.delenv("SSL_CERT_FILE")
    assert Settings.from_env({"CRAWLER_CA_BUNDLE": ca_pem}).CA_BUNDLE == ca_pem


def test_manage_crawl_refuses_a_missing_ca_bundle(tmp_path):
    out = tmp_path / "out"
    proc = manage("crawl", "https://example.org/", "--ca-bundle", "missing.pem", "--out", str(out), *UA,
                  cwd=tmp_path, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == "error: CA_BUNDLE: missing.pem does not exist"
    assert not out.exists()
