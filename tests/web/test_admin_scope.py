"""An admin scoped to one agent stays inside it on every write of the page (issue 15, hole 3).

Bea's admin (slack:U1) posts to every admin route against Andy's things, and against chats that
belong to someone else: each answer is 403, and a snapshot of what the page can change is the same
afterwards. What is theirs they can still change."""
from __future__ import annotations

import json

import pytest

from nanoclaw.reading.tables import AgentInternet

from nanoclaw.models import (AgentDestination, AgentGroup, HelpRequest, MessagingGroup, PendingChannelApproval, PendingProposal,
                             PendingSenderApproval, ScheduledTask, Session, UserDm, Wiring, utcnow)
from nanoclaw.usage.tables import Budget
from tests.web.test_admin import OWNER, csrf_of, login, site  # noqa: F401  (site: the fixture)

ADMIN, PASSWORD = "slack:U1", "bea admin password"
OWNER_DM = ("telegram", "42")
TEAM = ("telegram", "-100777")     # Andy answers here
LAB = ("telegram", "-100888")      # only Bea answers here
POLICY: list = []                  # the policy folder of the world under test


@pytest.fixture
def world(site, cli):
    for args in (("agent", "create", "Bea"), ("user", "add", ADMIN, "--role", "admin", "--agent", "bea"),
                 ("wire", "telegram", "42", "andy"), ("wire", "telegram", TEAM[1], "andy", "--kind", "group"),
                 ("wire", "telegram", LAB[1], "bea", "--kind", "group"),
                 ("destination", "add", "andy", "team", "telegram", TEAM[1]),
                 ("destination", "add", "bea", "lab-notes", "telegram", LAB[1]),
                 ("budget", "set", "andy", "--daily", "5"),
                 ("budget", "set", "bea", "--daily", "2", "--ceiling-daily", "3"),
                 ("egress", "add", "andy", "api.github.com"),
                 ("credentials", "add", "andy", "/reports/", "https://reports.example.com", "REPORT_TOKEN")):
        assert cli(*args).exit_code == 0, args
    site.test_cli_runner().invoke(args=["nanoclaw", "admin", "set-password", ADMIN, "--password-stdin"],
                                  input=PASSWORD + "\n")
    POLICY[:] = [site.config["NANOCLAW"].data_dir / "policy"]
    andy = AgentGroup.get(AgentGroup.folder == "andy")
    AgentGroup.update(container_config={"mounts": [{"host_path": "/srv/notes", "name": "notes", "readwrite": False}],
                                        "mcp_servers": {"glossary": {"name": "glossary", "command": "python3",
                                                                     "args": [], "env": []}},
                                        "packages": {"apt": [], "npm": [], "pip": ["rich"]}}
                      ).where(AgentGroup.id == andy.id).execute()
    team = MessagingGroup.get(MessagingGroup.platform_id == TEAM[1])
    session = Session.create(id="s-andy-1", agent_group=andy, messaging_group=team)
    ScheduledTask.create(id="t-andy-1", agent_group=andy, session=session, prompt="water the plants",
                         schedule_kind="cron", schedule_value="0 9 * * *", next_run_at=utcnow())
    sender = PendingSenderApproval.create(messaging_group=team, agent_group=andy, sender_id="telegram:5",
                                          original_message={"text": "hi"}, approver_user_id=OWNER)
    newchat = MessagingGroup.create(channel_type="telegram", platform_id="-100999", kind="group", name="Other")
    naming = PendingChannelApproval.create(messaging_group=newchat, original_message={"text": "yo"},
                                           approver_user_id=OWNER, state="naming")
    helpreq = HelpRequest.create(session=session, agent_group=andy, ref="h1", text="where is the wiki?",
                                 approver_user_id=OWNER)
    proposal = PendingProposal.create(session=session, agent_group=andy, ref="p1", kind="egress",
                                      payload={"host": "evil.example"}, approver_user_id=OWNER)
    client = site.test_client()
    assert login(client, ADMIN, PASSWORD).status_code == 302
    return dict(client=client, andy=andy, session=session, sender=sender, naming=naming, help=helpreq,
                proposal=proposal, team_wiring=Wiring.get(Wiring.messaging_group == team))


