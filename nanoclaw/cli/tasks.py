"""Tasks the agents scheduled: list, pause, resume, cancel, stop a run (times shown in TZ)."""
from __future__ import annotations

import click

from ..db import announce
from ..inbound.stopping import stop_session
from ..models import ScheduledTask, audit
from ..tasks.runs import run_sessions
from ..tasks.scheduling import TaskError, local_text, open_tasks, schedule_text, set_state
from .base import Mistake, get_agent, group, print_table, require_schema, settings


@group("tasks")
def tasks_group():
    """Tasks the agents scheduled: list, pause, resume, cancel, stop a run (times shown in TZ)."""


@tasks_group.command("list")
@click.option("--agent", "agent_folder", help="Only this agent's tasks.")
def tasks_list(agent_folder):
    """Show open (active and paused) tasks with their next run in local time."""
    require_schema()
    tasks = open_tasks(get_agent(agent_folder) if agent_folder else None)
    if not tasks:
        click.echo("no scheduled tasks" + (f" for {agent_folder}" if agent_folder else ""))
        return
    tz = settings().timezone
    print_table(["ID", "AGENT", "STATUS", "SCHEDULE", "NEXT RUN", "CONTEXT", "PROMPT"],
                [[t.id, t.agent_group.folder, t.status, schedule_text(t),
                  local_text(t.next_run_at, tz) if t.status == "active" else "-", t.context_mode,
                  (" ".join(t.prompt.split()))[:50]] for t in tasks])


def _task_action(task_id: str, action: str) -> None:
    require_schema()
    try:
        task = set_state(None, task_id, action, tz=settings().timezone)
    except TaskError as exc:
        raise Mistake(str(exc)) from None
    audit("cli", f"task.{action}", task.id)
    announce(settings().data_dir, "tasks")  # the running service replans it now
    done = {"pause": "paused", "resume": "resumed", "cancel": "cancelled"}[action]
    click.echo(f"task {task.id} {done}" + (f"; next run {local_text(task.next_run_at, settings().timezone)}"
                                           if action == "resume" else ""))


@tasks_group.command("pause")
@click.argument("task_id")
def tasks_pause(task_id):
    """Pause TASK_ID (it keeps its schedule)."""
    _task_action(task_id, "pause")


@tasks_group.command("resume")
@click.argument("task_id")
def tasks_resume(task_id):
    """Resume TASK_ID; runs missed while paused are skipped."""
    _task_action(task_id, "resume")


@tasks_group.command("cancel")
@click.argument("task_id")
def tasks_cancel(task_id):
    """Cancel TASK_ID for good."""
    _task_action(task_id, "cancel")


@tasks_group.command("stop")
@click.argument("task_id")
def tasks_stop(task_id):
    """Stop TASK_ID's run under way (the task keeps its schedule; the sandbox stays up)."""
    require_schema()
    task = ScheduledTask.get_or_none(ScheduledTask.id == task_id)
    if task is None:
        raise Mistake(f"no task {task_id!r}: `flask --app app nanoclaw tasks list` shows them")
    stopped = [turn for path in run_sessions(settings(), task) if (turn := stop_session(path, settings(), task.id))]
    if not stopped:
        click.echo(f"task {task.id} has no run under way: nothing to stop", err=True)
        raise SystemExit(1)
    audit("cli", "task.stop", task.id)
    click.echo(f"task {task.id}: its run was stopped; it keeps its schedule")
