"""Egress: HTTPS CONNECT tunnels, only to hosts on the agent group's allowlist.

decide() is pure: given the allowlist, the requested host:port and the addresses it resolves to,
it says yes or why not. A tunnel to a loopback, private, link-local or otherwise non-public address
needs an exact `host:port` entry (no wildcard, no implied port), so the host's own services stay
shut unless the owner opened that one door. We connect to the very addresses we checked, so a DNS
answer that changes between check and connect cannot slip past.

EgressGate is the Door's CONNECT handler: decide, connect, answer 200, then relay bytes until either
side closes. A refusal is a 403 whose reason phrase and body say why in words (curl -v, Python and
Node show the reason phrase), and how to ask for access.
"""
from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..internet.addresses import is_public  # one address check for the install
from .door import Reply, Request
from .policy import EgressPolicy, Policies
from ..proposal_rules import HostEntry, RuleError, check_hostname, check_port, split_host_port

log = logging.getLogger("nanoclaw.proxy.egress")

CONNECT_TIMEOUT_S = 10
TLS_HANDSHAKE = 0x16  # the first byte of every TLS record a client opens with
RELAY_PIECE = 64 * 1024


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    reason: str = ""
    status: int = 403


def parse_target(target: str) -> tuple[str, int]:
    """CONNECT's authority-form 'host:port' (port required)."""
    host, port = split_host_port(target)
    if port is None:
        raise RuleError(f"{target!r}: CONNECT needs host:port")
    return check_hostname(host), check_port(port)


def matching_entry(policy: EgressPolicy, host: str, port: int) -> HostEntry | None:
    """The most specific entry that admits host:port: an exact one wins over a wildcard."""
    found = None
    for entry in policy.entries:
        if entry.effective_port() != port:
            continue
        if not entry.wildcard and entry.host == host:
            if entry.port is not None:
                return entry  # exact host and port: nothing is more specific
            found = entry
        elif entry.wildcard and host.endswith("." + entry.host) and found is None:
            found = entry
    return found


def decide(policy: EgressPolicy, folder: str, host: str, port: int, addresses: Iterable[str],
           own_ports: frozenset[int] = frozenset()) -> Verdict:
    """own_ports: the ports of this host's own services (the web program, a platform's daemon): no
    allowlist entry opens them on a non-public address."""
    entry = matching_entry(policy, host, port)
    if entry is None:
        shown = host if port == 443 else f"{host}:{port}"
        return Verdict(False, f"egress to {shown} is not on the allowlist of agent group '{folder}'; "
                              f"ask the owner with the propose_egress tool (host {shown!r})")
    addresses = list(addresses)
    if not addresses:
        return Verdict(False, f"{host} does not resolve to any address", 502)
    private = [a for a in addresses if not is_public(a)]
    if private and port in own_ports:
        return Verdict(False, f"{host}:{port} is one of this host's own services (the web program, a chat "
                              "platform's daemon); no agent may reach it")
    exact = not entry.wildcard and entry.port is not None
    if private and not exact:
        return Verdict(False, f"{host}:{port} resolves to a non-public address ({private[0]}); that needs "
                              f"an exact '{host}:{port}' allowlist entry (propose_egress with the port)")
    return Verdict(True)


def resolve(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    seen: list[str] = []
    for *_rest, sockaddr in infos:
        if sockaddr[0] not in seen:
            seen.append(sockaddr[0])
    return seen


def _pump(read: Callable[[], bytes], dst: socket.socket) -> None:
    try:
        while True:
            data = read()
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)  # pass the half-close on
        except OSError:
            pass


class EgressGate:
    """The Door's CONNECT handler for every agent group (the policy comes from the socket's folder)."""

    def __init__(self, policies: Policies, *, resolver: Callable[[str, int], list[str]] = resolve,
                 connect_timeout: float = CONNECT_TIMEOUT_S, own_ports: Iterable[int] = ()):
        self.policies = policies
        self.own_ports = frozenset(own_ports)
        self.resolver = resolver
        self.connect_timeout = connect_timeout

    def __call__(self, request: Request, reply: Reply) -> int:
        try:
            host, port = parse_target(request.path)
        except RuleError as exc:
            return refuse(reply, 400, f"nanoclaw proxy: {exc}")
        policy = self.policies.get(request.folder).egress  # one snapshot for this whole tunnel
        if matching_entry(policy, host, port) is None:  # refuse before any DNS lookup leaves the host
            return refuse(reply, 403, "nanoclaw proxy: " + decide(policy, request.folder, host, port, []).reason)
        try:
            addresses = self.resolver(host, port)
        except OSError as exc:
            return refuse(reply, 502, f"nanoclaw proxy: cannot resolve {host}: {exc.strerror or exc}")
        verdict = decide(policy, request.folder, host, port, addresses, self.own_ports)
        if not verdict.allowed:
            return refuse(reply, verdict.status, f"nanoclaw proxy: {verdict.reason}")
        upstream = self._connect(addresses, port)
        if upstream is None:
            return refuse(reply, 502, f"nanoclaw proxy: cannot connect to {host}:{port}")
        try:
            return self._tunnel(reply, upstream, f"{host}:{port}")
        finally:
            upstream.close()

    def _connect(self, addresses: list[str], port: int) -> socket.socket | None:
        for address in addresses:
            try:
                sock = socket.create_connection((address, port), timeout=self.connect_timeout)
            except OSError:
                continue
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        return None

    def _tunnel(self, reply: Reply, upstream: socket.socket, target: str) -> int:
        client, rfile = reply.hijack(200, "Connection established")
        first = rfile.read1(RELAY_PIECE)  # anything the client sent right behind its CONNECT comes first
        if first and first[0] != TLS_HANDSHAKE:
            log.warning("proxy: closed a tunnel to %s that did not start with TLS", target)
            return 200
        if not first:
            return 200
        upstream.sendall(first)
        back = threading.Thread(target=_pump, args=(lambda: upstream.recv(RELAY_PIECE), client),
                                name="egress-back", daemon=True)
        back.start()
        _pump(lambda: client.recv(RELAY_PIECE), upstream)
        back.join()
        return 200


def refuse(reply: Reply, status: int, message: str) -> int:
    reply.simple(status, (message + "\n").encode(), "text/plain; charset=utf-8", close=True,
                 reason=message.removeprefix("nanoclaw proxy: ")[:300])
    return status
