"""Isolated task runs' sessions are removed once their run is over, delivered, and old.

Every run of an `isolated` task gets a session of its own (thread `task:<id>:<due>`, see
runs.run_session), so a task every 15 minutes leaves 96 session folders a day. A housekeeping
job closes such a session and removes its folder (and the sandbox's leftovers) when
NANOCLAW_ISOLATED_RETENTION_HOURS have passed since it last did anything and nothing is left to
do: its sandbox is stopped, no message in it waits for the agent, every row the agent wrote was
delivered (or failed for good), and the task will not fire into it again. The run's record stays:
the task's `runs` and `last_run_at`, the closed session row, and an audit entry.

keep_reason() is the pure decision; read_run() gathers what it needs from the session's files.
"""
from __future__ import annotations

import logging
import shutil
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from .housekeeping import register_job
from ..models import AgentGroup, ScheduledTask, Session, audit
from ..sandboxes.manager import sandbox_name
from ..security import UnsafePath, contained, validate_folder
from ..sessions import session_schema as schema
from ..sessions import store
from ..sessions.store import TASK_THREAD_PREFIX
from ..tasks.runs import due_key
from ..tasks.scheduling import from_db

log = logging.getLogger("nanoclaw.retention")

CHECK_S = 600.0
FIRST_CHECK_S = 60.0  # not during start-up


@dataclass(frozen=True)
class RunView:
    running: bool                 # its sandbox runs
    still_due: bool               # the task's next run is this session's run: it may still fire into it
    pending_in: int = 0           # messages the agent has not finished
    undelivered_out: int = 0      # rows the agent wrote that are not delivered (or failed for good)
    last_work_at: float | None = None  # epoch: newest of the session's files and its last_active_at


def keep_reason(view: RunView, now: float, retention_s: float) -> str | None:
    """Why the session must stay, or None when it may be removed."""
    if view.running:
        return "its sandbox runs"
    if view.still_due:
        return "its run has not fired yet"
    if view.pending_in:
        return f"{view.pending_in} message(s) wait for the agent"
    if view.undelivered_out:
        return f"{view.undelivered_out} reply row(s) are not delivered yet"
    if view.last_work_at is not None and now - view.last_work_at < retention_s:
        return "it is within the retention period"
    return None


def parse_thread(thread_id: str) -> tuple[str, str] | None:
    """('<task id>', '<due key>') of an isolated run's thread `task:<id>:<due>`."""
    if not thread_id.startswith(TASK_THREAD_PREFIX):
        return None
    task_id, _, due = thread_id[len(TASK_THREAD_PREFIX):].partition(":")
    return (task_id, due) if task_id and due else None


# --- reading ------------------------------------------------------------------------------------

def _mtime(path: Path) -> float | None:
    return store.agent_mtime(path)  # the agent's files: a link there is not followed


def read_run(path: Path, *, running: bool, still_due: bool, last_active: float | None) -> RunView:
    """The session's files, read-only. Raises sqlite3.Error when they cannot be read (kept then)."""
    outbound = store.outbound_db(path)
    stamps = [t for t in (_mtime(p) for p in (store.inbound_db(path), outbound,
                                              outbound.with_name(schema.OUTBOUND + "-wal"), store.heartbeat_file(path)))
              if t is not None]
    last = max(stamps + ([last_active] if last_active is not None else []), default=None)
    inbound = store.inbound_db(path)
    if not inbound.exists():
        return RunView(running, still_due, last_work_at=last)
    conn = sqlite3.connect(f"file:{inbound}?mode=ro", uri=True, timeout=5)
    try:
        agent = store.attach_outbound(conn, path)
        done = (" AND id NOT IN (SELECT message_id FROM ob.processing_ack WHERE status IN ('completed', 'failed'))"
                if agent else "")
        pending = conn.execute(f"SELECT COUNT(*) FROM messages_in WHERE status = 'pending'{done}").fetchone()[0]
        undelivered = conn.execute(
            "SELECT COUNT(*) FROM ob.messages_out o LEFT JOIN delivered d ON d.message_out_id = o.id "
            "WHERE d.message_out_id IS NULL OR d.status NOT IN ('delivered', 'failed')").fetchone()[0] if agent else 0
    finally:
        conn.close()
    return RunView(running, still_due, pending, undelivered, last)


