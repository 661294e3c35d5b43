"""Stopping a turn from outside the chat: the page's "Stop turn" on a session row (an owner, with the
CSRF token; recorded in the audit log) and `flask nanoclaw tasks stop TASK_ID` (only that task's run;
the task keeps its schedule). The runner's side against real sandboxes: tests/inbound/test_stop_e2e.py."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from nanoclaw.inbound.router import route
from nanoclaw.models import AuditLog, ScheduledTask, Session
from nanoclaw.sessions import session_schema as schema
from nanoclaw.sessions.store import session_path
from nanoclaw.sessions.wake import NO_WAKE
from nanoclaw.tasks import runs
from nanoclaw.tasks.scheduling import to_db
from tests.inbound.test_router import event
from tests.inbound.test_stop import _claim_all, _stopped
from tests.web.test_admin import OWNER, login, owner, site, token_for  # noqa: F401  (fixtures)


def _dm_turn(app, cli) -> tuple:
    assert cli("wire", "telegram", "42", "andy").exit_code == 0
    route(event(1, text="write the long report"), app.config["NANOCLAW"], NO_WAKE)
    session = Session.get()
    path = session_path(app.config["NANOCLAW"].sessions_dir, "andy", session.id)
    return session, path


def test_stop_turn_on_the_page_stops_the_running_turn_and_is_audited(site, owner, cli):  # noqa: F811
    session, path = _dm_turn(site, cli)
    ids = _claim_all(path)
    page = owner.get("/admin/sessions").get_data(as_text=True)
    assert f"/admin/sessions/{session.id}/stop-turn" in page and "Stop turn" in page
    url = f"/admin/sessions/{session.id}/stop-turn"
    assert owner.post(url, data={"why": "wrong way"}).status_code == 400  # no CSRF token: refused
    assert _stopped(path) == []
    response = owner.post(url, data={"csrf_token": token_for(owner, "/admin/sessions"), "why": "wrong way"},
                          follow_redirects=True)
    assert "Stopped the turn" in response.get_data(as_text=True)
    assert _stopped(path) == ids
    assert AuditLog.select().where(AuditLog.action == "session.stop_turn").count() == 1
    again = owner.post(url, data={"csrf_token": token_for(owner, "/admin/sessions")}, follow_redirects=True)
    assert "Nothing is running" in again.get_data(as_text=True)


def test_stop_turn_is_refused_to_someone_who_may_not_change_the_agent(site, cli):  # noqa: F811
    session, path = _dm_turn(site, cli)
    _claim_all(path)
    assert cli("agent", "create", "Bea").exit_code == 0
    assert cli("user", "add", "telegram:77", "--role", "admin", "--agent", "bea").exit_code == 0
    result = site.test_cli_runner().invoke(args=["nanoclaw", "admin", "set-password", "telegram:77"],
                                           input="another horse battery\nanother horse battery\n")
    assert result.exit_code == 0, result.output
    client = site.test_client()
    assert login(client, "telegram:77", "another horse battery").status_code == 302
    response = client.post(f"/admin/sessions/{session.id}/stop-turn",
                           data={"csrf_token": token_for(client, "/admin")})
    assert response.status_code in (403, 404) and _stopped(path) == []


def test_tasks_stop_stops_only_that_tasks_run(site, cli):  # noqa: F811
    session, path = _dm_turn(site, cli)
    settings = site.config["NANOCLAW"]
    due = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(seconds=1)
    for tid in ("t-water", "t-other"):
        ScheduledTask.create(id=tid, agent_group=session.agent_group, session=session, prompt=f"run {tid}",
                             schedule_kind="every", schedule_value="3600", next_run_at=to_db(due))
    assert cli("tasks", "stop", "t-water").exit_code == 1  # nothing of it runs yet: said, nothing recorded
    _claim_all(path)  # the chat's own turn runs: not the task's
    assert cli("tasks", "stop", "t-water").exit_code == 1 and _stopped(path) == []
    for db, sql in ((schema.OUTBOUND, "UPDATE processing_ack SET status = 'completed'"),
                    (schema.INBOUND, "UPDATE messages_in SET status = 'completed'")):  # that turn ended
        conn = schema.connect(path / ("agent" if db == schema.OUTBOUND else "host") / db)
        conn.execute(sql)
        conn.close()
    assert runs.fire(settings, "t-water", due) is not None
    [run] = _claim_all(path)
    assert run.startswith("task:t-water:")
    assert cli("tasks", "stop", "t-other").exit_code == 1 and _stopped(path) == []
    result = cli("tasks", "stop", "t-water")
    assert result.exit_code == 0, result.output
    assert _stopped(path) == [run]
    assert ScheduledTask.get_by_id("t-water").status == "active"  # it keeps its schedule
    assert cli("tasks", "stop", "no-such-task").exit_code == 2
