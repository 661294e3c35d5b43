"""What a remote runner sends up, checked, then written into the host's copy of its outbound.db.

For a session whose sandbox runs elsewhere, the door is the one writer of the session's
`agent/outbound.db` on the host, so delivery, the sweep, stuck detection and crash recovery read
the same file as for a local sandbox. What arrives is the agent's word exactly as that file is for
a local sandbox: hostile input. `check` (pure) keeps only well-formed rows of the runner's own
columns with sizes capped; rows already mirrored are never changed (a local agent could rewrite
its file; a remote one cannot even do that).
"""
from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from dataclasses import dataclass, field
from typing import Annotated, Literal

import msgspec

from ..sessions import session_schema as schema
from ..sessions import store
from .bodies import values_in

MAX_ROWS = 500          # messages_out rows in one push (the runner sends more in the next)
MAX_ACKS = 20_000
MAX_STATE = 200
MAX_TEXT = 256          # ids, times, kinds, names
MAX_ADDRESS = 1024      # channel type, platform id, thread id
MAX_CONTENT = 4 << 20   # one message's JSON
MAX_STREAM = 65536      # the answer so far (container_state.stream_text), characters
# A push is what the runner sends (agent_runner.remote: PUSH_BYTES of rows, ACKS_PER_PUSH acks)
# and room for the rest; its values bound what decoding it builds (bodies.py).
MAX_PUSH = 10 << 20
MAX_VALUES = 120_000


class BadPush(ValueError):
    """A push the door refuses as a whole (said in the answer and logged once)."""


@dataclass
class Push:
    out: list[tuple] = field(default_factory=list)
    acks: list[tuple] = field(default_factory=list)
    state: list[tuple] | None = None   # None: unchanged since the last push (a runner that says so)
    container: tuple | None = None
    acks_delta: bool = False          # acks are changes since the last push (and acks_gone the released)
    acks_gone: list[str] = field(default_factory=list)
    keep_from_seq: int | None = None  # the runner pruned below this seq
    heartbeat: float | None = None    # the runner's own heartbeat stamp (changes when it beats)


# The push's typed shape (msgspec): types and sizes are checked as it is decoded, in C; fields it
# does not name are skipped without being built. A list's length is only checked once the list is
# built, so `decode` bounds the number of values first (bodies.values_in).
Text = Annotated[str, msgspec.Meta(max_length=MAX_TEXT, pattern="^[^\\x00]*$")]
Address = Annotated[str, msgspec.Meta(max_length=MAX_ADDRESS, pattern="^[^\\x00]*$")]
Int62 = Annotated[int, msgspec.Meta(gt=-2**62, lt=2**62)]


class _Row(msgspec.Struct):
    id: Text
    seq: Annotated[int, msgspec.Meta(ge=1, lt=2**62)]
    timestamp: Text
    kind: Text
    content: Annotated[str, msgspec.Meta(max_length=MAX_CONTENT, pattern="^[^\\x00]*$")]
    in_reply_to: Text | None = None
    channel_type: Address | None = None
    platform_id: Address | None = None
    thread_id: Address | None = None


class _Ack(msgspec.Struct):
    message_id: Text
    status: Literal["processing", "completed", "failed"]
    status_changed: Text


class _State(msgspec.Struct):
    key: Text
    value: Annotated[str, msgspec.Meta(max_length=MAX_ADDRESS * 64, pattern="^[^\\x00]*$")] | None = None


class _Container(msgspec.Struct):
    current_tool: Text | None = None
    tool_declared_timeout_ms: Int62 | None = None
    tool_started_at: Text | None = None
    tool_subject: Address | None = None
    stream_for: Text | None = None
    stream_text: Annotated[str, msgspec.Meta(max_length=MAX_STREAM)] | None = None


