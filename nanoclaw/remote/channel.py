"""The session channel: what a remote sandbox and the host exchange in place of a shared folder.

Served on a unix socket that only the gate reaches (data/door/, owner-only); the gate has checked
the pass and writes the caller's identity as the connection's first line, so nothing the sandbox
sends can name another session. Each request checks again that the pass's start is still the
session's current one (a replaced sandbox's open connection gets nothing more).

    POST /inbound        {after, wait, have, position}: when the host's inbound.db differs from
                         `after` (or within `wait` s), a tar of the inbox files the sandbox lacks,
                         then what changed since `position` (change_log.py), or inbound.db whole (a
                         consistent snapshot) to start or after a gap; 204 when nothing changed
    GET  /outbound       the host's copy of the session's outbound.db (a restarted sandbox resumes it)
    POST /outbound       rows, acks, state, current tool, heartbeat (mirror.py)
    GET  /files/<part>   home | group | global, as a tar
    PUT  /files/<part>   home | group | outbox: changed files, as a tar (trees.py)
    DELETE /files/<part> home | group: files removed in the sandbox, {"files": {name: sha256}}
"""
from __future__ import annotations

import json
import logging
import os
import socketserver
import sqlite3
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from agent_runner import nudge

from ..sessions import store
from . import mirror, passes, starts, trees
from .inbound import InboundWatch, inbound_answer

log = logging.getLogger("nanoclaw.remote.channel")

MAX_WAIT_S = 30.0
IDLE_S = MAX_WAIT_S + 30      # a kept-alive connection with no request for this long is closed
MAX_JSON = 16 << 20           # a push (the runner sends rows in pieces below this) or an ask
MAX_ASK = 2 << 20             # what POST /inbound asks: the inbox files it has
BODIES_IN_FLIGHT = 64 << 20   # request bodies held in memory at once, all connections together
BODY_WAIT_S = 30.0            # how long a request waits for that room before a 503
PASS_HEADER = "X-Door-Pass"
DOWN_PARTS = ("home", "group", "global")
UP_PARTS = ("home", "group", "outbox")


class BodyRoom:
    """How many request body bytes the channel holds in memory at once: a request takes its length
    before reading and gives it back when done, so concurrent large bodies wait (or get a 503) rather
    than add up past what the door's process may use."""

    def __init__(self, total: int = BODIES_IN_FLIGHT):
        self.total, self.used = total, 0
        self._cond = threading.Condition()

    def take(self, size: int, timeout: float = BODY_WAIT_S) -> bool:
        with self._cond:
            if not self._cond.wait_for(lambda: self.used + size <= self.total, timeout):
                return False
            self.used += size
            return True

    def give(self, size: int) -> None:
        with self._cond:
            self.used -= size
            self._cond.notify_all()


class Busy(Exception):
    """No room for a request body now: 503, the runner tries again."""


class SessionChannel(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, path: Path, settings, key: bytes, *, sandbox_uid: int | None = None):
        self.settings, self.key = settings, key
        self.sandbox_uid = sandbox_uid
        self.watch = InboundWatch()
        self.room = BodyRoom()
        self._writers: dict[Path, sqlite3.Connection] = {}
        self._writer_locks: dict[Path, threading.Lock] = {}
        self._beats: dict[Path, float] = {}
        self._guard = threading.Lock()
        self.moved = {"down": 0, "up": 0}  # bytes of bodies answered and received (bench/volume.py)
        Path(path).unlink(missing_ok=True)
        super().__init__(str(path), ChannelHandler)
        os.chmod(path, 0o600)
        self.thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.2},
                                       name="door-session-channel", daemon=True)

    def start(self) -> "SessionChannel":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        self.watch.close()
        with self._guard:
            for conn in self._writers.values():
                conn.close()
            self._writers.clear()

    def handle_error(self, request, client_address) -> None:
        """A sandbox that went away mid-answer (stopped, killed) is not an error of the door's."""
        import sys
        exc = sys.exc_info()[1]
        if isinstance(exc, (BrokenPipeError, ConnectionResetError)):
            log.info("door: a sandbox went away mid-answer (%s)", type(exc).__name__)
        else:
            log.exception("door: the session channel failed on a request")

    def writer(self, session: Path) -> tuple[sqlite3.Connection, threading.Lock]:
        """The door's one connection to a session's outbound.db copy (it is that file's one writer)."""
        with self._guard:
            if session not in self._writers:
                agent = store.agent_part(session)
                agent.mkdir(parents=True, exist_ok=True)
                self._writers[session] = mirror.open_copy(store.outbound_db(session))
                self._writer_locks[session] = threading.Lock()
            return self._writers[session], self._writer_locks[session]

    def count(self, direction: str, size: int) -> None:
        with self._guard:
            self.moved[direction] += size

    def beat(self, session: Path, stamp: float | None) -> None:
        """The host's heartbeat file moves only when the runner's own heartbeat did (never through a
        link a local sandbox of this session left there)."""
        if stamp is None or self._beats.get(session) == stamp:
            return
        self._beats[session] = stamp
        nudge.touch_plain(store.heartbeat_file(session))


class ChannelHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: SessionChannel
    timeout = IDLE_S  # the socket's: an idle connection (no request, no bytes) ends, and its thread

    def log_message(self, format, *args):  # noqa: A002 - the stdlib's name; our own line is below
        pass

    def setup(self) -> None:
        super().setup()
        line = self.rfile.readline(512).decode("ascii", "replace").split()
        self.claims: passes.Claims | None = None
        if len(line) == 4:
            folder, session_id, expires, nonce = line
            self.claims = passes.Claims(self.server.settings.install_id, folder, session_id, nonce, int(expires))

    def _session(self) -> Path | None:
        if self.claims is None or self.claims.expires < time.time():
            return None
        return starts.session_if_current(self.server.settings.sessions_dir, self.claims)

    def _answer(self, status: int, body: bytes = b"", content_type: str = "application/json",
                headers: dict | None = None, file=None) -> None:
        """body, or `file` (written, not yet rewound) streamed from its start."""
        size = file.tell() if file is not None else len(body)
        self.server.count("down", size)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(size))
        fresh = passes.renewed(self.server.key, self.claims) if self.claims else None
        if fresh:
            self.send_header(PASS_HEADER, fresh)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if file is not None:
            file.seek(0)
            while chunk := file.read(1 << 20):
                self.wfile.write(chunk)
        elif body:
            self.wfile.write(body)

    def _refuse(self, status: int, why: str) -> None:
        log.warning("door: %s %s for %s refused: %s", self.command, self.path,
                    self.claims and f"{self.claims.folder}/{self.claims.session}", why)
        self._answer(status, json.dumps({"error": why}).encode())

    def _skip_body(self) -> None:
        try:
            size = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            size = 0
        if 0 < size <= MAX_JSON:
            _Bounded(self.rfile, size).drain()

    def _json(self, limit: int = MAX_JSON):
        """The request's JSON body, read within the channel's room for bodies (Busy when there is none)."""
        size = int(self.headers.get("Content-Length") or 0)
        if size < 0 or size > limit:
            raise ValueError(f"body over {limit} bytes")
        if not self.server.room.take(size):
            raise Busy()
        try:
            return json.loads(self.rfile.read(size) or b"{}")
        finally:
            self.server.room.give(size)

    def _dispatch(self) -> None:
        try:
            self.server.count("up", max(int(self.headers.get("Content-Length") or 0), 0))
        except ValueError:
            pass
        session = self._session()
        if session is None:
            self._skip_body()  # unread bytes at the close would reset the connection and lose the answer
            self._refuse(403, "this pass's sandbox is no longer the session's")
            self.close_connection = True
            return
        route = {("POST", "/inbound"): self._inbound, ("GET", "/outbound"): self._outbound_copy,
                 ("POST", "/outbound"): self._push}.get((self.command, self.path))
        try:
            if route is not None:
                route(session)
            elif self.path.startswith("/files/") and self.command in ("GET", "PUT"):
                self._files(session, self.path[len("/files/"):])
            elif self.path.startswith("/files/") and self.command == "DELETE":
                self._removed(session, self.path[len("/files/"):])
            else:
                self._skip_body()
                self._refuse(404, f"no {self.command} {self.path} on the session channel")
        except (ValueError, trees.BadTree, mirror.BadPush) as exc:
            self.close_connection = True  # the rest of a refused body is not read
            self._refuse(400, str(exc))
        except Busy:
            self.close_connection = True
            self._refuse(503, "the door holds as many request bodies as it may; try again")

    do_GET = do_POST = do_PUT = do_DELETE = _dispatch

    # -- down ------------------------------------------------------------------------------------
    def _inbound(self, session: Path) -> None:
        ask = self._json(MAX_ASK)
        if not isinstance(ask, dict):
            raise ValueError("the request is not a JSON object")
        wait = min(max(float(ask.get("wait") or 0), 0.0), MAX_WAIT_S)
        have = {tuple(x) for x in ask.get("have") or [] if isinstance(x, list) and len(x) == 2}
        db = store.inbound_db(session)
        stamp = self.server.watch.wait(db.parent, db, ask.get("after"), wait)
        if stamp is None or stamp == ask.get("after"):
            self._answer(204)
            return
        with tempfile.TemporaryFile() as out:
            stamp, position, whole = inbound_answer(session, out, have, ask.get("position"))
            self._answer(200, content_type="application/x-tar", file=out, headers={
                "X-Stamp": stamp or "", "X-Position": json.dumps(position) if position else "",
                "X-Inbound": "snapshot" if whole else "delta"})

    def _outbound_copy(self, session: Path) -> None:
        conn, lock = self.server.writer(session)
        with lock:
            self._answer(200, conn.serialize(), "application/vnd.sqlite3")

    def _files(self, session: Path, part: str) -> None:
        roots = self._roots(session)
        if part not in (DOWN_PARTS if self.command == "GET" else UP_PARTS):
            self._refuse(404, f"no {self.command} of files '{part}'")
            return
        if self.command == "GET":
            with tempfile.TemporaryFile() as out:
                count = trees.pack(roots[part], out)
                self._answer(200, content_type="application/x-tar", headers={"X-Files": str(count)}, file=out)
            return
        reader = _Bounded(self.rfile, int(self.headers.get("Content-Length") or 0))
        try:
            done = trees.unpack(roots[part], reader)
        finally:
            reader.drain()
        if done.skipped:
            log.warning("door: %s/%s %s upload passed over %d entr(ies), e.g. %s", self.claims.folder,
                        self.claims.session, part, len(done.skipped), done.skipped[0][:200])
        self._answer(200, json.dumps({"files": done.files, "bytes": done.bytes,
                                      "skipped": len(done.skipped)}).encode())

    def _roots(self, session: Path) -> dict[str, Path]:
        """The folders the session's files come from and go to, from the host's own records."""
        return {"home": store.agent_part(session) / "home",
                "group": self.server.settings.groups_dir / self.claims.folder,
                "global": self.server.settings.groups_dir / "global",
                "outbox": store.outbox_dir(session)}

    def _removed(self, session: Path, part: str) -> None:
        roots = self._roots(session)
        if part not in ("home", "group"):
            self._skip_body()
            self._refuse(404, f"no removal of files '{part}'")
            return
        done = trees.remove_known(roots[part], trees.removals(self._json()))
        if done.kept:
            log.info("door: %s/%s kept %d file(s) removed in the sandbox but changed since it knew them (or not "
                     "plain files), e.g. %s", self.claims.folder, self.claims.session, len(done.kept), done.kept[0][:200])
        self._answer(200, json.dumps({"removed": done.removed, "kept": len(done.kept)}).encode())

    # -- up --------------------------------------------------------------------------------------
    def _push(self, session: Path) -> None:
        push = mirror.check(self._json())
        conn, lock = self.server.writer(session)
        with lock:
            added, top = mirror.apply(conn, push)
        self.server.beat(session, push.heartbeat)
        if added or push.container is not None:
            nudge.touch(store.agent_part(session))  # delivery's inotify wakes on it, as for a local runner
        self._answer(200, json.dumps({"max_seq": top, "added": added}).encode())


class _Bounded:
    """The request body as a stream that ends at Content-Length (tarfile reads in blocks)."""

    def __init__(self, raw, size: int):
        if size < 0:
            raise ValueError("no body length")
        self.raw, self.left = raw, size

    def read(self, n: int = -1) -> bytes:
        if self.left <= 0:
            return b""
        n = self.left if n is None or n < 0 else min(n, self.left)
        data = self.raw.read(n)
        self.left -= len(data)
        return data

    def drain(self) -> None:
        while self.read(1 << 20):
            pass
