"""Scheduled tasks on the host (SQLite and PostgreSQL): local times stored as UTC, group
ownership, the agent's ops through the real transport (the runner's own tool code writes
outbound.db, delivery applies it and answers in inbound.db), runs written once, the CLI."""
from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
import threading
import time
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from nanoclaw.outbound import delivery
from nanoclaw.tasks import runs, scheduling
from nanoclaw.models import AgentGroup, MessagingGroup, ScheduledTask, Session
from nanoclaw.tasks.scheduling import TaskError, from_db, parse_schedule, to_db
from nanoclaw.sessions import session_schema as schema  # also puts container/ on sys.path
from nanoclaw.sessions import store

from agent_runner.config import RunnerConfig  # noqa: E402
from agent_runner.mcp_tools import ToolContext, Turn  # noqa: E402
from agent_runner.mcp_tools import scheduling as tools  # noqa: E402
from agent_runner.mcp_tools.context import ToolError  # noqa: E402
from agent_runner.store import SessionStore  # noqa: E402
from agent_runner.targets import Target as RunnerTarget  # noqa: E402

UTC = timezone.utc
TZ = "America/New_York"
NOW = datetime(2026, 3, 6, 15, 0, tzinfo=UTC)  # 10:00 in New York, a Friday


def make_session(settings, folder: str, chat: str = "chat-1") -> tuple[AgentGroup, Session]:
    group = AgentGroup.get_or_none(AgentGroup.folder == folder) or AgentGroup.create(name=folder, folder=folder)
    mg = MessagingGroup.create(channel_type="cli", platform_id=f"{folder}-{chat}")
    session = Session.create(id=store.new_session_id(), agent_group=group, messaging_group=mg)
    store.prepare(store.session_path(settings.sessions_dir, folder, session.id), store.Target("cli", mg.platform_id))
    return group, session


def path_of(settings, session) -> object:
    return store.session_path(settings.sessions_dir, session.agent_group.folder, session.id)


def inbound_rows(path, where="1=1"):
    conn = sqlite3.connect(path / "host" / schema.INBOUND)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(f"SELECT * FROM messages_in WHERE {where} ORDER BY seq")]
    finally:
        conn.close()


# --- pure parsing --------------------------------------------------------------------------------

def test_a_naive_time_is_the_users_local_time_and_is_stored_utc():
    kind, value, first = parse_schedule("2026-03-09T09:00", None, None, NOW, TZ)
    assert (kind, value) == ("once", "2026-03-09T09:00")
    assert first == datetime(2026, 3, 9, 13, 0, tzinfo=UTC)  # EDT (UTC-4) after the 8 March change


def test_cron_runs_in_local_time_and_sunday_is_zero():
    _, _, first = parse_schedule(None, "0 9 * * 0", None, NOW, TZ)
    local = first.astimezone(ZoneInfo(TZ))
    assert (local.strftime("%A"), local.hour, local.minute) == ("Sunday", 9, 0)


@pytest.mark.parametrize("at, cron, every, says", [
    (None, None, None, "exactly one"), ("2026-03-09T09:00", "0 9 * * *", None, "exactly one"),
    ("2026-03-01T09:00", None, None, "in the past"), ("next tuesday", None, None, "ISO"),
    (None, "0 9 * *", None, "5 fields"), (None, "0 25 * * *", None, "cron expression"),
    (None, None, "10s", "too often"), (None, None, "soon", "interval"),
])
def test_bad_schedules_say_what_would_be_right(at, cron, every, says):
    with pytest.raises(TaskError, match=says):
        parse_schedule(at, cron, every, NOW, TZ)


# --- actions, group ownership --------------------------------------------------------------------

def test_one_group_can_never_see_or_change_anothers_tasks(app):
    settings = app.config["NANOCLAW"]
    alice, a_session = make_session(settings, "alice")
    bob, b_session = make_session(settings, "bob")
    secret = scheduling.schedule(bob, b_session, "bob's secret", cron="0 7 * * *", tz=TZ, now=NOW)
    mine = scheduling.schedule(alice, a_session, "water the plants", every="1d", tz=TZ, now=NOW)
    assert [t.id for t in scheduling.open_tasks(alice)] == [mine.id]
    for action in ("pause", "resume", "cancel"):
        with pytest.raises(TaskError, match="no open task"):
            scheduling.set_state(alice, secret.id, action, tz=TZ)
    with pytest.raises(TaskError, match="no open task"):
        scheduling.update(alice, secret.id, prompt="mine now", tz=TZ)
    assert ScheduledTask.get_by_id(secret.id).status == "active"
    assert ScheduledTask.get_by_id(secret.id).prompt == "bob's secret"


