from __future__ import annotations

import dataclasses
import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler_tasks.exceptions import ConfigError
from crawler_tasks.fetch.http import Fetcher
from crawler_tasks.fetch.netsafety import (
    ALWAYS_REFUSED,
    METADATA_ADDRESSES,
    AddressRefused,
    check_address,
    classify_address,
    hosts_file,
    literal_address,
    parse_resolve_overrides,
)
from crawler_tasks.settings import Settings

# --- classification ----------------------------------------------------------------

CLASSIFICATION = [
    # IPv4, walking the edges of every range
    ("0.0.0.0", "unspecified"),
    ("0.0.0.1", "this-network"),
    ("0.255.255.255", "this-network"),
    ("1.0.0.0", None),
    ("1.1.1.1", None),
    ("8.8.8.8", None),
    ("9.255.255.255", None),
    ("10.0.0.0", "private"),
    ("10.255.255.255", "private"),
    ("11.0.0.0", None),
    ("100.63.255.255", None),
    ("100.64.0.0", "carrier-grade-nat"),
    ("100.100.100.199", "carrier-grade-nat"),
    ("100.100.100.200", "cloud-metadata"),        # Alibaba Cloud metadata
    ("100.127.255.255", "carrier-grade-nat"),
    ("100.128.0.0", None),
    ("126.255.255.255", None),
    ("127.0.0.0", "loopback"),
    ("127.0.0.1", "loopback"),
    ("127.255.255.255", "loopback"),
    ("128.0.0.0", None),
    ("168.63.129.15", None),
    ("168.63.129.16", "cloud-metadata"),          # Azure WireServer, a public address
    ("169.253.255.255", None),
    ("169.254.0.0", "link-local"),
    ("169.254.169.252", "link-local"),
    ("169.254.169.253", "cloud-metadata"),        # AWS VPC DNS
    ("169.254.169.254", "cloud-metadata"),
    ("169.254.255.255", "link-local"),
    ("169.255.0.0", None),
    ("172.15.255.255", None),
    ("172.16.0.0", "private"),
    ("172.31.255.255", "private"),
    ("172.32.0.0", None),
    ("192.0.0.0", "ietf-protocol"),
    ("192.0.0.255", "ietf-protocol"),
    ("192.0.0.192", "cloud-metadata"),            # Oracle Cloud
    ("192.0.1.0", None),
    ("192.0.2.0", "documentation"),
    ("192.0.2.255", "documentation"),
    ("192.0.3.0", None),
    ("192.88.99.1", "reserved"),
    ("192.167.255.255", None),
    ("192.168.0.0", "private"),
    ("192.168.255.255", "private"),
    ("192.169.0.0", None),
    ("198.17.255.255", None),
    ("198.18.0.0", "benchmark"),
    ("198.19.255.255", "benchmark"),
    ("198.20.0.0", None),
    ("198.51.100.7", "documentation"),
    ("203.0.113.9", "documentation"),
    ("203.0.114.0", None),
    ("223.255.255.255", None),
    ("224.0.0.0", "multicast"),
    ("239.255.255.255", "multicast"),
    ("240.0.0.0", "reserved"),
    ("255.255.255.254", "reserved"),
    ("255.255.255.255", "broadcast"),
    (" 8.8.4.4 ", None),
    # IPv6
    ("::", "unspecified"),
    ("::1", "loopback"),
    ("[::1]", "loopback"),
    ("0:0:0:0:0:0:0:1", "loopback"),
    ("2606:4700:4700::1111", None),
    ("2001:4860:4860::8888", None),
    ("2000::", None),
    ("3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", None),  # just past 3fff::/20
    ("1fff:ffff::1", "reserved"),
    ("4000::1", "reserved"),
    ("5f00::1", "reserved"),
    ("100::1", "reserved"),
    ("100:0:0:1::1", "reserved"),
    ("2001:2::1", "benchmark"),
    ("2001:10::1", "reserved"),
    ("2001:db8::1", "documentation"),
    ("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", "documentation"),
    ("2001:db9::1", None),
    ("3fff::1", "documentation"),
    ("3fff:fff::1", "documentation"),
    ("fbff:ffff::1", "reserved"),
    ("fc00::", "private"),
    ("fd12:3456:789a::1", "private"),
    ("fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "private"),
    ("fd00:ec2::254", "cloud-metadata"),
    ("fd00:ec2::253", "cloud-metadata"),
    ("fd00:ec2::252", "private"),
    ("fe7f:ffff::1", "reserved"),
    ("fe80::", "link-local"),
    ("fe80::1%eth0", "link-local"),
    ("[fe80::1%25eth0]", "link-local"),
    ("febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "link-local"),
    ("fec0::1", "site-local"),
    ("ff02::1", "multicast"),
    ("ff0e::101", "multicast"),
    # IPv6 forms that carry an IPv4 address are judged by it
    ("::ffff:127.0.0.1", "loopback"),
    ("::ffff:7f00:1", "loopback"),
    ("::FFFF:10.1.2.3", "private"),
    ("::ffff:169.254.169.254", "cloud-metadata"),
    ("::ffff:0.0.0.0", "unspecified"),
    ("::ffff:8.8.8.8", None),
    ("::ffff:0:127.0.0.1", "loopback"),     # IPv4-translated (SIIT)
    ("::ffff:0:8.8.8.8", None),
    ("::127.0.0.1", "loopback"),            # deprecated IPv4-compatible
    ("::192.168.1.1", "private"),
    ("::8.8.8.8", "reserved"),
    ("64:ff9b::127.0.0.1", "loopback"),     # NAT64 well-known prefix
    ("64:ff9b::a9fe:a9fe", "cloud-metadata"),
    ("64:ff9b::8.8.8.8", None),
    ("64:ff9b:1::a00:1", "private"),        # local-use NAT64
    ("64:ff9b:1::808:808", "private"),
    ("64:ff9b:1::a9fe:a9fe", "cloud-metadata"),
    ("2002:7f00:1::", "loopback"),          # 6to4
    ("2002:c0a8:101::1", "private"),
    ("2002:a9fe:a9fe::1", "cloud-metadata"),
    ("2002:808:808::1", None),
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "documentation"),  # Teredo, client 192.0.2.45
    ("2001:0:4136:e378:8000:63bf:80ff:fffe", "loopback"),       # Teredo, client 127.0.0.1
    ("2001:0:4136:e378:8000:63bf:f7f7:f7f7", None),             # Teredo, client 8.8.8.8
]


@pytest.mark.parametrize("ip, expected", CLASSIFICATION)
def test_classify_address(ip: str, expected: str | None) -> None:
    assert classify_address(ip) == expected


def test_classification_table_is_large_and_unique() -> None:
    ips = [ip for ip, _ in CLASSIFICATION]
    assert len(ips) >= 40 and len(set(ips)) == len(ips)


@pytest.mark.parametrize("bad", ["", "localhost", "1.2.3", "256.1.1.1", "127.1", "0x7f.0.0.1",
                                 "2130706433", "010.0.0.1", "::g", "[127.0.0.1", "1.2.3.4/32"])
def test_classify_rejects_non_addresses(bad: str) -> None:
    with pytest.raises(ValueError):
        classify_address(bad)


@settings(max_examples=100, deadline=None, database=None)
@given(st.ip_addresses(v=4))
def test_mapped_forms_agree_with_ipv4(addr: ipaddress.IPv4Address) -> None:
    expected = classify_address(str(addr))
    assert classify_address(f"::ffff:{addr}") == expected
    assert classify_address(f"64:ff9b::{addr}") == expected
    six_to_four = ipaddress.IPv6Address((0x2002 << 112) | (int(addr) << 80) | 1)
    assert classify_address(str(six_to_four)) == expected


@settings(max_examples=100, deadline=None, database=None)
@given(st.ip_addresses())
def test_public_by_us_is_global_by_python(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> None:
    # We may refuse more than the stdlib, never less.
    if classify_address(str(addr)) is None:
        embedded = getattr(addr, "ipv4_mapped", None) or getattr(addr, "sixtofour", None)
        teredo = getattr(addr, "teredo", None)
        target = embedded or (teredo[1] if teredo else None)
        if target is not None:
            assert target.is_global
        elif addr not in ipaddress.ip_network("64:ff9b::/96") and addr not in ipaddress.ip_network("2001::/23"):
            assert addr.is_global


# --- check_address ------------------------------------------------------------------

@pytest.mark.parametrize("ip", ["8.8.8.8", "2606:4700:4700::1111", "::ffff:1.1.1.1"])
@pytest.mark.parametrize("allow_private", [False, True])
def test_public_addresses_pass(ip: str, allow_private: bool) -> None:
    check_address(ip, allow_private)


@pytest.mark.parametrize(
    "ip, category",
    [
        ("127.0.0.1", "loopback"), ("10.0.0.1", "private"), ("::1", "loopback"),
        ("fe80::1", "link-local"), ("100.64.0.1", "carrier-grade-nat"), ("0.0.0.0", "unspecified"),
        ("::ffff:192.168.0.1", "private"), ("fc00::1", "private"), ("240.0.0.1", "reserved"),
        ("192.0.2.1", "documentation"),
    ],
)
def test_private_refused_unless_allowed(ip: str, category: str) -> None:
    with pytest.raises(AddressRefused) as info:
        check_address(ip, allow_private=False)
    assert info.value.category == category
    assert info.value.ip == ip
    assert category in info.value.reason and ip in info.value.reason
    assert "allow_private is off" in info.value.reason
    check_address(ip, allow_private=True)  # no exception


def test_reason_text() -> None:
    with pytest.raises(AddressRefused) as info:
        check_address("127.0.0.1", allow_private=False)
    assert info.value.reason == "loopback address 127.0.0.1 refused (allow_private is off)"
    assert str(info.value) == info.value.reason


def test_reason_names_the_embedded_address() -> None:
    with pytest.raises(AddressRefused) as info:
        check_address("::ffff:7f00:1", allow_private=False)
    assert "embeds 127.0.0.1" in info.value.reason


@pytest.mark.parametrize("ip", ["169.254.169.254", "::ffff:169.254.169.254", "fd00:ec2::254",
                                "224.0.0.1", "ff02::1", "255.255.255.255"])
@pytest.mark.parametrize("allow_private", [False, True])
def test_always_refused(ip: str, allow_private: bool) -> None:
    with pytest.raises(AddressRefused) as info:
        check_address(ip, allow_private)
    assert info.value.category in ALWAYS_REFUSED
    assert "even with allow_private" in info.value.reason


# --- cloud metadata and platform endpoints ----------------------------------------

METADATA_V4 = ["169.254.169.254", "169.254.170.2", "169.254.170.23", "100.100.100.200",
               "168.63.129.16", "192.0.0.192", "169.254.169.253", "169.254.169.123",
               "169.254.0.23", "169.254.42.42"]
METADATA_V6 = ["fd00:ec2::254", "fd00:ec2::23", "fd00:ec2::253", "fd00:ec2::123", "fd20:ce::254",
               "fe80::a9fe:a9fe", "fd00:42::42"]


def _v4_forms(ip: str) -> list[str]:
    """The address and IPv6 forms whose packets reach it."""
    n = int(ipaddress.IPv4Address(ip))
    return [ip, f"::ffff:{ip}", f"::ffff:{n >> 16:x}:{n & 0xFFFF:x}", f"64:ff9b::{ip}",
            f"64:ff9b::{n >> 16:x}:{n & 0xFFFF:x}", f"64:ff9b:1::{ip}", f"::ffff:0:{ip}",
            str(ipaddress.IPv6Address((0x2002 << 112) | (n << 80) | 1))]


METADATA_FORMS = [form for ip in METADATA_V4 for form in _v4_forms(ip)] + METADATA_V6 + [
    "[fd00:ec2::254]", "fe80::a9fe:a9fe%eth0", "FD00:EC2:0:0:0:0:0:23"]


def test_metadata_table_holds_every_listed_endpoint() -> None:
    assert {ipaddress.ip_address(a) for a in METADATA_V4 + METADATA_V6} <= METADATA_ADDRESSES
    assert "::ffff:a9fe:a9fe" in METADATA_FORMS and "64:ff9b::a9fe:a9fe" in METADATA_FORMS


@pytest.mark.parametrize("ip", METADATA_FORMS)
@pytest.mark.parametrize("allow_private", [False, True])
def test_metadata_endpoints_refused_even_with_allow_private(ip: str, allow_private: bool) -> None:
    assert classify_address(ip) == "cloud-metadata"
    with pytest.raises(AddressRefused) as info:
        check_address(ip, allow_private)
    assert info.value.category == "cloud-metadata"
    assert "never allowed" in info.value.reason and "even with allow_private" in info.value.reason


@pytest.mark.parametrize("ip", ["168.63.129.16", "::ffff:168.63.129.16", "64:ff9b::a83f:8110"])
def test_an_allowed_public_metadata_address_passes_without_allow_private(ip: str) -> None:
    check_address(ip, allow_private=False, allow_metadata=["168.63.129.16"])


@pytest.mark.parametrize("ip", ["169.254.170.2", "::ffff:169.254.170.2", "64:ff9b::a9fe:aa02"])
def test_an_allowed_link_local_metadata_address_still_needs_allow_private(ip: str) -> None:
    with pytest.raises(AddressRefused) as info:
        check_address(ip, allow_private=False, allow_metadata=["169.254.170.2"])
    assert info.value.category == "link-local" and "allow_private is off" in info.value.reason
    check_address(ip, allow_private=True, allow_metadata=["169.254.170.2"])


@pytest.mark.parametrize("ip, allowed", [("fd00:ec2::254", "[fd00:ec2::254]"),
                                         ("fe80::a9fe:a9fe%eth0", "fe80::a9fe:a9fe")])
def test_an_allowed_ipv6_metadata_address_passes_with_allow_private(ip: str, allowed: str) -> None:
    check_address(ip, allow_private=True, allow_metadata=[allowed])


def test_allowing_one_metadata_address_allows_no_other() -> None:
    for ip in ["169.254.169.254", "::ffff:169.254.169.254", "169.254.170.23", "fd00:ec2::23"]:
        with pytest.raises(AddressRefused):
            check_address(ip, allow_private=True, allow_metadata=["169.254.170.2", "168.63.129.16"])


def test_allow_metadata_setting_is_read_validated_and_used_by_the_fetcher() -> None:
    env = {"CRAWLER_ALLOW_METADATA_ADDRESSES": "168.63.129.16, 169.254.170.2"}
    assert Settings.from_env(env).ALLOW_METADATA_ADDRESSES == ("168.63.129.16", "169.254.170.2")
    with pytest.raises(ConfigError, match="ALLOW_METADATA_ADDRESSES"):
        Settings.from_env({"CRAWLER_ALLOW_METADATA_ADDRESSES": "metadata.google.internal"})
    # check_host vets the resolved address and connects to nothing
    base = dataclasses.replace(Settings(), ALLOW_PRIVATE=True,
                               RESOLVE=("metadata.google.internal=169.254.169.254", "wire.test=168.63.129.16"))
    for host in ("metadata.google.internal", "wire.test"):
        with pytest.raises(AddressRefused):
            Fetcher(base).check_host(host)
    opened = Fetcher(dataclasses.replace(base, ALLOW_METADATA_ADDRESSES=("168.63.129.16",)))
    assert opened.check_host("wire.test") == "168.63.129.16"
    with pytest.raises(AddressRefused):
        opened.check_host("metadata.google.internal")


@pytest.mark.parametrize("bad", ["", "example.com", "127.1", "999.1.1.1"])
def test_invalid_addresses_refused(bad: str) -> None:
    with pytest.raises(AddressRefused) as info:
        check_address(bad, allow_private=True)
    assert info.value.category == "invalid"


# --- names the fetcher never looks up -------------------------------------------------

@pytest.mark.parametrize("literal, expected", [
    ("127.0.0.1", "127.0.0.1"), ("[::1]", "::1"), ("::1", "::1"), ("[fe80::1%eth0]", "fe80::1%eth0"),
    ("8.8.8.8", "8.8.8.8"), ("::ffff:127.0.0.1", "::ffff:127.0.0.1"),
])
def test_literals_need_no_lookup(literal: str, expected: str) -> None:
    assert literal_address(literal) == expected
    assert Fetcher(Settings()).pinned(literal) == expected


def test_a_non_canonical_numeric_host_is_a_name() -> None:
    # "127.1" is not a literal for us: it would be looked up, and its answer checked
    assert literal_address("127.1") is None and Fetcher(Settings()).pinned("127.1") is None


def test_hosts_file_pins_names_ipv4_first_and_skips_junk(tmp_path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("# comment\n127.0.0.1 localhost Local.Test.\n::1 localhost ip6-localhost\n"
                     "fe80::1%eth0 link.test\nnot-an-address junk.test\n10.0.0.1\n\n"
                     "192.0.2.5 twice.test # trailing\n192.0.2.6 twice.test\n")
    assert hosts_file(str(hosts)) == {"localhost": "127.0.0.1", "local.test": "127.0.0.1",
                                      "ip6-localhost": "::1", "link.test": "fe80::1", "twice.test": "192.0.2.5"}
    assert hosts_file(str(tmp_path / "missing")) == {}


def test_resolve_overrides_win_over_hosts_file() -> None:
    fetcher = Fetcher(dataclasses.replace(Settings(), ALLOW_PRIVATE=True, RESOLVE=("localhost=127.0.0.9",)))
    assert fetcher.pinned("localhost") == "127.0.0.9" and fetcher.check_host("LOCALHOST.") == "127.0.0.9"


# --- parse_resolve_overrides ---------------------------------------------------------------

def test_parse_resolve_overrides_forms() -> None:
    parsed = parse_resolve_overrides([
        "example.test=127.0.0.1",
        "Other.Test:443:127.0.0.2",
        "+plus.test:80:127.0.0.3",
        "v6.test:8080:[::1]",
        "bare6.test:8080:::1",
        "list.test:80:::1,127.0.0.4",
        "eq6.test=::1",
        " spaced.test = 127.0.0.5 ",
        "same.test:80:127.0.0.6",
        "same.test:443:127.0.0.6",
    ])
    assert parsed == {
        "example.test": "127.0.0.1",
        "other.test": "127.0.0.2",
        "plus.test": "127.0.0.3",
        "v6.test": "::1",
        "bare6.test": "::1",
        "list.test": "127.0.0.4",
        "eq6.test": "::1",
        "spaced.test": "127.0.0.5",
        "same.test": "127.0.0.6",
    }
    assert parse_resolve_overrides([]) == {}


@pytest.mark.parametrize(
    "item, message",
    [
        ("example.test", "malformed"),
        ("example.test:443", "malformed"),
        ("=127.0.0.1", "empty host"),
        ("example.test=", "no address"),
        ("example.test=localhost", "not an IP address"),
        ("example.test=127.1", "not an IP address"),
        ("example.test:0:127.0.0.1", "port"),
        ("example.test:65536:127.0.0.1", "port"),
        ("example.test:http:127.0.0.1", "port"),
        ("example.test:443:", "no address"),
        ("example.test:443:1.2.3.4,bogus", "not an IP address"),
        ("-example.test:443", "removal"),
        ("*:443:127.0.0.1", "not a host name"),
        ("bad host=127.0.0.1", "not a host name"),
        ("a:80=127.0.0.1", "not a host name"),
    ],
)
def test_parse_resolve_overrides_errors(item: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        parse_resolve_overrides([item])
    assert repr(item) in str(info.value)


def test_parse_resolve_overrides_conflict() -> None:
    with pytest.raises(ValueError, match="already pinned"):
        parse_resolve_overrides(["a.test=127.0.0.1", "a.test:443:127.0.0.2"])


def test_parse_resolve_overrides_pins_the_fetcher() -> None:
    fetcher = Fetcher(dataclasses.replace(Settings(), ALLOW_PRIVATE=True, RESOLVE=("site.test:8000:127.0.0.1",)))
    assert fetcher.check_host("site.test") == "127.0.0.1"


def test_check_host_keeps_its_verdict_per_address_and_says_it_each_time() -> None:
    fetcher = Fetcher(dataclasses.replace(Settings(), RESOLVE=("a.test=127.0.0.9", "b.test=127.0.0.9",
                                                              "pub.test=93.184.215.14")))
    seen = []
    for host in ("a.test", "b.test", "a.test"):
        with pytest.raises(AddressRefused) as info:
            fetcher.check_host(host)
        seen.append((info.value.reason, info.value.category, info.value.ip))
    assert seen[0] == seen[1] == seen[2] and seen[0][1] == "loopback" and seen[0][2] == "127.0.0.9"
    assert fetcher.check_host("pub.test") == fetcher.check_host("pub.test") == "93.184.215.14"
    # another Fetcher with other settings judges the same address otherwise
    assert Fetcher(dataclasses.replace(Settings(), ALLOW_PRIVATE=True,
                                       RESOLVE=("a.test=127.0.0.9",))).check_host("a.test") == "127.0.0.9"
