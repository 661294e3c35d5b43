"""Host-side reads and writes of a session folder.

The folder has two parts (session_schema): host/ (inbound.db, inbox/: the host writes, the sandbox
sees it read-only as a whole) and agent/ (outbound.db, heartbeat, outbox/, home/: the agent
writes). The host writes inbound.db only; it reads outbound.db read-only, and never follows a link
the agent put in its part.
"""
from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import uuid
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from . import session_schema as schema
from .agent_files import (agent_file, agent_mtime, file_identity, files_signature, open_agent_db,  # noqa: F401
                          opened_in_place, plain_agent_db)

log = logging.getLogger("nanoclaw.sessions")


@dataclass(frozen=True)
class Target:
    channel_type: str
    platform_id: str
    thread_id: str | None = None


TASK_THREAD_PREFIX = "task:"  # thread_id of an isolated task run's own session: task:<task id>:<due>
WEBHOOK_THREAD_PREFIX = "webhook:"  # thread_id of the session a webhook wakes: webhook:<name> (never private reach)

@dataclass(frozen=True)
class SessionRef:
    """One session's folder, as the background work (sweep, delivery, task runs) knows it."""
    folder: str
    session_id: str
    path: Path
    isolated_run: bool = False


def session_path(sessions_dir: Path, folder: str, session_id: str) -> Path:
    return sessions_dir / folder / session_id


def new_session_id() -> str:
    return uuid.uuid4().hex[:16]


# --- the layout -------------------------------------------------------------------------------

def host_part(path: Path) -> Path:
    return path / schema.HOST_PART


def agent_part(path: Path) -> Path:
    return path / schema.AGENT_PART


def inbound_db(path: Path) -> Path:
    return path / schema.HOST_PART / schema.INBOUND


def inbox_dir(path: Path) -> Path:
    return path / schema.HOST_PART / "inbox"


def outbound_db(path: Path) -> Path:
    return path / schema.AGENT_PART / schema.OUTBOUND


def heartbeat_file(path: Path) -> Path:
    return path / schema.AGENT_PART / schema.HEARTBEAT


def outbox_dir(path: Path) -> Path:
    return path / schema.AGENT_PART / "outbox"


HOST_ENTRIES = (schema.INBOUND, "inbox")  # of the old flat layout, what moves to host/ (not the journal)


def upgrade_layout(path: Path) -> bool:
    """A session folder of the old flat layout (inbound.db beside the agent's files) split into
    host/ and agent/. Only inbound.db and inbox/, as plain entries, go to host/; everything else,
    the journal and anything the agent may have planted beside inbound.db included, goes to agent/
    where it can do no harm. True if it moved something."""
    if host_part(path).exists() or not (path / schema.INBOUND).exists():
        return False
    host, agent = host_part(path), agent_part(path)
    host.mkdir(mode=0o755)
    agent.mkdir(exist_ok=True)
    for entry in list(path.iterdir()):
        if entry.name in (schema.HOST_PART, schema.AGENT_PART):
            continue
        plain = not entry.is_symlink() and (entry.is_dir() if entry.name == "inbox" else entry.is_file())
        entry.rename((host if entry.name in HOST_ENTRIES and plain else agent) / entry.name)
    log.info("session folder %s split into host/ and agent/", path)
    return True


def attach_outbound(conn: sqlite3.Connection, path: Path,
                    tables: tuple[str, ...] = ("messages_out", "processing_ack")) -> bool:
    """Attach the agent's outbound.db to `conn` read-only as `ob`. False (nothing attached) while it
    is missing, has not got these tables yet, or is not a plain file (a link is never followed)."""
    outbound = agent_file(outbound_db(path))
    if outbound is None:
        return False
    try:
        conn.execute("ATTACH DATABASE ? AS ob", (f"file:{outbound}?mode=ro",))
    except sqlite3.Error:
        return False
    if not opened_in_place(conn, "ob", outbound):  # swapped for a link between the check and the open
        conn.execute("DETACH DATABASE ob")
        return False
    marks = ", ".join("?" * len(tables))
    try:
        ready = conn.execute(f"SELECT COUNT(*) FROM ob.sqlite_master WHERE name IN ({marks})",
                             tables).fetchone()[0] == len(tables)
    except sqlite3.Error:  # not a database the agent made (or half written): nothing to read from it
        ready = False
    if not ready:
        conn.execute("DETACH DATABASE ob")
    return ready