def snapshot() -> str:
    """Everything the page can change, as text."""
    rows = {
        "wirings": [(w.messaging_group.channel_type, w.messaging_group.platform_id, w.agent_group.folder,
                     w.engage_mode, w.engage_pattern, w.sender_scope) for w in Wiring.select().order_by(Wiring.id)],
        "chats": [(m.channel_type, m.platform_id, m.kind, m.name, m.unknown_sender_policy, str(m.denied_at))
                  for m in MessagingGroup.select().order_by(MessagingGroup.id)],
        "agents": [(a.folder, a.container_config) for a in AgentGroup.select().order_by(AgentGroup.id)],
        "tasks": [(t.id, t.status) for t in ScheduledTask.select()],
        "destinations": [(d.agent_group.folder, d.name, d.platform_id) for d in AgentDestination.select()],
        "internet": [(r.agent_group_id, r.read, r.search, r.browser) for r in AgentInternet.select().order_by(AgentInternet.id)],
        "budgets": [(b.agent_folder, b.daily_usd, b.monthly_usd, b.ceiling_daily_usd) for b in
                    Budget.select().order_by(Budget.agent_folder)],
        "policy": sorted((str(p.relative_to(POLICY[0])), p.read_text()) for p in POLICY[0].rglob("*.json"))
        if POLICY else [],
        "pending": [PendingSenderApproval.select().count(), PendingChannelApproval.select().count(),
                    [(h.state, h.answer) for h in HelpRequest.select()],
                    [(p.state, p.payload) for p in PendingProposal.select()]],
    }
    return json.dumps(rows, sort_keys=True, default=str)


def post(client, path, **data):
    page = client.get("/admin/wirings").get_data(as_text=True)
    return client.post(path, data={"csrf_token": csrf_of(page), **data})


def wiring_form(agent, channel, chat_id, **extra):
    return dict(agent=agent, channel=channel, chat_id=chat_id, sender_scope="all", ignored="drop", **extra)


def attempts(w):
    """(what, path, form) of every write an admin of Bea must not make."""
    andy_wiring = w["team_wiring"].id
    return [
        ("wire Andy somewhere", "/admin/wirings", wiring_form("andy", *LAB)),
        ("wire Bea to the owner's DM", "/admin/wirings", wiring_form("bea", *OWNER_DM, kind="group")),
        ("wire Bea into Andy's chat", "/admin/wirings", wiring_form("bea", *TEAM, kind="group", name="mine",
                                                                   unknown_senders="public")),
        ("change Andy's wiring", f"/admin/wirings/{andy_wiring}", dict(engage="pattern", pattern=".",
                                                                       unknown_senders="public")),
        ("remove Andy's wiring", f"/admin/wirings/{andy_wiring}/remove", {}),
        ("add a mount to Andy", "/admin/agents/andy/mounts", dict(host_path="/srv", name="srv")),
        ("remove Andy's mount", "/admin/agents/andy/mounts/notes/remove", {}),
        ("add a destination to Andy", "/admin/agents/andy/destinations", dict(name="x", channel="slack", chat_id="C9")),
        ("remove Andy's destination", "/admin/agents/andy/destinations/team/remove", {}),
        ("make the owner's DM a destination of Bea", "/admin/agents/bea/destinations",
         dict(name="boss", channel=OWNER_DM[0], chat_id=OWNER_DM[1])),
        ("make Andy's chat a destination of Bea", "/admin/agents/bea/destinations",
         dict(name="team", channel=TEAM[0], chat_id=TEAM[1])),
        ("re-point Bea's destination at Andy's chat", "/admin/agents/bea/destinations",
         dict(name="lab-notes", channel=TEAM[0], chat_id=TEAM[1])),
        ("make a chat never seen a destination of Bea", "/admin/agents/bea/destinations",
         dict(name="new", channel="telegram", chat_id="-100123")),
        ("raise Andy's budget", "/admin/agents/andy/budget", dict(daily="500")),
        ("remove Andy's budget", "/admin/agents/andy/budget/clear", {}),
        ("raise Bea's budget past the owner's ceiling", "/admin/agents/bea/budget", dict(daily="50")),
        ("remove the budget the owner gave Bea", "/admin/agents/bea/budget/clear", {}),
        ("allow Andy a host", "/admin/agents/andy/egress", dict(host="evil.example")),
        ("revoke Andy's host", "/admin/agents/andy/egress/remove", dict(host="api.github.com")),
        ("give Andy a route", "/admin/agents/andy/routes", dict(match="/x/", upstream="https://x.example",
                                                               secret="X_TOKEN")),
        ("remove Andy's route", "/admin/agents/andy/routes/remove", dict(match="/reports/")),
        ("remove Andy's MCP server", "/admin/agents/andy/mcp/glossary/remove", {}),
        ("add an MCP server to Andy", "/admin/agents/andy/mcp", dict(name="evil", command="sh", args="-c id")),
        ("install a package for Andy", "/admin/agents/andy/packages", dict(manager="pip", names="requests")),
        ("remove Andy's package", "/admin/agents/andy/packages/remove", dict(manager="pip", name="rich")),
        ("stop Andy's sandbox", f"/admin/sessions/{w['session'].id}/stop", {}),
        ("pause Andy's task", "/admin/tasks/t-andy-1/pause", {}),
        ("let a stranger talk to Andy", "/admin/decide", dict(action_id=f"nsa-{w['sender'].token}:allow")),
        ("approve Andy's proposal", "/admin/decide", dict(action_id=f"npr-{w['proposal'].token}:approve")),
        ("answer Andy's help request", "/admin/reply", dict(prefix="nhr", ident=w["help"].token, text="here")),
        ("name a new agent for a chat", "/admin/reply", dict(prefix="nca", ident=w["naming"].token, text="Mine")),
        ("modify Andy's proposal", "/admin/form", dict(form="npr.modify", ident=w["proposal"].token,
                                                       host="other.example", why="")),
        ("reject Andy's proposal", "/admin/form", dict(form="npr.reject", ident=w["proposal"].token, reason="no")),
        ("create an agent for a chat", "/admin/form", dict(form="nca.create", ident=w["naming"].token, name="Mine")),
        ("grant Andy an upstream", "/admin/agents/andy/upstreams/anthropic/revoke", {}),
        ("let Bea's admins choose an upstream the owner did not grant", "/admin/agents/bea/upstreams/anthropic/revoke",
         {}),
        ("allow Andy's model a provider feature", "/admin/agents/andy/features/web_search/allow", {}),
        ("allow Bea's model to have the provider fetch URLs", "/admin/agents/bea/features/url-source/allow", {}),
        ("let Andy read the web", "/admin/agents/andy/internet", dict(read="on", search="on")),
        ("widen what Bea, their own agent, reads of the web", "/admin/agents/bea/internet", dict(read="on")),
        ("write in Andy's web chat", "/chat/andy", dict(text="hello")),
        ("click in Andy's web chat", "/chat/andy/action", dict(action_id=f"nsa-{w['sender'].token}:allow")),
    ]


