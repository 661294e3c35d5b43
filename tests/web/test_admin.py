"""The operator's page through Flask's test client: login, CSRF, login links, session expiry,
every view, deciding a pending item through the chat card's handler, wirings and mounts, and
the web chat channel's storage (without a sandbox; tests/web/test_browser.py has the real one)."""
import json
import os
import re
import stat
from datetime import timedelta

import pytest

import cli_batch
from nanoclaw.app import create_app
from nanoclaw.sessions.wake import NO_WAKE
from nanoclaw.approvals import actions, pending
from nanoclaw.channels.base import Card, get_adapter
from nanoclaw.channels import web as webchannel
from nanoclaw.models import (AgentGroup, AuditLog, MessagingGroup, Session, WebLoginToken,
                             WebMessage, WebPassword, WebSession, Wiring, utcnow)
from nanoclaw.sessions.store import Target
from nanoclaw.lifecycle.sweep import Claim, SessionView
from nanoclaw.web import sandbox_state

OWNER = "telegram:42"
PASSWORD = "correct horse battery"


def csrf_of(html: str) -> str:
    m = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert m, "the page has no CSRF token"
    return m.group(1)


@pytest.fixture
def site(app, cli):
    assert cli("agent", "create", "Andy").exit_code == 0
    assert cli("user", "add", OWNER, "--name", "Olga", "--role", "owner").exit_code == 0
    result = app.test_cli_runner().invoke(args=["nanoclaw", "admin", "set-password", OWNER],
                                          input=f"{PASSWORD}\n{PASSWORD}\n")
    assert result.exit_code == 0, result.output
    return app


def login(client, user_id=OWNER, password=PASSWORD, next_=None):
    token = csrf_of(client.get("/login").get_data(as_text=True))
    data = {"csrf_token": token, "user_id": user_id, "password": password}
    if next_:
        data["next"] = next_
    return client.post("/login", data=data)


@pytest.fixture
def owner(site):
    client = site.test_client()
    assert login(client).status_code == 302
    return client


def token_for(client, path="/admin"):
    return csrf_of(client.get(path).get_data(as_text=True))


# --- login and CSRF ---------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/", "/admin", "/admin/agents", "/admin/agents/andy", "/admin/wirings",
                                  "/admin/sessions", "/admin/tasks", "/admin/audit", "/chat", "/chat/andy"])
def test_logged_out_visits_are_sent_to_login(site, path):
    response = site.test_client().get(path)
    assert response.status_code == 302
    assert response.headers["Location"].startswith("/login")


def test_logged_out_poll_gets_401_not_a_page(site):
    response = site.test_client().get("/chat/andy/messages.json", headers={"Accept": "application/json"})
    assert response.status_code == 401 and response.json == {"error": "not logged in"}


def test_password_login_then_the_page_and_back_to_where_you_were(site):
    client = site.test_client()
    first = client.get("/admin/agents")
    next_ = first.headers["Location"].split("next=", 1)[1]
    response = login(client, next_=next_.replace("%2F", "/"))
    assert response.status_code == 302 and response.headers["Location"] == "/admin/agents"
    page = client.get("/admin/agents").get_data(as_text=True)
    assert "Andy" in page and "Olga" in page
    assert AuditLog.select().where(AuditLog.action == "web.login", AuditLog.actor == OWNER).exists()


def test_wrong_password_is_refused(site):
    client = site.test_client()
    response = login(client, password="not the password")
    assert response.status_code == 401
    assert "Wrong user id or password" in response.get_data(as_text=True)
    assert client.get("/admin").status_code == 302
    assert login(client, user_id="telegram:999", password=PASSWORD).status_code == 401  # unknown user alike


def test_repeated_wrong_passwords_lock_the_user_id_for_a_while(site):
    client = site.test_client()
    for _ in range(5):
        assert login(client, password="nope nope nope").status_code == 401
    assert login(client).status_code == 429  # even the right one, for now
    AuditLog.update(at=utcnow() - timedelta(minutes=16)).where(AuditLog.action == "web.login_failed").execute()
    assert login(client).status_code == 302


def test_wrong_passwords_from_one_address_lock_it_whatever_the_user_id(site):
    """Guessing across many user ids from one address is limited too (issue 15, hole 7)."""
    client = site.test_client()
    for i in range(20):
        assert login(client, user_id=f"telegram:{1000 + i}", password="nope nope nope").status_code == 401
    assert login(client).status_code == 429  # the owner's right password, from that address, for now
    other = site.test_client()
    assert login(other, password="wrong again please").status_code == 429  # same test address: still locked
    AuditLog.update(at=utcnow() - timedelta(minutes=16)).where(AuditLog.action == "web.login_failed").execute()
    assert login(client).status_code == 302


