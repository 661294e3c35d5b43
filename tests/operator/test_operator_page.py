"""The page's operator forms through Flask's test client (no sandbox; tests/web/test_browser_operator.py
runs them in a real browser against a real one):

- "Modify" on a pending proposal: prefilled per kind, checked like the tool (a refusal changes
  nothing and is shown next to the form with what was typed), audited with who/why/changes/diff,
  the chat card replaced, the agent told what was changed when it is approved; refused once
  decided; refused without a CSRF token.
- "Create a new agent" for an unknown chat: named on the page, wired, the stored message replayed,
  audited like the chat flow; first answer wins against the chat card.
- The login cookie: HttpOnly and SameSite=Lax always, Secure when NANOCLAW_PUBLIC_URL is https.
"""
from __future__ import annotations

import json
import re

import pytest

from nanoclaw.sessions.wake import NO_WAKE
from nanoclaw.config import Settings, SettingsError
from nanoclaw.outbound.delivery import deliver_session
from nanoclaw.models import AgentGroup, AuditLog, PendingChannelApproval, PendingProposal, Session, Wiring
from nanoclaw.sessions import session_schema as schema
from nanoclaw.sessions.store import Target
from tests.tg_flow import Telegram, buttons, cards, click, edits, message, person, post, telegram_app

from agent_runner.store import SessionStore  # noqa: E402  (container/ is on sys.path via session_schema)

OWNER, BOB = person(111, "Olivia"), person(444, "Bob")
PASSWORD = "correct horse battery"
SETUP = (("agent", "create", "Andy"), ("user", "add", "telegram:111", "--role", "owner", "--name", "Olivia"),
         ("wire", "telegram", "111", "andy"))


@pytest.fixture
def tg():
    with Telegram() as server:
        yield server


@pytest.fixture
def app(make_settings, db_url, tg):
    with telegram_app(make_settings, db_url, tg, *SETUP) as app:
        result = app.test_cli_runner().invoke(args=["nanoclaw", "admin", "set-password", "telegram:111",
                                                    "--password-stdin"], input=PASSWORD + "\n")
        assert result.exit_code == 0, result.output
        yield app


def csrf_of(page: str) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)


@pytest.fixture
def owner(app):
    client = app.test_client()
    token = csrf_of(client.get("/login").get_data(as_text=True))
    assert client.post("/login", data={"csrf_token": token, "user_id": "telegram:111",
                                       "password": PASSWORD}).status_code == 302
    return client


def page_of(client) -> str:
    return client.get("/admin").get_data(as_text=True)


def session_path(app):
    post(app, message(111, OWNER, "hello"))
    session = Session.select().order_by(Session.created_at.desc()).first()
    return app.config["NANOCLAW"].sessions_dir / "andy" / session.id


def propose(app, path, kind, payload, reason="", ref="r1"):
    """What the MCP tool writes in the sandbox; the host's delivery takes it from there."""
    agent = SessionStore.of_session(path)
    agent.write_out({"op": "proposal", "ref": ref, "kind": kind, "payload": payload, "reason": reason},
                    Target("telegram", "111"), kind="system")
    agent.close()
    deliver_session(path, app.config["NANOCLAW"])
    return PendingProposal.get(PendingProposal.ref == ref)


def system_texts(path) -> list[str]:
    conn = schema.connect(path / "host" / schema.INBOUND, readonly=True)
    try:
        rows = conn.execute("SELECT content FROM messages_in WHERE kind = 'system' ORDER BY seq").fetchall()
    finally:
        conn.close()
    return [json.loads(r["content"])["text"] for r in rows]


def modify(client, p, **fields):
    data = {"csrf_token": csrf_of(page_of(client)), "form": "npr.modify", "ident": p.token, **fields}
    return client.post("/admin/form", data=data)


def form_of(page: str, name: str, ident) -> str:
    """The HTML of one item form (from its <details> to the end of it)."""
    found = re.search(rf'name="form" value="{re.escape(name)}">\s*<input type="hidden" name="ident" value="{ident}">',
                      page)
    assert found, f"no {name} form for {ident}"
    start = page.rindex("<details", 0, found.start())
    return page[start:page.index("</details>", start)]


