"""Scheduled tasks on the host: the agent's scheduling ops, the operator's commands, and a run.

Transport (docs/architecture.md, "Scheduled tasks"): the agent's tool writes a system op row
(`{"op": "schedule_task", "request_id": …}`) to outbound.db; delivery hands it to the handler
registered here, which applies it to the central `scheduled_tasks` table and writes the answer
into the session's inbound.db as a completed `answer` row with id `answer:<request_id>`, which
the tool is waiting for. Every query is scoped to the agent group that owns the session folder
the row came from, so one group can never see or change another group's tasks.

Times: what the agent gives is the user's local time (TIMEZONE); storage is naive UTC; what the
agent and the operator are shown is local again.
"""
from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

from peewee import fn

from . import delivery, recurrence
from .db import database
from .models import TASK_CONTEXTS, AgentGroup, ScheduledTask, Session, audit, utcnow
from .sessions import session_schema as schema
from .sessions import store

log = logging.getLogger("nanoclaw.scheduling")

UTC = timezone.utc
MIN_EVERY_S = 60            # a shorter interval is a runaway loop, not a reminder
MAX_TASKS_PER_GROUP = 50
PAST_GRACE_S = 60           # `at` a few seconds ago (the agent was slow) still runs, at once
MAX_PROMPT = 4000
OPEN_STATES = ("active", "paused")


class TaskError(ValueError):
    """One line the agent (or the operator) reads: what was wrong and what would be right."""


# --- pure helpers --------------------------------------------------------------------------

def to_db(dt: datetime | None) -> datetime | None:
    return None if dt is None else dt.astimezone(UTC).replace(tzinfo=None)


def from_db(dt: datetime | None) -> datetime | None:
    return None if dt is None else dt.replace(tzinfo=UTC)


def local_text(dt: datetime | None, tz: str) -> str:
    if dt is None:
        return "none"
    local = from_db(dt).astimezone(ZoneInfo(tz))
    return f"{local:%a %Y-%m-%d %H:%M} ({tz})"


def parse_schedule(at: str | None, cron: str | None, every: str | None, now: datetime,
                   tz: str) -> tuple[str, str, datetime]:
    """Exactly one of at | cron | every → (kind, value, first run in UTC)."""
    given = [(k, v) for k, v in (("once", at), ("cron", cron), ("every", every)) if v not in (None, "")]
    if len(given) != 1:
        raise TaskError("give exactly one of `at` (a local date-time like 2026-03-29T09:00), "
                        "`cron` (like '0 9 * * 1-5') or `every` (like '15m', '2h', '1d')")
    kind, value = given[0]
    value = str(value).strip()
    try:
        if kind == "cron" and len(value.split()) != 5:
            raise recurrence.ScheduleError(f"{value!r} must have 5 fields: minute hour day month weekday")
        if kind == "every" and recurrence.parse_every(value) < timedelta(seconds=MIN_EVERY_S):
            raise recurrence.ScheduleError(f"every {value!r} is too often; the shortest interval is 1 minute")
        first = recurrence.first_run(kind, value, now, tz)
    except recurrence.ScheduleError as exc:
        raise TaskError(str(exc)) from None
    if kind == "once" and first < now - timedelta(seconds=PAST_GRACE_S):
        raise TaskError(f"{value} is in the past (it is now {now.astimezone(ZoneInfo(tz)):%Y-%m-%d %H:%M} "
                        f"in {tz}); give a future time")
    return kind, value, max(first, now) if kind == "once" else first


def schedule_text(task: ScheduledTask) -> str:
    if task.schedule_kind == "once":
        return "once"
    return f"cron '{task.schedule_value}'" if task.schedule_kind == "cron" else f"every {task.schedule_value}"


def describe(task: ScheduledTask, tz: str) -> dict:
    return {"id": task.id, "prompt": task.prompt, "schedule": schedule_text(task), "context": task.context_mode,
            "status": task.status, "next_run": local_text(task.next_run_at, tz),
            "next_run_utc": task.next_run_at.isoformat() + "Z" if task.next_run_at else None,
            "runs": task.runs}