def test_post_without_csrf_token_is_refused(owner):
    before = AuditLog.select().count()
    response = owner.post("/admin/decide", data={"action_id": "tst-1:allow"})
    assert response.status_code == 400
    assert "security token" in response.get_data(as_text=True)
    assert owner.post("/login", data={"user_id": OWNER, "password": PASSWORD}).status_code == 400
    assert owner.post("/admin/wirings", data={"channel": "telegram", "chat_id": "1", "agent": "andy"}).status_code == 400
    assert AuditLog.select().count() == before and Wiring.select().count() == 0
    bad = owner.post("/admin/decide", data={"action_id": "tst-1:allow", "csrf_token": "forged"})
    assert bad.status_code == 400


def test_webhooks_need_no_csrf_token(site):
    # their signature is their authentication; an unsigned one is refused by the channel, not by CSRF
    response = site.test_client().post("/webhooks/telegram", data=b"{}", headers={"Content-Type": "application/json"})
    assert response.status_code in (401, 403)


def test_open_redirects_are_not_followed(site):
    for evil in ("//evil.example/x", "https://evil.example/", "/\\evil.example"):
        response = login(site.test_client(), next_=evil)
        assert response.status_code == 302 and response.headers["Location"] == "/admin"


def test_logout_ends_the_session_on_the_server(owner):
    assert WebSession.select().count() == 1
    response = owner.post("/logout", data={"csrf_token": token_for(owner)})
    assert response.status_code == 302
    assert WebSession.select().count() == 0
    assert owner.get("/admin").status_code == 302


def test_sessions_expire_absolute_and_idle(owner):
    WebSession.update(expires_at=utcnow() - timedelta(seconds=1)).execute()
    assert owner.get("/admin").status_code == 302
    assert WebSession.select().count() == 0  # removed on sight
    assert login(owner).status_code == 302
    WebSession.update(last_seen_at=utcnow() - timedelta(hours=3)).execute()  # idle longer than 2 h
    assert owner.get("/admin").status_code == 302


def test_new_password_ends_open_logins(owner, site):
    result = site.test_cli_runner().invoke(args=["nanoclaw", "admin", "set-password", OWNER, "--password-stdin"],
                                           input="another long password\n")
    assert result.exit_code == 0, result.output
    assert owner.get("/admin").status_code == 302
    assert login(owner, password="another long password").status_code == 302


def test_a_password_set_by_the_command_is_scrypt_and_logs_in(tmp_path, make_settings):
    """The suite's own processes hash passwords cheaply (tests/conftest.py); `admin set-password` run
    as an operator runs it stores werkzeug's scrypt, and the page's login takes that password."""
    env = {**os.environ, "NANOCLAW_DATA_DIR": str(tmp_path / "data"), "NANOCLAW_GROUPS_DIR": str(tmp_path / "groups"),
           "NANOCLAW_ENV_FILE": str(tmp_path / "none.env"), "TZ": "UTC"}
    env.pop("DATABASE_URL", None)
    cli_batch.run([["migrate"], ["user", "add", OWNER, "--role", "owner"],
                   ["admin", "set-password", OWNER, "--password-stdin"]], env, input=PASSWORD + "\n")
    app = create_app(make_settings())  # the same data folder, its SQLite file
    assert WebPassword.get(WebPassword.user == OWNER).password_hash.startswith("scrypt:")
    client = app.test_client()
    assert login(client).status_code == 302
    assert login(app.test_client(), password="not the password").status_code == 401


def test_set_password_refusals_are_one_line(site, cli):
    assert cli("user", "add", "telegram:7", "--name", "Mo").exit_code == 0
    run = site.test_cli_runner().invoke
    refused = run(args=["nanoclaw", "admin", "set-password", "telegram:7", "--password-stdin"], input="long enough pw\n")
    assert refused.exit_code == 2 and "neither an owner nor an admin" in refused.output
    short = run(args=["nanoclaw", "admin", "set-password", OWNER, "--password-stdin"], input="short\n")
    assert short.exit_code == 2 and "shorter than 10" in short.output
    ghost = run(args=["nanoclaw", "admin", "login-link", "telegram:404"])
    assert ghost.exit_code == 2 and "no user 'telegram:404'" in ghost.output
    assert "Traceback" not in refused.output + short.output + ghost.output


def test_secret_key_is_random_and_kept_private(site):
    assert site.config["SECRET_KEY"] != "dev-only-not-secret" and len(site.config["SECRET_KEY"]) >= 40
    path = site.config["NANOCLAW"].data_dir / "secret_key"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert path.read_text().strip() == site.config["SECRET_KEY"]


