"""THE one definition of the per-session databases. Dependency-free (stdlib
only): the runner imports it inside the sandbox and the host imports it too.

inbound.db  — written only by the host:  messages_in, delivered, destinations, routing, …, and the
              log of their changes (change_log.py) a remote copy follows
outbound.db — written only by the agent: messages_out, processing_ack, session_state, container_state

One writer per file is what makes crash recovery simple: never break it. The session folder has
two parts, one per writer. The sandbox sees the host's part read-only as a whole, so the agent
can create nothing beside inbound.db (no -wal, -shm, journal, link or replacement):

    <session>/host/    inbound.db (+ its journal), inbox/        -> /workspace/inbound (read-only)
    <session>/agent/   outbound.db (+ -wal, -shm), heartbeat,    -> /workspace/session (read-write)
                       outbox/, home/
Times are stored as UTC ISO-8601 strings ending in 'Z'.
"""
from __future__ import annotations

import json
import sqlite3
from datetime import datetime, timezone
from pathlib import Path

from . import change_log

INBOUND_DDL = """
CREATE TABLE IF NOT EXISTS messages_in (
    id            TEXT PRIMARY KEY,
    seq           INTEGER NOT NULL UNIQUE,
    kind          TEXT NOT NULL DEFAULT 'chat',      -- chat | task | system | answer
    timestamp     TEXT NOT NULL,                     -- when it was said (UTC)
    status        TEXT NOT NULL DEFAULT 'pending',   -- pending | completed | failed
    process_after TEXT,                              -- not before this time (UTC)
    recurrence    TEXT,
    series_id     TEXT,
    tries         INTEGER NOT NULL DEFAULT 0,
    trigger       INTEGER NOT NULL DEFAULT 1,        -- 0 = context only, 1 = wake the agent
    channel_type  TEXT,
    platform_id   TEXT,
    thread_id     TEXT,
    content       TEXT NOT NULL                      -- JSON: text, sender, sender_id, message_id, reply_to, attachments
);
CREATE INDEX IF NOT EXISTS idx_messages_in_status ON messages_in (status, seq);
CREATE TABLE IF NOT EXISTS delivered (
    message_out_id      TEXT PRIMARY KEY,
    status              TEXT NOT NULL,               -- delivered | failed | retry | sending | dropped
    platform_message_id TEXT,
    tries               INTEGER NOT NULL DEFAULT 0,
    last_error          TEXT,
    next_try_at         TEXT,
    delivered_at        TEXT,
    -- what the host sent, as the host saw it when it claimed the row (the agent's file may change
    -- afterwards): which of the agent's messages an edit or a reaction may touch is decided from these
    seq                 INTEGER,
    op                  TEXT,                        -- text | file | card | a system op (proposal, …)
    channel_type        TEXT,
    platform_id         TEXT
);
CREATE INDEX IF NOT EXISTS idx_delivered_retry ON delivered (next_try_at) WHERE status = 'retry';
CREATE TABLE IF NOT EXISTS destinations (
    name          TEXT PRIMARY KEY,
    channel_type  TEXT NOT NULL,
    platform_id   TEXT NOT NULL,
    thread_id     TEXT,
    display_name  TEXT
);
CREATE TABLE IF NOT EXISTS routing (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    channel_type  TEXT NOT NULL,
    platform_id   TEXT NOT NULL,
    thread_id     TEXT
);
CREATE TABLE IF NOT EXISTS options (               -- what the host decided for this session's chat
    key           TEXT PRIMARY KEY,                -- e.g. progress: on | off
    value         TEXT
);
CREATE TABLE IF NOT EXISTS status_messages (       -- the host's status message of a long turn
    message_in_id       TEXT PRIMARY KEY,          -- the turn: the person's message being answered
    channel_type        TEXT NOT NULL,
    platform_id         TEXT NOT NULL,
    thread_id           TEXT,
    platform_message_id TEXT NOT NULL,
    shown_at            TEXT NOT NULL,
    text                TEXT                       -- what it shows (a streamed answer's text, for "(stopped)")
);
"""

