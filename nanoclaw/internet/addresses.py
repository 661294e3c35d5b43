"""One address check for the whole install: where may the host connect on an agent's behalf?

Pure. `target(url)` reads a URL the way a resolver and a socket would (so every spelling of one
address is the same address: decimal, hex, octal and short IPv4 forms, bracketed IPv6, a trailing
dot, an IDN), refusing userinfo and schemes other than http and https. `refusal(address, rules)`
says why an address may not be reached, or None: anything but global unicast (loopback, private,
link-local, CGNAT, multicast, reserved, unspecified, and IPv6 addresses that carry such an IPv4
address: mapped, compatible, 6to4, Teredo, NAT64), the cloud metadata addresses always, the
install's own ports on any address that is not public; a port other than 80 and 443 only when the
owner named it; a private network only when the owner named it. The proxy's egress (`proxy/egress.py`)
asks `is_public` of the same module.
"""
from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass, field
from urllib.parse import urlsplit

NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
# Instance metadata services: never reachable, whatever network the owner opens. AWS, GCP, Azure and
# most others answer at 169.254.169.254 (AWS also at fd00:ec2::254), Alibaba at 100.100.100.200,
# Oracle at 192.0.0.192.
METADATA = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254", "fd00:ec2::254", "100.100.100.200", "192.0.0.192", "169.254.170.2"))
DEFAULT_PORTS = {"http": 80, "https": 443}


class Refused(ValueError):
    """A URL or an address the host will not fetch; the text is for the agent, in plain words."""


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str          # lower-case ASCII (an IDN in its punycode form), no trailing dot; an IP literal as text
    port: int
    literal: ipaddress.IPv4Address | ipaddress.IPv6Address | None  # the host was written as an address

    @property
    def authority(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return shown if self.port == DEFAULT_PORTS[self.scheme] else f"{shown}:{self.port}"


@dataclass(frozen=True)
class Rules:
    allow_networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    allow_ports: frozenset[int] = frozenset()
    own_ports: frozenset[int] = field(default_factory=frozenset)  # the install's own services


def embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries, which is where a packet to it really goes:
    IPv4-mapped, IPv4-compatible, 6to4 (2002::/16), Teredo (2001::/32, server and client) and NAT64."""
    found = []
    if ip.ipv4_mapped is not None:
        found.append(ip.ipv4_mapped)
    if ip.sixtofour is not None:
        found.append(ip.sixtofour)
    if ip.teredo is not None:
        found.extend(ip.teredo)
    if any(ip in net for net in NAT64) or (int(ip) >> 32 == 0 and int(ip) > 1):  # NAT64, or ::a.b.c.d
        found.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return found


def _address(address: str | ipaddress.IPv4Address | ipaddress.IPv6Address):
    if isinstance(address, str):
        return ipaddress.ip_address(address.split("%", 1)[0])
    return address


def is_public(address) -> bool:
    ip = _address(address)
    if isinstance(ip, ipaddress.IPv6Address):
        inner = embedded_ipv4(ip)
        if inner:
            return all(v4.is_global and not v4.is_multicast for v4 in inner)
    return ip.is_global and not ip.is_multicast


def _ipv4_literal(host: str) -> ipaddress.IPv4Address | None:
    """What a C resolver makes of a numeric host: inet_aton's forms (2130706433, 0x7f.1, 017700000001,
    127.1), which browsers and curl also accept. None for a name."""
    if not host or not all(c in "0123456789abcdefxABCDEFX." for c in host) or host.endswith(".."):
        return None
    if not any(c.isdigit() for c in host.split(".")[-1] or "x"):
        return None  # a name made of hex letters ("cafe.bad") is a name
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


def target(url: str, *, allow_ports: frozenset[int] = frozenset()) -> Target:
    """The scheme, host and port a fetch of `url` would connect to, or Refused saying why not."""
    if not isinstance(url, str) or not url.strip():
        raise Refused("give a URL: http:// or https:// and a host")
    url = url.strip()
    if any(ord(c) < 0x21 or c in "\\" for c in url):
        raise Refused("the URL has spaces, control characters or backslashes; write it percent-encoded")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise Refused(f"the URL cannot be read: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise Refused(f"only http and https pages can be read, not {scheme or 'a URL without a scheme'}")
    if "@" in parts.netloc:
        raise Refused("a URL with a user name or password in it is not fetched (no credentials leave the host)")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise Refused("the URL names no host")
    port = port if port is not None else DEFAULT_PORTS[scheme]
    literal: ipaddress.IPv4Address | ipaddress.IPv6Address | None
    if parts.netloc.split("]")[0].startswith("["):
        try:
            literal = ipaddress.IPv6Address(host.split("%", 1)[0])
        except ValueError:
            raise Refused(f"{host!r} is not an IPv6 address") from None
        host = str(literal)
    else:
        literal = _ipv4_literal(host)
        if literal is not None:
            host = str(literal)
        else:
            try:
                host = host.encode("idna").decode("ascii").lower()
            except UnicodeError:
                raise Refused(f"{parts.hostname!r} is not a host name that can be looked up") from None
            if len(host) > 253 or any(not label or len(label) > 63 for label in host.split(".")):
                raise Refused(f"{host!r} is not a host name that can be looked up")
    if port not in (80, 443) and port not in allow_ports:
        raise Refused(f"port {port} is not one the owner opened for reading (80 and 443 are; others only "
                      "when named in NANOCLAW_WEB_ALLOW_PORTS)")
    return Target(scheme, host, port, literal)


def refusal(address, port: int, rules: Rules) -> str | None:
    """Why the host will not connect to `address`:`port` for an agent, or None when it may."""
    ip = _address(address)
    if ip in METADATA or any(v4 in METADATA for v4 in (embedded_ipv4(ip) if ip.version == 6 else ())):
        return f"{ip} is a cloud metadata address; it is never fetched"
    if is_public(ip):
        return None
    inner = embedded_ipv4(ip) if ip.version == 6 else []
    opened = any(candidate in net for candidate in [ip, *inner] for net in rules.allow_networks
                 if candidate.version == net.version)
    if opened and port not in rules.own_ports:
        return None
    if opened:
        return f"port {port} of {ip} is one of this install's own services; no agent may reach it"
    return (f"{ip} is not a public address (loopback, private, link-local or reserved); the owner can open "
            "a private network with NANOCLAW_WEB_ALLOW_NETWORKS")


def parse_networks(text: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """NANOCLAW_WEB_ALLOW_NETWORKS: CIDRs separated by commas or spaces. ValueError names a bad one."""
    found = []
    for item in text.replace(",", " ").split():
        try:
            found.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ValueError(f"{item!r} is not a network (write it as a CIDR, 192.168.1.0/24)") from None
    return tuple(found)


def parse_ports(text: str) -> frozenset[int]:
    ports = set()
    for item in text.replace(",", " ").split():
        if not item.isdigit() or not 0 < int(item) < 65536:
            raise ValueError(f"{item!r} is not a port (1-65535)")
        ports.add(int(item))
    return frozenset(ports)