def input_value(form: str, name: str) -> str:
    m = re.search(rf'name="{name}" value="([^"]*)"', form)
    if m:
        return m.group(1)
    return re.search(rf'name="{name}"[^>]*>([^<]*)</textarea>', form).group(1)


# --- modify --------------------------------------------------------------------------------------

def test_each_kind_gets_a_form_prefilled_with_its_values_and_no_secret_value(app, owner, monkeypatch):
    monkeypatch.setenv("REPORT_TOKEN", "rpt-secret-value-0123456789")
    path = session_path(app)
    egress = propose(app, path, "egress", {"host": "api.example.com"})
    route = propose(app, path, "credential_route", {"match": "/reports/", "upstream": "https://reports.example.com/v2",
                                                    "secret": "REPORT_TOKEN"}, ref="r2")
    pkgs = propose(app, path, "install_packages", {"apt": ["jq", "ripgrep"], "npm": ["@scope/tool"]},
                   reason="to search logs", ref="r3")
    mcp = propose(app, path, "mcp_server", {"name": "fetch", "command": "python3", "args": ["-m", "fetcher", "a b"],
                                            "env": ["TZ", "LANG"]}, ref="r4")
    page = page_of(owner)
    assert "rpt-secret-value" not in page
    f = form_of(page, "npr.modify", egress.token)
    assert "Modify before deciding" in f and input_value(f, "host") == "api.example.com"
    f = form_of(page, "npr.modify", route.token)
    assert (input_value(f, "match"), input_value(f, "upstream"), input_value(f, "secret")) == (
        "/reports/", "https://reports.example.com/v2", "REPORT_TOKEN")
    f = form_of(page, "npr.modify", pkgs.token)
    assert (input_value(f, "apt"), input_value(f, "npm"), input_value(f, "reason")) == (
        "jq ripgrep", "@scope/tool", "to search logs")
    f = form_of(page, "npr.modify", mcp.token)
    assert (input_value(f, "name"), input_value(f, "command"), input_value(f, "args"), input_value(f, "env")) == (
        "fetch", "python3", "-m\nfetcher\na b", "LANG TZ")
    assert all(f"<textarea id=\"f-npr-modify-{p.token}-why\"" in page for p in (egress, route, pkgs, mcp))


def test_a_valid_change_is_saved_audited_and_applied_and_the_agent_learns_it(app, owner, tg):
    path = session_path(app)
    p = propose(app, path, "egress", {"host": "data.example.org"}, reason="fetch the data")
    response = modify(owner, p, host="API.example.org", why="only the API host is needed")
    assert response.status_code == 302
    page = page_of(owner)
    assert "Changed (host: data.example.org → api.example.org). It now reads: allow HTTPS to api.example.org." in page
    assert "+ api.example.org" in page and "+ data.example.org" not in page  # the diff is recomputed
    assert "Changed on the page: host: data.example.org → api.example.org (why: only the API host is needed)" in page
    assert input_value(form_of(page, "npr.modify", p.token), "host") == "api.example.org"
    entry = AuditLog.get(AuditLog.action == "proposal.modify")
    assert entry.actor == "telegram:111" and entry.target == f"npr-{p.token}" and entry.at is not None
    assert entry.detail["why"] == "only the API host is needed"
    assert entry.detail["changes"] == ["host: data.example.org → api.example.org"]
    assert entry.detail["diff"] == ["+ api.example.org"]

    decided = owner.post("/admin/decide", data={"csrf_token": csrf_of(page), "action_id": f"npr-{p.token}:approve"},
                         follow_redirects=True)
    assert "Approved: allow HTTPS to api.example.org." in decided.get_data(as_text=True)
    allow = json.loads((app.config["NANOCLAW"].data_dir / "policy" / "andy" / "egress.json").read_text())["allow"]
    assert allow == ["api.example.org"]
    told = system_texts(path)[-1]
    assert told.startswith("The owner approved your proposal id=r1 (allow HTTPS to api.example.org) after "
                           "changing it: host: data.example.org → api.example.org (why: only the API host is "
                           "needed). HTTPS to api.example.org is now allowed")
    approve = AuditLog.get(AuditLog.action == "proposal.approve")
    assert approve.detail["changed"].startswith("host: data.example.org → api.example.org")
    assert edits(tg)[-1]["text"].startswith("✅ Approved by Olivia: allow HTTPS to api.example.org")