def _still_due(task_id: str, due: str) -> bool:
    task = ScheduledTask.get_or_none(ScheduledTask.id == task_id)
    return (task is not None and task.status == "active" and task.next_run_at is not None
            and due_key(from_db(task.next_run_at)) == due)


# --- effects ------------------------------------------------------------------------------------

def _epoch(naive_utc: datetime | None) -> float | None:
    return None if naive_utc is None else naive_utc.replace(tzinfo=timezone.utc).timestamp()


def remove_session_folder(settings, folder: str, session_id: str) -> None:
    """Delete data/sessions/<folder>/<session id> (checked to stay inside the sessions dir)."""
    validate_folder(folder)
    if not session_id.isalnum():
        raise UnsafePath(f"session id {session_id!r} is not a plain id")
    path = store.session_path(settings.sessions_dir, folder, session_id)
    if path.is_symlink():
        raise UnsafePath(f"{path} is a symlink")
    contained(settings.sessions_dir, path)
    store.forget_writer(path)  # this process's kept connection would hold the removed file open
    if path.exists():
        shutil.rmtree(path)


@register_job("retention.isolated_runs", every_s=CHECK_S, first_after_s=FIRST_CHECK_S)
def remove_finished_runs(settings, manager, now: float | None = None) -> list[str]:
    """Close and remove the isolated runs' sessions that are done and older than the retention
    period; returns their ids. `manager` (SandboxManager or None) says what runs."""
    import time
    now = time.time() if now is None else now
    retention_s = settings.isolated_retention_hours * 3600
    cutoff = datetime.fromtimestamp(now, timezone.utc).replace(tzinfo=None) - timedelta(seconds=retention_s)
    candidates = list(Session.select(Session, AgentGroup).join(AgentGroup)
                      .where(Session.status == "active", Session.thread_id.startswith(TASK_THREAD_PREFIX),
                             Session.last_active_at <= cutoff))
    removed = []
    for session in candidates:
        parsed = parse_thread(session.thread_id)
        if parsed is None:
            continue
        folder = session.agent_group.folder
        path = store.session_path(settings.sessions_dir, folder, session.id)
        try:
            running = manager is not None and manager.is_running(folder, session.id)
            view = read_run(path, running=running, still_due=_still_due(*parsed),
                            last_active=_epoch(session.last_active_at))
            why = keep_reason(view, now, retention_s)
            if why:
                log.debug("keeping %s/%s: %s", folder, session.id, why)
                continue
            if manager is not None:  # what a stopped sandbox left: an exited container, a bwrap log
                name = sandbox_name(settings.install_id, folder, session.id)
                manager.runtime.stop(name)
                discard = getattr(manager.runtime, "discard", None)
                if discard is not None:
                    discard(name)
            remove_session_folder(settings, folder, session.id)
        except (OSError, sqlite3.Error, UnsafePath) as exc:
            log.warning("could not remove the finished task run %s/%s (next pass tries again): %s", folder,
                        session.id, exc)
            continue
        Session.update(status="closed").where(Session.id == session.id, Session.status == "active").execute()
        audit("system", "session.remove", session.id, folder=folder, task=parsed[0],
              reason=f"isolated task run done, kept {settings.isolated_retention_hours} h")
        removed.append(session.id)
    if removed:
        log.info("removed %d finished isolated task run session(s) older than %d h", len(removed),
                 settings.isolated_retention_hours)
    return removed


__all__ = ["RunView", "keep_reason", "read_run", "remove_finished_runs", "remove_session_folder", "parse_thread"]
