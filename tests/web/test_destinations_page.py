"""Destinations on the agent's page: the owner adds and removes named places (with a why), the
agent's sessions learn them at once, and an admin of another agent gets 403 with nothing changed."""
from __future__ import annotations

from nanoclaw.models import AgentDestination, AgentGroup, AuditLog, MessagingGroup, Session
from nanoclaw.sessions import session_schema as schema
from nanoclaw.sessions import store
from nanoclaw.sessions.store import Target
from tests.web.test_admin import csrf_of, login, owner, site  # noqa: F401  (fixtures)

BEA_ADMIN, BEA_PASSWORD = "slack:U1", "bea admin password"


def session_destinations(app, folder: str) -> dict:
    session = Session.select().join(AgentGroup).where(AgentGroup.folder == folder).get()
    path = store.session_path(app.config["NANOCLAW"].sessions_dir, folder, session.id)
    conn = schema.connect(store.inbound_db(path), readonly=True)
    try:
        return {r[0]: (r[1], r[2], r[3]) for r in conn.execute(
            "SELECT name, channel_type, platform_id, thread_id FROM destinations")}
    finally:
        conn.close()


def a_session(app, folder: str) -> None:
    agent = AgentGroup.get(AgentGroup.folder == folder)
    mg = MessagingGroup.get_or_create(channel_type="telegram", platform_id="42", defaults={"kind": "dm"})[0]
    session = Session.create(id=f"s-{folder}", agent_group=agent, messaging_group=mg)
    store.prepare(store.session_path(app.config["NANOCLAW"].sessions_dir, folder, session.id), Target("telegram", "42"))


def post(client, path, **form):
    token = csrf_of(client.get("/admin/agents/andy").get_data(as_text=True))
    return client.post(path, data={"csrf_token": token, **form})


def test_the_owner_adds_and_removes_a_destination_and_the_sessions_follow(site, owner, cli):  # noqa: F811
    assert cli("wire", "telegram", "42", "andy").exit_code == 0
    a_session(site, "andy")
    page = owner.get("/admin/agents/andy").get_data(as_text=True)
    assert 'id="destinations"' in page and "telegram-42" in page and "wired chat" in page

    resp = post(owner, "/admin/agents/andy/destinations", name="family", channel="telegram", chat_id="-1001234567",
                thread="", why="the weekly summary goes there")
    assert resp.status_code == 302 and resp.headers["Location"].endswith("/admin/agents/andy#destinations")
    page = owner.get("/admin/agents/andy").get_data(as_text=True)
    assert "may send to “family” now (1 conversation(s) updated)" in page
    assert "<code>family</code> → telegram:-1001234567" in page
    assert session_destinations(site, "andy")["family"] == ("telegram", "-1001234567", None)
    entry = AuditLog.select().where(AuditLog.action == "destination.add").get()
    assert entry.actor == "telegram:42" and entry.detail["why"] == "the weekly summary goes there"

    resp = post(owner, "/admin/agents/andy/destinations/family/remove", why="they left the group")
    assert resp.status_code == 302
    assert "family" not in session_destinations(site, "andy")
    assert not AgentDestination.select().exists()
    assert AuditLog.select().where(AuditLog.action == "destination.remove").get().detail["why"] == "they left the group"


def test_a_bad_destination_is_refused_readably_and_nothing_stored(site, owner):  # noqa: F811
    for form, says in ((dict(name="Family!", channel="telegram", chat_id="1"), "is not a destination name"),
                       (dict(name="family", channel="tele gram", chat_id="1"), "is not a channel name"),
                       (dict(name="family", channel="telegram", chat_id="  "), "a chat id is needed")):
        post(owner, "/admin/agents/andy/destinations", **form)
        assert says in owner.get("/admin/agents/andy").get_data(as_text=True)
    assert not AgentDestination.select().exists()
    post(owner, "/admin/agents/andy/destinations/nothing/remove")
    assert "has no added destination" in owner.get("/admin/agents/andy").get_data(as_text=True)


def test_an_admin_of_another_agent_cannot_add_or_remove_andys_destinations(site, owner, cli):  # noqa: F811
    for args in (("agent", "create", "Bea"), ("user", "add", BEA_ADMIN, "--role", "admin", "--agent", "bea"),
                 ("destination", "add", "andy", "family", "telegram", "-100123"),
                 ("wire", "slack", "C123", "bea")):
        assert cli(*args).exit_code == 0, args
    site.test_cli_runner().invoke(args=["nanoclaw", "admin", "set-password", BEA_ADMIN, "--password-stdin"],
                                  input=BEA_PASSWORD + "\n")
    bea = site.test_client()
    assert login(bea, BEA_ADMIN, BEA_PASSWORD).status_code == 302
    token = csrf_of(bea.get("/admin/agents/bea").get_data(as_text=True))
    added = bea.post("/admin/agents/andy/destinations", data={"csrf_token": token, "name": "evil", "channel": "telegram",
                                                               "chat_id": "-1009"})
    removed = bea.post("/admin/agents/andy/destinations/family/remove", data={"csrf_token": token})
    assert (added.status_code, removed.status_code) == (403, 403)
    assert [(d.name, d.platform_id) for d in AgentDestination.select()] == [("family", "-100123")]
    ok = bea.post("/admin/agents/bea/destinations", data={"csrf_token": token, "name": "lab", "channel": "slack",
                                                           "chat_id": "C123"})  # a chat where Bea is wired
    assert ok.status_code == 302 and AgentDestination.select().where(AgentDestination.name == "lab").exists()


def test_the_agents_page_shows_its_approved_packages_and_mcp_servers(site, owner):  # noqa: F811
    AgentGroup.update(container_config={"packages": {"apt": ["jq"], "npm": [], "pip": ["requests"]},
                                        "mcp_servers": {"glossary": {"command": "python3", "args": ["glossary.py"]}}}
                      ).where(AgentGroup.folder == "andy").execute()
    page = owner.get("/admin/agents/andy").get_data(as_text=True)
    section = page[page.index('id="capabilities"'):page.index('id="destinations"')]
    assert "<code>jq</code>" in section and "<code>requests</code>" in section
    assert "<code>glossary</code>" in section and "python3 glossary.py" in section


def test_the_owner_removes_an_mcp_server_with_a_why(site, owner):  # noqa: F811
    from nanoclaw.models import AuditLog
    AgentGroup.update(container_config={"mcp_servers": {"glossary": {"name": "glossary", "command": "python3",
                                                                      "args": ["glossary.py"], "env": []}}}
                      ).where(AgentGroup.folder == "andy").execute()
    page = owner.get("/admin/agents/andy").get_data(as_text=True)
    resp = owner.post("/admin/agents/andy/mcp/glossary/remove", data={"csrf_token": csrf_of(page),
                                                                     "why": "it leaked drafts"})
    assert resp.status_code == 302
    assert AgentGroup.get(AgentGroup.folder == "andy").container_config["mcp_servers"] == {}
    entry = AuditLog.get(AuditLog.action == "mcp.remove")
    assert entry.detail["why"] == "it leaked drafts" and entry.detail["diff"] == ["- glossary: python3 glossary.py"]
    again = owner.post("/admin/agents/andy/mcp/glossary/remove", data={"csrf_token": csrf_of(page)})
    assert again.status_code == 302
    assert "has no MCP server" in owner.get("/admin/agents/andy").get_data(as_text=True)