def summary(task: ScheduledTask, tz: str) -> str:
    prompt = " ".join(task.prompt.split())
    prompt = prompt if len(prompt) <= 120 else prompt[:117] + "..."
    nxt = f"next run {local_text(task.next_run_at, tz)}" if task.status == "active" and task.next_run_at \
        else task.status
    return f"[{task.id}] {schedule_text(task)}, {nxt}, context {task.context_mode}: {prompt}"


def clean_prompt(prompt) -> str:
    text = str(prompt or "").strip()
    if not text:
        raise TaskError("the task's prompt is empty: say what the agent should do when it runs")
    if len(text) > MAX_PROMPT:
        raise TaskError(f"the prompt is {len(text)} characters; the limit is {MAX_PROMPT}")
    return text


def clean_context(context) -> str:
    value = str(context or "group").strip().lower()
    if value not in TASK_CONTEXTS:
        raise TaskError(f"context {context!r} is unknown; use 'group' (continue this conversation) or "
                        "'isolated' (a fresh conversation each run)")
    return value


# --- change listeners (the timer of the process that runs jobs) ------------------------------

_listeners: list = []


def on_change(listener) -> None:
    """listener(task_id) after a task was created or changed in this process."""
    _listeners.append(listener)


def off_change(listener) -> None:
    if listener in _listeners:
        _listeners.remove(listener)


def _changed(task_id: str) -> None:
    for listener in list(_listeners):
        try:
            listener(task_id)
        except Exception as exc:  # the reconcile job picks the change up anyway
            log.warning("task listener failed for %s: %s", task_id, exc)


# --- actions, scoped to an agent group -------------------------------------------------------

def _now() -> datetime:
    return datetime.now(UTC)


def find(group: AgentGroup | None, task_id: str) -> ScheduledTask:
    query = ScheduledTask.select().where(ScheduledTask.id == str(task_id or "").strip())
    if group is not None:
        query = query.where(ScheduledTask.agent_group == group.id)
    task = query.first()
    if task is None or task.status not in OPEN_STATES:
        raise TaskError(f"no open task {task_id!r}" + ("; list_tasks shows yours" if group else ""))
    return task


def schedule(group: AgentGroup, session: Session | None, prompt, *, at=None, cron=None, every=None,
             context="group", tz: str, task_id: str | None = None, now: datetime | None = None) -> ScheduledTask:
    now = now or _now()
    prompt, context = clean_prompt(prompt), clean_context(context)
    kind, value, first = parse_schedule(at, cron, every, now, tz)
    open_count = ScheduledTask.select().where(ScheduledTask.agent_group == group.id,
                                              ScheduledTask.status.in_(OPEN_STATES)).count()
    if open_count >= MAX_TASKS_PER_GROUP:
        raise TaskError(f"this agent already has {open_count} tasks (the limit); cancel some first")
    task_id = task_id or uuid.uuid4().hex[:8]
    with database.atomic():
        if ScheduledTask.get_or_none(ScheduledTask.id == task_id) is not None:
            task_id = uuid.uuid4().hex[:8]
        task = ScheduledTask.create(id=task_id, agent_group=group.id, session=session.id if session else None,
                                    prompt=prompt, schedule_kind=kind, schedule_value=value, context_mode=context,
                                    next_run_at=to_db(first), created_at=to_db(now), updated_at=to_db(now))
    _changed(task.id)
    return task


def open_tasks(group: AgentGroup | None) -> list[ScheduledTask]:
    query = ScheduledTask.select().where(ScheduledTask.status.in_(OPEN_STATES))
    if group is not None:
        query = query.where(ScheduledTask.agent_group == group.id)
    return list(query.order_by(ScheduledTask.next_run_at, ScheduledTask.id))