def test_every_write_outside_the_scope_is_403_and_changes_nothing(world):
    before = snapshot()
    for what, path, form in attempts(world):
        response = post(world["client"], path, **form)
        assert response.status_code == 403, (what, response.status_code, response.get_data(as_text=True)[:300])
        assert snapshot() == before, what


def test_the_refusal_says_why(world):
    body = post(world["client"], "/admin/wirings", **wiring_form("bea", *OWNER_DM)).get_data(as_text=True)
    assert "someone else&#39;s direct message" in body or "someone else's direct message" in body
    body = post(world["client"], "/admin/wirings", **wiring_form("bea", *TEAM, kind="group")).get_data(as_text=True)
    assert "an agent you do not administer answers in this chat" in body


def test_what_is_theirs_they_can_change(world):
    client = world["client"]
    assert post(client, "/admin/wirings", **wiring_form("bea", "telegram", "-100555", kind="group",
                                                        name="New room")).status_code == 302
    assert Wiring.select().join(MessagingGroup).where(MessagingGroup.platform_id == "-100555").count() == 1
    lab = Wiring.select().join(MessagingGroup).where(MessagingGroup.platform_id == LAB[1]).get()
    assert post(client, f"/admin/wirings/{lab.id}", engage="pattern", pattern=".",
                unknown_senders="public").status_code == 302
    assert MessagingGroup.get(MessagingGroup.platform_id == LAB[1]).unknown_sender_policy == "public"
    UserDm.create(user=ADMIN, channel_type="slack", platform_id="D0BEA")  # their own DM
    assert post(client, "/admin/wirings", **wiring_form("bea", "slack", "D0BEA", kind="dm")).status_code == 302
    assert post(client, "/admin/agents/bea/destinations", name="newroom", channel="telegram",
                chat_id="-100555").status_code == 302  # a chat where they wired their agent
    assert AgentDestination.get(AgentDestination.name == "newroom").platform_id == "-100555"
    assert post(client, "/admin/agents/bea/budget", daily="3", why="more work").status_code == 302  # up to the ceiling
    assert Budget.get(Budget.agent_folder == "bea").daily_usd == 3