# --- login links ------------------------------------------------------------------------------

def link_path(site, *extra):
    result = site.test_cli_runner().invoke(args=["nanoclaw", "admin", "login-link", OWNER, *extra])
    assert result.exit_code == 0, result.output
    url = result.output.strip().splitlines()[0]
    assert url.startswith("http://127.0.0.1:") and "/login/link/" in url
    return "/login/link/" + url.rsplit("/", 1)[1]


def test_login_link_works_once(site):
    path = link_path(site)
    token = path.rsplit("/", 1)[1]
    assert WebLoginToken.get().token_hash != token and token not in WebLoginToken.get().token_hash  # hashed
    client = site.test_client()
    page = client.get(path)  # a link preview: shows a button, spends nothing
    assert page.status_code == 200 and "Log in as" in page.get_data(as_text=True)
    assert WebLoginToken.get().used_at is None
    response = client.post(path, data={"csrf_token": csrf_of(page.get_data(as_text=True))})
    assert response.status_code == 302
    assert client.get("/admin").status_code == 200

    other = site.test_client()
    again = other.get(path)
    assert again.status_code == 410 and "already used" in again.get_data(as_text=True)
    token_form = csrf_of(other.get("/login").get_data(as_text=True))
    assert other.post(path, data={"csrf_token": token_form}).status_code == 410
    assert other.get("/admin").status_code == 302


def test_login_link_expires(site):
    path = link_path(site, "--minutes", "5")
    WebLoginToken.update(expires_at=utcnow() - timedelta(seconds=1)).execute()
    client = site.test_client()
    page = client.get(path)
    assert page.status_code == 410 and "expired" in page.get_data(as_text=True)
    assert client.post(path, data={"csrf_token": csrf_of(client.get("/login").get_data(as_text=True))}).status_code == 410
    assert client.get("/admin").status_code == 302


def test_unknown_login_link_is_refused(site):
    client = site.test_client()
    assert client.get("/login/link/not-a-token").status_code == 410


# --- Waiting on you ---------------------------------------------------------------------------

@pytest.fixture
def decisions():
    """A capability defined here: one pending item whose button is decided once, by whoever is first."""
    state = {"decided_by": None, "calls": []}

    @pending.register_pending("test_items")
    def items(settings, user_id):
        if state["decided_by"]:
            return []
        return [pending.PendingItem(key="tst-1", kind="Unknown sender", title="Bo wants to talk to Andy",
                                    body="hello?", created_at=utcnow(), agent_folder="andy",
                                    buttons=(("Allow", "tst-1:allow"), ("Deny", "tst-1:deny")),
                                    details=(("chat", "telegram:-100"),))]

    @actions.register_action("tst")
    def handle(action, ident, value, settings, wake):
        state["calls"].append((action.channel, action.user_id, ident, value))
        if state["decided_by"]:
            return f"Already decided by {state['decided_by']}."
        state["decided_by"] = action.user_id
        return f"{value} (decided by {action.user_id})"
    yield state
    pending.unregister_pending("test_items")


def test_waiting_lists_items_and_deciding_calls_the_card_handler(owner, decisions):
    page = owner.get("/admin").get_data(as_text=True)
    assert "Bo wants to talk to Andy" in page and "tst-1:allow" in page and "telegram:-100" in page
    response = owner.post("/admin/decide", data={"csrf_token": csrf_of(page), "action_id": "tst-1:allow"},
                          follow_redirects=True)
    body = response.get_data(as_text=True)
    assert f"allow (decided by {OWNER})" in body
    assert "Bo wants to talk to Andy" not in body and "Nothing is waiting on you" in body
    assert decisions["calls"] == [("web", OWNER, "1", "allow")]
    # a second answer (e.g. from the chat card) finds it decided
    again = owner.post("/admin/decide", data={"csrf_token": csrf_of(body), "action_id": "tst-1:deny"},
                       follow_redirects=True)
    assert f"Already decided by {OWNER}" in again.get_data(as_text=True)
    assert AuditLog.select().where(AuditLog.action == "web.decide", AuditLog.actor == OWNER).count() == 2


def test_a_malformed_action_id_is_refused(owner):
    response = owner.post("/admin/decide", data={"csrf_token": token_for(owner), "action_id": "<script>"})
    assert response.status_code == 400


