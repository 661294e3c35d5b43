"""The browser sandbox's only way out, on the host: an HTTP proxy on a unix socket (layer a).

Chromium asks it for every connection (CONNECT for https and WebSockets, an absolute URL for plain
http). It connects only where the browser's request routing (layer b, browser.py) checked the URL
as `web_read` checks one and pinned the address it resolved: a name with no pin, or a pin the
address check now refuses, gets 403 and no connection. So page JavaScript that reaches past the
routing (a preconnect, a socket the routing did not see) still reaches nothing, and a name that
resolves elsewhere the second time (rebinding) is never looked up again. No TLS is intercepted.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Callable

from ..internet.addresses import Rules, refusal

log = logging.getLogger("nanoclaw.browser")
HEAD_LIMIT = 64 * 1024
CONNECT_S = 10.0


class Pins:
    """(host, port) -> the address layer (b) checked for it; the proxy connects only to these."""

    def __init__(self, rules: Rules):
        self.rules = rules
        self._pins: dict[tuple[str, int], str] = {}

    def approve(self, host: str, port: int, address: str) -> None:
        self._pins[(host.lower().strip("[]"), port)] = address

    def address(self, host: str, port: int) -> str | None:
        """The pinned address, or None: unpinned, or refused by the address check."""
        address = self._pins.get((host.lower().strip("[]"), port))
        if address is None or refusal(address, port, self.rules):
            return None
        return address


def _split_authority(authority: str, default: int) -> tuple[str, int]:
    if authority.startswith("["):
        host, _, rest = authority[1:].partition("]")
        port = rest.removeprefix(":")
    else:
        host, _, port = authority.rpartition(":") if authority.count(":") == 1 else (authority, "", "")
    return host, int(port) if port else default


def parse_head(head: bytes) -> tuple[str, str, int, bytes | None]:
    """(method, host, port, the request to send on: None for CONNECT). ValueError when unreadable."""
    lines = head.decode("latin-1").split("\r\n")
    method, target, version = lines[0].split(" ")
    if method == "CONNECT":
        host, port = _split_authority(target, 443)
        return method, host, port, None
    if not target.lower().startswith("http://"):
        raise ValueError("only absolute http:// URLs and CONNECT")
    authority, _, path = target[7:].partition("/")
    host, port = _split_authority(authority, 80)
    kept = [line for line in lines[1:] if line and not line.lower().startswith(("proxy-", "connection:", "keep-alive:"))]
    # one request per connection: the next one may name another host, and goes through the check again
    rewritten = "\r\n".join([f"{method} /{path} {version}", *kept, "Connection: close", "", ""])
    return method, host, port, rewritten.encode("latin-1")


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        try:
            writer.close()
        except OSError:
            pass


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, pins: Pins,
                 told: Callable[[str, str, int], None]) -> None:
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), CONNECT_S)
        method, host, port, request = parse_head(head)
    except (ValueError, asyncio.LimitOverrunError, asyncio.IncompleteReadError, asyncio.TimeoutError, OSError):
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        writer.close()
        return
    address = pins.address(host, port)
    if address is None:
        told("refused", host, port)
        writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        writer.close()
        return
    try:
        up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(address, port), CONNECT_S)
    except (OSError, asyncio.TimeoutError):
        writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        writer.close()
        return
    if request is None:
        writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
    else:
        up_writer.write(request)
    await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))


async def serve(path: str, pins: Pins, told: Callable[[str, str, int], None]) -> asyncio.AbstractServer:
    return await asyncio.start_unix_server(lambda r, w: handle(r, w, pins, told), path=path, limit=HEAD_LIMIT)