class _Shape(msgspec.Struct):
    out: Annotated[list[_Row], msgspec.Meta(max_length=MAX_ROWS)] | None = None
    acks: Annotated[list[_Ack], msgspec.Meta(max_length=MAX_ACKS)] | None = None
    acks_gone: Annotated[list[Text], msgspec.Meta(max_length=MAX_ACKS)] | None = None
    acks_delta: bool | None = None
    state: Annotated[list[_State], msgspec.Meta(max_length=MAX_STATE)] | None = None
    container: _Container | None = None
    keep_from_seq: Int62 | None = None
    heartbeat: float | None = None


_DECODER = msgspec.json.Decoder(_Shape)


def decode(body: bytes) -> Push:
    """A push as it came over the wire, within `bodies.room_for(len(body), MAX_VALUES)`, or BadPush."""
    if len(body) > MAX_PUSH:
        raise BadPush(f"a push is at most {MAX_PUSH} bytes")
    if values_in(body, MAX_VALUES) > MAX_VALUES:
        raise BadPush(f"a push holds at most {MAX_VALUES} values")
    try:
        return _push(_DECODER.decode(body or b"{}"))
    except msgspec.DecodeError as exc:  # ValidationError included
        raise BadPush(str(exc)) from None


def check(payload) -> Push:
    """The push (as already parsed JSON) as rows ready to write, or BadPush."""
    try:
        return _push(msgspec.convert(payload, _Shape))
    except msgspec.ValidationError as exc:
        raise BadPush(str(exc)) from None


def _push(shape: _Shape) -> Push:
    push = Push()
    last = None
    for row in shape.out or ():
        if last is not None and row.seq <= last:
            raise BadPush("out rows must come in rising seq order")
        last = row.seq
        push.out.append((row.id, row.seq, row.in_reply_to, row.timestamp, row.kind, row.channel_type,
                         row.platform_id, row.thread_id, row.content))
    if len({r[0] for r in push.out}) < len(push.out):
        raise BadPush("an out row's id comes twice")
    push.acks = [(a.message_id, a.status, a.status_changed) for a in shape.acks or ()]
    push.acks_delta = shape.acks_delta is True
    push.acks_gone = list(shape.acks_gone or ())
    push.state = None if shape.state is None else [(s.key, s.value) for s in shape.state]
    c = shape.container
    push.container = None if c is None else (c.current_tool, c.tool_declared_timeout_ms, c.tool_started_at,
                                             c.tool_subject, c.stream_for, c.stream_text)
    push.keep_from_seq = shape.keep_from_seq
    push.heartbeat = shape.heartbeat
    return push


def max_seq(conn: sqlite3.Connection) -> int:
    return conn.execute("SELECT COALESCE(MAX(seq), 0) FROM messages_out").fetchone()[0]


def writes_nothing(push: Push) -> bool:
    """A push that only carries the runner's heartbeat (an idle sandbox's): no transaction for it."""
    return not (push.out or push.acks or push.acks_gone or not push.acks_delta or push.state is not None
                or push.container is not None or push.keep_from_seq is not None)


