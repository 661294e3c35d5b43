"""A session's running turn as the host sees it, and the host's record of turns it stopped.

Which messages a turn holds is read from the agent's processing_ack (its claims); who sent them and
which task they belong to from the host's own messages_in. A stop is a host record: the option
`stop` of inbound.db lists the message ids of stopped turns (newest last). The runner watches it
and interrupts its turn; delivery drops the turn's rows not yet sent; a restarted runner completes
them instead of trying them again. The agent can claim any row, so a lie in its claims only stops
its own work.
"""
from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from . import session_schema as schema
from .store import attach_outbound, inbound_db, update_option

STOP_KEY = schema.STOP_OPTION
stopped_ids = schema.stopped_ids
KEEP_STOPPED = 200  # ids remembered: far more than a turn holds, so a stop outlives its turn's rows


@dataclass(frozen=True)
class Running:
    ids: tuple[str, ...]          # the turn's messages, oldest first
    started_by: str | None        # whose message started it ("<channel>:<id>"), from the host's record
    task_id: str | None           # the scheduled task it runs, if it is a task's run


def with_stopped(value: str | None, ids) -> str:
    """The option after a stop of `ids`: kept in order, the oldest forgotten first (pure)."""
    kept = [i for i in stopped_ids(value) if i not in set(ids)] + list(ids)
    return json.dumps(kept[-KEEP_STOPPED:])


def stopped(conn: sqlite3.Connection) -> set[str]:
    """The stopped turns' message ids, read on an open connection to the session's inbound.db."""
    row = conn.execute("SELECT value FROM options WHERE key = ?", (STOP_KEY,)).fetchone()
    return set(stopped_ids(row[0] if row else None))


def running(path: Path) -> Running | None:
    """The turn the session's runner holds now, or None (no runner, no turn, or only rows already
    stopped)."""
    if not inbound_db(path).exists():
        return None
    conn = schema.connect(inbound_db(path), readonly=True)
    try:
        if not attach_outbound(conn, path):
            return None
        rows = conn.execute(
            "SELECT m.id, m.kind, m.trigger, m.content FROM messages_in m JOIN ob.processing_ack a "
            "ON a.message_id = m.id WHERE a.status = 'processing' AND m.status = 'pending' ORDER BY m.seq").fetchall()
        done = stopped(conn)
    except sqlite3.Error:  # the agent's file half written or not a database: nothing known to run
        return None
    finally:
        conn.close()
    rows = [r for r in rows if r[0] not in done]
    if not rows:
        return None
    starter = next((r for r in rows if r[2]), rows[0])
    try:
        content = json.loads(starter[3])
    except ValueError:
        content = {}
    content = content if isinstance(content, dict) else {}
    sender = content.get("sender_id") if starter[1] == "chat" else None
    task = content.get("task_id") if starter[1] == "task" else None
    return Running(tuple(r[0] for r in rows), sender if isinstance(sender, str) else None,
                   task if isinstance(task, str) else None)


def request_stop(path: Path, ids) -> None:
    """Record the stop of the turn holding `ids`: one commit to inbound.db, which also wakes the
    runner (a remote one gets it with the next push)."""
    update_option(path, STOP_KEY, lambda value: with_stopped(value, ids))