def test_pause_resume_cancel(app):
    settings = app.config["NANOCLAW"]
    group, session = make_session(settings, "andy")
    task = scheduling.schedule(group, session, "standup notes", cron="0 9 * * 1-5", tz=TZ, now=NOW)
    assert from_db(task.next_run_at) == datetime(2026, 3, 9, 13, 0, tzinfo=UTC)  # Monday 09:00 EDT
    assert scheduling.set_state(group, task.id, "pause", tz=TZ).status == "paused"
    with pytest.raises(TaskError, match="already paused"):
        scheduling.set_state(group, task.id, "pause", tz=TZ)
    # resumed a week later: the missed runs are skipped, the grid stays 09:00 local
    later = datetime(2026, 3, 16, 15, 0, tzinfo=UTC)
    resumed = scheduling.set_state(group, task.id, "resume", tz=TZ, now=later)
    assert resumed.status == "active" and from_db(resumed.next_run_at) == datetime(2026, 3, 17, 13, 0, tzinfo=UTC)
    assert scheduling.set_state(group, task.id, "cancel", tz=TZ).status == "cancelled"
    assert scheduling.open_tasks(group) == []


# --- the agent's ops through the real transport --------------------------------------------------

class Host:
    """The host's delivery loop for one session, on a thread (as the background thread runs it)."""

    def __init__(self, path, settings):
        self.path, self.settings = path, settings
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        from nanoclaw.db import database
        while not self.stop.is_set():
            delivery.deliver_session(self.path, self.settings)
            time.sleep(0.02)
        database.close()

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *_):
        self.stop.set()
        self.thread.join(5)


def agent_context(path, settings) -> ToolContext:
    env = {"NANOCLAW_SESSION_DIR": str(path), "TZ": settings.timezone}
    ctx = ToolContext(store=SessionStore.of_session(path), config=RunnerConfig.from_env(env))
    ctx.turn = Turn(reply_to=RunnerTarget("cli", "x"), in_reply_to="m1")
    return ctx


@pytest.fixture
def agent(app, make_settings):
    settings = app.config["NANOCLAW"]
    group, session = make_session(settings, "andy")
    path = path_of(settings, session)
    ctx = agent_context(path, settings)
    with Host(path, settings):
        yield ctx, group, session, path
    ctx.store.close()


def test_agent_schedules_lists_and_cancels_through_outbound_ops(agent):
    ctx, group, session, path = agent
    tomorrow = (datetime.now(ZoneInfo("UTC")) + timedelta(days=1)).strftime("%Y-%m-%dT08:30")
    said = tools.schedule_task(ctx, "Remind me to call mum", at=tomorrow)
    task = ScheduledTask.get(ScheduledTask.agent_group == group.id)
    assert said.startswith(f"Task {task.id} scheduled: once, first run ") and "08:30 (UTC)" in said
    assert task.session_id == session.id and from_db(task.next_run_at).strftime("%H:%M") == "08:30"
    assert task.id in tools.list_tasks(ctx) and "Remind me to call mum" in tools.list_tasks(ctx)
    assert "cancelled" in tools.cancel_task(ctx, task.id)
    assert tools.list_tasks(ctx) == "No scheduled tasks."
    # the answers are completed rows: no turn ever picks them up as work
    assert {r["status"] for r in inbound_rows(path, "kind = 'answer'")} == {"completed"}
    assert inbound_rows(path, "status = 'pending'") == []


def test_agent_is_told_what_was_wrong(agent):
    ctx, *_ = agent
    with pytest.raises(ToolError, match="5 fields"):
        tools.schedule_task(ctx, "x", cron="every morning")
    with pytest.raises(ToolError, match="exactly one"):
        tools.schedule_task(ctx, "x", at="2030-01-01T09:00", every="1d")
    with pytest.raises(ToolError, match="no open task"):
        tools.pause_task(ctx, "nope1234")


def test_another_groups_task_is_invisible_to_the_agent(agent, app):
    ctx, *_ = agent
    bob, b_session = make_session(app.config["NANOCLAW"], "bob")
    secret = scheduling.schedule(bob, b_session, "bob's secret", every="1h", tz="UTC")
    assert "bob's secret" not in tools.list_tasks(ctx)
    with pytest.raises(ToolError, match="no open task"):
        tools.cancel_task(ctx, secret.id)
    assert ScheduledTask.get_by_id(secret.id).status == "active"