def test_a_failing_provider_is_reported_not_fatal(owner):
    @pending.register_pending("broken")
    def broken(settings, user_id):
        raise RuntimeError("table missing")
    try:
        page = owner.get("/admin")
        assert page.status_code == 200 and "broken: table missing" in page.get_data(as_text=True)
    finally:
        pending.unregister_pending("broken")


def test_reply_box_reaches_the_registered_reply_handler(owner):
    got = []

    @pending.register_pending("test_questions")
    def items(settings, user_id):
        return [pending.PendingItem(key="tq-9", kind="Question", title="Which day?", body="", created_at=utcnow(),
                                    reply_prefix="tq")]
    pending.register_reply("tq")(lambda user_id, ident, text, settings, wake: got.append((user_id, ident, text)) or "Sent.")
    try:
        page = owner.get("/admin").get_data(as_text=True)
        assert 'name="prefix" value="tq"' in page and 'name="ident" value="9"' in page
        owner.post("/admin/reply", data={"csrf_token": csrf_of(page), "prefix": "tq", "ident": "9", "text": "Friday"})
        assert got == [(OWNER, "9", "Friday")]
    finally:
        pending.unregister_pending("test_questions")


# --- views ------------------------------------------------------------------------------------

def test_every_view_renders(owner, site):
    mg = MessagingGroup.create(channel_type="telegram", platform_id="-100", kind="group")
    w = Wiring.create(messaging_group=mg, agent_group=AgentGroup.get(), engage_mode="mention")
    Session.create(id="s1", agent_group=AgentGroup.get(), messaging_group=mg)
    for path, expect in [("/admin", "Waiting on you"), ("/admin/agents", "Andy"), ("/admin/agents/andy", "Read-only"),
                         ("/admin/wirings", "telegram:-100"), (f"/admin/wirings/{w.id}", "Remove this wiring"),
                         ("/admin/sessions", "s1"), ("/admin/tasks", "No scheduled tasks"),
                         ("/admin/audit", "agent.create"), ("/chat/andy", "Message Andy")]:
        response = owner.get(path)
        assert response.status_code == 200, path
        body = response.get_data(as_text=True)
        assert expect in body, path
        assert 'name="viewport"' in body and "app.css" in body  # phone-ready layout
    assert owner.get("/chat").status_code == 302  # one agent: straight to its chat
    assert owner.get("/admin/agents/ghost").status_code == 404
    assert owner.get("/static/app.css").status_code == 200 and owner.get("/static/chat.js").status_code == 200


def test_sessions_show_the_sandbox_state(owner, site):
    from nanoclaw.sessions import store
    settings = site.config["NANOCLAW"]
    mg = MessagingGroup.create(channel_type="telegram", platform_id="5")
    Session.create(id="sfail", agent_group=AgentGroup.get(), messaging_group=mg)
    path = store.session_path(settings.sessions_dir, "andy", "sfail")
    store.prepare(path, Target("telegram", "5"))
    mid = store.write_message(path, content={"text": "hi"}, target=Target("telegram", "5"))
    conn = store.schema.connect(path / "host" / store.schema.INBOUND)
    conn.execute("UPDATE messages_in SET status = 'failed' WHERE id = ?", (mid,))
    conn.close()

    class Running:
        def is_running(self, folder, session_id):
            return True
    site.extensions["nanoclaw.background"] = type("Bg", (), {"manager": Running()})()
    try:
        body = owner.get("/admin/sessions").get_data(as_text=True)
    finally:
        del site.extensions["nanoclaw.background"]
    assert "badge state failed" in body and "the last message failed" in body
    assert "unknown" in owner.get("/admin/sessions").get_data(as_text=True)  # no runtime in this process


def test_sandbox_state_rules():
    now = 10_000.0
    claim = Claim("m1", claimed_at=now - 5, tries=0)
    def obs(running, **kw):
        return sandbox_state.Observed(running, SessionView(running=bool(running), **kw), last_failed=False)
    assert sandbox_state.state(obs(True, claims=(claim,), heartbeat_at=now - 1), now) == "running"
    assert sandbox_state.state(obs(True, heartbeat_at=now - 1), now) == "idle"
    stuck = Claim("m1", claimed_at=now - 120, tries=0)
    assert sandbox_state.state(obs(True, claims=(stuck,), heartbeat_at=now - 200), now) == "stuck"
    assert sandbox_state.state(obs(False), now) == "stopped"
    assert sandbox_state.state(obs(False, has_due_work=True), now) == "queued"
    assert sandbox_state.state(obs(None), now) == "unknown"
    failed = sandbox_state.Observed(False, SessionView(running=False), last_failed=True)
    assert sandbox_state.state(failed, now) == "failed"
    retried = sandbox_state.Observed(True, SessionView(running=True, has_due_work=True), last_failed=True)
    assert sandbox_state.state(retried, now) == "running"  # a newer message is being worked on


