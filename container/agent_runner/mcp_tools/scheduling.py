"""Scheduling tools: schedule_task, list_tasks, update_task, cancel_task, pause_task, resume_task.

The host owns tasks (they outlive the sandbox), so each tool is a request: it writes a system op
row to outbound.db (`{"op": <tool>, "request_id": …, …}`, kind `system`) and waits for the
host's answer, a completed `answer` row with id `answer:<request_id>` in inbound.db. The host
validates (times, cron), stores the task for this agent group only, and answers with the text
the model reads. Times are the user's local time; the host converts them.
"""
from __future__ import annotations

import time
import uuid

from ..targets import Target
from .context import ToolContext, ToolError

ANSWER_WAIT_S = 10.0
POLL_S = 0.02


def request(ctx: ToolContext, op: str, *, late: str = "Check with list_tasks later.", wait_s: float = ANSWER_WAIT_S,
            applied_later: bool = True, whole: bool = False, **fields):
    """Ask the host (a system op row) and wait for its answer; `late`: what to do when it is slow;
    `applied_later`: a request the host still applies when it is back (a read or a search is not);
    `whole`: the answer's dict (a screenshot's image with its text), else its text."""
    request_id = uuid.uuid4().hex[:12]
    content = {"op": op, "request_id": request_id, **{k: v for k, v in fields.items() if v not in (None, "")}}
    # not sent to any chat: the host applies it; the target only records where the turn was
    target = ctx.default_target() or Target("", "")
    ctx.store.write_out(content, target, in_reply_to=ctx.turn.in_reply_to, kind="system")
    deadline = time.monotonic() + wait_s
    while True:
        answer = ctx.store.host_answer(f"answer:{request_id}")
        if answer is not None:
            if not answer.get("ok"):
                raise ToolError(str(answer.get("text") or "the host refused").removeprefix("Error: "))
            return answer if whole else str(answer.get("text") or "Done.")
        if time.monotonic() >= deadline:
            if not applied_later:
                raise ToolError(f"the host did not answer within {wait_s:.0f} s. {late}")
            raise ToolError(f"the host did not confirm within {wait_s:.0f} s; the request is queued and "
                            f"is applied when the host is back. {late}")
        time.sleep(POLL_S)


def _one_schedule(at, cron, every) -> None:
    if sum(1 for v in (at, cron, every) if v not in (None, "")) != 1:
        raise ToolError("give exactly one of at, cron or every")


def schedule_task(ctx: ToolContext, prompt: str, at: str | None = None, cron: str | None = None,
                  every: str | None = None, context: str = "group", progress: bool = False) -> str:
    if not str(prompt or "").strip():
        raise ToolError("the prompt is empty: say what you should do when the task runs")
    _one_schedule(at, cron, every)
    return request(ctx, "schedule_task", prompt=prompt, at=at, cron=cron, every=every, context=context or "group",
                   progress=bool(progress))


def list_tasks(ctx: ToolContext) -> str:
    return request(ctx, "list_tasks")


def update_task(ctx: ToolContext, task_id: str, prompt: str | None = None, at: str | None = None,
                cron: str | None = None, every: str | None = None, context: str | None = None,
                progress: bool | None = None) -> str:
    if sum(1 for v in (at, cron, every) if v not in (None, "")) > 1:
        raise ToolError("give at most one of at, cron or every")
    return request(ctx, "update_task", task_id=task_id, prompt=prompt, at=at, cron=cron, every=every,
                   context=context, progress=progress)


def cancel_task(ctx: ToolContext, task_id: str) -> str:
    return request(ctx, "cancel_task", task_id=task_id)


def pause_task(ctx: ToolContext, task_id: str) -> str:
    return request(ctx, "pause_task", task_id=task_id)


def resume_task(ctx: ToolContext, task_id: str) -> str:
    return request(ctx, "resume_task", task_id=task_id)


_WHEN = {
    "at": {"type": "string", "description": "Run once at this local date-time of the user (ISO, e.g. "
                                            "2026-03-29T09:00; no offset needed: times are the user's timezone)."},
    "cron": {"type": "string", "description": "Repeat on a 5-field cron schedule in the user's local time, "
                                              "e.g. '0 9 * * 1-5' = weekdays at 09:00 (weekday 0 = Sunday)."},
    "every": {"type": "string", "description": "Repeat at a fixed interval: '30m', '2h', '1d' (at least 1 minute)."},
}
_ID = {"type": "string", "description": "The task id that schedule_task or list_tasks gave."}
_CONTEXT = {"type": "string", "enum": ["group", "isolated"],
            "description": "group (default): run in this conversation, with its history. isolated: a fresh "
                           "conversation each run, answering in this chat."}
_PROGRESS = {"type": "boolean",
             "description": "Show a status message in the chat while a long run works (off unless asked)."}

SPECS = [
    (schedule_task, "schedule_task",
     "Schedule a task: at its time you get `prompt` as a message from 'Scheduled task' and your answer goes "
     "to this chat. Give exactly one of at (once), cron or every. Times are the user's local time.",
     {"type": "object", "properties": {"prompt": {"type": "string", "description": "What to do when it runs."},
                                       **_WHEN, "context": _CONTEXT, "progress": _PROGRESS},
      "required": ["prompt"]}),
    (list_tasks, "list_tasks", "List your scheduled tasks (active and paused) with their next run in local time.",
     {"type": "object", "properties": {}}),
    (update_task, "update_task",
     "Change a task: a new prompt, context, progress, or schedule (one of at, cron, every).",
     {"type": "object", "properties": {"task_id": _ID, "prompt": {"type": "string"}, **_WHEN,
                                       "context": _CONTEXT, "progress": _PROGRESS},
      "required": ["task_id"]}),
    (cancel_task, "cancel_task", "Cancel a task for good.",
     {"type": "object", "properties": {"task_id": _ID}, "required": ["task_id"]}),
    (pause_task, "pause_task", "Pause a task (it keeps its schedule; resume_task continues it).",
     {"type": "object", "properties": {"task_id": _ID}, "required": ["task_id"]}),
    (resume_task, "resume_task", "Resume a paused task; runs missed while paused are skipped.",
     {"type": "object", "properties": {"task_id": _ID}, "required": ["task_id"]}),
]
