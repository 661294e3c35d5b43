"""Isolated task runs' sessions are cleaned up: once the run's reply is delivered and its sandbox
stopped, the session is closed and its folder removed after NANOCLAW_ISOLATED_RETENTION_HOURS; the
task's record stays. A session with a message still waiting, a reply not delivered yet, a running
sandbox, or a run that has not fired is never removed. Session files are written by the runner's
own store code and delivered by the real delivery code (SQLite and PostgreSQL); one run goes through
the whole service (real bwrap sandbox, SDK, fake model and Telegram)."""
from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

from nanoclaw.outbound import delivery
from nanoclaw.lifecycle import retention
from nanoclaw.tasks import runs, scheduling
from nanoclaw.sessions.store import SessionRef
from nanoclaw.models import AuditLog, ScheduledTask, Session
from nanoclaw.lifecycle.retention import RunView, keep_reason, remove_finished_runs
from nanoclaw.sessions import session_schema as schema  # also puts container/ on sys.path
from tests.fakes.model_api import Reply
from tests.tasks.test_scheduling import make_session
from tests.tg_flow import message, person, sandbox_service, texts

from agent_runner.store import SessionStore  # noqa: E402
from agent_runner.targets import Target as RunnerTarget  # noqa: E402

HOUR = 3600.0
DAY_AFTER = 25 * HOUR


def test_a_session_stays_while_anything_is_left_to_do_or_it_is_recent():
    old = 1000.0
    now = old + DAY_AFTER
    assert keep_reason(RunView(False, False, last_work_at=old), now, 24 * HOUR) is None
    assert keep_reason(RunView(True, False, last_work_at=old), now, 24 * HOUR) == "its sandbox runs"
    assert keep_reason(RunView(False, True, last_work_at=old), now, 24 * HOUR) == "its run has not fired yet"
    assert "wait for the agent" in keep_reason(RunView(False, False, pending_in=1, last_work_at=old), now, 24 * HOUR)
    assert "not delivered" in keep_reason(RunView(False, False, undelivered_out=2, last_work_at=old), now, 24 * HOUR)
    assert keep_reason(RunView(False, False, last_work_at=now - HOUR), now, 24 * HOUR) == \
        "it is within the retention period"
    assert keep_reason(RunView(False, False, last_work_at=now - HOUR), now, 0) is None
    assert retention.parse_thread("task:ab12cd34:20260306T150000000000") == ("ab12cd34", "20260306T150000000000")
    assert retention.parse_thread("") is None and retention.parse_thread("task:x") is None


class Sandboxes:
    """What runs, as the manager would say (the real runtime is in the service test below)."""

    def __init__(self):
        self.running: set[str] = set()
        self.runtime = self

    def is_running(self, folder, session_id):
        return session_id in self.running

    def stop(self, name, timeout=5):
        pass


def run_isolated(settings, group, origin, *, answer=True, deliver=True) -> SessionRef:
    """One isolated run: fired by the host, answered by the agent (the runner's store), delivered."""
    task = scheduling.schedule(group, origin, "read me the news", every="1h", context="isolated", tz="UTC")
    due = scheduling.from_db(task.next_run_at)
    ref = runs.fire(settings, task.id, due, now=due).ref
    if answer:
        agent = SessionStore.of_session(ref.path)
        [(row, _)] = agent.pending_rows()
        agent.claim([row.id])
        agent.finish_turn([row.id], {"op": "text", "text": "Here is the news."}, RunnerTarget("cli", row.platform_id),
                          in_reply_to=row.id, ok=True)
        agent.touch_heartbeat()
        agent.close()
    if deliver:
        assert delivery.deliver_session(ref.path, settings) == (1 if answer else 0)
    return ref


def test_a_finished_run_is_removed_after_the_retention_period_and_its_record_kept(app):
    settings = app.config["NANOCLAW"]
    assert settings.isolated_retention_hours == 24
    group, origin = make_session(settings, "andy")
    ref = run_isolated(settings, group, origin)
    sandboxes = Sandboxes()
    now = time.time()
    assert remove_finished_runs(settings, sandboxes, now=now + HOUR) == []  # kept for a day
    assert ref.path.is_dir()

    assert remove_finished_runs(settings, sandboxes, now=now + DAY_AFTER) == [ref.session_id]
    assert not ref.path.exists()
    assert Session.get_by_id(ref.session_id).status == "closed"
    task = ScheduledTask.get(ScheduledTask.context_mode == "isolated")
    assert task.runs == 1 and task.last_run_at is not None and task.status == "active"  # the run's record
    [entry] = AuditLog.select().where(AuditLog.action == "session.remove")
    assert entry.target == ref.session_id and entry.detail["task"] == task.id
    origin_path = ref.path.parent / origin.id
    assert origin_path.is_dir() and Session.get_by_id(origin.id).status == "active"  # the chat's own: untouched
    assert remove_finished_runs(settings, sandboxes, now=now + DAY_AFTER) == []