def test_tasks_view_lists_scheduled_tasks(owner, site):
    from nanoclaw.tasks import scheduling
    mg = MessagingGroup.create(channel_type="telegram", platform_id="6")
    session = Session.create(id="stask", agent_group=AgentGroup.get(), messaging_group=mg)
    scheduling.schedule(AgentGroup.get(), session, "water the plants", at="2099-01-01T09:00", tz="UTC")
    body = owner.get("/admin/tasks").get_data(as_text=True)
    assert "water the plants" in body and "2099-01-01 09:00" in body
    from nanoclaw.models import ScheduledTask
    task = ScheduledTask.get()
    owner.post(f"/admin/tasks/{task.id}/pause", data={"csrf_token": csrf_of(body)})
    assert ScheduledTask.get().status == "paused"
    owner.post(f"/admin/tasks/{task.id}/cancel", data={"csrf_token": csrf_of(body)})
    assert ScheduledTask.get().status == "cancelled"
    assert AuditLog.select().where(AuditLog.action == "task.cancel", AuditLog.actor == OWNER).exists()


# --- wirings and mounts on the page -----------------------------------------------------------

def test_wiring_create_change_remove(owner):
    token = token_for(owner, "/admin/wirings")
    created = owner.post("/admin/wirings", data={"csrf_token": token, "channel": "telegram", "chat_id": "-100123",
                                                 "agent": "andy", "kind": "group", "engage": "",
                                                 "sender_scope": "all", "ignored": "drop",
                                                 "unknown_senders": "request_approval"}, follow_redirects=True)
    assert "Wired telegram:-100123" in created.get_data(as_text=True)
    w = Wiring.get()
    assert (w.engage_mode, w.messaging_group.kind) == ("mention", "group")  # the kind's default, like the CLI
    changed = owner.post(f"/admin/wirings/{w.id}", data={"csrf_token": token, "kind": "group", "engage": "pattern",
                                                         "pattern": "^andy", "sender_scope": "known",
                                                         "ignored": "accumulate", "unknown_senders": "strict"},
                         follow_redirects=True)
    assert "Updated" in changed.get_data(as_text=True)
    w = Wiring.get()
    assert (w.engage_mode, w.engage_pattern, w.sender_scope, w.ignored_message_policy) == \
        ("pattern", "^andy", "known", "accumulate")
    assert w.messaging_group.unknown_sender_policy == "strict"
    bad = owner.post(f"/admin/wirings/{w.id}", data={"csrf_token": token, "engage": "pattern", "pattern": "(",
                                                     "sender_scope": "all", "ignored": "drop"}, follow_redirects=True)
    assert "not a valid regular expression" in bad.get_data(as_text=True)
    assert Wiring.get().engage_pattern == "^andy"
    owner.post(f"/admin/wirings/{w.id}/remove", data={"csrf_token": token})
    assert Wiring.select().count() == 0
    actions_logged = [a.action for a in AuditLog.select().where(AuditLog.actor == OWNER).order_by(AuditLog.id)]
    assert actions_logged[-3:] == ["wiring.create", "wiring.update", "wiring.delete"]


@pytest.fixture
def allowed(site, tmp_path):
    root = tmp_path / "notes"
    (root / "vault").mkdir(parents=True)
    (root / ".ssh").mkdir()
    site.config["NANOCLAW"].mount_allowlist.write_text(json.dumps(
        {"allowedRoots": [{"path": str(root), "allowReadWrite": True}]}))
    return root


def test_mounts_are_read_only_by_default_and_validated(owner, allowed):
    page = owner.get("/admin/agents/andy").get_data(as_text=True)
    assert 'value="ro" checked' in page and "cannot create, change or delete" in page
    token = csrf_of(page)
    added = owner.post("/admin/agents/andy/mounts", data={"csrf_token": token, "host_path": str(allowed / "vault")},
                       follow_redirects=True)
    assert "(read-only)" in added.get_data(as_text=True)
    assert AgentGroup.get().container_config["mounts"] == [
        {"host_path": str(allowed / "vault"), "name": "vault", "readwrite": False}]  # what `mount add` stores
    rw = owner.post("/admin/agents/andy/mounts", data={"csrf_token": token, "host_path": str(allowed / "vault"),
                                                       "name": "notes", "mode": "rw"}, follow_redirects=True)
    assert "read-write: it can create, change and delete files there" in rw.get_data(as_text=True)
    refused = owner.post("/admin/agents/andy/mounts", data={"csrf_token": token, "host_path": str(allowed / ".ssh")},
                         follow_redirects=True)
    assert "Mount refused" in refused.get_data(as_text=True) and "blocked pattern" in refused.get_data(as_text=True)
    assert [m["name"] for m in AgentGroup.get().container_config["mounts"]] == ["vault", "notes"]
    owner.post("/admin/agents/andy/mounts/vault/remove", data={"csrf_token": token})
    assert [m["name"] for m in AgentGroup.get().container_config["mounts"]] == ["notes"]
    assert AuditLog.select().where(AuditLog.action == "mount.add", AuditLog.actor == OWNER).count() == 2


