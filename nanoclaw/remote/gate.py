"""The door's TLS gate for sandboxes that run elsewhere (NANOCLAW_DOOR_LISTEN).

Each connection: TLS (the door's certificate), then one line `NANOCLAW/1 <channel> <pass>`. The pass
is checked (passes.py: this install, genuine, unexpired) and so is its start nonce (starts.py: the
session's current sandbox). Then the connection is relayed byte for byte:
- `proxy`   to the agent's own proxy socket, the very socket a local sandbox of that agent has
            mounted, so the model route, egress allowlist, credential routes and budgets apply as
            they do on one machine: the pass picks the socket, nothing the caller sends can;
- `session` to the session channel (channel.py), in this process and on this loop: the channel
            is handed the connection with the pass's claims (no relay, no descriptor of its own).
Anything else gets the connection closed and one log line; a failed pass is counted.

The gate runs in the proxy program, beside every local agent's door, so it must not use up what
they need. Connections that have not shown a pass yet are at most MAX_UNAUTHENTICATED at once, at
most MAX_UNAUTHENTICATED_PER_ADDRESS of them from one address (so one host cannot take every slot from
the sandboxes), and have HANDSHAKE_S for TLS and the first line together; past a limit a new one is
closed at once (logged once a minute). One pass holds at most MAX_PER_PASS connections (a runner keeps warm ones,
a long poll, pushes, and the CLI's calls in parallel). A connection with a pass lives only while
that pass does: every RECHECK_S the open ones are looked at, and those whose pass expired or whose
sandbox start is no longer the session's current one (stopped, replaced) are closed. A relay is closed
at once when its session's start changes (an inotify watch on the start file of each session with an
open relay): a stopped sandbox's relay must not outlive it by the recheck. A session channel's
connection waits for that recheck, since each of its requests is checked anyway (and told 403).
"""
from __future__ import annotations

import asyncio
import asyncio.sslproto
import logging
import resource
import threading
import time
from collections import defaultdict

from agent_runner import nudge
from agent_runner.door_link import pipe  # the runner's relay: one copy for both ends

from ..config import host_port
from ..sessions import store
from . import passes, starts

log = logging.getLogger("nanoclaw.remote.gate")

# asyncio keeps a read buffer of this size per TLS connection for the connection's life, and the
# connection's incoming BIO keeps as much again once a read filled it: at asyncio's 256 KiB, 5,000
# idle sandboxes' two connections would hold gigabytes. 8 KiB reads a 16 KiB TLS record in two
# (OpenSSL waits for the whole record); an idle TLS connection costs the program 35 KiB, 59 KiB at
# 32 KiB (2,000 connections, this machine). The gate is the proxy program's only asyncio TLS.
asyncio.sslproto.SSLProtocol.max_size = 8 << 10

PREAMBLE = "NANOCLAW/1"
PREAMBLE_MAX = 2048
READ_LIMIT = 64 << 10       # what a stream reads to find a line: a session request's line and headers
HANDSHAKE_S = 10.0          # TLS and the first line, together
MAX_UNAUTHENTICATED = 256   # connections without a pass yet, at once
MAX_UNAUTHENTICATED_PER_ADDRESS = 64  # the sandboxes of one remote engine all come from its address
MAX_PER_PASS = 64           # connections one pass may hold open
RECHECK_S = 5.0             # how often open connections are checked against their pass


def read_preamble(line: bytes) -> tuple[str, str]:
    """(channel, pass) from the first line, or ValueError (pure)."""
    parts = line.decode("ascii", "replace").strip().split(" ")
    if len(parts) != 3 or parts[0] != PREAMBLE or parts[1] not in ("proxy", "session"):
        raise ValueError("not a NanoClaw door preamble")
    return parts[1], parts[2]


