"""Which HTTP proxy a fetch goes through, read as curl and requests read it; pure (no sockets).

Sources, read once when a Fetcher starts: PROXY_URL (every http:// and https:// URL;
``crawl --proxy``), else, with PROXY_FROM_ENV, the environment's ``http_proxy`` (http://
URLs), ``https_proxy`` (https:// URLs) and ``all_proxy`` (both, when the other is unset),
lower case first, then upper case, as Python's urllib reads them. Hosts listed in
NO_PROXY (the setting) and the environment's ``no_proxy``/``NO_PROXY`` are fetched
directly, with curl's rules: ``*`` alone is every host; a name is itself and its
subdomains (``example.com`` and ``.example.com`` both match ``example.com`` and
``www.example.com``, never ``badexample.com``; a leading ``*.`` is read as ``.``); an IP
address or CIDR block (``10.0.0.0/8``) matches hosts written as addresses in it (no name
is resolved for it); ``name:port`` or ``[v6]:port`` only that port. Case and a final dot
do not count. An entry that means nothing is skipped, as curl does, since the variable
is shared with every other tool of the machine.

Only HTTP proxies: ``http://[user:pass@]host:port`` (no scheme means http://, as in curl;
the port is required, since curl's and requests' defaults differ). A socks or https
proxy is a ConfigError at start, never a fetch made directly instead.

Credentials (percent-decoded user and password) go as ``Proxy-Authorization: Basic``
on each request to the proxy, never to the target: they are left out of a Proxy's repr,
of its ``label`` (``http://host:port``, which names it in records and logs), of the
request headers a FetchResult keeps (the WARC request record) and of every message
here (``redact_proxy_url``: ``http://***@host:port``).

What the private-address gate means through a proxy (the crawler resolves and vets every
target itself, before the proxy is asked) is stated in fetch/http.py's docstring.

Per site: ``ProxyRules.proxy_for(scheme, host, port)`` is the one choice; a job's
per-site rules can put their own function in front of it (``Fetcher(proxy_for=...)``).
"""
from __future__ import annotations

import base64
import ipaddress
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

import idna

from crawler_tasks.exceptions import ConfigError

if TYPE_CHECKING:
    from crawler_tasks.settings import Settings

