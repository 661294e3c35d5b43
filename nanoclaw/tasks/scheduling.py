"""Scheduled tasks: their rules (schedule, prompt, context), and the changes agents and the
operator make (schedule, update, pause, resume, cancel), each scoped to one agent group.

The agent's side arrives as system ops (ops.py); a run is written into its session by runs.py at
the time timer.py keeps. Times: what the agent gives is the user's local time (TIMEZONE); storage is
naive UTC; what the agent and the operator are shown is local again.
"""
from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from ..db import database
from ..models import TASK_CONTEXTS, AgentGroup, ScheduledTask, Session
from . import recurrence

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
            "runs": task.runs,
            "progress": bool(task.progress)}


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

def utc_now() -> datetime:
    return datetime.now(UTC)


EVERY_CHAT = "every chat"   # the CLI's and the page's view: `chat` left out


def _in(query, group: AgentGroup | None, chat):
    """Tasks of the agent (all agents: None) and of one chat (a messaging group's id; EVERY_CHAT: any). The
    agent's own ops always name a chat: a task scheduled elsewhere, or whose chat is unknown, is not there."""
    if group is not None:
        query = query.where(ScheduledTask.agent_group == group.id)
    if chat is not EVERY_CHAT:
        query = query.where(ScheduledTask.messaging_group_id == chat if chat is not None else ScheduledTask.id.is_null())
    return query


def find(group: AgentGroup | None, task_id: str, chat=EVERY_CHAT) -> ScheduledTask:
    query = _in(ScheduledTask.select().where(ScheduledTask.id == str(task_id or "").strip()), group, chat)
    task = query.first()
    if task is None or task.status not in OPEN_STATES:
        raise TaskError(f"no open task {task_id!r}" + ("; list_tasks shows yours" if group else ""))
    return task


def clean_progress(progress) -> bool:
    if not isinstance(progress, bool):
        raise TaskError(f"progress must be true or false, not {progress!r}")
    return progress


def schedule(group: AgentGroup, session: Session | None, prompt, *, at=None, cron=None, every=None,
             context="group", progress=False, tz: str, task_id: str | None = None,
             now: datetime | None = None) -> ScheduledTask:
    now = now or utc_now()
    prompt, context, progress = clean_prompt(prompt), clean_context(context), clean_progress(progress)
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
                                    messaging_group_id=session.messaging_group_id if session else None,
                                    prompt=prompt, schedule_kind=kind, schedule_value=value, context_mode=context,
                                    progress=progress, next_run_at=to_db(first), created_at=to_db(now),
                                    updated_at=to_db(now))
    _changed(task.id)
    return task


def open_tasks(group: AgentGroup | None, chat=EVERY_CHAT) -> list[ScheduledTask]:
    query = _in(ScheduledTask.select().where(ScheduledTask.status.in_(OPEN_STATES)), group, chat)
    return list(query.order_by(ScheduledTask.next_run_at, ScheduledTask.id))


def update(group: AgentGroup, task_id: str, *, prompt=None, at=None, cron=None, every=None, context=None,
           progress=None, tz: str, now: datetime | None = None, chat=EVERY_CHAT) -> ScheduledTask:
    now = now or utc_now()
    task = find(group, task_id, chat)
    changes = {}
    if prompt is not None:
        changes["prompt"] = clean_prompt(prompt)
    if context is not None:
        changes["context_mode"] = clean_context(context)
    if progress is not None:
        changes["progress"] = clean_progress(progress)
    if any(v not in (None, "") for v in (at, cron, every)):
        kind, value, first = parse_schedule(at, cron, every, now, tz)
        changes.update(schedule_kind=kind, schedule_value=value, next_run_at=to_db(first))
    if not changes:
        raise TaskError("nothing to change: give a new prompt, context, progress, or one of at | cron | every")
    changes["updated_at"] = to_db(now)
    ScheduledTask.update(**changes).where(ScheduledTask.id == task.id).execute()
    _changed(task.id)
    return ScheduledTask.get_by_id(task.id)


def set_state(group: AgentGroup | None, task_id: str, action: str, *, tz: str,
              now: datetime | None = None, chat=EVERY_CHAT) -> ScheduledTask:
    """pause | resume | cancel. Resuming continues on the task's grid from now (runs missed
    while paused are skipped); a one-shot whose time passed while paused runs at once."""
    now = now or utc_now()
    task = find(group, task_id, chat)
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