def update(group: AgentGroup, task_id: str, *, prompt=None, at=None, cron=None, every=None, context=None,
           tz: str, now: datetime | None = None) -> ScheduledTask:
    now = now or _now()
    task = find(group, task_id)
    changes = {}
    if prompt is not None:
        changes["prompt"] = clean_prompt(prompt)
    if context is not None:
        changes["context_mode"] = clean_context(context)
    if any(v not in (None, "") for v in (at, cron, every)):
        kind, value, first = parse_schedule(at, cron, every, now, tz)
        changes.update(schedule_kind=kind, schedule_value=value, next_run_at=to_db(first))
    if not changes:
        raise TaskError("nothing to change: give a new prompt, context, or one of at | cron | every")
    changes["updated_at"] = to_db(now)
    ScheduledTask.update(**changes).where(ScheduledTask.id == task.id).execute()
    _changed(task.id)
    return ScheduledTask.get_by_id(task.id)


def set_state(group: AgentGroup | None, task_id: str, action: str, *, tz: str,
              now: datetime | None = None) -> ScheduledTask:
    """pause | resume | cancel. Resuming continues on the task's grid from now (runs missed
    while paused are skipped); a one-shot whose time passed while paused runs at once."""
    now = now or _now()
    task = find(group, task_id)
    if action == "pause":
        if task.status == "paused":
            raise TaskError(f"task {task.id} is already paused")
        changes = {"status": "paused"}
    elif action == "resume":
        if task.status == "active":
            raise TaskError(f"task {task.id} is not paused")
        nxt = from_db(task.next_run_at) or now
        if nxt < now and task.schedule_kind != "once":
            nxt = recurrence.next_run(task.schedule_kind, task.schedule_value, nxt, now, tz)
        changes = {"status": "active", "next_run_at": to_db(max(nxt, now) if task.schedule_kind == "once" else nxt)}
    elif action == "cancel":
        changes = {"status": "cancelled", "next_run_at": None}
    else:
        raise TaskError(f"unknown action {action!r}")
    changes["updated_at"] = to_db(now)
    ScheduledTask.update(**changes).where(ScheduledTask.id == task.id).execute()
    _changed(task.id)
    return ScheduledTask.get_by_id(task.id)


# --- the agent's ops -------------------------------------------------------------------------

@dataclass(frozen=True)
class Caller:
    group: AgentGroup
    session: Session | None
    path: Path


def _caller(session_path: Path) -> Caller:
    """The agent group is the folder the op row came from (the sandbox cannot claim another)."""
    folder, session_id = session_path.parent.name, session_path.name
    group = AgentGroup.get_or_none(AgentGroup.folder == folder)
    if group is None:
        raise TaskError("this agent is unknown to the host")
    session = Session.get_or_none(Session.id == session_id, Session.agent_group == group.id)
    return Caller(group, session, session_path)


def _op_schedule(c: Caller, op: dict, tz: str) -> dict:
    task = schedule(c.group, c.session, op.get("prompt"), at=op.get("at"), cron=op.get("cron"),
                    every=op.get("every"), context=op.get("context"), tz=tz, task_id=_safe_id(op.get("request_id")))
    audit(f"agent:{c.group.folder}", "task.schedule", task.id, schedule=schedule_text(task), context=task.context_mode)
    return {"text": f"Task {task.id} scheduled: {schedule_text(task)}, first run {local_text(task.next_run_at, tz)}, "
                    f"context {task.context_mode}.", "task": describe(task, tz)}


def _op_list(c: Caller, op: dict, tz: str) -> dict:
    tasks = open_tasks(c.group)
    text = "\n".join(summary(t, tz) for t in tasks) if tasks else "No scheduled tasks."
    return {"text": text, "tasks": [describe(t, tz) for t in tasks]}


def _op_update(c: Caller, op: dict, tz: str) -> dict:
    task = update(c.group, op.get("task_id"), prompt=op.get("prompt"), at=op.get("at"), cron=op.get("cron"),
                  every=op.get("every"), context=op.get("context"), tz=tz)
    audit(f"agent:{c.group.folder}", "task.update", task.id)
    return {"text": f"Task updated: {summary(task, tz)}", "task": describe(task, tz)}


def _op_state(action: str):
    def apply(c: Caller, op: dict, tz: str) -> dict:
        task = set_state(c.group, op.get("task_id"), action, tz=tz)
        audit(f"agent:{c.group.folder}", f"task.{action}", task.id)
        done = {"pause": "paused", "resume": "resumed", "cancel": "cancelled"}[action]
        return {"text": f"Task {task.id} {done}." + (f" Next run {local_text(task.next_run_at, tz)}."
                                                       if action == "resume" else ""), "task": describe(task, tz)}
    return apply


