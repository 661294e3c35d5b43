"""Layer (a) of the browser's way out, on its own (issue 62, item 4): the host's proxy connects only to
an address the routing pinned for that name and port, and never to one the address check refuses,
whatever Chromium (or a page that got past the routing) asks of it."""
from __future__ import annotations

import asyncio
import ipaddress
import socket
import tempfile
from pathlib import Path

from hypothesis import given, settings, strategies as st

from nanoclaw.internet.addresses import Rules
from nanoclaw.reading.browser_proxy import Pins, parse_head, serve
from tests.internet.test_fetch import Canary


def _ask(pins: Pins, head: bytes) -> tuple[bytes, list]:
    """Send one request head through the proxy; (what the proxy answered first, its refusals)."""
    told: list = []

    async def run() -> bytes:
        with tempfile.TemporaryDirectory() as d:
            path = str(Path(d) / "proxy.sock")
            server = await serve(path, pins, lambda *a: told.append(a))
            reader, writer = await asyncio.open_unix_connection(path)
            writer.write(head)
            await writer.drain()
            got = await asyncio.wait_for(reader.read(200), 10)
            writer.close()
            server.close()
            return got

    return asyncio.run(run()), told


LOOPBACK_OPEN = Rules(allow_networks=(ipaddress.ip_network("127.0.0.0/8"),))


def test_a_name_the_routing_never_checked_gets_403_and_no_connection():
    canary = Canary("127.0.0.1")
    got, told = _ask(Pins(LOOPBACK_OPEN), f"CONNECT 127.0.0.1:{canary.port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert got.startswith(b"HTTP/1.1 403") and told == [("refused", "127.0.0.1", canary.port)]
    assert canary.connections == 0
    canary.close()


def test_a_pinned_address_the_address_check_refuses_gets_403():
    """A pin can only come from the routing's check; were one ever wrong, the proxy checks it again."""
    canary = Canary("127.0.0.1")
    pins = Pins(Rules())  # loopback not opened
    pins.approve("tea.example", canary.port, "127.0.0.1")
    got, _ = _ask(pins, f"GET http://tea.example:{canary.port}/ HTTP/1.1\r\nHost: tea.example\r\n\r\n".encode())
    assert got.startswith(b"HTTP/1.1 403") and canary.connections == 0
    canary.close()


def test_a_pinned_name_goes_to_its_pinned_address_only_one_request_a_connection():
    """Plain http: the request goes on in origin form, Proxy- headers dropped, the connection closed after."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    pins = Pins(LOOPBACK_OPEN)
    pins.approve("tea.example", port, "127.0.0.1")
    seen: list[bytes] = []

    def answer():
        conn, _ = server.accept()
        seen.append(conn.recv(4096))
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        conn.close()

    import threading
    threading.Thread(target=answer, daemon=True).start()
    got, _ = _ask(pins, f"GET http://Tea.Example:{port}/cup?x=1 HTTP/1.1\r\nHost: tea.example\r\n"
                        "Proxy-Authorization: Basic eA==\r\nConnection: keep-alive\r\n\r\n".encode())
    assert got.startswith(b"HTTP/1.1 200 OK")
    head = seen[0].decode()
    assert head.startswith("GET /cup?x=1 HTTP/1.1\r\n") and "Proxy-Authorization" not in head
    assert "Connection: close" in head and "keep-alive" not in head
    server.close()


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300) | st.text(max_size=200).map(lambda t: (t + "\r\n\r\n").encode("utf-8", "replace")))
def test_any_head_is_read_or_refused_never_an_exception_of_another_kind(head):
    try:
        method, host, port, request = parse_head(head)
    except ValueError:
        return
    assert isinstance(port, int) and isinstance(host, str)
    assert (request is None) == (method == "CONNECT")
