"""The install's one address check (nanoclaw/internet/addresses.py): every spelling of a refused
address is refused, before any connection; the owner's named networks and ports open only those."""
from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanoclaw.internet.addresses import Refused, Rules, parse_networks, parse_ports, refusal, target
from nanoclaw.proxy import egress

LOOPBACK_SPELLINGS = [
    "http://127.0.0.1/", "http://2130706433/", "http://0x7f000001/", "http://0x7f.1/", "http://017700000001/",
    "http://0177.0.0.1/", "http://127.1/", "http://127.0.1/", "http://[::ffff:127.0.0.1]/", "http://[::ffff:7f00:1]/",
    "http://[::1]/", "http://[64:ff9b::7f00:1]/", "http://[::127.0.0.1]/", "http://127.0.0.1./", "HTTP://127.0.0.1/",
    "http://[0:0:0:0:0:ffff:127.0.0.1]/", "http://0/", "http://0.0.0.0/", "http://[2002:7f00:1::]/",
]


@pytest.mark.parametrize("url", LOOPBACK_SPELLINGS)
def test_every_spelling_of_a_local_address_is_refused(url):
    where = target(url)
    assert where.literal is not None, url
    assert refusal(where.literal, where.port, Rules()) is not None, url


@pytest.mark.parametrize("address", ["169.254.169.254", "fd00:ec2::254", "100.100.100.200", "::ffff:169.254.169.254"])
def test_the_metadata_addresses_are_refused_even_in_an_opened_network(address):
    rules = Rules(allow_networks=parse_networks("0.0.0.0/0 ::/0"))
    assert "metadata" in refusal(address, 80, rules)


def test_an_opened_network_admits_its_addresses_but_not_the_installs_own_ports():
    rules = Rules(allow_networks=parse_networks("192.168.1.0/24"), own_ports=frozenset({8080}))
    assert refusal("192.168.1.20", 80, rules) is None
    assert refusal("192.168.2.20", 80, rules) is not None
    assert "own services" in refusal("192.168.1.20", 8080, rules)
    assert refusal("::ffff:192.168.1.20", 80, rules) is None  # the same address, written as IPv6


@pytest.mark.parametrize("url,why", [
    ("ftp://example.com/", "only http and https"), ("file:///etc/passwd", "only http and https"),
    ("http://user:pw@example.com/", "user name or password"), ("http://example.com@127.0.0.1/", "user name"),
    ("http://example.com:8080/", "port 8080"), ("example.com/page", "only http and https"),
    ("http://exa mple.com/", "spaces"), ("http:\\\\127.0.0.1\\", "backslashes"), ("http:///path", "names no host"),
])
def test_urls_that_are_not_plain_web_pages_are_refused_saying_why(url, why):
    with pytest.raises(Refused, match=why):
        target(url)


def test_names_are_read_as_a_resolver_reads_them():
    assert target("https://Bücher.Example./a").host == "xn--bcher-kva.example"
    assert target("http://cafe.bad/").literal is None  # a name of hex letters stays a name
    assert target("http://example.com:8080/", allow_ports=frozenset({8080})).port == 8080


def test_the_proxys_egress_asks_the_same_check():
    assert egress.is_public is __import__("nanoclaw.internet.addresses", fromlist=["is_public"]).is_public


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="not a network"):
        parse_networks("192.168.1.0/24, home")
    with pytest.raises(ValueError, match="not a port"):
        parse_ports("8080 70000")


# Any spelling inet_aton reads: the address it names decides, never the spelling.
octet_forms = st.sampled_from(["{:d}", "0x{:x}", "0{:o}"])


@st.composite
def ipv4_spellings(draw):
    value = draw(st.integers(0, 2**32 - 1))
    parts = draw(st.sampled_from([1, 2, 3, 4]))
    octets = list(value.to_bytes(4, "big"))
    fields = {1: [value], 2: [octets[0], value & 0xFFFFFF], 3: [octets[0], octets[1], value & 0xFFFF],
              4: octets}[parts]
    text = ".".join(draw(octet_forms).format(f) if f else "0" for f in fields)
    return ipaddress.IPv4Address(value), text


@settings(max_examples=300)
@given(ipv4_spellings(), st.booleans())
def test_an_ipv4_address_is_judged_the_same_however_it_is_written(spelled, mapped):
    address, text = spelled
    host = f"[::ffff:{address}]" if mapped else text
    where = target(f"http://{host}/")
    assert ipaddress.ip_address(where.host) in (address, ipaddress.IPv6Address(f"::ffff:{address}"))
    assert (refusal(where.literal, 80, Rules()) is None) == (address.is_global and not address.is_multicast)
