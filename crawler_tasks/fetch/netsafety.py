"""Network safety for fetches: which addresses a crawler may connect to, and pinned names.

A crawler follows links written by strangers, so a URL can point at
127.0.0.1, the cloud metadata service or an intranet box (SSRF). The fetcher
must resolve the host once (its resolver, ``fetch/dns.py``, or a name pinned by
``parse_resolve_overrides`` or ``hosts_file``), run ``check_address`` on that exact
address, and connect to it; checking a name and then letting the HTTP library
resolve it again would open a DNS-rebinding window.

Cloud metadata and platform endpoints (``METADATA_ADDRESSES``) hand out credentials
or control the machine, so they are refused even with ``allow_private``, in every
form that reaches them (IPv4-mapped, NAT64, 6to4, ...), unless the operator names the
address in ``allow_metadata`` (the ALLOW_METADATA_ADDRESSES setting).
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable

__all__ = [
    "ALWAYS_REFUSED",
    "METADATA_ADDRESSES",
    "AddressRefused",
    "ResolveError",
    "check_address",
    "classify_address",
    "hosts_file",
    "literal_address",
    "parse_resolve_overrides",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: Categories refused even with ``allow_private``: nothing a crawl may want is
#: there, and the metadata service hands out cloud credentials.
ALWAYS_REFUSED = frozenset({"cloud-metadata", "multicast", "broadcast"})


class AddressRefused(Exception):
    """The fetcher must not connect to this address; ``reason`` says why, for the crawl log."""

    def __init__(self, reason: str, *, ip: str | None = None, category: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.ip = ip
        self.category = category


class ResolveError(Exception):
    """A host name could not be resolved; ``temporary`` is True for EAI_AGAIN-style failures."""

    def __init__(self, reason: str, *, host: str | None = None, temporary: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.host = host
        self.temporary = temporary


# --- Classification -----------------------------------------------------------

_V4 = ipaddress.IPv4Network
_V6 = ipaddress.IPv6Network

#: Cloud metadata and platform endpoints, category "cloud-metadata" wherever their
#: surrounding range is (link-local, carrier-grade NAT, IETF protocol, even public).
METADATA_ADDRESSES: frozenset[IPAddress] = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254",  # IMDS: AWS, GCP (metadata.google.internal), Azure, OCI, OpenStack, DO, ...
    "fd00:ec2::254",    # AWS IMDS over IPv6
    "fd20:ce::254",     # GCP metadata server over IPv6
    "fe80::a9fe:a9fe",  # OpenStack metadata over IPv6
    "169.254.170.2",    # AWS ECS task metadata and container credentials
    "169.254.170.23",   # AWS EKS Pod Identity agent (credentials)
    "fd00:ec2::23",     # AWS EKS Pod Identity agent over IPv6
    "169.254.169.253",  # AWS VPC DNS resolver
    "fd00:ec2::253",    # AWS VPC DNS resolver over IPv6
    "169.254.169.123",  # AWS Time Sync
    "fd00:ec2::123",    # AWS Time Sync over IPv6
    "100.100.100.200",  # Alibaba Cloud metadata
    "168.63.129.16",    # Azure WireServer (platform agent channel; a public address)
    "192.0.0.192",      # Oracle Cloud (Classic) metadata
    "169.254.0.23",     # Tencent Cloud metadata (metadata.tencentyun.com)
    "169.254.42.42",    # Scaleway metadata
    "fd00:42::42",      # Scaleway metadata over IPv6
))

# Checked in order, so a more specific range must come before the one holding it.
_V4_RANGES: tuple[tuple[ipaddress.IPv4Network, str], ...] = (
    (_V4("0.0.0.0/32"), "unspecified"),
    (_V4("0.0.0.0/8"), "this-network"),
    (_V4("10.0.0.0/8"), "private"),
    (_V4("100.64.0.0/10"), "carrier-grade-nat"),
    (_V4("127.0.0.0/8"), "loopback"),
    (_V4("169.254.0.0/16"), "link-local"),
    (_V4("172.16.0.0/12"), "private"),
    (_V4("192.0.0.0/24"), "ietf-protocol"),
    (_V4("192.0.2.0/24"), "documentation"),
    (_V4("192.88.99.0/24"), "reserved"),  # deprecated 6to4 relay anycast
    (_V4("192.168.0.0/16"), "private"),
    (_V4("198.18.0.0/15"), "benchmark"),
    (_V4("198.51.100.0/24"), "documentation"),
    (_V4("203.0.113.0/24"), "documentation"),
    (_V4("224.0.0.0/4"), "multicast"),
    (_V4("255.255.255.255/32"), "broadcast"),
    (_V4("240.0.0.0/4"), "reserved"),
)

_V6_RANGES: tuple[tuple[ipaddress.IPv6Network, str], ...] = (
    (_V6("100::/64"), "reserved"),  # discard-only
    (_V6("2001:2::/48"), "benchmark"),
    (_V6("2001:10::/28"), "reserved"),  # deprecated ORCHID
    (_V6("2001:db8::/32"), "documentation"),
    (_V6("3fff::/20"), "documentation"),
    (_V6("fc00::/7"), "private"),  # unique local
    (_V6("fe80::/10"), "link-local"),
    (_V6("fec0::/10"), "site-local"),  # deprecated, still not global
    (_V6("ff00::/8"), "multicast"),
)

_GLOBAL_UNICAST = _V6("2000::/3")
_IPV4_TRANSLATED = _V6("::ffff:0:0:0/96")  # SIIT, RFC 2765
_IPV4_COMPATIBLE = _V6("::/96")  # deprecated
_NAT64_WELL_KNOWN = _V6("64:ff9b::/96")
_NAT64_LOCAL = _V6("64:ff9b:1::/48")


def _parse_ip(ip: str) -> IPAddress:
    text = ip.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    return ipaddress.ip_address(text)


def _embedded_v4(addr: ipaddress.IPv6Address) -> ipaddress.IPv4Address:
    return ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)


def _plain(addr: IPAddress) -> IPAddress:
    """The address without an IPv6 scope id ("%eth0" does not change where packets go)."""
    return ipaddress.IPv6Address(int(addr)) if isinstance(addr, ipaddress.IPv6Address) else addr


def _classify_v4(addr: ipaddress.IPv4Address, exempt: frozenset[IPAddress]) -> str | None:
    if addr in METADATA_ADDRESSES and addr not in exempt:
        return "cloud-metadata"
    for net, category in _V4_RANGES:
        if addr in net:
            return category
    return None


def _classify(
    addr: IPAddress, exempt: frozenset[IPAddress] = frozenset()
) -> tuple[str | None, ipaddress.IPv4Address | None]:
    """(category, the IPv4 address it was derived from if the IPv6 form embeds one);
    metadata addresses in ``exempt`` are judged by their surrounding range."""
    if isinstance(addr, ipaddress.IPv4Address):
        return _classify_v4(addr, exempt), None

    plain = ipaddress.IPv6Address(int(addr))
    if int(plain) == 0:
        return "unspecified", None
    if int(plain) == 1:
        return "loopback", None

    # Forms whose packets end up at an IPv4 address: judge that address.
    embedded: ipaddress.IPv4Address | None = plain.ipv4_mapped
    if embedded is None and (
        plain in _IPV4_TRANSLATED or plain in _IPV4_COMPATIBLE or plain in _NAT64_WELL_KNOWN
    ):
        embedded = _embedded_v4(plain)
    if embedded is None and plain.sixtofour is not None:
        embedded = plain.sixtofour
    if embedded is None and plain.teredo is not None:
        embedded = plain.teredo[1]  # the client, where traffic is delivered
    if embedded is not None:
        category = _classify_v4(embedded, exempt)
        if category is None and plain in _IPV4_COMPATIBLE:
            category = "reserved"  # deprecated form, never routed globally
        return category, embedded

    if plain in METADATA_ADDRESSES and plain not in exempt:
        return "cloud-metadata", None
    if plain in _NAT64_LOCAL:
        # Local-use NAT64 (RFC 8215): the translator is inside some network. Its /96
        # form may still carry a metadata address in the last 32 bits.
        embedded = _embedded_v4(plain)
        if embedded in METADATA_ADDRESSES and embedded not in exempt:
            return "cloud-metadata", embedded
        return "private", None
    for net, category in _V6_RANGES:
        if plain in net:
            return category, None
    if plain not in _GLOBAL_UNICAST:
        return "reserved", None
    return None, None


def classify_address(ip: str) -> str | None:
    """Category of a non-public address ("loopback", "private", ...), or None if public.

    Accepts IPv4, IPv6 (brackets and a zone id tolerated) and IPv6 forms that
    carry an IPv4 address (mapped, translated, compatible, NAT64, 6to4,
    Teredo), which are judged by that IPv4 address because that is where the
    packets go. Raises ValueError if ``ip`` is not an IP address.
    """
    return _classify(_parse_ip(ip))[0]


def check_address(ip: str, allow_private: bool, allow_metadata: Iterable[str] = ()) -> None:
    """Raise AddressRefused unless the fetcher may connect to ``ip``.

    ``allow_private`` (for crawling a test site on localhost or an intranet)
    lets non-public unicast through, but never the categories in
    ``ALWAYS_REFUSED``. ``allow_metadata`` names metadata endpoints the operator
    wants reachable after all (matched on the address packets go to, so it covers
    that address's IPv6 forms); such an address is then judged by its range as
    any other (168.63.129.16 is public, 169.254.170.2 needs ``allow_private``).
    Anything that is not an IP address is refused; ValueError if an
    ``allow_metadata`` item is not one (settings.validate checks them first).
    """
    try:
        addr = _parse_ip(ip)
    except ValueError:
        raise AddressRefused(f"invalid address {ip!r} refused", ip=ip, category="invalid") from None
    category, embedded = _classify(addr)
    if category is None:
        return
    shown = f"{ip.strip()} (embeds {embedded})" if embedded is not None else ip.strip()
    if category == "cloud-metadata" and allow_metadata:
        category, embedded = _classify(addr, frozenset(_plain(_parse_ip(a)) for a in allow_metadata))
        if category is None:
            return
    if category in ALWAYS_REFUSED:
        why = "never allowed" if category == "cloud-metadata" else "not a unicast destination"
        raise AddressRefused(
            f"{category} address {shown} refused ({why}, even with allow_private)",
            ip=ip,
            category=category,
        )
    if not allow_private:
        raise AddressRefused(
            f"{category} address {shown} refused (allow_private is off)",
            ip=ip,
            category=category,
        )


# --- DNS ---------------------------------------------------------------------


@functools.lru_cache(maxsize=65_536)
def literal_address(host: str) -> str | None:
    """The address a host spells (an IP literal), else None. Cached: every turn asks
    it of its host, and ``ip_address`` takes ~10 us a host, raising for a name."""
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return None
    return text


def _pick(addresses: Iterable[str]) -> str | None:
    """First valid IPv4 address, else the first valid IPv6 one (IPv6 is often half-configured)."""
    first_v6: str | None = None
    for address in addresses:
        if not isinstance(address, str):
            continue
        try:
            parsed = _parse_ip(address)
        except ValueError:
            continue
        if isinstance(parsed, ipaddress.IPv4Address):
            return str(parsed)
        if first_v6 is None:
            first_v6 = address.strip().strip("[]")
    return first_v6


def parse_resolve_overrides(items: Iterable[str]) -> dict[str, str]:
    """Turn "--resolve" strings into a host -> address map (names the fetcher never looks up).

    Each item is "host=addr" or curl's "host:port:addr" (a leading "+" and
    several comma-separated addresses are accepted; IPv4 is preferred as in
    ``resolve``). The port is validated but dropped: pins are per host. A host
    given two different addresses is an error, not a silent last-one-wins.
    """
    out: dict[str, str] = {}
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"--resolve item must be a string, got {item!r}")
        text = item.strip()
        form = "expected host=addr or host:port:addr"
        if "=" in text:
            host, _, addr_part = text.partition("=")
        else:
            body = text[1:] if text.startswith("+") else text
            if body.startswith("-"):
                raise ValueError(f"--resolve item {item!r}: removal entries are not supported")
            parts = body.split(":", 2)
            if len(parts) != 3:
                raise ValueError(f"--resolve item {item!r} is malformed: {form}")
            host, port, addr_part = parts
            if not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"--resolve item {item!r}: port {port!r} is not in 1-65535")
        host = host.strip().lower().rstrip(".")
        if not host:
            raise ValueError(f"--resolve item {item!r} has an empty host: {form}")
        if any(c.isspace() or c in "/[]@*:" for c in host):
            raise ValueError(f"--resolve item {item!r}: {host!r} is not a host name")
        addresses = [a.strip() for a in addr_part.split(",") if a.strip()]
        if not addresses:
            raise ValueError(f"--resolve item {item!r} has no address: {form}")
        bad = [a for a in addresses if literal_address(a) is None]
        if bad:
            raise ValueError(f"--resolve item {item!r}: {bad[0]!r} is not an IP address")
        address = _pick(addresses)
        assert address is not None
        if host in out and out[host] != address:
            raise ValueError(
                f"--resolve item {item!r}: {host!r} is already pinned to {out[host]}"
            )
        out[host] = address
    return out


def hosts_file(path: str = "/etc/hosts") -> dict[str, str]:
    """The names /etc/hosts pins (``localhost`` among them), each to its first IPv4
    address, else its first IPv6 one, as nsswitch's "files" before "dns"; {} when the
    file cannot be read. Malformed lines are skipped."""
    found: dict[str, list[str]] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return {}
    for line in lines:
        fields = line.split("#", 1)[0].split()
        if len(fields) < 2 or literal_address(fields[0]) is None:
            continue
        for name in fields[1:]:
            found.setdefault(name.lower().rstrip("."), []).append(fields[0].split("%")[0])
    return {name: address for name, addresses in found.items() if (address := _pick(addresses)) is not None}