OPS = {"schedule_task": _op_schedule, "list_tasks": _op_list, "update_task": _op_update,
       "pause_task": _op_state("pause"), "resume_task": _op_state("resume"), "cancel_task": _op_state("cancel")}


def _safe_id(value) -> str | None:
    text = str(value or "")
    return text[:12] if text and all(ch in "0123456789abcdef" for ch in text[:12]) else None


def answer_id(request_id: str) -> str:
    return f"answer:{request_id}"


def handle_op(session_path: Path, row, settings) -> None:
    """delivery's handler for the ops above: apply, then answer in inbound.db (idempotent)."""
    op = row.op
    request_id = str(op.get("request_id") or row.id)
    if _answered(session_path, answer_id(request_id)):
        return None
    try:
        with database.connection_context():
            result = {"ok": True, **OPS[op["op"]](_caller(session_path), op, settings.timezone)}
    except TaskError as exc:
        result = {"ok": False, "text": f"Error: {exc}"}
    store.write_message(session_path, content=result, target=None, kind="answer", trigger=False,
                        message_id=answer_id(request_id), status="completed")
    return None


def _answered(session_path: Path, message_id: str) -> bool:
    conn = schema.connect(session_path / schema.INBOUND, readonly=True)
    try:
        return conn.execute("SELECT 1 FROM messages_in WHERE id = ?", (message_id,)).fetchone() is not None
    finally:
        conn.close()


for _name in OPS:
    delivery.register_op(_name, handle_op)


# --- a run -----------------------------------------------------------------------------------

def due_key(due: datetime) -> str:
    return to_db(due).strftime("%Y%m%dT%H%M%S%f")


def run_session(settings, task: ScheduledTask, due: datetime):
    """The session a run writes to: the chat's own (group) or a fresh one per run (isolated)."""
    from .active import TASK_THREAD_PREFIX, SessionRef
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


def _routing(path: Path) -> store.Target | None:
    db = path / schema.INBOUND
    if not db.exists():
        return None
    conn = schema.connect(db, readonly=True)
    try:
        row = conn.execute("SELECT channel_type, platform_id, thread_id FROM routing").fetchone()
    finally:
        conn.close()
    return store.Target(*row) if row else None


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
    if not (ref.path / schema.INBOUND).exists():
        routing = _routing(origin_path)
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
    now = now or _now()
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
        routing = _routing(ref.path)
        store.write_message(ref.path, content={"text": task.prompt, "sender": f"Scheduled task {task.id}",
                                               "task_id": task.id, "context": task.context_mode},
                            target=routing, kind="task", trigger=True, timestamp=schema.utc_now_iso(),
                            message_id=f"task:{task.id}:{due_key(due)}")
        nxt = recurrence.next_run(task.schedule_kind, task.schedule_value, due, now, settings.timezone)
        moved = ScheduledTask.update(next_run_at=to_db(nxt), last_run_at=to_db(now), runs=ScheduledTask.runs + 1,
                                     status="done" if nxt is None else "active", updated_at=to_db(now)).where(
            ScheduledTask.id == task.id, ScheduledTask.runs == task.runs).execute()
        Session.update(last_active_at=utcnow()).where(Session.id == ref.session_id).execute()
    late = (now - due).total_seconds()
    log.info("task %s fired%s into %s/%s; next %s", task.id, f" ({late:.0f} s late)" if late > 1 else "",
             ref.folder, ref.session_id, nxt.isoformat() if nxt else "none")
    return Run(ref, nxt if moved else None)


def due_soon(horizon: timedelta, now: datetime | None = None) -> list[tuple[str, datetime]]:
    """(task id, next run UTC) of active tasks due before now + horizon (overdue ones included)."""
    now = now or _now()
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


__all__ = ["TaskError", "parse_schedule", "schedule", "update", "set_state", "open_tasks", "find", "describe",
           "summary", "local_text", "handle_op", "fire", "prepare_run", "due_soon", "next_of", "on_change",
           "changed_since"]
