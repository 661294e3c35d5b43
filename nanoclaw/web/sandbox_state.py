"""A session's sandbox state for the page: running, idle, stuck, failed (or stopped, queued, unknown).

`state()` is a pure decision over what the files and the runtime say; `observe()` reads
the session folder (read-only) and asks the runtime. "Stuck" is the sweep's own rule
(sweep.decide), so the page and the sweep never disagree about it.
"""
from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ..lifecycle import sweep
from ..sessions import session_schema as schema
from ..sessions import store

EXPLAIN = {
    "running": "the sandbox is up and working on a message",
    "idle": "the sandbox is up and waiting for the next message",
    "stuck": "the sandbox is up but has not shown progress within its limits; the sweep will restart it",
    "failed": "the last message failed after its retries",
    "stopped": "no sandbox; it starts when a message arrives",
    "queued": "a message is waiting for a free sandbox slot",
    "unknown": "this process does not run the sandboxes, so it cannot tell",
}


@dataclass(frozen=True)
class Observed:
    running: bool | None          # None: no runtime in this process
    view: sweep.SessionView
    last_failed: bool             # the newest triggering message ended 'failed'
    working_on: str | None = None # current tool, if any


def state(obs: Observed, now: float) -> str:
    if obs.running and sweep.decide(obs.view, now).stop in ("heartbeat_stale", "claim_stuck"):
        return "stuck"
    if obs.last_failed and not obs.view.claims and not obs.view.has_due_work:
        return "failed"
    if obs.running is None:
        return "unknown"
    if obs.running:
        return "running" if obs.view.claims or obs.view.has_due_work else "idle"
    return "queued" if obs.view.has_due_work else "stopped"


def _epoch(iso: str | None) -> float | None:
    if not iso:
        return None
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return None


def _query(path: Path | None, sql: str, args=(), *, agents: bool = False) -> list[sqlite3.Row]:
    if path is None or not path.exists():
        return []
    try:
        conn = store.open_agent_db(path) if agents else schema.connect(path, readonly=True, timeout=1.0)
    except sqlite3.Error:
        return []
    if conn is None:
        return []
    try:
        return conn.execute(sql, args).fetchall()
    except sqlite3.Error:  # the agent has not created its tables yet
        return []
    finally:
        conn.close()


def observe(session_path: Path, running: bool | None) -> Observed:
    inbound, outbound = store.inbound_db(session_path), store.agent_file(store.outbound_db(session_path))
    heartbeat = store.agent_mtime(store.heartbeat_file(session_path))
    acks = _query(outbound, "SELECT message_id, status_changed FROM processing_ack WHERE status = 'processing'",
                  agents=True)
    tries = {r["id"]: r["tries"] for r in _query(inbound, "SELECT id, tries FROM messages_in WHERE status = 'pending'")}
    claims = tuple(sweep.Claim(a["message_id"], _epoch(a["status_changed"]) or 0.0, tries.get(a["message_id"], 0))
                   for a in acks if a["message_id"] in tries)
    tool = _query(outbound, "SELECT current_tool, tool_declared_timeout_ms FROM container_state WHERE id = 1",
                  agents=True)
    last = _query(inbound, "SELECT status, timestamp FROM messages_in WHERE trigger = 1 ORDER BY seq DESC LIMIT 1")
    view = sweep.SessionView(
        running=bool(running), heartbeat_at=heartbeat, claims=claims,
        current_tool=tool[0]["current_tool"] if tool else None,
        tool_timeout_ms=tool[0]["tool_declared_timeout_ms"] if tool else None,
        last_work_at=max(filter(None, [heartbeat, _epoch(last[0]["timestamp"]) if last else None]), default=None),
        has_due_work=store.has_due_trigger(session_path))
    return Observed(running, view, bool(last) and last[0]["status"] == "failed",
                    tool[0]["current_tool"] if tool else None)


def session_state(manager, folder: str, session_id: str, sessions_dir: Path) -> tuple[str, Observed]:
    """(state, what was observed) for one session; `manager` may be None (no runtime here)."""
    running = None
    if manager is not None:
        try:
            running = manager.is_running(folder, session_id)
        except Exception:  # an engine that stopped answering: say we cannot tell
            running = None
    obs = observe(store.session_path(sessions_dir, folder, session_id), running)
    return state(obs, time.time()), obs
