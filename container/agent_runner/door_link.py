"""The runner's way to the host when its sandbox runs on another machine (NANOCLAW_DOOR_URL).

Every connection is TLS to the door, trusting only the CA the host gave with the pass, and starts
with one line naming the channel and the pass (the host's gate checks both):
- `proxy`: what the local runner's bridge relays to the proxy socket (model calls, egress CONNECTs,
  credential routes) goes here instead, byte for byte. DoorBridge listens on 127.0.0.1 for the CLI.
- `session`: HTTP/1.1 to the session channel (SessionClient), one keep-alive connection per thread.
The pass is renewed by the host in an answer header before it expires; the newest one is used.
"""
from __future__ import annotations

import asyncio
import http.client
import logging
import socket
import ssl
import threading
import time
from urllib.parse import urlsplit

log = logging.getLogger("agent_runner.door")

PREAMBLE = "NANOCLAW/1"
PASS_HEADER = "X-Door-Pass"
CHUNK = 65536
SPARES = 2              # connections to the door kept ready for the CLI
SPARE_MAX_AGE_S = 60.0  # well within the proxy's idle limit for a connection without a request
RELAY_WAIT_S = 15.0     # how long the runner waits for the door relay's socket at start


class DoorLink:
    def __init__(self, url: str, token: str, ca_pem: str, via: str | None = None):
        """via: a unix socket to reach the door through (the door relay beside a sandbox that has no
        network); TLS still goes to the door, by its name in `url`."""
        parts = urlsplit(url)
        if parts.scheme != "https" or not parts.hostname:
            raise ValueError(f"NANOCLAW_DOOR_URL={url!r} is not an https:// address")
        self.host, self.port = parts.hostname, parts.port or 443
        self.via = via or None
        self._token = token
        self._lock = threading.Lock()
        self.context = ssl.create_default_context(cadata=ca_pem)

    @classmethod
    def from_env(cls, env) -> "DoorLink":
        return cls(env["NANOCLAW_DOOR_URL"], env.pop("NANOCLAW_DOOR_PASS", ""), env.pop("NANOCLAW_DOOR_CA", ""),
                   env.get("NANOCLAW_DOOR_SOCKET"))

    def raw(self, timeout: float) -> socket.socket:
        """A plain connection toward the door: through the relay's socket, or straight to it."""
        if self.via:
            deadline = time.monotonic() + RELAY_WAIT_S  # the relay starts beside the sandbox: it may be a moment
            while True:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(timeout)
                try:
                    sock.connect(self.via)
                    return sock
                except (FileNotFoundError, ConnectionRefusedError):
                    sock.close()
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
                except BaseException:
                    sock.close()
                    raise
        raw = socket.create_connection((self.host, self.port), timeout=timeout)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return raw

    @property
    def token(self) -> str:
        with self._lock:
            return self._token

    def renew(self, token: str | None) -> None:
        if token:
            with self._lock:
                self._token = token

    def preamble(self, channel: str) -> bytes:
        return f"{PREAMBLE} {channel} {self.token}\n".encode()

    def connect(self, channel: str, timeout: float = 30.0) -> ssl.SSLSocket:
        raw = self.raw(timeout)
        try:
            sock = self.context.wrap_socket(raw, server_hostname=self.host)
            sock.sendall(self.preamble(channel))
        except BaseException:
            raw.close()
            raise
        return sock

    def session(self, timeout: float = 60.0) -> "SessionClient":
        return SessionClient(self, timeout)


class _DoorConnection(http.client.HTTPConnection):
    def __init__(self, link: DoorLink, timeout: float):
        super().__init__(link.host, link.port, timeout=timeout)
        self.link = link

    def connect(self) -> None:
        self.sock = self.link.connect("session", self.timeout)


class SessionClient:
    """Requests on the session channel; one reconnect when a kept-alive connection went away."""

    def __init__(self, link: DoorLink, timeout: float):
        self.link, self.timeout = link, timeout
        self._conn: _DoorConnection | None = None

    def request(self, method: str, path: str, body: bytes | None = None, *, timeout: float | None = None,
                content_type: str = "application/json") -> tuple[int, dict, bytes]:
        for attempt in (1, 2):
            if self._conn is None:
                self._conn = _DoorConnection(self.link, self.timeout)
            self._conn.timeout = timeout or self.timeout
            if self._conn.sock is not None:
                self._conn.sock.settimeout(self._conn.timeout)
            try:
                self._conn.request(method, path, body=body, headers={"Content-Type": content_type})
                response = self._conn.getresponse()
                data = response.read()
            except (OSError, http.client.HTTPException):
                self.close()
                if attempt == 2:
                    raise
                continue
            headers = {k.lower(): v for k, v in response.getheaders()}
            self.link.renew(headers.get(PASS_HEADER.lower()))
            if response.will_close:
                self.close()
            return response.status, headers, data
        raise OSError("unreachable")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class DoorBridge:
    """127.0.0.1:<port> → the door's `proxy` channel, for the CLI (same interface as bridge.Bridge).
    asyncio in a thread of its own: one TLS stream is read and written by one event loop, never
    by two threads at once."""

    def __init__(self, link: DoorLink):
        self.link = link
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="door-bridge", daemon=True)
        self.port = 0
        self._spares: list[tuple[asyncio.StreamReader, asyncio.StreamWriter, float]] = []
        self._refilling = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "DoorBridge":
        self._thread.start()
        self._ready.wait(10)
        log.info("bridge: 127.0.0.1:%d -> door %s:%d", self.port, self.link.host, self.link.port)
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._client, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        server.close()

    async def _open(self):
        if self.link.via:
            up_reader, upstream = await asyncio.open_unix_connection(
                self.link.via, ssl=self.link.context, server_hostname=self.link.host)
        else:
            up_reader, upstream = await asyncio.open_connection(
                self.link.host, self.link.port, ssl=self.link.context, server_hostname=self.link.host)
            upstream.transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        upstream.write(self.link.preamble("proxy"))
        return up_reader, upstream

    async def _take(self):
        """A connection to the door: a spare made beforehand when one is fresh (a TLS handshake costs
        milliseconds on the turn's path; the CLI opens connections as it goes), else a new one."""
        while self._spares:
            up_reader, upstream, made = self._spares.pop()
            if time.monotonic() - made < SPARE_MAX_AGE_S and not up_reader.at_eof() and not upstream.is_closing():
                return up_reader, upstream
            upstream.close()
        return await self._open()

    async def _refill(self) -> None:
        if self._refilling:
            return
        self._refilling = True
        try:
            while len(self._spares) < SPARES:
                self._spares.append((*await self._open(), time.monotonic()))
        except (OSError, ssl.SSLError):
            pass  # the next client connects itself (and says so if the door is down)
        finally:
            self._refilling = False

    async def _client(self, reader, writer) -> None:
        upstream = None
        try:
            up_reader, upstream = await self._take()
            asyncio.ensure_future(self._refill())
            await asyncio.gather(pipe(reader, upstream), pipe(up_reader, writer, close=True))
        except (OSError, ssl.SSLError) as exc:
            log.warning("bridge: the door is unreachable: %s", exc)
        finally:
            for w in (upstream, writer):
                if w is not None:
                    w.close()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)


async def pipe(src, dst, *, close: bool = False) -> None:
    """Copy until the end; then close `dst` (close=True) or pass the half-close on where it can."""
    try:
        while data := await src.read(CHUNK):
            dst.write(data)
            await dst.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        if close:
            dst.close()
        elif dst.can_write_eof():
            try:
                dst.write_eof()
            except OSError:
                pass