def test_an_invalid_change_is_shown_next_to_the_form_and_changes_nothing(app, owner, tg):
    path = session_path(app)
    p = propose(app, path, "egress", {"host": "data.example.org"})
    before = AuditLog.select().count()
    response = modify(owner, p, host="https://evil.example/x")
    assert response.status_code == 422
    page = response.get_data(as_text=True)
    form = form_of(page, "npr.modify", p.token)
    assert form.startswith("<details class=\"item-form\" open>")
    assert "Not changed: &#39;https://evil.example/x&#39;: give a host name like api.example.com" in form
    assert input_value(form, "host") == "https://evil.example/x"  # what was typed, to correct it
    assert PendingProposal.get_by_id(p.id).payload == {"host": "data.example.org"}
    assert AuditLog.select().count() == before and len(cards(tg)) == 1
    same = modify(owner, p, host="data.example.org")
    assert same.status_code == 422 and "these are the proposal&#39;s current values" in same.get_data(as_text=True)


def test_a_decided_proposal_cannot_be_modified(app, owner, tg):
    path = session_path(app)
    p = propose(app, path, "egress", {"host": "data.example.org"})
    token = csrf_of(page_of(owner))
    [card] = cards(tg)
    post(app, click(buttons(card)["❌ Reject"], OWNER, card))  # the chat card answers first
    response = owner.post("/admin/form", data={"csrf_token": token, "form": "npr.modify", "ident": p.token,
                                               "host": "api.example.org"})
    assert response.status_code == 422
    assert "Already rejected by Olivia. It can no longer be changed." in response.get_data(as_text=True)
    assert PendingProposal.get_by_id(p.id).payload == {"host": "data.example.org"}
    assert not AuditLog.select().where(AuditLog.action == "proposal.modify").exists()


# --- reject with a reason ------------------------------------------------------------------------
def test_reject_with_a_reason_on_the_page_tells_the_agent_and_the_card(app, owner, tg):
    path = session_path(app)
    p = propose(app, path, "egress", {"host": "pastebin.example.com"}, reason="share the log")
    page = page_of(owner)
    form = form_of(page, "npr.reject", p.token)
    assert "Reason (the agent is told)" in form and "required" in form
    assert 'action="/admin/reply"' not in page  # no free reply box where "ok" would approve
    empty = owner.post("/admin/form", data={"csrf_token": csrf_of(page), "form": "npr.reject", "ident": p.token,
                                            "reason": "   "})
    assert empty.status_code == 422 and "Say why it is rejected" in empty.get_data(as_text=True)
    assert PendingProposal.get_by_id(p.id).state == "pending"
    done = owner.post("/admin/form", data={"csrf_token": csrf_of(page), "form": "npr.reject", "ident": p.token,
                                           "reason": "ok, but use the internal paste service"}, follow_redirects=True)
    assert "Rejected: allow HTTPS to pastebin.example.com." in done.get_data(as_text=True)
    assert PendingProposal.get_by_id(p.id).state == "rejected"  # "ok" in a reason does not approve
    assert system_texts(path)[-1] == ("The owner rejected your proposal id=r1 (allow HTTPS to pastebin.example.com): "
                                      "ok, but use the internal paste service Nothing was changed.")
    assert edits(tg)[-1]["text"].startswith("❌ Rejected by Olivia")
    assert "Reason: ok, but use the internal paste service" in edits(tg)[-1]["text"]
    assert AuditLog.get(AuditLog.action == "proposal.reject").detail["note"] == "ok, but use the internal paste service"
    again = owner.post("/admin/form", data={"csrf_token": csrf_of(page), "form": "npr.reject", "ident": p.token,
                                            "reason": "twice"})
    assert again.status_code == 422 and "Already rejected by Olivia" in again.get_data(as_text=True)