def last_audit(action):
    entry = AuditLog.select().where(AuditLog.action == action).order_by(AuditLog.id.desc()).get()
    return entry.actor, entry.detail


def test_page_changes_are_audited_with_why_and_a_diff(owner, site, allowed):
    from nanoclaw.tasks import scheduling
    from nanoclaw.models import ScheduledTask
    token = token_for(owner, "/admin/wirings")
    owner.post("/admin/wirings", data={"csrf_token": token, "channel": "telegram", "chat_id": "-100777", "agent": "andy",
                                       "kind": "group", "engage": "", "sender_scope": "all", "ignored": "drop",
                                       "why": "  the   family group  "})
    actor, detail = last_audit("wiring.create")
    assert actor == OWNER and detail["why"] == "the family group"
    assert "+ engage: mention" in detail["diff"] and not any(line.startswith("-") for line in detail["diff"])
    w = Wiring.get()
    owner.post(f"/admin/wirings/{w.id}", data={"csrf_token": token, "kind": "group", "engage": "pattern",
                                               "pattern": "^andy", "sender_scope": "all", "ignored": "drop",
                                               "why": "too chatty"})
    _, detail = last_audit("wiring.update")
    assert detail["why"] == "too chatty"
    assert detail["diff"] == ["- engage: mention", "+ engage: pattern", "+ pattern: ^andy"]  # only what changed
    owner.post(f"/admin/wirings/{w.id}/remove", data={"csrf_token": token})
    _, detail = last_audit("wiring.delete")
    assert detail["why"] is None and "- agent: andy" in detail["diff"] and "- engage: pattern" in detail["diff"]

    owner.post("/admin/agents/andy/mounts", data={"csrf_token": token, "host_path": str(allowed / "vault"),
                                                  "why": "for the reading list"})
    owner.post("/admin/agents/andy/mounts", data={"csrf_token": token, "host_path": str(allowed / "vault"),
                                                  "mode": "rw"})
    _, detail = last_audit("mount.add")
    assert detail["diff"] == [f"- vault: {allowed / 'vault'} -> /workspace/extra/vault (read-only)",
                              f"+ vault: {allowed / 'vault'} -> /workspace/extra/vault (read-write)"]
    owner.post("/admin/agents/andy/mounts/vault/remove", data={"csrf_token": token, "why": "done"})
    _, detail = last_audit("mount.remove")
    assert detail["why"] == "done" and detail["diff"][0].startswith("- vault: ")

    mg = MessagingGroup.create(channel_type="telegram", platform_id="8")
    session = Session.create(id="saudit", agent_group=AgentGroup.get(), messaging_group=mg)
    scheduling.schedule(AgentGroup.get(), session, "water the plants", at="2099-01-01T09:00", tz="UTC")
    task = ScheduledTask.get()
    owner.post(f"/admin/tasks/{task.id}/pause", data={"csrf_token": token, "why": "on holiday"})
    _, detail = last_audit("task.pause")
    assert detail["why"] == "on holiday" and detail["diff"] == ["- status: active", "+ status: paused"]

    page = owner.get("/admin/audit").get_data(as_text=True)  # what the owner reads later
    assert "Why: on holiday" in page and '<span class="add">+ status: paused</span>' in page
    assert "Why: too chatty" in page and '<span class="del">- engage: mention</span>' in page
    with_diff = sum(1 for e in AuditLog.select() if (e.detail or {}).get("diff"))
    assert page.count('<pre class="diff">') == with_diff == 7  # entries without a diff (the login) show none


def test_field_diff_shows_only_changes():
    from nanoclaw.web.changes import clean_why, field_diff
    assert field_diff({"a": 1, "b": 2}, {"a": 1, "b": 3}) == ["- b: 2", "+ b: 3"]
    assert field_diff({}, {"x": "y", "z": None}) == ["+ x: y"]
    assert field_diff({"x": "y"}, {}) == ["- x: y"]
    assert clean_why("  ") is None and clean_why("a\nb") == "a b" and len(clean_why("x" * 900)) == 300


