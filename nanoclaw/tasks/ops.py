"""The agent's scheduling tools, applied on the host.

Transport (docs/architecture.md, "Scheduled tasks"): the agent's tool writes a system op row
(`{"op": "schedule_task", "request_id": …}`) to outbound.db; delivery hands it to the handler
registered here, which applies it to the central `scheduled_tasks` table and writes the answer
into the session's inbound.db as a completed `answer` row with id `answer:<request_id>`, which
the tool is waiting for. Every query is scoped to the agent group that owns the session folder
the row came from and to that session's chat (the host's record, never the agent's word), so one
group can never see or change another group's tasks, and a group chat never sees or rewrites the
tasks of the owner's DM (which run there, with its private reach).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..db import database
from ..models import AgentGroup, Session, audit
from ..outbound import delivery
from ..sessions import store
from .scheduling import (TaskError, describe, local_text, open_tasks, schedule, schedule_text, set_state, summary,
                         update)


@dataclass(frozen=True)
class Caller:
    group: AgentGroup
    session: Session | None
    path: Path

    @property
    def chat(self) -> int | None:
        """The chat whose tasks this caller sees: its session's, from the host's records."""
        return self.session.messaging_group_id if self.session is not None else None


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
                    every=op.get("every"), context=op.get("context"), progress=op.get("progress", False), tz=tz,
                    task_id=_safe_id(op.get("request_id")))
    audit(f"agent:{c.group.folder}", "task.schedule", task.id, schedule=schedule_text(task), context=task.context_mode)
    return {"text": f"Task {task.id} scheduled: {schedule_text(task)}, first run {local_text(task.next_run_at, tz)}, "
                    f"context {task.context_mode}.", "task": describe(task, tz)}


def _op_list(c: Caller, op: dict, tz: str) -> dict:
    tasks = open_tasks(c.group, c.chat)
    text = "\n".join(summary(t, tz) for t in tasks) if tasks else "No scheduled tasks."
    return {"text": text, "tasks": [describe(t, tz) for t in tasks]}


def _op_update(c: Caller, op: dict, tz: str) -> dict:
    task = update(c.group, op.get("task_id"), prompt=op.get("prompt"), at=op.get("at"), cron=op.get("cron"),
                  every=op.get("every"), context=op.get("context"), progress=op.get("progress"), tz=tz,
                  chat=c.chat)
    audit(f"agent:{c.group.folder}", "task.update", task.id)
    return {"text": f"Task updated: {summary(task, tz)}", "task": describe(task, tz)}


def _op_state(action: str):
    def apply(c: Caller, op: dict, tz: str) -> dict:
        task = set_state(c.group, op.get("task_id"), action, tz=tz, chat=c.chat)
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
    return store.message_exists(session_path, message_id)


for _name in OPS:
    delivery.register_op(_name, handle_op)