def test_modify_without_a_csrf_token_is_refused(app, owner):
    p = propose(app, session_path(app), "egress", {"host": "data.example.org"})
    response = owner.post("/admin/form", data={"form": "npr.modify", "ident": p.token, "host": "api.example.org"})
    assert response.status_code == 400 and "security token" in response.get_data(as_text=True)
    assert PendingProposal.get_by_id(p.id).payload == {"host": "data.example.org"}
    assert app.test_client().post("/admin/form", data={"form": "npr.modify", "ident": p.token}).status_code == 400


def test_someone_not_allowed_to_decide_cannot_modify(app, tg):
    from nanoclaw.operator import proposals
    p = propose(app, session_path(app), "egress", {"host": "data.example.org"})
    from nanoclaw.approvals.actions import NotAllowed
    with pytest.raises(NotAllowed, match="^Only Olivia or an admin can change this.$"):
        proposals.modify(p.token, {"host": "x.example.org"}, "telegram:666", app.config["NANOCLAW"])


def test_packages_mcp_and_route_changes_keep_the_tools_rules(app, owner, monkeypatch):
    monkeypatch.setenv("NEW_REPORT_TOKEN", "new-secret-value-987654321")
    path = session_path(app)
    pkgs = propose(app, path, "install_packages", {"apt": ["jq"], "npm": []}, reason="json", ref="r1")
    mcp = propose(app, path, "mcp_server", {"name": "fetch", "command": "python3", "args": [], "env": []}, ref="r2")
    route = propose(app, path, "credential_route", {"match": "/reports/", "upstream": "https://reports.example.com",
                                                    "secret": "REPORT_TOKEN"}, ref="r3")
    too_many = " ".join(f"pkg{i}" for i in range(21))
    refused = modify(owner, pkgs, apt=too_many, npm="", reason="json")
    assert refused.status_code == 422 and "at most 20 packages" in refused.get_data(as_text=True)
    assert modify(owner, pkgs, apt="jq, curl", npm="left-pad", reason="json and downloads").status_code == 302
    assert PendingProposal.get_by_id(pkgs.id).payload == {"apt": ["curl", "jq"], "npm": ["left-pad"], "pip": []}
    assert PendingProposal.get_by_id(pkgs.id).reason == "json and downloads"
    assert modify(owner, mcp, name="fetch", command="python3", args="-m\r\nfetcher\r\n\r\n--root /data",
                  env="TZ").status_code == 302
    assert PendingProposal.get_by_id(mcp.id).payload == {"name": "fetch", "command": "python3",
                                                         "args": ["-m", "fetcher", "--root /data"], "env": ["TZ"]}
    reserved = modify(owner, route, match="/reports/", upstream="https://reports.example.com",
                      secret="ANTHROPIC_API_KEY")
    assert reserved.status_code == 422 and "reserved for the host" in reserved.get_data(as_text=True)
    assert modify(owner, route, match="/reports/", upstream="https://reports.example.com",
                  secret="NEW_REPORT_TOKEN").status_code == 302
    page = page_of(owner)
    assert "+ /reports/ -&gt; https://reports.example.com with Authorization: Bearer $NEW_REPORT_TOKEN" in page
    audit_text = json.dumps([a.detail for a in AuditLog.select()], ensure_ascii=False)
    assert "new-secret-value" not in page and "new-secret-value" not in audit_text
    assert "secret name: REPORT_TOKEN → NEW_REPORT_TOKEN" in audit_text


# --- an unknown chat: a new agent named on the page ------------------------------------------------

def unknown_chat(app, tg, chat=-100888, text="help with research"):
    post(app, message(chat, BOB, text, title="Lab", mention=True))
    return PendingChannelApproval.get()


def create(client, row, **fields):
    data = {"csrf_token": csrf_of(page_of(client)), "form": "nca.create", "ident": row.token, **fields}
    return client.post("/admin/form", data=data)