def test_an_agent_admin_sees_only_their_agents(site, cli):
    assert cli("agent", "create", "Bea").exit_code == 0
    assert cli("user", "add", "slack:U1", "--role", "admin", "--agent", "bea").exit_code == 0
    site.test_cli_runner().invoke(args=["nanoclaw", "admin", "set-password", "slack:U1", "--password-stdin"],
                                  input="bea admin password\n")
    client = site.test_client()
    assert login(client, "slack:U1", "bea admin password").status_code == 302
    agents = client.get("/admin/agents").get_data(as_text=True)
    assert "Bea" in agents and "Andy" not in agents
    assert client.get("/admin/agents/andy").status_code == 404
    assert client.get("/chat/andy").status_code == 404
    assert "for owners and admins of every agent" in client.get("/admin/audit").get_data(as_text=True)


# --- the web chat channel (storage and routing; the sandbox round trip is in test_browser.py) ---

def test_web_chat_routes_like_a_platform_and_shows_deliveries(owner, site):
    settings = site.config["NANOCLAW"]
    token = token_for(owner, "/chat/andy")
    response = owner.post("/chat/andy", data={"csrf_token": token, "text": "hello andy"},
                          headers={"Accept": "application/json"})
    assert response.status_code == 200 and response.json["message"]["text"] == "hello andy"
    chat_id = webchannel.chat_id_for(OWNER, "andy")
    mg = MessagingGroup.get(MessagingGroup.channel_type == "web", MessagingGroup.platform_id == chat_id)
    assert Wiring.get(Wiring.messaging_group == mg).agent_group.folder == "andy"  # auto-wired
    session = Session.get(Session.messaging_group == mg)
    from nanoclaw.sessions import store
    path = store.session_path(settings.sessions_dir, "andy", session.id)
    conn = store.schema.connect(path / "host" / store.schema.INBOUND, readonly=True)
    row = conn.execute("SELECT content, channel_type, platform_id FROM messages_in").fetchone()
    conn.close()
    assert json.loads(row["content"])["text"] == "hello andy" and tuple(row)[1:] == ("web", chat_id)

    adapter = get_adapter("web", settings)
    target = Target("web", chat_id)
    ref = adapter.send_text(target, "hi, I am Andy")
    first = owner.get("/chat/andy/messages.json?after=0", headers={"Accept": "application/json"}).json
    assert [m["text"] for m in first["messages"]] == ["hello andy", "hi, I am Andy"]
    adapter.edit_text(target, ref, "hi, I am Andy (edited)")
    adapter.react(target, ref, "👍")
    later = owner.get(f"/chat/andy/messages.json?after={first['messages'][-1]['id']}&since={first['cursor']}").json
    by_id = {m["id"]: m for m in later["messages"]}  # may repeat recent rows (the cursor overlaps); ids dedup
    edited = by_id[webchannel.row_id_of(ref)]
    assert (edited["text"], edited["reactions"]) == ("hi, I am Andy (edited)", ["👍"])
    # another user's chat with the same agent is not visible here
    adapter.send_text(Target("web", webchannel.chat_id_for("slack:U9", "andy")), "not yours")
    assert "not yours" not in owner.get("/chat/andy").get_data(as_text=True)


def test_web_chat_cards_and_files(owner, site, tmp_path, decisions):
    settings = site.config["NANOCLAW"]
    chat_id = webchannel.chat_id_for(OWNER, "andy")
    adapter = get_adapter("web", settings)
    adapter.send_card(Target("web", chat_id), Card("Unknown sender", "Bo wants in", (("Allow", "tst-1:allow"),)))
    page = owner.get("/chat/andy").get_data(as_text=True)
    assert "Bo wants in" in page and 'value="tst-1:allow"' in page
    clicked = owner.post("/chat/andy/action", data={"csrf_token": csrf_of(page), "action_id": "tst-1:allow"},
                         headers={"Accept": "application/json"})
    assert clicked.json["text"] == f"allow (decided by {OWNER})"
    assert decisions["calls"] == [("web", OWNER, "1", "allow")]

    report = tmp_path / "report.html"
    report.write_text("<script>alert(1)</script>")
    ref = adapter.send_file(Target("web", chat_id), report, "the report")
    report.write_text("changed after delivery")
    got = owner.get(f"/chat/andy/file/{webchannel.row_id_of(ref)}")
    assert got.status_code == 200 and got.data == b"<script>alert(1)</script>"
    assert got.headers["Content-Disposition"].startswith("attachment")  # never rendered as this site
    assert owner.get("/chat/andy/file/9999").status_code == 404