__all__ = ["NoProxy", "Proxy", "ProxyChoice", "ProxyRules", "parse_no_proxy", "parse_proxy_url",
           "redact_proxy_url"]

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class Proxy:
    """An HTTP proxy: where it is, and the Basic credentials it is sent (not shown)."""

    host: str                                              # ASCII name or IP literal, no brackets
    port: int
    authorization: str | None = field(default=None, repr=False)   # "Basic ...", the header's value

    @property
    def label(self) -> str:
        """The proxy as records and logs name it: no credentials."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def __str__(self) -> str:
        return self.label


#: (scheme, ASCII host, port) of a target -> its proxy, or None for a direct fetch
ProxyChoice = Callable[[str, str, int], Proxy | None]


def redact_proxy_url(text: str) -> str:
    """A proxy URL as a message may show it: everything before its last ``@`` (a user and
    a password, even one with ``/`` or ``#`` in it) becomes ``***``."""
    text = text.strip()
    if "@" not in text:
        return text
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "", text
    return f"{scheme}{sep}***@{rest.rpartition('@')[2]}"


def parse_proxy_url(text: str, source: str = "PROXY_URL") -> Proxy:
    """A Proxy from ``http://[user:pass@]host:port`` (scheme optional); ConfigError names
    ``source`` and the URL without its credentials."""
    raw = text.strip()
    shown = redact_proxy_url(raw)
    if "://" not in raw:
        raw = f"http://{raw}"
    try:
        parts = urlsplit(raw)
        port = parts.port
        host = parts.hostname or ""
        if host and not host.isascii():
            host = idna.encode(host, uts46=True).decode("ascii")
    except (ValueError, idna.IDNAError):
        raise ConfigError(f"{source}: cannot read {shown!r} as a proxy URL (http://[user:pass@]host:port)") from None
    if parts.scheme.lower() != "http":
        raise ConfigError(f"{source}: {shown!r} is not an http:// proxy (only HTTP proxies are supported; "
                          "https:// URLs go through them with CONNECT)")
    if not host or port is None or parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ConfigError(f"{source}: {shown!r} must be http://[user:pass@]host:port (a host and a port, no path)")
    authorization = None
    if parts.username is not None or parts.password is not None:
        pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
        authorization = "Basic " + base64.b64encode(pair.encode("utf-8")).decode("ascii")
    return Proxy(host, port, authorization)


@dataclass(frozen=True, slots=True)
class NoProxy:
    """Hosts fetched directly (curl's NO_PROXY rules, in the module docstring)."""

    every: bool = False
    names: tuple[tuple[str, int | None], ...] = ()          # (name without leading dot, port or None)
    networks: tuple[tuple[IPNetwork, int | None], ...] = ()

    def matches(self, host: str, port: int) -> bool:
        if self.every:
            return True
        name = host.lower().rstrip(".")
        for entry, only in self.names:
            if (only is None or only == port) and (name == entry or name.endswith("." + entry)):
                return True
        if self.networks:
            try:
                address = ipaddress.ip_address(name.strip("[]"))
            except ValueError:
                return False
            for network, only in self.networks:
                if (only is None or only == port) and address.version == network.version and address in network:
                    return True
        return False


def parse_no_proxy(*lists: str | tuple[str, ...]) -> NoProxy:
    """One NoProxy from comma- (or space-) separated strings and tuples of entries;
    entries that mean nothing are skipped."""
    every = False
    names: list[tuple[str, int | None]] = []
    networks: list[tuple[IPNetwork, int | None]] = []
    for entries in lists:
        items = entries.replace(",", " ").split() if isinstance(entries, str) else list(entries)
        for item in items:
            entry = item.strip().lower()
            if entry == "*":
                every = True
                continue
            host, port = _host_port(entry)
            if port == -1 or not host:
                continue
            try:
                networks.append((ipaddress.ip_network(host, strict=False), port))
                continue
            except ValueError:
                pass
            name = host.removeprefix("*").lstrip(".").rstrip(".")
            if name and not name.isascii():
                try:
                    name = idna.encode(name, uts46=True).decode("ascii")
                except idna.IDNAError:
                    continue
            if name:
                names.append((name, port))
    return NoProxy(every, tuple(names), tuple(networks))


def _host_port(entry: str) -> tuple[str, int | None]:
    """(host, port or None) of a NO_PROXY entry; port -1 when it has a port that is no number."""
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        text = rest[1:] if rest.startswith(":") else ""
    elif entry.count(":") == 1:
        host, text = entry.split(":")
    else:   # a name, an IPv4 address or block, or a bare IPv6 address or block
        return entry, None
    if not text:
        return host, None
    return (host, int(text)) if text.isdigit() and 0 < int(text) < 65536 else (host, -1)


@dataclass(frozen=True, slots=True)
class ProxyRules:
    """The proxies of one process: one per scheme, and the hosts that go direct."""

    http: Proxy | None
    https: Proxy | None
    no_proxy: NoProxy = NoProxy()

    @classmethod
    def from_settings(cls, settings: Settings, environ: Mapping[str, str] | None = None) -> ProxyRules | None:
        """The rules of PROXY_URL, NO_PROXY and (PROXY_FROM_ENV) the environment; None when
        no URL goes through a proxy (the fetcher then does no proxy work at all)."""
        env = os.environ if environ is None else environ
        from_env = settings.PROXY_FROM_ENV

        def variable(name: str) -> tuple[str, str] | None:
            for spelled in (name, name.upper()):
                value = env.get(spelled, "").strip()
                if value:
                    return spelled, value
            return None

        http: Proxy | None
        https: Proxy | None
        if settings.PROXY_URL:
            http = https = parse_proxy_url(settings.PROXY_URL, "PROXY_URL")
        elif from_env:
            every = variable("all_proxy")
            found = [variable("http_proxy") or every, variable("https_proxy") or every]
            http, https = (parse_proxy_url(v[1], v[0]) if v else None for v in found)
        else:
            http = https = None
        if http is None and https is None:
            return None
        no_proxy = variable("no_proxy") if from_env else None
        return cls(http, https, parse_no_proxy(settings.NO_PROXY, no_proxy[1] if no_proxy else ""))

    def proxy_for(self, scheme: str, host: str, port: int) -> Proxy | None:
        """The proxy of a target (scheme, ASCII host, port); None: fetched directly."""
        proxy = self.https if scheme == "https" else self.http
        if proxy is None or self.no_proxy.matches(host, port):
            return None
        return proxy