def inbound_texts(app, folder):
    out = []
    for session in Session.select().join(AgentGroup).where(AgentGroup.folder == folder):
        conn = schema.connect(app.config["NANOCLAW"].sessions_dir / folder / session.id / "host" / schema.INBOUND,
                              readonly=True)
        try:
            out += [json.loads(r["content"])["text"] for r in conn.execute("SELECT content FROM messages_in")]
        finally:
            conn.close()
    return out


def test_create_a_new_agent_for_an_unknown_chat_on_the_page(app, owner, tg):
    app.test_cli_runner().invoke(args=["nanoclaw", "agent", "create", "Bea"])  # two agents: the card asks
    row = unknown_chat(app, tg)
    page = page_of(owner)
    form = form_of(page, "nca.create", row.token)
    assert "Create a new agent for this chat" in form and 'data-folder-preview="/admin/folder-preview.json"' in form
    assert f"nca-{row.token}:create" not in page  # the page names it here instead of a DM round trip
    assert f"nca-{row.token}:ignore" in page and f"nca-{row.token}:bea" in page

    preview = owner.get("/admin/folder-preview.json?name=Andy", headers={"Accept": "application/json"})
    assert preview.json == {"folder": "andy-2"}  # the rule that creates it: taken folders get a suffix
    assert owner.get("/admin/folder-preview.json?name=x&folder=My Lab!").json == {"folder": "my-lab"}

    refused = create(owner, row, name="!!!", folder="")
    assert refused.status_code == 422
    assert "has no letters or digits to make a folder from" in form_of(refused.get_data(as_text=True),
                                                                       "nca.create", row.token)
    assert PendingChannelApproval.select().count() == 1

    response = create(owner, row, name="Lab  Helper", folder="My Lab!")
    assert response.status_code == 302
    done = page_of(owner)
    assert "Created the agent Lab Helper (folder my-lab); it now answers in the Telegram group &#39;Lab&#39;." in done
    agent = AgentGroup.get(AgentGroup.folder == "my-lab")
    assert agent.name == "Lab Helper"
    assert Wiring.get(Wiring.agent_group == agent).messaging_group.platform_id == "-100888"
    assert inbound_texts(app, "my-lab") == ["@andy_test_bot help with research"]  # the stored message, replayed
    assert app.woken == ["my-lab"]
    assert edits(tg)[-1]["text"] == "➕ Created by Olivia: Lab Helper now answers in the Telegram group 'Lab'."
    actions = {a.action: a for a in AuditLog.select().where(AuditLog.actor == "telegram:111")}
    assert actions["approval.channel.create"].detail == {"chat": "telegram:-100888", "agent": "my-lab", "via": "web"}
    assert {"agent.create", "wiring.create", "web.form"} <= set(actions)

    [card] = cards(tg)
    post(app, click(buttons(card)["Ignore"], OWNER, card))  # the chat card is too late now
    assert "Already decided: a new agent was created by Olivia." in json.dumps(tg.calls("answerCallbackQuery"))
    again = create(owner, row, name="Second", folder="")
    assert again.status_code == 422
    assert "Already decided: a new agent was created by Olivia." in again.get_data(as_text=True)


def test_the_page_can_name_the_agent_after_create_new_was_clicked_in_chat(app, owner, tg):
    app.test_cli_runner().invoke(args=["nanoclaw", "agent", "create", "Bea"])
    row = unknown_chat(app, tg)
    [card] = cards(tg)
    post(app, click(buttons(card)["➕ Create new"], OWNER, card))  # the chat flow: waits for a DM reply
    assert PendingChannelApproval.get_by_id(row.id).state == "naming"
    assert "or name it here" in page_of(owner)
    assert create(owner, row, name="Research", folder="").status_code == 302
    assert inbound_texts(app, "research") == ["@andy_test_bot help with research"]
    post(app, message(111, OWNER, "Another Name"))  # the DM reply is an ordinary message again
    assert not AgentGroup.select().where(AgentGroup.name == "Another Name").exists()