def apply(conn: sqlite3.Connection, push: Push) -> tuple[int, int]:
    """One transaction on the host's copy: new rows (those past what it has) appended, the runner's
    acks, state and current tool as sent. (rows added, the copy's highest seq)."""
    if writes_nothing(push):
        return 0, max_seq(conn)
    conn.execute("BEGIN IMMEDIATE")
    try:
        have = max_seq(conn)
        fresh = [row for row in push.out if row[1] > have]
        taken = {r[0] for r in conn.execute(
            f"SELECT id FROM messages_out WHERE id IN ({','.join('?' * len(fresh))})", [r[0] for r in fresh])} \
            if fresh else set()
        fresh = [row for row in fresh if row[0] not in taken]  # an id is the host's key for what it delivered
        conn.executemany("INSERT INTO messages_out (id, seq, in_reply_to, timestamp, kind, channel_type, platform_id,"
                         " thread_id, content) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", fresh)
        if push.keep_from_seq is not None:
            conn.execute("DELETE FROM messages_out WHERE seq < ? AND seq < (SELECT MAX(seq) FROM messages_out)",
                         (push.keep_from_seq,))
        if not push.acks_delta:  # a runner that sends its whole table
            conn.execute("DELETE FROM processing_ack")
        conn.executemany("DELETE FROM processing_ack WHERE message_id = ?", [(m,) for m in push.acks_gone])
        conn.executemany("INSERT OR REPLACE INTO processing_ack (message_id, status, status_changed) VALUES (?, ?, ?)",
                         push.acks)
        if push.state is not None:
            conn.execute("DELETE FROM session_state")
            conn.executemany("INSERT OR REPLACE INTO session_state (key, value) VALUES (?, ?)", push.state)
        if push.container is not None:
            conn.execute("INSERT INTO container_state (id, current_tool, tool_declared_timeout_ms, tool_started_at,"
                         " tool_subject, stream_for, stream_text) VALUES (1, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO "
                         "UPDATE SET current_tool = excluded.current_tool, tool_declared_timeout_ms = "
                         "excluded.tool_declared_timeout_ms, tool_started_at = excluded.tool_started_at, "
                         "tool_subject = excluded.tool_subject, stream_for = excluded.stream_for, "
                         "stream_text = excluded.stream_text", push.container)
        top = max_seq(conn)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return len(fresh), top


def open_copy(path) -> sqlite3.Connection:
    """The host's copy of a remote session's outbound.db, opened by its one writer (the door). The
    session may have run in a local sandbox before, whose agent could leave links there: nothing is
    opened through one (store.plain_agent_db, then the open checked to be the file itself)."""
    path = Path(path)
    if not store.plain_agent_db(path):
        raise BadPush(f"{path.name} is a folder in the agent's part")
    conn = schema.connect(path)
    conn.execute("PRAGMA schema_version").fetchone()
    if not store.opened_in_place(conn, "main", path):
        conn.close()
        raise BadPush(f"{path.name} was swapped for a link while it was opened")
    return conn


def copy_signature(path: Path) -> tuple:
    """Changes whenever the copy does (its main file or WAL); a link a local sandbox left is never followed."""
    return store.files_signature((path, path.with_name(path.name + "-wal")))


class Tops:
    """The highest seq of each session's copy, for the pushes that write nothing (an idle runner's
    heartbeat, every minute): remembered with the copy's signature, else read through a connection
    opened for it and closed, so the door holds no connection (three descriptors and a page cache)
    for an idle sandbox. A session not asked about for a while is forgotten (`forget`)."""

    def __init__(self) -> None:
        self._known: dict[Path, tuple[tuple, int, float]] = {}  # signature, top, when last asked
        self._lock = threading.Lock()

    def remember(self, path: Path, top: int, signature: tuple | None = None) -> None:
        """`top` as the copy's highest seq while its signature stays (read now unless given)."""
        with self._lock:
            self._known[path] = (signature or copy_signature(path), top, time.monotonic())

    def of(self, path: Path) -> int:
        signature = copy_signature(path)
        with self._lock:
            known = self._known.get(path)
            if known is not None and known[0] == signature:
                self._known[path] = (signature, known[1], time.monotonic())
                return known[1]
        if signature[0] is None:  # no copy yet: nothing of the runner's is here
            return 0
        conn = open_copy(path)
        try:
            top = max_seq(conn)
        finally:
            conn.close()
        self.remember(path, top, signature)  # the signature from before the read: a write since makes it differ
        return top

    def forget(self, idle_s: float) -> int:
        """Drop the sessions not asked about for `idle_s` (stopped sandboxes'); how many."""
        limit = time.monotonic() - idle_s
        with self._lock:
            old = [path for path, (_s, _t, used) in self._known.items() if used < limit]
            for path in old:
                del self._known[path]
        return len(old)
