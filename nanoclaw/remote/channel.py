"""The session channel: what a remote sandbox and the host exchange in place of a shared folder.

The gate hands each connection whose pass it checked to `serve`, on its own event loop, with the
pass's claims: nothing the sandbox sends can name another session. Each request checks again that
the pass's start is still the session's current one (a replaced sandbox's open connection gets
nothing more).

    POST /inbound        {after, wait, inbox, position}: when the host's inbound.db differs from
                         `after` (or within `wait` s), a tar of the inbox files the sandbox lacks
                         (changed since the `inbox` mark it holds: inbound.py),
                         then what changed since `position` (change_log.py), or inbound.db whole (a
                         consistent snapshot) to start or after a gap; 204 when nothing changed
    GET  /outbound       the host's copy of the session's outbound.db (a restarted sandbox resumes it)
    POST /outbound       rows, acks, state, current tool, heartbeat (mirror.py)
    GET  /files/<part>   home | group | global | packages (the agent's approved pip/npm prefix), as a
                         tar, with X-Digest (sha256 of the tar) for the runner to check
    PUT  /files/<part>   home | group | outbox: changed files, as a tar (trees.py); in the group
                         folder, a write over a version its sandbox never saw keeps that version
                         aside and tells its session (shared_files.py)
    DELETE /files/<part> home | group: files removed in the sandbox, {"files": {name: sha256}}
    POST /files/<part>/manifest  home | group, {"tag": the runner's}: 204 when the host's files are
                         what the runner has, else {"files": {name: sha256}, "tag"}
    POST /files/<part>/pick      home | group, {"names": [...]}: those files, as a tar with X-Digest

Thousands of sandboxes each keep a long poll open, so connections live on the gate's event loop (a
coroutine and its buffers each, no thread, and no descriptor beyond the connection's own):
HTTP/1.1 is read there, a long poll waits there, and request bodies are read there within a shared
budget. What touches SQLite or the disk runs on a small pool of threads (WORKERS), one request at a
time per connection.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import sqlite3
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from pathlib import Path

from agent_runner import nudge

from ..sessions import store
from . import mirror, passes, starts, trees
from .shared_files import SharedFiles
from .bodies import BodyRoom, LoopBody, parse_json, room_for
from .exchange import Answer, Busy, Refused, Request, json_answer
from .inbound import InboundWatch, inbound_answer, inbox_mark

log = logging.getLogger("nanoclaw.remote.channel")

MAX_WAIT_S = 30.0
IDLE_S = MAX_WAIT_S + 30      # a kept-alive connection with no request for this long is closed
MAX_JSON = 8 << 20            # a list of removed files (a push: mirror.MAX_PUSH)
MAX_JSON_VALUES = 2 * trees.MAX_FILES + 16
MAX_ASK = 2 << 20             # what POST /inbound asks: the inbox files it has
MAX_HEAD = 64 << 10           # a request's line and headers
WORKERS = 16                  # threads for what touches SQLite or the disk, all connections together
WRITER_IDLE_S = 60.0          # a session's outbound.db copy unused this long is closed (reopened on use)
FORGET_S = 3600.0             # what the door remembers of a session it has not heard from this long goes
PRUNE_FILES_S = 86400.0       # how often the record of who wrote which file is pruned (shared_files.py)
# An answer goes to TLS in pieces of a TLS record's size: the connection's outgoing buffer keeps the
# size of the largest piece written at once for the connection's life (1 MiB pieces left each idle
# sandbox's long poll holding its start-up snapshot: 216 KiB a connection, 39 KiB without).
WRITE_CHUNK = 16 << 10
PASS_HEADER = "X-Door-Pass"
DOWN_PARTS = ("home", "group", "global", "packages")
UP_PARTS = ("home", "group", "outbox")
SHARED_PARTS = ("home", "group")  # kept in step both ways while the sandbox runs


class SessionChannel:
    def __init__(self, door_dir: Path, settings, key: bytes):
        self.settings, self.key = settings, key
        self.room = BodyRoom()
        self._writers: dict[Path, sqlite3.Connection] = {}
        self._writer_locks: dict[Path, threading.Lock] = {}
        self._writer_used: dict[Path, float] = {}
        self._beats: dict[Path, tuple[float, float]] = {}  # the runner's last heartbeat, and when it came
        self._files_pruned = -float("inf")  # the first tidy prunes, then one a day
        self.tops = mirror.Tops()
        self._guard = threading.Lock()
        self.moved = {"down": 0, "up": 0}  # bytes of bodies answered and received (bench/volume.py)
        self.files = SharedFiles(Path(door_dir), settings.sessions_dir)
        self.pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="door-channel")
        self.loop: asyncio.AbstractEventLoop | None = None
        self.watch: InboundWatch | None = None

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """On `loop`'s thread, before it serves: the loop every connection of the channel lives on."""
        self.loop = loop
        self.watch = InboundWatch(loop)
        loop.call_later(60, self._tidy_soon)

    def detach(self) -> None:
        """On the loop's thread, its connections ended, before it closes."""
        if self.watch is not None:
            self.watch.close()
            self.watch = None

    def stop(self) -> None:
        """After the loop stopped (the gate's)."""
        self.pool.shutdown(wait=False, cancel_futures=True)
        with self._guard:
            for conn in self._writers.values():
                conn.close()
            self._writers.clear()
        self.files.close()

    # -- what the pool's threads share ---------------------------------------------------------
    def writer(self, session: Path) -> tuple[sqlite3.Connection, threading.Lock]:
        """The door's one connection to a session's outbound.db copy (it is that file's one writer)."""
        with self._guard:
            if session not in self._writers:
                agent = store.agent_part(session)
                agent.mkdir(parents=True, exist_ok=True)
                self._writers[session] = mirror.open_copy(store.outbound_db(session))
                self._writer_locks[session] = threading.Lock()
            self._writer_used[session] = time.monotonic()
            return self._writers[session], self._writer_locks[session]

    def close_idle_writers(self, idle_s: float | None = None) -> int:
        """Close the copies no request used for WRITER_IDLE_S (stopped and replaced sandboxes'):
        the door holds a connection per live session, not per session it ever served."""
        limit = time.monotonic() - (WRITER_IDLE_S if idle_s is None else idle_s)
        closed = 0
        with self._guard:
            for session, used in list(self._writer_used.items()):
                lock = self._writer_locks[session]
                if used > limit or not lock.acquire(blocking=False):
                    continue
                try:
                    self._writers.pop(session).close()
                    del self._writer_locks[session], self._writer_used[session]
                    closed += 1
                finally:
                    lock.release()
        return closed

    def tidy(self) -> None:
        """Once a minute, on the pool: close the copies left idle, forget the sessions not heard from
        for FORGET_S (stopped sandboxes'), and once a day prune the record of who wrote what."""
        self.close_idle_writers()
        self.tops.forget(FORGET_S)
        limit = time.monotonic() - FORGET_S
        with self._guard:
            for session in [s for s, (_stamp, seen) in self._beats.items() if seen < limit]:
                del self._beats[session]
        if time.monotonic() - self._files_pruned >= PRUNE_FILES_S:
            self._files_pruned = time.monotonic()
            self.files.prune()

    def _tidy_soon(self) -> None:
        self.pool.submit(self._tidy_or_say)
        self.loop.call_later(60, self._tidy_soon)

    def _tidy_or_say(self) -> None:
        try:
            self.tidy()
        except Exception as exc:  # noqa: BLE001 - the pool's future would keep it unseen; next minute tries again
            log.warning("door: tidying failed (next minute tries again): %s", exc)

    def count(self, direction: str, size: int) -> None:
        with self._guard:
            self.moved[direction] += size

    def beat(self, session: Path, stamp: float | None) -> None:
        """The host's heartbeat file moves only when the runner's own heartbeat did (never through a
        link a local sandbox of this session left there)."""
        if stamp is None:
            return
        with self._guard:
            known = self._beats.get(session)
            self._beats[session] = (stamp, time.monotonic())
        if known is None or known[0] != stamp:
            nudge.touch_plain(store.heartbeat_file(session))

    def roots(self, claims: passes.Claims, session: Path) -> dict[str, Path]:
        """The folders the session's files come from and go to, from the host's own records."""
        return {"home": store.agent_part(session) / "home",
                "group": self.settings.groups_dir / claims.folder,
                "global": self.settings.groups_dir / "global",
                "packages": self.settings.data_dir / "packages" / claims.folder,
                "outbox": store.outbox_dir(session)}

    # -- a connection, on the loop --------------------------------------------------------------
    async def serve(self, claims: passes.Claims, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A connection the gate admitted with `claims` (its pass, checked): its requests, one after
        another, until it closes, idles past IDLE_S or a request ends it. The gate closes it after."""
        try:
            while await self._one_request(claims, reader, writer):
                pass
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass  # idle past IDLE_S, gone, or not HTTP: the connection ends
        except Exception:  # noqa: BLE001 - one request's failure ends its connection, not the channel
            log.exception("door: the session channel failed on a request of %s/%s", claims.folder, claims.session)

    async def _one_request(self, claims, reader, writer) -> bool:
        """Read, serve and answer one request; whether the connection goes on."""
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), IDLE_S)
        lines = head.decode("latin-1").split("\r\n")
        method, path, _version = lines[0].split(" ", 2)
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
        try:
            length = int(headers.get("content-length") or 0)
        except ValueError:
            length = -1
        self.count("up", max(length, 0))
        session = None
        request = Request(method, path, headers, claims, session, length)
        try:
            if length < 0 or "transfer-encoding" in headers:
                raise Refused(400, "a body needs a Content-Length (no chunked bodies)")
            if claims.expires >= time.time():
                try:
                    session = request.session = starts.session_if_current(self.settings.sessions_dir, claims)
                except OSError as exc:  # cannot read the start now: the runner tries again
                    await self._skip(reader, length)
                    raise Busy("the door cannot read the session's start now; try again") from exc
            if session is None:
                await self._skip(reader, length)  # unread bytes at the close would reset it and lose the answer
                raise Refused(403, "this pass's sandbox is no longer the session's")
            try:
                answer = await self._serve(request, reader)
            finally:
                self.room.give(request.room)  # what parsing its body built is gone with the answer made
            keep = headers.get("connection", "").lower() != "close"
        except (Refused, ValueError, trees.BadTree, mirror.BadPush, Busy) as exc:
            status = exc.status if isinstance(exc, Refused) else 503 if isinstance(exc, Busy) else 400
            why = str(exc)
            log.warning("door: %s %s for %s/%s refused: %s", method, path, claims.folder, claims.session, why)
            answer, keep = json_answer(status, {"error": why}), False  # the rest of a refused body is not read
        await self._send(answer, claims, writer)
        return keep

    async def _skip(self, reader, length: int) -> None:
        if 0 < length <= max(MAX_JSON, mirror.MAX_PUSH):
            while length > 0:
                chunk = await asyncio.wait_for(reader.read(min(length, 1 << 20)), IDLE_S)
                if not chunk:
                    raise ConnectionError("the body ended early")
                length -= len(chunk)

    async def _body(self, reader, request: Request, limit: int, max_values: int) -> bytes:
        """The request's body, read once the channel's room for bodies holds what it may build
        (bodies.room_for; Busy when there is none). The room is the request's until it is answered."""
        if request.length > limit:
            raise ValueError(f"body over {limit} bytes")
        room = room_for(request.length, max_values)
        if not await self.room.take(room):
            raise Busy()
        request.room += room
        return await asyncio.wait_for(reader.readexactly(request.length), IDLE_S)

    async def _json(self, reader, request: Request, limit: int = MAX_JSON, max_values: int = MAX_JSON_VALUES):
        """The request's JSON body, parsed on the pool within its room."""
        return await self._work(parse_json, await self._body(reader, request, limit, max_values), max_values)

    async def _work(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    async def _send(self, answer: Answer, claims, writer: asyncio.StreamWriter) -> None:
        size = answer.file.tell() if answer.file is not None else len(answer.body)
        self.count("down", size)
        lines = [f"HTTP/1.1 {answer.status} {HTTPStatus(answer.status).phrase}",
                 f"Content-Type: {answer.content_type}", f"Content-Length: {size}"]
        fresh = passes.renewed(self.key, claims) if claims else None
        if fresh:
            lines.append(f"{PASS_HEADER}: {fresh}")
        lines += [f"{name}: {value}" for name, value in answer.headers.items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        try:
            if answer.file is not None:
                answer.file.seek(0)
                while chunk := answer.file.read(WRITE_CHUNK):
                    writer.write(chunk)
                    await writer.drain()
            else:
                writer.write(answer.body)
            await writer.drain()
        finally:
            if answer.file is not None:
                answer.file.close()

    # -- the routes ------------------------------------------------------------------------------
    async def _serve(self, request: Request, reader) -> Answer:
        method, path, session = request.method, request.path, request.session
        if (method, path) == ("POST", "/inbound"):
            return await self._inbound(request, reader)
        if (method, path) == ("GET", "/outbound"):
            return await self._work(self._outbound_copy, session)
        if (method, path) == ("POST", "/outbound"):  # decoded and applied on the pool, within its room
            body = await self._body(reader, request, mirror.MAX_PUSH, mirror.MAX_VALUES)
            return await self._work(self._push, session, body)
        if path.startswith("/files/"):
            part = path[len("/files/"):]
            roots = self.roots(request.claims, session)
            if method == "GET" and part in DOWN_PARTS:
                return await self._work(self._pack, roots[part])
            if method == "PUT" and part in UP_PARTS:
                body = LoopBody(reader, request.length, asyncio.get_running_loop())
                return await self._work(self._unpack, request, part, roots[part], body)
            if method == "DELETE" and part in SHARED_PARTS:
                return await self._work(self._removed, request, part, roots[part], await self._json(reader, request))
            tree, _, verb = part.partition("/")
            if method == "POST" and tree in SHARED_PARTS and verb in ("manifest", "pick"):
                ask = await self._json(reader, request, MAX_ASK)
                return await self._work(self._manifest if verb == "manifest" else self._pick, roots[tree], ask)
            await self._skip(reader, request.length)
            raise Refused(404, f"no {method} of files '{part}'")
        await self._skip(reader, request.length)
        raise Refused(404, f"no {method} {path} on the session channel")

    async def _inbound(self, request: Request, reader) -> Answer:
        ask = await self._json(reader, request, MAX_ASK)
        if not isinstance(ask, dict):
            raise ValueError("the request is not a JSON object")
        wait = min(max(float(ask.get("wait") or 0), 0.0), MAX_WAIT_S)
        mark = inbox_mark(ask.get("inbox"))
        db = store.inbound_db(request.session)
        stamp = await self.watch.wait(db.parent, db, ask.get("after"), wait)
        if stamp is None or stamp == ask.get("after"):
            return Answer(204)
        return await self._work(self._inbound_answer, request, mark, ask.get("position"))

    # -- on the pool -----------------------------------------------------------------------------
    def _inbound_answer(self, request: Request, mark: dict | None, position) -> Answer:
        """The change, and the tags of the shared folders as they are now: the runner takes what
        changed in them before the change applies, so a message's turn sees the files it came with."""
        roots = self.roots(request.claims, request.session)
        tags = {part: self.files.manifest(roots[part])[1] for part in SHARED_PARTS}
        out = tempfile.TemporaryFile()
        stamp, position, whole, mark = inbound_answer(request.session, out, mark, position)
        return Answer(200, content_type="application/x-tar", file=out, headers={
            "X-Stamp": stamp or "", "X-Position": json.dumps(position) if position else "",
            "X-Inbound": "snapshot" if whole else "delta", "X-Trees": json.dumps(tags),
            "X-Inbox": json.dumps({"after": mark["after"], "at": sorted(mark["at"])}) if mark else ""})

    def _outbound_copy(self, session: Path) -> Answer:
        conn, lock = self.writer(session)
        with lock:
            return Answer(200, conn.serialize(), "application/vnd.sqlite3")

    def _push(self, session: Path, body: bytes) -> Answer:
        push = mirror.decode(body)
        del body
        if mirror.writes_nothing(push):  # an idle runner's heartbeat: no connection kept open for it
            added, top = 0, self.tops.of(store.outbound_db(session))
        else:
            conn, lock = self.writer(session)
            with lock:
                added, top = mirror.apply(conn, push)
                self.tops.remember(store.outbound_db(session), top)
        self.beat(session, push.heartbeat)
        if added or push.container is not None:
            nudge.touch(store.agent_part(session))  # delivery's inotify wakes on it, as for a local runner
        return json_answer(200, {"max_seq": top, "added": added})

    @staticmethod
    def _pack(root: Path, only: set[str] | None = None) -> Answer:
        out = tempfile.TemporaryFile()
        count = trees.pack(root, out, only=only)
        digest, size = hashlib.sha256(), out.tell()
        out.seek(0)
        while chunk := out.read(1 << 20):
            digest.update(chunk)
        out.seek(size)
        return Answer(200, content_type="application/x-tar", file=out,
                      headers={"X-Files": str(count), "X-Digest": digest.hexdigest()})

    def _owner_of(self, request: Request, part: str):
        """Who wrote a file of `part` (the conflict rule), from the door's own record: any session of
        the agent in its group folder, the one session in its home/; None: no conflict rule."""
        if part == "group":
            return self.files.owner_of(request.claims.folder)
        return trees.NO_OWNER if part == "home" else None

    def _unpack(self, request: Request, part: str, root: Path, body: "LoopBody") -> Answer:
        shared = part == "group"
        try:
            done = trees.unpack(root, body, owner_of=self._owner_of(request, part))
        finally:
            body.drain()
        if shared:
            self.files.settle(request.claims.folder, request.claims.session, done)
        if done.skipped:
            log.warning("door: %s/%s %s upload passed over %d entr(ies), e.g. %s", request.claims.folder,
                        request.claims.session, request.path, len(done.skipped), done.skipped[0][:200])
        return json_answer(200, {"files": done.files, "bytes": done.bytes, "skipped": len(done.skipped),
                                 "conflicts": len(done.conflicts), "again": done.again})

    def _removed(self, request: Request, part: str, root: Path, payload) -> Answer:
        shared = part == "group"
        done = trees.remove_known(root, trees.removals(payload), self._owner_of(request, part) or trees.NO_OWNER)
        if shared:
            self.files.settle(request.claims.folder, request.claims.session, done, done.gone)
        return json_answer(200, {"removed": done.removed, "kept": len(done.kept), "conflicts": len(done.conflicts)})

    def _manifest(self, root: Path, ask) -> Answer:
        files, tag = self.files.manifest(root)
        if isinstance(ask, dict) and ask.get("tag") == tag:
            return Answer(204)
        return json_answer(200, {"files": files, "tag": tag})

    @staticmethod
    def _pick(root: Path, ask) -> Answer:
        names = ask.get("names") if isinstance(ask, dict) else None
        if not isinstance(names, list) or len(names) > trees.MAX_FILES or not all(isinstance(n, str) for n in names):
            raise Refused(400, f"a pick names its files as a list of at most {trees.MAX_FILES} names")
        return SessionChannel._pack(root, only={"/".join(trees.member_path(n)) for n in names})