def test_only_someone_allowed_to_decide_may_create(app, tg):
    from nanoclaw.approvals.chats import create_from_page
    app.test_cli_runner().invoke(args=["nanoclaw", "agent", "create", "Bea"])
    row = unknown_chat(app, tg)
    from nanoclaw.approvals.actions import NotAllowed
    with pytest.raises(NotAllowed, match="^Only Olivia or an admin can decide this.$"):
        create_from_page("telegram:666", row.token, {"name": "Mine"}, app.config["NANOCLAW"], NO_WAKE)
    assert create_from_page("telegram:111", row.token, {"name": "  "}, app.config["NANOCLAW"], NO_WAKE).message == \
        "Give the new agent a name."
    assert PendingChannelApproval.select().count() == 1


# --- the login cookie ------------------------------------------------------------------------------

def login_cookie(app) -> str:
    client = app.test_client()
    token = csrf_of(client.get("/login").get_data(as_text=True))
    response = client.post("/login", data={"csrf_token": token, "user_id": "telegram:111", "password": PASSWORD})
    assert response.status_code == 302
    [cookie] = [c for c in response.headers.getlist("Set-Cookie") if c.startswith("nanoclaw_session=")]
    return cookie


@pytest.mark.parametrize("public_url, secure", [(None, False), ("http://10.0.0.5:8080", False),
                                                ("https://claw.example.net/", True)])
def test_the_login_cookie_is_secure_when_the_page_is_served_over_https(make_settings, sqlite_url, tg, public_url,
                                                                        secure):
    env = {"NANOCLAW_PUBLIC_URL": public_url} if public_url else {}
    with telegram_app(make_settings, sqlite_url, tg, *SETUP, **env) as app:
        app.test_cli_runner().invoke(args=["nanoclaw", "admin", "set-password", "telegram:111", "--password-stdin"],
                                     input=PASSWORD + "\n")
        flags = [part.strip().lower() for part in login_cookie(app).split(";")]
        assert "httponly" in flags and "samesite=lax" in flags
        assert ("secure" in flags) is secure
        link = app.test_cli_runner().invoke(args=["nanoclaw", "admin", "login-link", "telegram:111"])
        base = (public_url or "http://127.0.0.1:8080").rstrip("/")
        assert link.output.startswith(f"{base}/login/link/"), link.output


def test_a_public_url_that_is_not_a_url_stops_start_up(tmp_path):
    with pytest.raises(SettingsError, match="NANOCLAW_PUBLIC_URL"):
        Settings.load(environ={"NANOCLAW_DATA_DIR": str(tmp_path), "NANOCLAW_PUBLIC_URL": "claw.example.net"},
                      dotenv_path=tmp_path / "none.env")


def test_a_help_request_leads_to_the_agents_reach_section_and_a_change_there_works(app, owner):
    """Answering "can you let me reach X?": from the request on Waiting on you to the agent's page,
    where allowing the host is one form (audited with its why)."""
    from nanoclaw.models import HelpRequest
    from nanoclaw.proxy.policy_files import EGRESS_FILE, group_file, policy_root, read_policy_file
    path = session_path(app)
    HelpRequest.create(session=Session.get(), agent_group=AgentGroup.get(AgentGroup.folder == "andy"), ref="h1",
                       text="Can I reach api.github.com?", approver_user_id="telegram:111")
    page = page_of(owner)
    link = re.search(r'<a href="([^"]+)">Allow a host or a credential\s+route for andy</a>', page)
    assert link and link.group(1) == "/admin/agents/andy#reach"
    agent_page = owner.get("/admin/agents/andy").get_data(as_text=True)
    assert 'id="reach"' in agent_page
    answer = owner.post("/admin/agents/andy/egress", data={"csrf_token": csrf_of(agent_page), "host": "api.github.com",
                                                          "why": "asked in h1"})
    assert answer.status_code == 302 and answer.headers["Location"].endswith("#reach")
    root = policy_root(app.config["NANOCLAW"])
    assert read_policy_file(group_file(root, "andy", EGRESS_FILE)).as_list() == ["api.github.com"]
    assert AuditLog.get(AuditLog.action == "egress.add").detail["why"] == "asked in h1"
    assert path.exists()