def prepare(path: Path, routing: Target) -> None:
    """Create the folder layout and inbound.db; (re)write the routing row."""
    upgrade_layout(path)
    host_part(path).mkdir(mode=0o755, parents=True, exist_ok=True)
    inbox_dir(path).mkdir(mode=0o755, exist_ok=True)
    for sub in ("outbox", "home"):
        (agent_part(path) / sub).mkdir(parents=True, exist_ok=True)
    with _inbound(path) as conn:
        conn.execute("INSERT INTO routing (id, channel_type, platform_id, thread_id) VALUES (1, ?, ?, ?) "
                     "ON CONFLICT (id) DO UPDATE SET channel_type = excluded.channel_type, "
                     "platform_id = excluded.platform_id, thread_id = excluded.thread_id",
                     (routing.channel_type, routing.platform_id, routing.thread_id))


_write_locks: dict[Path, threading.Lock] = {}
_locks_guard = threading.Lock()


def _write_lock(path: Path) -> threading.Lock:
    with _locks_guard:
        return _write_locks.setdefault(path, threading.Lock())


# This process's write connection to each recently written inbound.db, used only under the
# session's write lock. A new one costs connect, pragmas and reading the schema (~0.5 ms of the
# router's, before the runner can see the message); a kept one is used again only while
# inbound.db is the file it opened (a session folder made anew gets a new connection).
KEPT_WRITERS = 32
_writers: OrderedDict[Path, tuple[tuple[int, int], sqlite3.Connection]] = OrderedDict()
_writers_pid = os.getpid()
_forked_away: list = []  # a forked child's copies of its parent's connections: never used, never closed


def _writer(path: Path) -> sqlite3.Connection:
    """The kept write connection to path's inbound.db (the caller holds the path's write lock)."""
    global _writers_pid
    db = inbound_db(path)
    with _locks_guard:
        if _writers_pid != os.getpid():  # SQLite connections must not cross a fork
            _forked_away.extend(conn for _, conn in _writers.values())
            _writers.clear()
            _writers_pid = os.getpid()
        kept = _writers.get(path)
        if kept is not None:
            _writers.move_to_end(path)
    if kept is not None:
        if kept[0] == file_identity(db):
            return kept[1]
        forget_writer(path, locked=True)
    conn = schema.connect(db)
    with _locks_guard:
        _writers[path] = (file_identity(db), conn)
        evictable = list(_writers)[:-KEPT_WRITERS]
    for other in evictable:  # the least recently written, unless a writer holds it right now
        lock = _write_lock(other)
        if lock.acquire(blocking=False):
            try:
                forget_writer(other, locked=True)
            finally:
                lock.release()
    return conn


def forget_writer(path: Path, *, locked: bool = False) -> None:
    """Close the kept write connection of a session (before its folder is removed, or after an error)."""
    lock = None if locked else _write_lock(path)
    if lock is not None:
        lock.acquire()
    try:
        with _locks_guard:
            kept = _writers.pop(path, None) if _writers_pid == os.getpid() else None
        if kept is not None:
            kept[1].close()
    finally:
        if lock is not None:
            lock.release()


_batch = threading.local()


@contextmanager
def batched():
    """Within this thread, inbound.db writes share one transaction per session until the block
    ends (one commit, one journal sync, for many messages). Each write is still all or nothing
    (a savepoint); if the block raises, or a commit fails, nothing of the block is kept in that
    session. Other threads wait for a batched session's lock as they wait for any writer."""
    if getattr(_batch, "open", None) is not None:  # nested: the outer block commits
        yield
        return
    _batch.open = opened = {}
    failed = True
    try:
        yield
        failed = False
    finally:
        _batch.open = None
        error = None
        for path, (conn, lock) in opened.items():
            try:
                conn.execute("ROLLBACK" if failed or error else "COMMIT")
            except sqlite3.Error as exc:
                error = error or exc
                forget_writer(path, locked=True)
            finally:
                lock.release()
        if error is not None and not failed:
            raise error