def test_a_chat_sees_and_changes_only_its_own_tasks(agent, app):
    """Issue 60, item 3: the owner's DM and a group chat share the agent. The group's session lists none of
    the DM's tasks, cannot rewrite, pause or cancel one (it would then run in the DM, with the owner's
    private reach), and its own task is not the DM's either; the CLI's view still sees both."""
    ctx, group, dm_session, _path = agent
    settings = app.config["NANOCLAW"]
    private = scheduling.schedule(group, dm_session, "read me my private notes", every="1d", tz="UTC")
    _same, group_session = make_session(settings, "andy", chat="the-group")
    group_ctx = agent_context(path_of(settings, group_session), settings)
    try:
        with Host(path_of(settings, group_session), settings):
            assert tools.list_tasks(group_ctx) == "No scheduled tasks."
            for attempt in (lambda: tools.update_task(group_ctx, private.id, prompt="post the notes here"),
                            lambda: tools.pause_task(group_ctx, private.id),
                            lambda: tools.cancel_task(group_ctx, private.id)):
                with pytest.raises(ToolError, match="no open task"):
                    attempt()
            tools.schedule_task(group_ctx, "weekly group digest", every="7d")
        kept = ScheduledTask.get_by_id(private.id)
        assert (kept.prompt, kept.status, kept.session_id) == ("read me my private notes", "active", dm_session.id)
        assert "weekly group digest" not in tools.list_tasks(ctx)  # the DM sees only its own
        assert "read me my private notes" in tools.list_tasks(ctx)
        assert {t.prompt for t in scheduling.open_tasks(group)} == {"read me my private notes", "weekly group digest"}
    finally:
        group_ctx.store.close()


def test_an_op_applied_again_after_a_crash_is_applied_once(agent, app):
    ctx, group, session, path = agent
    settings = app.config["NANOCLAW"]
    tools.schedule_task(ctx, "daily digest", cron="0 18 * * *")
    conn = sqlite3.connect(path / "host" / schema.INBOUND)
    # the tool returns once the answer is written; the host records the op delivered just after: wait
    # for that record, or the rewrite below races it (and the host's 'delivered' wins)
    deadline = time.monotonic() + 10
    while conn.execute("SELECT COUNT(*) FROM delivered WHERE status != 'delivered'").fetchone()[0] or \
            not conn.execute("SELECT COUNT(*) FROM delivered").fetchone()[0]:
        assert time.monotonic() < deadline, "the host never recorded the op as delivered"
        time.sleep(0.01)
    conn.execute("UPDATE delivered SET status = 'sending'")  # as if the host died while applying it
    conn.commit()
    conn.close()
    assert delivery.settle_interrupted(path) >= 1
    delivery.deliver_session(path, settings)
    assert ScheduledTask.select().where(ScheduledTask.agent_group == group.id).count() == 1


def test_without_a_host_the_tool_says_the_request_is_queued(app, monkeypatch):
    settings = app.config["NANOCLAW"]
    _group, session = make_session(settings, "solo")
    ctx = agent_context(path_of(settings, session), settings)
    monkeypatch.setattr(tools, "ANSWER_WAIT_S", 0.2)
    with pytest.raises(ToolError, match="queued"):
        tools.list_tasks(ctx)
    ctx.store.close()


# --- runs ----------------------------------------------------------------------------------------

def test_a_group_run_continues_the_chats_session_and_is_written_once(app):
    settings = replace(app.config["NANOCLAW"], timezone=TZ)
    group, session = make_session(settings, "andy")
    task = scheduling.schedule(group, session, "morning brief", cron="0 9 * * *", tz=TZ, now=NOW)
    due = from_db(task.next_run_at)
    run = runs.fire(settings, task.id, due, now=due)
    assert run.ref.session_id == session.id and not run.ref.isolated_run
    assert run.next_run == datetime(2026, 3, 8, 13, 0, tzinfo=UTC)  # 09:00 local again: DST began that night
    assert runs.fire(settings, task.id, due, now=due) is None  # that run moved on already
    rows = inbound_rows(path_of(settings, session), "kind = 'task'")
    assert len(rows) == 1 and rows[0]["trigger"] == 1 and rows[0]["status"] == "pending"
    assert json.loads(rows[0]["content"])["text"] == "morning brief"
    assert (rows[0]["channel_type"], rows[0]["platform_id"]) == ("cli", "andy-chat-1")  # answers in the chat