OUTBOUND_DDL = """
CREATE TABLE IF NOT EXISTS messages_out (
    id            TEXT PRIMARY KEY,
    seq           INTEGER NOT NULL UNIQUE,
    in_reply_to   TEXT,                              -- messages_in.id this answers, if any
    timestamp     TEXT NOT NULL,
    kind          TEXT NOT NULL DEFAULT 'chat',      -- chat | system
    channel_type  TEXT,
    platform_id   TEXT,
    thread_id     TEXT,
    content       TEXT NOT NULL                      -- JSON: {op: text|edit|reaction|file|card, ...}
);
CREATE INDEX IF NOT EXISTS idx_messages_out_reply ON messages_out (in_reply_to);
CREATE TABLE IF NOT EXISTS processing_ack (
    message_id     TEXT PRIMARY KEY,
    status         TEXT NOT NULL,                    -- processing | completed | failed
    status_changed TEXT NOT NULL
);
-- the claims of a turn under way, found without reading a year of outcomes
CREATE INDEX IF NOT EXISTS idx_processing_ack_open ON processing_ack (message_id) WHERE status = 'processing';
CREATE TABLE IF NOT EXISTS session_state (
    key    TEXT PRIMARY KEY,
    value  TEXT
);
CREATE TABLE IF NOT EXISTS container_state (
    id                       INTEGER PRIMARY KEY CHECK (id = 1),
    current_tool             TEXT,
    tool_declared_timeout_ms INTEGER,
    tool_started_at          TEXT,
    tool_subject             TEXT,                   -- a few words for the status message (activity.py)
    stream_for               TEXT,                   -- the message being answered, while its answer streams
    stream_text              TEXT                    -- the answer so far, as the live message shows it (stream.py)
);
"""

# The agent's own chat messages: the only rows its `edit` and `reaction` may point at (never a card
# the host showed for it, such as a proposal or a question). The runner and the host both use this.
AGENT_MESSAGE_OPS = ("text", "file")

# options: the message ids of turns the host stopped (/stop), a JSON list, newest last
STOP_OPTION = "stop"


def stopped_ids(value: str | None) -> list[str]:
    """The ids in the stop option; anything unreadable is no stop (pure; the host writes it)."""
    try:
        ids = json.loads(value) if value else []
    except ValueError:
        return []
    return [i for i in ids if isinstance(i, str)] if isinstance(ids, list) else []


INBOUND = "inbound.db"
OUTBOUND = "outbound.db"
HEARTBEAT = "heartbeat"
HOST_PART = "host"
AGENT_PART = "agent"
SANDBOX_INBOUND_DIR = "/workspace/inbound"   # the host's part, read-only
SANDBOX_SESSION_DIR = "/workspace/session"   # the agent's part, read-write


_READY: set[str] = set()
# Columns added to an existing table after its first release, added in place to older files.
CONTAINER_STATE_ADDED = (("tool_subject", "TEXT"), ("stream_for", "TEXT"), ("stream_text", "TEXT"))
DELIVERED_ADDED = (("seq", "INTEGER"), ("op", "TEXT"), ("channel_type", "TEXT"), ("platform_id", "TEXT"))


def _add_missing_columns(conn: sqlite3.Connection, table: str, columns) -> None:
    have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
    for name, kind in columns:
        if name not in have:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")


def utc_now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def connect(path: Path | str, *, readonly: bool = False, timeout: float = 5.0) -> sqlite3.Connection:
    """Open a session database. The writer side creates the schema; a reader
    opens read-only and never creates or changes anything."""
    path = Path(path)
    fresh = not path.exists()
    if readonly:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=timeout,
                               isolation_level=None, check_same_thread=False)
    else:
        conn = sqlite3.connect(str(path), timeout=timeout, isolation_level=None, check_same_thread=False)
        ddl = INBOUND_DDL if path.name == INBOUND else OUTBOUND_DDL if path.name == OUTBOUND else None
        if ddl is None:
            raise ValueError(f"unknown session database {path.name!r}")
        # inbound.db keeps a rollback journal: its reader (the agent, another uid) then needs only
        # read access, never write access to a -shm file the host created. TRUNCATE keeps the
        # host's journal file in place, so the agent cannot plant a "hot" journal of its own.
        conn.execute(f"PRAGMA journal_mode={'TRUNCATE' if path.name == INBOUND else 'WAL'}")
        conn.execute("PRAGMA synchronous=NORMAL")
        if path.name == INBOUND:  # a row REPLACE removes leaves its tombstone too (change_log)
            conn.execute("PRAGMA recursive_triggers=ON")
        key = str(path.resolve())
        if fresh or key not in _READY:  # the schema is created once per file per process, not per write
            change_log.in_one_transaction(conn, ddl)
            if path.name == INBOUND:
                _add_missing_columns(conn, "delivered", DELIVERED_ADDED)
                _add_missing_columns(conn, "status_messages", (("text", "TEXT"),))
                conn.execute("CREATE INDEX IF NOT EXISTS idx_delivered_seq ON delivered (seq)")
                change_log.track(conn)  # last: every table above gets its triggers
            else:
                _add_missing_columns(conn, "container_state", CONTAINER_STATE_ADDED)
            _READY.add(key)
    conn.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
    conn.row_factory = sqlite3.Row
    return conn