class Gate:
    def __init__(self, settings, *, context, key: bytes, channel, proxy_socket, refused=None):
        """channel: the session channel (its attach, serve, detach run on this gate's loop);
        proxy_socket(folder): the agent's own proxy socket (the proxy program knows where)."""
        self.settings, self.context, self.key = settings, context, key
        self.proxy_socket = proxy_socket
        self.channel = channel
        self.host, self.port = host_port("NANOCLAW_DOOR_LISTEN", settings.door_listen)
        self.refused = refused or (lambda why: None)
        self._loop = asyncio.new_event_loop()
        self._server = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="door-gate", daemon=True)
        self.error: BaseException | None = None
        self.unauthenticated = 0
        self._unauthenticated_from: dict[str, int] = defaultdict(int)
        self._open: dict[passes.Claims, set[asyncio.Task]] = defaultdict(set)  # by pass: its connections
        self._relays: dict[object, dict[asyncio.Task, passes.Claims]] = {}  # session folder -> its relays
        self._starts: nudge.Watcher | None = None
        self._busy_logged = -1e9

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
            # TLS is started per connection, once it is counted (start_server's ssl= would handshake
            # every accepted connection before anything could count or refuse it)
            self._server = self._loop.run_until_complete(asyncio.start_server(
                self._client, self.host, self.port, limit=READ_LIMIT, reuse_address=True, backlog=1024))
        except BaseException as exc:  # noqa: BLE001 - said by start()
            self.error = exc
            self._ready.set()
            return
        self.channel.attach(self._loop)
        try:
            self._starts = nudge.Watcher((starts.NONCE_FILE,), nudge.IN_MOVED_TO | nudge.IN_DELETE | nudge.IN_CLOSE_WRITE)
            self._loop.add_reader(self._starts.fileno(), self._start_changed)
        except nudge.Unavailable as exc:
            log.warning("door: no inotify (%s): a stopped sandbox's relays close at the next recheck", exc)
        self._ready.set()
        self._loop.create_task(self._recheck())
        self._loop.run_forever()
        self._server.close()
        _cancel_all(self._loop, before_close=self.channel.detach)
        if self._starts is not None:
            self._starts.close()

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

    def open_connections(self, claims: passes.Claims | None = None) -> int:
        """Connections with a pass now (of that pass, when given)."""
        if claims is not None:
            return len(self._open.get(claims, ()))
        return sum(len(tasks) for tasks in self._open.values())

    def _start_changed(self) -> None:
        """On the loop: a watched session's start file changed (a stop, a new start): its relays whose pass
        no longer holds are closed now. The look reads a few small files, so it runs here."""
        for folder in self._starts.drain():
            relays = self._relays.get(folder, {})
            held = set(relays.values())
            for claims, why in self.stale(held, time.time()):
                for task, of in list(relays.items()):
                    if of == claims:
                        log.info("door: closing a relay of %s/%s: %s", claims.folder, claims.session, why)
                        task.cancel()

    def _watch_relay(self, task: asyncio.Task, claims: passes.Claims) -> object | None:
        """Watch the start file of a relay's session (its pass was just checked: no second read)."""
        if self._starts is None:
            return None
        folder = store.session_path(self.settings.sessions_dir, claims.folder, claims.session)
        relays = self._relays.setdefault(folder, {})
        if not relays and not self._starts.watch(folder):
            del self._relays[folder]
            return None
        relays[task] = claims
        return folder

    def _unwatch_relay(self, task: asyncio.Task, folder) -> None:
        relays = self._relays.get(folder)
        if relays is None:
            return
        relays.pop(task, None)
        if not relays:
            del self._relays[folder]
            if self._starts is not None:
                self._starts.unwatch(folder)

    async def _recheck(self) -> None:
        """Close the connections whose pass expired or whose sandbox start is no longer current. Each
        look reads every open session's start file: that runs on a worker thread, not the loop
        (5,000 sandboxes are 5,000 reads, and every wake and answer waits on the loop)."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(RECHECK_S)
            held = [claims for claims, tasks in self._open.items() if tasks]
            self.close(await loop.run_in_executor(None, self.stale, held, time.time()))

    def stale(self, held, now: float) -> list[tuple[object, str]]:
        """(claims, why) of the passes in `held` that no longer admit their connections."""
        out = []
        for claims in held:
            if claims.expires < now:
                out.append((claims, "its pass expired"))
                continue
            try:
                if starts.session_if_current(self.settings.sessions_dir, claims) is None:
                    out.append((claims, "its sandbox is no longer the session's"))
            except OSError as exc:  # cannot read the start now (out of descriptors): no reason to close
                log.warning("door: could not check the start of %s/%s: %s", claims.folder, claims.session, exc)
        return out

    def close(self, stale) -> int:
        """On the loop: cancel the connections of the (claims, why) pairs `stale` names."""
        closed = 0
        for claims, why in stale:
            tasks = self._open.get(claims)
            if not tasks:
                continue
            log.info("door: closing %d connection(s) of %s/%s: %s", len(tasks), claims.folder, claims.session, why)
            for task in list(tasks):
                task.cancel()
                closed += 1
        return closed

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        address = str(peer[0]) if peer else ""
        if self.unauthenticated >= MAX_UNAUTHENTICATED or \
                self._unauthenticated_from[address] >= MAX_UNAUTHENTICATED_PER_ADDRESS:
            writer.transport.abort()  # at once: no handshake, no descriptor held
            now = time.monotonic()
            if now - self._busy_logged >= 60:
                self._busy_logged = now
                log.warning("door: %d connections (%d from %s) are still to show a pass; refusing new ones until "
                            "they do or time out (%.0f s)", self.unauthenticated, self._unauthenticated_from[address],
                            address, HANDSHAKE_S)
            self.refused("busy")
            return
        self.unauthenticated += 1
        self._unauthenticated_from[address] += 1
        try:
            try:
                async with asyncio.timeout(HANDSHAKE_S):
                    await writer.start_tls(self.context)
                    line = await reader.readuntil(b"\n")
                if len(line) > PREAMBLE_MAX:
                    raise ValueError("the first line is too long")
                channel, token = read_preamble(line)
                claims = self.claims_of(token)
            except (ValueError, asyncio.LimitOverrunError, asyncio.IncompleteReadError, TimeoutError,
                    ConnectionError, OSError) as exc:
                why = str(exc) or type(exc).__name__
                log.warning("door: refused a connection from %s: %s", peer and peer[0], why)
                self.refused(why)
                writer.transport.abort()
                return
        finally:
            self.unauthenticated -= 1
            self._unauthenticated_from[address] -= 1
            if not self._unauthenticated_from[address]:
                del self._unauthenticated_from[address]
        if self.open_connections(claims) >= MAX_PER_PASS:
            log.warning("door: refused a connection of %s/%s: its pass already holds %d", claims.folder,
                        claims.session, MAX_PER_PASS)
            self.refused("too many connections")
            writer.close()
            return
        task = asyncio.current_task()
        self._open[claims].add(task)
        upstream = watched = None
        try:
            if channel == "session":
                await self.channel.serve(claims, reader, writer)
            else:
                watched = self._watch_relay(task, claims)
                up_reader, upstream = await asyncio.open_unix_connection(str(self.proxy_socket(claims.folder)))
                await asyncio.gather(pipe(reader, upstream), pipe(up_reader, writer, close=True))
        except (OSError, asyncio.IncompleteReadError) as exc:
            log.info("door: connection from %s ended: %s", peer and peer[0], exc)
        except asyncio.CancelledError:
            pass  # the door is closing, or the pass no longer holds
        finally:
            if watched is not None:
                self._unwatch_relay(task, watched)
            tasks = self._open.get(claims)
            if tasks is not None:
                tasks.discard(task)
                if not tasks:
                    del self._open[claims]
            for w in (upstream, writer):
                if w is not None:
                    w.close()


def raise_descriptor_limit() -> int:
    """The proxy program's soft limit on open files raised to its hard limit (many hosts start programs
    at 1,024, which a door with remote sandboxes and every local agent's calls share). The new limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            return hard
        except (ValueError, OSError):
            pass
    return soft


def _cancel_all(loop: asyncio.AbstractEventLoop, before_close) -> None:
    """End the connections still open (each closes its streams), then `before_close`, then the loop."""
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    before_close()
    loop.close()
