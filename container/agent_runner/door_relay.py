"""The door relay: the one thing on a remote Docker engine that reaches the network for a sandbox.

A sandbox on another engine runs with no network at all; its runner reaches the door through a unix
socket in a volume it shares with this relay, and the relay copies each connection, byte for byte,
to the door's address, which the host gave it at start and the sandbox cannot change. The TLS and
the pass stay end to end between the runner and the door: the relay sees ciphertext only. So the
sandbox reaches the door and nothing else: not the engine's host, its other ports, the LAN or a
cloud's metadata address.

    python -m agent_runner.door_relay SOCKET HOST PORT
"""
from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys

from .door_link import pipe

log = logging.getLogger("agent_runner.door_relay")


async def serve(path: str, host: str, port: int) -> None:
    async def client(reader, writer) -> None:
        upstream = None
        try:
            up_reader, upstream = await asyncio.open_connection(host, port)
            upstream.transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await asyncio.gather(pipe(reader, upstream), pipe(up_reader, writer, close=True))
        except OSError as exc:
            log.warning("door relay: %s:%d unreachable: %s", host, port, exc)
        finally:
            for w in (upstream, writer):
                if w is not None:
                    w.close()

    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    server = await asyncio.start_unix_server(client, path)
    os.chmod(path, 0o600)  # the sandbox runs as the same user; nobody else on the volume
    log.info("door relay: %s -> %s:%d", path, host, port)
    async with server:
        await server.serve_forever()


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if len(argv) != 3 or not argv[2].isdigit():
        print("usage: python -m agent_runner.door_relay SOCKET HOST PORT", file=sys.stderr)
        return 2
    asyncio.run(serve(argv[0], argv[1], int(argv[2])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