def test_the_owner_is_not_limited(site, world):
    owner = site.test_client()
    assert login(owner).status_code == 302
    assert post(owner, "/admin/wirings", **wiring_form("bea", *TEAM, kind="group")).status_code == 302
    assert Wiring.select().join(MessagingGroup).where(MessagingGroup.platform_id == TEAM[1]).count() == 2


def test_only_the_owner_grants_upstreams_and_provider_features_on_the_page(site, world):
    """Issue 60, items 4 and 8: the page shows an admin what their agent may use, without the buttons; the
    owner grants an upstream and allows a feature there, each audited and read by the door from the next
    request."""
    from nanoclaw.models import AuditLog
    from nanoclaw.operator import models as ops
    page = world["client"].get("/admin/agents/bea").get_data(as_text=True)
    assert "Only the owner changes these" in page and "/features/url-source/allow" not in page
    owner = site.test_client()
    assert login(owner).status_code == 302
    page = owner.get("/admin/agents/bea").get_data(as_text=True)
    assert "no: refused at the door" in page and "/admin/agents/bea/features/web_fetch/allow" in page
    assert post(owner, "/admin/agents/bea/features/web_fetch/allow", why="reads the docs").status_code == 302
    assert post(owner, "/admin/agents/bea/upstreams/anthropic/revoke").status_code == 302
    settings, bea = site.config["NANOCLAW"], AgentGroup.get(AgentGroup.folder == "bea")
    assert ops.features(settings, bea) == {"web_fetch"} and "anthropic" not in ops.granted(settings, bea)
    with pytest.raises(ops.ModelRefused, match="not granted to bea"):
        ops.set_model(settings, ADMIN, bea, "claude-sonnet-4-5")
    page = owner.get("/admin/agents/bea").get_data(as_text=True)
    assert "/admin/agents/bea/features/web_fetch/deny" in page and "/admin/agents/bea/upstreams/anthropic/grant" in page
    assert post(owner, "/admin/agents/bea/features/nonsense/allow").status_code == 302  # told, nothing written
    assert ops.features(settings, bea) == {"web_fetch"}
    assert [(a.action, a.detail.get("why")) for a in AuditLog.select().where(
        AuditLog.action.in_(["model.feature.allow", "upstream.revoke"])).order_by(AuditLog.id)] == \
        [("model.feature.allow", "reads the docs"), ("upstream.revoke", None)]


def test_only_the_owner_changes_what_an_agent_reads_of_the_web_on_the_page(site, world):
    """Issue 62: an agent's admin sees its web setting and reads, without the form; the owner changes it,
    audited, and a value that is not one changes nothing."""
    from nanoclaw.models import AuditLog
    from nanoclaw.reading import settings as internet
    page = world["client"].get("/admin/agents/bea").get_data(as_text=True)
    assert 'id="internet"' in page and "/admin/agents/bea/internet" not in page
    owner = site.test_client()
    assert login(owner).status_code == 302
    assert "/admin/agents/bea/internet" in owner.get("/admin/agents/bea").get_data(as_text=True)
    assert post(owner, "/admin/agents/bea/internet", read="listed", search="off", why="docs only").status_code == 302
    bea = AgentGroup.get(AgentGroup.folder == "bea")
    assert internet.current(bea).read == "listed"
    assert post(owner, "/admin/agents/bea/internet", read="everything").status_code == 302  # told, nothing written
    assert internet.current(bea).read == "listed"
    [entry] = AuditLog.select().where(AuditLog.action == "internet.set")
    assert entry.actor == OWNER and entry.detail["why"] == "docs only" and entry.detail["after"]["read"] == "listed"


def test_an_admin_grants_their_agent_only_the_secrets_delegated_to_them(world, cli):
    client = world["client"]
    route = dict(match="/lab/", upstream="https://lab.example", secret="LAB_TOKEN")
    refused = post(client, "/admin/agents/bea/routes", **route)
    assert refused.status_code == 403 and "only the owner grants $LAB_TOKEN" in refused.get_data(as_text=True)
    assert post(client, "/admin/agents/bea/egress", host="lab.example").status_code == 302  # hosts are theirs to give
    assert cli("credentials", "delegate", "bea", "LAB_TOKEN").exit_code == 0
    assert post(client, "/admin/agents/bea/routes", **route).status_code == 302
    assert "/lab/ -> https://lab.example" in cli("credentials", "list", "bea").output


