"""A task's run: its session (the chat's own, or a fresh one per isolated run), the message that
starts it, and the move to its next time. The timer (timer.py) calls these at the exact time."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from peewee import fn

from .. import metrics
from ..db import database
from ..models import ScheduledTask, Session, utcnow
from ..sessions import session_schema as schema
from ..sessions import store
from ..sessions.store import TASK_THREAD_PREFIX, SessionRef
from . import recurrence
from .scheduling import TaskError, from_db, to_db, utc_now

log = logging.getLogger("nanoclaw.scheduling")


def due_key(due: datetime) -> str:
    return to_db(due).strftime("%Y%m%dT%H%M%S%f")


def run_session(settings, task: ScheduledTask, due: datetime):
    """The session a run writes to: the chat's own (group) or a fresh one per run (isolated)."""
    origin = Session.get_or_none(Session.id == task.session_id) if task.session_id else None
    if origin is None:
        raise TaskError("the chat this task was scheduled from no longer exists")
    folder = task.agent_group.folder
    origin_path = store.session_path(settings.sessions_dir, folder, origin.id)
    if task.context_mode == "group":
        return SessionRef(folder, origin.id, origin_path), origin_path
    thread = f"{TASK_THREAD_PREFIX}{task.id}:{due_key(due)}"
    session = Session.get_or_none(Session.agent_group == task.agent_group_id,
                                  Session.messaging_group == origin.messaging_group_id, Session.thread_id == thread)
    if session is None:
        session = Session.create(id=store.new_session_id(), agent_group=task.agent_group_id,
                                 messaging_group=origin.messaging_group_id, thread_id=thread)
    path = store.session_path(settings.sessions_dir, folder, session.id)
    return SessionRef(folder, session.id, path, isolated_run=True), origin_path


def prepare_run(settings, task_id: str, due: datetime):
    """Make the run's session ready (an isolated run's folder, with the chat's routing) before
    the run: the pre-wake starts its sandbox. Returns a SessionRef, or None if the task is off."""
    with database.connection_context():
        task = ScheduledTask.get_or_none(ScheduledTask.id == task_id)
        if task is None or task.status != "active":
            return None
        return _prepare(settings, task, due)


def _prepare(settings, task: ScheduledTask, due: datetime):
    ref, origin_path = run_session(settings, task, due)
    if not store.inbound_db(ref.path).exists():
        routing = store.routing_of(origin_path)
        if routing is None:
            raise TaskError("the chat this task was scheduled from has no routing")
        store.prepare(ref.path, routing)
    return ref


@dataclass(frozen=True)
class Run:
    ref: object                 # active.SessionRef the run was written to
    next_run: datetime | None   # UTC, None when the task is done


def fire(settings, task_id: str, due: datetime, now: datetime | None = None) -> Run | None:
    """Run the task whose run is due at `due` (UTC): write its message into the session, then
    move it to its next time. The message id is derived from the run, so a run a crash
    interrupted is written once when it is fired again; `runs` guards the move."""
    now = now or utc_now()
    with database.connection_context():
        task = ScheduledTask.get_or_none(ScheduledTask.id == task_id)
        if task is None or task.status != "active" or task.next_run_at is None \
                or abs(from_db(task.next_run_at) - due) > timedelta(milliseconds=1):
            return None  # paused, cancelled or moved since this job was planned
        try:
            ref = _prepare(settings, task, due)
        except TaskError as exc:
            ScheduledTask.update(status="failed", last_error=str(exc), updated_at=to_db(now)).where(
                ScheduledTask.id == task.id).execute()
            log.error("task %s cannot run: %s", task.id, exc)
            return None
        routing = store.routing_of(ref.path)
        store.write_message(ref.path, content={"text": task.prompt, "sender": f"Scheduled task {task.id}",
                                               "task_id": task.id, "context": task.context_mode,
                                               **({"progress": True} if task.progress else {})},
                            target=routing, kind="task", trigger=True, timestamp=schema.utc_now_iso(),
                            message_id=f"task:{task.id}:{due_key(due)}")
        metrics.mark_awaiting(settings.data_dir, ref.folder, time.time())
        nxt = recurrence.next_run(task.schedule_kind, task.schedule_value, due, now, settings.timezone)
        moved = ScheduledTask.update(next_run_at=to_db(nxt), last_run_at=to_db(now), runs=ScheduledTask.runs + 1,
                                     status="done" if nxt is None else "active", updated_at=to_db(now)).where(
            ScheduledTask.id == task.id, ScheduledTask.runs == task.runs).execute()
        Session.update(last_active_at=utcnow()).where(Session.id == ref.session_id).execute()
    late = (now - due).total_seconds()
    log.info("task %s fired%s into %s/%s; next %s", task.id, f" ({late:.0f} s late)" if late > 1 else "",
             ref.folder, ref.session_id, nxt.isoformat() if nxt else "none")
    return Run(ref, nxt if moved else None)


def run_sessions(settings, task: ScheduledTask) -> list:
    """The session folders a run of the task may be running in: the chat's own, and its isolated runs'."""
    ids = [task.session_id] if task.session_id else []
    ids += [s.id for s in Session.select(Session.id).where(
        Session.agent_group == task.agent_group_id, Session.thread_id.startswith(f"{TASK_THREAD_PREFIX}{task.id}:"))]
    return [store.session_path(settings.sessions_dir, task.agent_group.folder, i) for i in ids]


def due_soon(horizon: timedelta, now: datetime | None = None) -> list[tuple[str, datetime]]:
    """(task id, next run UTC) of active tasks due before now + horizon (overdue ones included)."""
    now = now or utc_now()
    with database.connection_context():
        rows = (ScheduledTask.select(ScheduledTask.id, ScheduledTask.next_run_at)
                .where(ScheduledTask.status == "active", ScheduledTask.next_run_at.is_null(False),
                       ScheduledTask.next_run_at <= to_db(now + horizon)).tuples())
        return [(tid, from_db(at)) for tid, at in rows]


def changed_since(stamp: datetime | None) -> tuple[list[str], datetime | None]:
    """Ids of tasks whose row changed after `stamp` (naive UTC, as stored) and the newest stamp
    seen. The timer asks this every second, so a change another process made (the `tasks` CLI)
    takes effect at once; with no stamp yet, only the newest stamp is returned."""
    with database.connection_context():
        if stamp is None:
            newest = ScheduledTask.select(fn.MAX(ScheduledTask.updated_at)).scalar()
            return [], newest or datetime(1970, 1, 1)
        rows = list(ScheduledTask.select(ScheduledTask.id, ScheduledTask.updated_at)
                    .where(ScheduledTask.updated_at > stamp).tuples())
    return [tid for tid, _ in rows], max([stamp, *(at for _, at in rows if at is not None)])


def next_of(task_id: str) -> datetime | None:
    with database.connection_context():
        task = ScheduledTask.get_or_none(ScheduledTask.id == task_id)
        return from_db(task.next_run_at) if task is not None and task.status == "active" else None