def test_empty_chat_message_is_refused(owner):
    response = owner.post("/chat/andy", data={"csrf_token": token_for(owner, "/chat/andy"), "text": "  "},
                          headers={"Accept": "application/json"})
    assert response.status_code == 400 and WebMessage.select().count() == 0


# --- the real approval and question capabilities on the page ----------------------------------

def test_a_sender_approval_decided_on_the_page_matches_the_chat_card(owner, site, cli):
    from nanoclaw.inbound import router
    from nanoclaw.channels.events import InboundEvent
    from nanoclaw.models import PendingSenderApproval, UserDm
    from nanoclaw.sessions import store
    settings = site.config["NANOCLAW"]
    assert cli("wire", "telegram", "777", "andy").exit_code == 0  # a DM whose strangers need approval
    UserDm.create(user=OWNER, channel_type="web", platform_id=webchannel.chat_id_for(OWNER, "andy"))
    router.route(InboundEvent(channel="telegram", event_id="u1", chat_id="777", kind="dm", sender_id="777",
                              sender_name="Bo", text="Hi, lunch?", timestamp="2026-01-01T10:00:00.000Z"), settings,
                 NO_WAKE)
    row = PendingSenderApproval.get()
    chat = owner.get("/chat/andy").get_data(as_text=True)
    assert f'value="nsa-{row.token}:allow"' in chat  # the card reached the owner's DM (here: the web chat)
    page = owner.get("/admin").get_data(as_text=True)
    assert "Bo (telegram:777) wants to talk to Andy" in page and "Hi, lunch?" in page
    assert f'value="nsa-{row.token}:allow"' in page  # the same action id as the card

    decided = owner.post("/admin/decide", data={"csrf_token": csrf_of(page), "action_id": f"nsa-{row.token}:allow"},
                         follow_redirects=True).get_data(as_text=True)
    assert "Allowed: Bo can talk to Andy now." in decided and "wants to talk to Andy" not in decided
    chat = owner.get("/chat/andy").get_data(as_text=True)
    assert "Allowed by Olga" in chat and f'value="nsa-{row.token}:deny"' not in chat  # the card shows who decided
    late = owner.post("/chat/andy/action", data={"csrf_token": csrf_of(chat), "action_id": f"nsa-{row.token}:deny"},
                      headers={"Accept": "application/json"})
    assert late.json["text"] == "Already decided: allowed by Olga."  # first answer won
    session = Session.get(Session.messaging_group == MessagingGroup.get(MessagingGroup.platform_id == "777"))
    conn = store.schema.connect(store.session_path(settings.sessions_dir, "andy", session.id) / "host" / "inbound.db",
                                readonly=True)
    texts = [json.loads(r[0])["text"] for r in conn.execute("SELECT content FROM messages_in")]
    conn.close()
    assert texts == ["Hi, lunch?"]  # the stored message, replayed to the agent


def test_an_open_agent_question_is_answered_on_the_page(owner, site):
    from nanoclaw.models import PendingQuestion
    from nanoclaw.sessions import store
    settings = site.config["NANOCLAW"]
    mg = MessagingGroup.create(channel_type="telegram", platform_id="42", kind="dm")
    session = Session.create(id="sq", agent_group=AgentGroup.get(), messaging_group=mg)
    path = store.session_path(settings.sessions_dir, "andy", "sq")
    store.prepare(path, Target("telegram", "42"))
    pq = PendingQuestion.create(session=session, question_id="q1", title="Dinner", question="Which day?",
                                options=["Friday", "Saturday"], channel_type="telegram", platform_id="42",
                                expires_at=utcnow() + timedelta(minutes=5))
    PendingQuestion.create(session=session, question_id="q0", question="Expired?", options=["yes"],
                           channel_type="telegram", platform_id="42", expires_at=utcnow() - timedelta(seconds=1))
    page = owner.get("/admin").get_data(as_text=True)
    assert "Which day?" in page and f'value="ncq-{pq.token}:1"' in page and "Expired?" not in page
    answered = owner.post("/admin/decide", data={"csrf_token": csrf_of(page), "action_id": f"ncq-{pq.token}:1"},
                          follow_redirects=True).get_data(as_text=True)
    assert "You chose: Saturday" in answered and "Which day?" not in answered
    conn = store.schema.connect(path / "host" / "inbound.db", readonly=True)
    kinds = [(r[0], json.loads(r[1])["answer"]) for r in conn.execute("SELECT kind, content FROM messages_in")]
    conn.close()
    assert kinds == [("answer", "Saturday")]