def test_a_run_interrupted_before_it_moved_on_is_not_written_twice(app):
    settings = replace(app.config["NANOCLAW"], timezone=TZ)
    group, session = make_session(settings, "andy")
    task = scheduling.schedule(group, session, "water", every="1h", tz=TZ, now=NOW)
    due = from_db(task.next_run_at)
    runs.fire(settings, task.id, due, now=due)
    ScheduledTask.update(next_run_at=to_db(due), runs=0).where(ScheduledTask.id == task.id).execute()  # the crash
    runs.fire(settings, task.id, due, now=due + timedelta(seconds=3))
    assert len(inbound_rows(path_of(settings, session), "kind = 'task'")) == 1
    assert from_db(ScheduledTask.get_by_id(task.id).next_run_at) == due + timedelta(hours=1)


def test_after_downtime_an_overdue_task_runs_once_then_stays_on_its_grid(app):
    settings = replace(app.config["NANOCLAW"], timezone=TZ)
    group, session = make_session(settings, "andy")
    task = scheduling.schedule(group, session, "daily", cron="30 8 * * *", tz=TZ, now=NOW)
    due = from_db(task.next_run_at)
    back = due + timedelta(days=3, hours=2)  # the host was down for three days
    run = runs.fire(settings, task.id, due, now=back)
    assert run.next_run.astimezone(ZoneInfo(TZ)).strftime("%H:%M") == "08:30" and run.next_run > back
    assert run.next_run - back < timedelta(days=1)
    assert len(inbound_rows(path_of(settings, session), "kind = 'task'")) == 1


def test_an_isolated_run_gets_a_fresh_session_answering_in_the_same_chat(app):
    settings = replace(app.config["NANOCLAW"], timezone=TZ)
    group, session = make_session(settings, "andy")
    task = scheduling.schedule(group, session, "news digest", every="1d", context="isolated", tz=TZ, now=NOW)
    first = runs.fire(settings, task.id, from_db(task.next_run_at), now=NOW + timedelta(days=1))
    task = ScheduledTask.get_by_id(task.id)
    second = runs.fire(settings, task.id, from_db(task.next_run_at), now=NOW + timedelta(days=2))
    refs = [first.ref, second.ref]
    assert all(r.isolated_run for r in refs) and len({r.session_id for r in refs} | {session.id}) == 3
    for ref in refs:
        conn = sqlite3.connect(ref.path / "host" / schema.INBOUND)
        assert conn.execute("SELECT channel_type, platform_id FROM routing").fetchone() == ("cli", "andy-chat-1")
        conn.close()
        assert not (ref.path / "agent" / schema.OUTBOUND).exists()  # nothing of the chat's conversation


def test_a_paused_task_does_not_run(app):
    settings = replace(app.config["NANOCLAW"], timezone=TZ)
    group, session = make_session(settings, "andy")
    task = scheduling.schedule(group, session, "ping", every="1h", tz=TZ, now=NOW)
    scheduling.set_state(group, task.id, "pause", tz=TZ)
    assert runs.fire(settings, task.id, from_db(task.next_run_at)) is None
    assert inbound_rows(path_of(settings, session), "kind = 'task'") == []


# --- the operator's CLI --------------------------------------------------------------------------

def test_tasks_cli(app, cli):
    settings = app.config["NANOCLAW"]
    group, session = make_session(settings, "andy")
    task = scheduling.schedule(group, session, "check the mail", cron="0 9 * * 0", tz="UTC")
    out = cli("tasks", "list")
    assert out.exit_code == 0 and task.id in out.output and "cron '0 9 * * 0'" in out.output
    assert "(UTC)" in out.output and "check the mail" in out.output
    assert "paused" in cli("tasks", "pause", task.id).output
    assert "resumed" in cli("tasks", "resume", task.id).output
    assert "cancelled" in cli("tasks", "cancel", task.id).output
    assert "no scheduled tasks" in cli("tasks", "list").output
    bad = cli("tasks", "pause", "nope")
    assert bad.exit_code == 2 and bad.output.strip() == "error: no open task 'nope'"


def test_update_task_changes_the_prompt_and_the_schedule(agent):
    ctx, group, session, path = agent
    tools.schedule_task(ctx, "Water the plants", cron="0 8 * * *")
    task = ScheduledTask.get(ScheduledTask.agent_group == group.id)
    said = tools.update_task(ctx, task.id, prompt="Water the plants and the herbs")
    assert said.startswith("Task updated:") and "Water the plants and the herbs" in said
    said = tools.update_task(ctx, task.id, cron="30 19 * * 1-5")
    changed = ScheduledTask.get_by_id(task.id)
    assert (changed.prompt, changed.schedule_kind, changed.schedule_value) == \
        ("Water the plants and the herbs", "cron", "30 19 * * 1-5")
    assert from_db(changed.next_run_at).strftime("%H:%M") == "19:30" and "19:30" in said