# --- the same admin in chat: card buttons, replies to cards, admin-only commands -----------------

def test_in_chat_an_admin_of_another_agent_decides_nothing_of_andys(make_settings, sqlite_url):
    """Bea's admin is in a group where Andy answers too. Every host card of Andy's shown there (a
    stranger, a new chat, a proposal, a help request, a question) is pressed and replied to by them,
    and they send /clear: nothing changes, and they are told so."""
    from nanoclaw.models import PendingQuestion
    from nanoclaw.sessions import store
    from tests.operator.test_operator_e2e import reply_to
    from tests.tg_flow import Telegram, click, message, person, post, telegram_app, toasts

    group, admin, owner = -100321, person(77, "Bea's admin"), person(111, "Olivia")
    with Telegram() as tg, telegram_app(
            make_settings, sqlite_url, tg, ("agent", "create", "Andy"), ("agent", "create", "Bea"),
            ("user", "add", "telegram:111", "--role", "owner", "--name", "Olivia"),
            ("user", "add", "telegram:77", "--role", "admin", "--agent", "bea", "--name", "Bea's admin"),
            ("wire", "telegram", str(group), "andy", "--kind", "group", "--engage", "pattern", "--pattern", "."),
            ("wire", "telegram", str(group), "bea", "--kind", "group")) as app:
        post(app, message(group, owner, "hello Andy", title="Both"))
        andy = AgentGroup.get(AgentGroup.folder == "andy")
        session = Session.get(Session.agent_group == andy)
        mg = MessagingGroup.get(MessagingGroup.platform_id == str(group))
        at = dict(card_channel="telegram", card_chat_id=str(group))
        sender = PendingSenderApproval.create(messaging_group=mg, agent_group=andy, sender_id="telegram:5",
                                              original_message={"text": "hi"}, approver_user_id="telegram:111",
                                              card_message_id="501", **at)
        proposal = PendingProposal.create(session=session, agent_group=andy, ref="p1", kind="egress",
                                          payload={"host": "evil.example"}, approver_user_id="telegram:111",
                                          card_message_id="502", **at)
        helpreq = HelpRequest.create(session=session, agent_group=andy, ref="h1", text="which branch?",
                                     approver_user_id="telegram:111", card_message_id="503", **at)
        question = PendingQuestion.create(session=session, question_id="q1", question="Which day?",
                                          options=["Monday", "Tuesday"], channel_type="telegram",
                                          platform_id=str(group), card_message_id="504",
                                          expires_at=utcnow().replace(year=2099), asked_user_id="telegram:111")
        newchat = MessagingGroup.create(channel_type="telegram", platform_id="-100999", kind="group", name="New")
        naming = PendingChannelApproval.create(messaging_group=newchat, original_message={"text": "yo"},
                                               approver_user_id="telegram:111", card_message_id="505", **at)

        def card(mid):
            return {"chat_id": group, "_message_id": int(mid), "text": "a card"}
        before = snapshot()
        for data, mid in ((f"nsa-{sender.token}:allow", 501), (f"npr-{proposal.token}:approve", 502),
                          (f"nhr-{helpreq.token}:dismiss", 503), (f"ncq-{question.token}:0", 504),
                          (f"nca-{naming.token}:bea", 505), (f"nca-{naming.token}:create", 505)):
            post(app, click(data, admin, card(mid)))
            assert toasts(tg)[-1] and "Approved" not in toasts(tg)[-1], (data, toasts(tg)[-1])
        for mid, text in ((502, "yes"), (503, "use main"), (505, "Mine")):
            post(app, reply_to(card(mid), admin, text))
        post(app, message(group, admin, "/clear", title="Both", command=True))
        assert snapshot() == before
        assert PendingQuestion.get().answered_at is None
        path = store.session_path(app.config["NANOCLAW"].sessions_dir, "andy", session.id)
        conn = store.schema.connect(store.inbound_db(path), readonly=True)
        written = [r[0] for r in conn.execute("SELECT content FROM messages_in")]
        conn.close()
        assert not any('"command"' in c or "/clear" in c or "use main" in c for c in written), written