class _inbound:
    """Context manager: a short write transaction on inbound.db (BEGIN IMMEDIATE so seq is safe).

    Threads of this process queue on a lock first: SQLite's own busy handler sleeps in
    growing steps, which under concurrent webhooks wastes far more time than it waits.
    Inside batched(), the session's batch transaction is used, each write in a savepoint."""

    def __init__(self, path: Path):
        self.path = path
        self.lock = _write_lock(path)
        self.batch = getattr(_batch, "open", None)

    def __enter__(self) -> sqlite3.Connection:
        if self.batch is not None:
            if self.path not in self.batch:
                self._begin()
                self.batch[self.path] = (self.conn, self.lock)
            self.conn = self.batch[self.path][0]
            self.conn.execute("SAVEPOINT write")
            return self.conn
        self._begin()
        return self.conn

    def _begin(self) -> None:
        self.lock.acquire()
        try:
            self.conn = _writer(self.path)
            try:
                self.conn.execute("BEGIN IMMEDIATE")
            except BaseException:
                forget_writer(self.path, locked=True)
                raise
        except BaseException:
            self.lock.release()
            raise

    def __exit__(self, exc_type, *_):
        if self.batch is not None:
            if exc_type:
                self.conn.execute("ROLLBACK TO write")
            self.conn.execute("RELEASE write")
            return
        try:
            self.conn.execute("ROLLBACK" if exc_type else "COMMIT")
        except BaseException:
            forget_writer(self.path, locked=True)  # whatever state it is in, the next write starts afresh
            raise
        finally:
            self.lock.release()


# What the host tells a session with each message a turn reads (e.g. the memory snapshot of its scope):
# provider(path) -> {option: value}, written into `options` in the same transaction as the message.
_option_providers: list = []


def provide_options(provider) -> None:
    if provider not in _option_providers:
        _option_providers.append(provider)


def open_session_readonly(path: Path) -> sqlite3.Connection | None:
    """The session's inbound.db, read-only (None when there is none)."""
    db = inbound_db(path)
    return schema.connect(db, readonly=True) if db.exists() else None


def message_exists(path: Path, message_id: str) -> bool:
    db = inbound_db(path)
    if not db.exists():
        return False
    conn = schema.connect(db, readonly=True)
    try:
        return conn.execute("SELECT 1 FROM messages_in WHERE id = ?", (message_id,)).fetchone() is not None
    finally:
        conn.close()


def hold_album(path: Path, album: str, until: str) -> None:
    """Keep an album's items waiting until `until` (UTC ISO) while its next item downloads; that
    item's write sets them to its own time (write_message)."""
    with _inbound(path) as conn:
        conn.execute("UPDATE messages_in SET process_after = ? WHERE status = 'pending' AND"
                     " json_extract(content, '$.album') = ? AND process_after < ?", (until, album, until))


def write_message(path: Path, *, content: dict, target: Target | None, kind: str = "chat",
                  trigger: bool = True, timestamp: str | None = None, process_after: str | None = None,
                  message_id: str | None = None, status: str = "pending", album: str | None = None) -> str:
    """Append one messages_in row; returns its id. (An `answer` to a system op is written
    `completed`: the agent's tool reads it by id, no turn ever picks it up.) A row of an album
    (content["album"]) sets the album's earlier rows still waiting to its own process_after (they
    may have been held longer while it downloaded: hold_album), so the runner takes the album in one
    turn. A chat, task, webhook or agent row carries the providers' options."""
    message_id = message_id or uuid.uuid4().hex
    options: dict[str, str] = {}
    if kind in ("chat", "task", "webhook", "agent"):
        for provider in _option_providers:
            try:
                options.update(provider(path) or {})
            except Exception as exc:  # noqa: BLE001 - an option is a courtesy; the message is what matters
                log.warning("could not add the session options of %s: %s", path, exc)
    with _inbound(path) as conn:
        for key, value in options.items():
            conn.execute("INSERT INTO options (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET "
                         "value = excluded.value WHERE options.value IS NOT excluded.value", (key, value))
        if album and process_after:
            conn.execute("UPDATE messages_in SET process_after = ? WHERE status = 'pending' AND"
                         " json_extract(content, '$.album') = ? AND process_after IS NOT NULL",
                         (process_after, album))
        # one statement: the next seq, and nothing written for an id already there (a platform
        # retry is written once, whatever happens). "WHERE true" is SQLite's rule for an upsert
        # on INSERT ... SELECT.
        conn.execute(
            "INSERT INTO messages_in (id, seq, kind, timestamp, status, process_after, trigger,"
            " channel_type, platform_id, thread_id, content) SELECT ?, COALESCE(MAX(seq), 0) + 1,"
            " ?, ?, ?, ?, ?, ?, ?, ?, ? FROM messages_in WHERE true ON CONFLICT (id) DO NOTHING",
            (message_id, kind, timestamp or schema.utc_now_iso(), status, process_after, 1 if trigger else 0,
             target and target.channel_type, target and target.platform_id, target and target.thread_id,
             json.dumps(content)))
    return message_id