def test_a_run_with_work_left_or_a_running_sandbox_is_never_removed(app):
    settings = app.config["NANOCLAW"]
    group, origin = make_session(settings, "andy")
    unanswered = run_isolated(settings, group, origin, answer=False)
    undelivered = run_isolated(settings, group, origin, deliver=False)
    running = run_isolated(settings, group, origin)
    sandboxes = Sandboxes()
    sandboxes.running.add(running.session_id)
    later = time.time() + 30 * 24 * HOUR
    assert remove_finished_runs(settings, sandboxes, now=later) == []
    assert all(r.path.is_dir() for r in (unanswered, undelivered, running))

    assert delivery.deliver_session(undelivered.path, settings) == 1  # delivered at last
    sandboxes.running.clear()  # and the sweep stopped the other one
    assert sorted(remove_finished_runs(settings, sandboxes, now=later)) == sorted(
        [undelivered.session_id, running.session_id])
    assert unanswered.path.is_dir() and Session.get_by_id(unanswered.session_id).status == "active"


def test_a_run_prepared_but_not_fired_yet_is_kept(app):
    settings = app.config["NANOCLAW"]
    group, origin = make_session(settings, "andy")
    task = scheduling.schedule(group, origin, "read me the news", every="1h", context="isolated", tz="UTC")
    ref = runs.prepare_run(settings, task.id, scheduling.from_db(task.next_run_at))  # the pre-wake
    Session.update(last_active_at=datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(days=3)).execute()
    assert remove_finished_runs(settings, Sandboxes(), now=time.time() + 3 * 24 * HOUR) == []
    assert ref.path.is_dir()
    scheduling.set_state(group, task.id, "cancel", tz="UTC")  # it will never fire into it now
    assert remove_finished_runs(settings, Sandboxes(), now=time.time() + 3 * 24 * HOUR) == [ref.session_id]


def test_the_retention_is_a_setting(make_settings):
    assert make_settings(NANOCLAW_ISOLATED_RETENTION_HOURS="0").isolated_retention_hours == 0
    assert make_settings().isolated_retention_hours == 24


# --- the whole service ------------------------------------------------------------------------------

OWNER = person(111, "Olivia")


def test_a_real_isolated_run_is_delivered_stopped_and_then_removed(make_settings, sqlite_url):
    def brain(req):
        if "read me the news" in req.current_prompt():
            return Reply.say("Here is the news.")
        return Reply.say("Hello!")

    with sandbox_service(make_settings, sqlite_url, brain) as svc:
        svc.cli("agent", "create", "Andy")
        svc.cli("user", "add", "telegram:111", "--role", "owner", "--name", "Olivia")
        svc.cli("wire", "telegram", "111", "andy")
        svc.post(message(111, OWNER, "hi"))
        svc.wait(lambda: texts(svc.tg, 111) == ["Hello!"], what="the chat's answer")
        origin = Session.get()
        at = datetime.now(timezone.utc) + timedelta(seconds=2)
        scheduling.schedule(origin.agent_group, origin, "read me the news", context="isolated", tz="UTC",
                            at=at.strftime("%Y-%m-%dT%H:%M:%S.%f"))
        svc.wait(lambda: "Here is the news." in texts(svc.tg, 111), what="the run's answer")
        run = Session.get(Session.thread_id.startswith("task:"))
        manager = svc.app.extensions["nanoclaw.background"].manager
        path = svc.settings.sessions_dir / "andy" / run.id
        day_after = time.time() + DAY_AFTER
        if manager.is_running("andy", run.id):
            assert remove_finished_runs(svc.settings, manager, now=day_after) == []  # its sandbox runs
        svc.wait(lambda: not manager.is_running("andy", run.id), timeout=40, what="the sweep stopping the run")
        assert remove_finished_runs(svc.settings, manager, now=time.time() + HOUR) == []
        assert remove_finished_runs(svc.settings, manager, now=day_after) == [run.id]
        assert not path.exists() and Session.get_by_id(run.id).status == "closed"
        assert not list((svc.settings.data_dir / "run" / "bwrap").glob(f"*{run.id}*"))  # its sandbox's leftovers
        assert (svc.settings.sessions_dir / "andy" / origin.id / "host" / schema.INBOUND).exists()