def test_update_task_refusals_say_what_would_be_right(agent, app):
    ctx, group, session, path = agent
    tools.schedule_task(ctx, "Daily digest", every="1d")
    task = ScheduledTask.get(ScheduledTask.agent_group == group.id)
    before = ScheduledTask.get_by_id(task.id)
    with pytest.raises(ToolError, match="at most one of at, cron or every"):
        tools.update_task(ctx, task.id, cron="0 9 * * *", every="2h")
    with pytest.raises(ToolError, match="nothing to change"):
        tools.update_task(ctx, task.id)
    with pytest.raises(ToolError, match="5 fields"):
        tools.update_task(ctx, task.id, cron="every morning")
    with pytest.raises(ToolError, match="no open task"):
        tools.update_task(ctx, "nope1234", prompt="x")
    bob, b_session = make_session(app.config["NANOCLAW"], "bob")
    theirs = scheduling.schedule(bob, b_session, "bob's", every="1h", tz="UTC")
    with pytest.raises(ToolError, match="no open task"):
        tools.update_task(ctx, theirs.id, prompt="mine now")
    assert ScheduledTask.get_by_id(theirs.id).prompt == "bob's"
    after = ScheduledTask.get_by_id(task.id)
    assert (after.prompt, after.schedule_value, after.next_run_at) == \
        (before.prompt, before.schedule_value, before.next_run_at)


class StatusChat:
    """A platform that can show, edit and delete a status message (what progress needs)."""
    live_status = True
    shown: list = []

    def __init__(self, settings):
        pass

    def send_text(self, target, text):
        StatusChat.shown.append((target.platform_id, text))
        return f"status-{len(StatusChat.shown)}"

    def edit_text(self, target, platform_message_id, text):
        pass

    def delete_message(self, target, platform_message_id):
        pass


def test_a_long_scheduled_run_shows_progress_only_when_its_task_asked_for_it(agent, app):
    from nanoclaw.channels.base import register
    from nanoclaw.outbound.progress import Progress
    register("statuschat")(StatusChat)
    StatusChat.shown = []
    ctx, group, _, _ = agent
    settings = app.config["NANOCLAW"]
    mg = MessagingGroup.create(channel_type="statuschat", platform_id="family")
    session = Session.create(id=store.new_session_id(), agent_group=group, messaging_group=mg)
    store.prepare(path_of(settings, session), store.Target("statuschat", "family"))
    # the agent asks for progress on one task (its tool, through the real op transport), not the other
    tools.schedule_task(ctx, "Build the weekly report", every="1d", context="isolated", progress=True)
    tools.schedule_task(ctx, "Send the news digest", every="1d", context="isolated")
    asked, quiet = (ScheduledTask.get(ScheduledTask.prompt == p) for p in ("Build the weekly report",
                                                                           "Send the news digest"))
    assert (asked.progress, quiet.progress) == (True, False)
    assert "progress must be true or false" in str(pytest.raises(ToolError, tools.update_task, ctx, quiet.id,
                                                                 progress="yes").value)
    shown = []
    for task in (quiet, asked):
        ScheduledTask.update(session=session.id).where(ScheduledTask.id == task.id).execute()
        task = ScheduledTask.get_by_id(task.id)
        ref = runs.fire(settings, task.id, from_db(task.next_run_at), now=from_db(task.next_run_at)).ref
        message_id = inbound_rows(ref.path, "kind = 'task'")[0]["id"]
        out = schema.connect(ref.path / "agent" / schema.OUTBOUND)  # the runner claims the run's message
        out.execute("INSERT INTO processing_ack VALUES (?, 'processing', ?)", (message_id, schema.utc_now_iso()))
        out.close()
        progress, conn = Progress(settings), delivery.open_session(ref.path)
        started = time.monotonic()
        progress.tick(conn, ref.path, now=started)                                    # the run starts
        progress.tick(conn, ref.path, now=started + settings.progress_after_s + 1)    # and is still at it
        conn.close()
        progress._pool.shutdown(wait=True)  # every status call the ticks sent off has been made
        shown.append(list(StatusChat.shown))
        StatusChat.shown = []
    assert shown[0] == []                                      # not asked: a run shows nothing
    assert [(chat, text.split("…")[0]) for chat, text in shown[1]] == [("family", "⏳ Working")]