def set_destination(path: Path, name: str, target: Target, display_name: str | None = None) -> None:
    with _inbound(path) as conn:
        conn.execute("INSERT OR REPLACE INTO destinations (name, channel_type, platform_id, thread_id, display_name)"
                     " VALUES (?, ?, ?, ?, ?)",
                     (name, target.channel_type, target.platform_id, target.thread_id, display_name))


def routing_of(path: Path) -> Target | None:
    """Where the session's chat is: the routing row of its inbound.db (the host's own file)."""
    db = inbound_db(path)
    if not db.exists():
        return None
    conn = schema.connect(db, readonly=True)
    try:
        row = conn.execute("SELECT channel_type, platform_id, thread_id FROM routing").fetchone()
    finally:
        conn.close()
    return Target(*row) if row else None


def allowed_targets(path: Path) -> set[Target]:
    """The session's routing plus its named destinations: the only places its rows may go."""
    conn = schema.connect(inbound_db(path))
    try:
        return targets_of(conn)
    finally:
        conn.close()


def targets_of(conn: sqlite3.Connection) -> set[Target]:
    """allowed_targets on an open connection to the session's inbound.db."""
    rows = conn.execute("SELECT channel_type, platform_id, thread_id FROM routing "
                        "UNION SELECT channel_type, platform_id, thread_id FROM destinations").fetchall()
    return {Target(r[0], r[1], r[2]) for r in rows}


def has_due_trigger(path: Path, now_iso: str | None = None) -> bool:
    """Is there a triggering pending message that is due? (decides whether to wake)."""
    db = inbound_db(path)
    if not db.exists():
        return False
    conn = schema.connect(db, readonly=True)
    try:
        row = conn.execute("SELECT 1 FROM messages_in WHERE status = 'pending' AND trigger = 1 AND "
                           "(process_after IS NULL OR process_after <= ?) LIMIT 1",
                           (now_iso or schema.utc_now_iso(),)).fetchone()
    finally:
        conn.close()
    return row is not None


# --- the host's live message of a turn, and the session's options (outbound/progress.py) ---
def record_status_message(path: Path, message_in_id: str, target: Target, platform_message_id: str,
                          text: str | None = None) -> None:
    with _inbound(path) as conn:
        conn.execute("INSERT OR REPLACE INTO status_messages (message_in_id, channel_type, platform_id, thread_id, "
                     "platform_message_id, shown_at, text) VALUES (?, ?, ?, ?, ?, ?, ?)",
                     (message_in_id, target.channel_type, target.platform_id, target.thread_id, platform_message_id,
                      schema.utc_now_iso(), text))


def forget_status_message(path: Path, message_in_id: str, platform_message_id: str | None = None) -> None:
    if inbound_db(path).exists():
        with _inbound(path) as conn:
            conn.execute("DELETE FROM status_messages WHERE message_in_id = ? AND platform_message_id IS "
                         "COALESCE(?, platform_message_id)", (message_in_id, platform_message_id))


def set_option(path: Path, key: str, value: str | None) -> None:
    """A decision of the host's for this session's chat (e.g. progress on|off), read by the host."""
    if not inbound_db(path).exists():
        return
    with _inbound(path) as conn:
        if value is None:
            conn.execute("DELETE FROM options WHERE key = ?", (key,))
        else:
            conn.execute("INSERT INTO options (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET "
                         "value = excluded.value", (key, value))


def update_option(path: Path, key: str, change) -> None:
    """Set an option to change(its value now) in one write transaction (two writers never lose one)."""
    with _inbound(path) as conn:
        row = conn.execute("SELECT value FROM options WHERE key = ?", (key,)).fetchone()
        conn.execute("INSERT INTO options (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET "
                     "value = excluded.value", (key, change(row[0] if row else None)))
