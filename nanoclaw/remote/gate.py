"""The door's TLS gate for sandboxes that run elsewhere (NANOCLAW_DOOR_LISTEN).

Each connection: TLS (the door's certificate), then one line `NANOCLAW/1 <channel> <pass>`. The pass
is checked (passes.py: this install, genuine, unexpired) and so is its start nonce (starts.py: the
session's current sandbox). Then the connection is relayed byte for byte:
- `proxy`   to the agent's own proxy socket, the very socket a local sandbox of that agent has
            mounted, so the model route, egress allowlist, credential routes and budgets apply as
            they do on one machine: the pass picks the socket, nothing the caller sends can;
- `session` to the session channel (channel.py), after a first line naming the pass's session.
Anything else gets the connection closed and one log line; a failed pass is counted.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path

from agent_runner.door_link import pipe  # the runner's relay: one copy for both ends

from ..config import host_port
from . import passes, starts

log = logging.getLogger("nanoclaw.remote.gate")

PREAMBLE = "NANOCLAW/1"
PREAMBLE_MAX = 2048
HANDSHAKE_S = 10.0


def read_preamble(line: bytes) -> tuple[str, str]:
    """(channel, pass) from the first line, or ValueError (pure)."""
    parts = line.decode("ascii", "replace").strip().split(" ")
    if len(parts) != 3 or parts[0] != PREAMBLE or parts[1] not in ("proxy", "session"):
        raise ValueError("not a NanoClaw door preamble")
    return parts[1], parts[2]


class Gate:
    def __init__(self, settings, *, context, key: bytes, channel_socket: Path, proxy_socket, refused=None):
        """proxy_socket(folder): the agent's own proxy socket (the proxy program knows where)."""
        self.settings, self.context, self.key = settings, context, key
        self.proxy_socket = proxy_socket
        self.channel_socket = Path(channel_socket)
        self.host, self.port = host_port("NANOCLAW_DOOR_LISTEN", settings.door_listen)
        self.refused = refused or (lambda why: None)
        self._loop = asyncio.new_event_loop()
        self._server = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="door-gate", daemon=True)
        self.error: BaseException | None = None

    @property
    def address(self) -> tuple[str, int]:
        return self._server.sockets[0].getsockname()[:2]

    def start(self) -> "Gate":
        self._thread.start()
        self._ready.wait(10)
        if self.error is not None:
            raise self.error
        log.info("door: remote sandboxes are taken at %s:%d (TLS)", *self.address)
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._server = self._loop.run_until_complete(asyncio.start_server(
                self._client, self.host, self.port, ssl=self.context, ssl_handshake_timeout=HANDSHAKE_S,
                limit=PREAMBLE_MAX, reuse_address=True))
        except BaseException as exc:  # noqa: BLE001 - said by start()
            self.error = exc
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()
        self._server.close()
        _cancel_all(self._loop)

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def claims_of(self, token: str) -> passes.Claims:
        """The pass's claims when it may open a channel now, else BadPass."""
        claims = passes.verify(self.key, token, install=self.settings.install_id)
        if starts.session_if_current(self.settings.sessions_dir, claims) is None:
            raise passes.BadPass("its sandbox is no longer the session's")
        return claims

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        upstream = None
        try:
            try:
                line = await asyncio.wait_for(reader.readuntil(b"\n"), HANDSHAKE_S)
                channel, token = read_preamble(line)
                claims = self.claims_of(token)
            except (ValueError, asyncio.LimitOverrunError, asyncio.IncompleteReadError, asyncio.TimeoutError,
                    ConnectionError) as exc:
                why = str(exc) or type(exc).__name__
                log.warning("door: refused a connection from %s: %s", peer and peer[0], why)
                self.refused(why)
                return
            if channel == "proxy":
                target = self.proxy_socket(claims.folder)
            else:
                target = self.channel_socket
            up_reader, upstream = await asyncio.open_unix_connection(str(target))
            if channel == "session":
                upstream.write(f"{claims.folder} {claims.session} {claims.expires} {claims.nonce}\n".encode())
            await asyncio.gather(pipe(reader, upstream), pipe(up_reader, writer, close=True))
        except (OSError, asyncio.IncompleteReadError) as exc:
            log.info("door: connection from %s ended: %s", peer and peer[0], exc)
        except asyncio.CancelledError:
            pass  # the door is closing
        finally:
            for w in (upstream, writer):
                if w is not None:
                    w.close()


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    """End the connections still open (each closes its streams) before the loop closes."""
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    loop.close()
