"""Operator control without a sandbox: the tools' own checks (runner side), the host's checks again,
cards, who may decide, first decision wins, replies, the page's items, the audit trail, and the
pieces that restart a group differently (MCP servers in the sandbox spec, per-group image tags)."""
from __future__ import annotations

import json

import pytest

from nanoclaw import platforms
from nanoclaw.sessions.wake import NO_WAKE
from nanoclaw.app import create_app
from nanoclaw.db import database
from nanoclaw.outbound.delivery import deliver_session
from nanoclaw.migrate import apply_pending
from nanoclaw.models import AgentGroup, AuditLog, HelpRequest, PendingProposal, Session
from nanoclaw.approvals.pending import pending_items, reply as page_reply
from nanoclaw.runtime.image import group_dockerfile, group_image_tag
from nanoclaw.sandboxes.manager import build_spec
from nanoclaw.sessions import session_schema as schema
from nanoclaw.sessions.store import Target
from nanoclaw.approvals import actions
from nanoclaw.operator import proposals
from tests.fakes.telegram_api import TOKEN
from tests.tg_flow import SECRET, Telegram, buttons, cards, click, edits, message, person, post, shown, texts, toasts

from agent_runner.config import RunnerConfig  # noqa: E402  (container/ is on sys.path via session_schema)
from agent_runner.extra_servers import extra_mcp_servers  # noqa: E402
from agent_runner.mcp_tools import ToolContext, call_tool  # noqa: E402
from agent_runner.mcp_tools import operator as tools  # noqa: E402
from agent_runner.store import SessionStore  # noqa: E402

OWNER, ADA = person(111, "Olivia"), person(666, "Ada")


@pytest.fixture
def tg():
    with Telegram() as server:
        yield server


@pytest.fixture
def app(make_settings, db_url, tg):
    app = create_app(make_settings(DATABASE_URL=db_url, TELEGRAM_BOT_TOKEN=TOKEN, TELEGRAM_WEBHOOK_SECRET=SECRET,
                                   TELEGRAM_API_BASE=tg.url, NANOCLAW_RUNTIME="bwrap"))
    database.connect(reuse_if_open=True)
    apply_pending(database.obj, log=lambda _l: None)
    app.woken = []
    app.extensions["nanoclaw.wake"].connect(lambda folder, session_id: app.woken.append(folder))
    runner = app.test_cli_runner()
    for args in (("agent", "create", "Andy"), ("user", "add", "telegram:111", "--role", "owner", "--name", "Olivia"),
                 ("wire", "telegram", "111", "andy"), ("wire", "telegram", "-100200", "andy", "--kind", "group")):
        assert runner.invoke(args=["nanoclaw", *args]).exit_code == 0, args
    yield app
    database.close()


def session_path(app, chat=111, sender=OWNER, **kw):
    post(app, message(chat, sender, "hello", **kw))
    session = Session.select().order_by(Session.created_at.desc()).first()
    return app.config["NANOCLAW"].sessions_dir / "andy" / session.id


def agent_ctx(path) -> ToolContext:
    config = RunnerConfig.from_env({"NANOCLAW_SESSION_DIR": str(path), "NANOCLAW_GROUP_DIR": str(path),
                                    # as the host sets it for every sandbox (sandboxes/manager.build_spec)
                                    "NANOCLAW_RESERVED_SECRET_PREFIXES": ",".join(platforms.secret_prefixes())})
    return ToolContext(store=SessionStore.of_session(path), config=config)


def run_tool(ctx, fn, **args) -> tuple[str, bool]:
    result = call_tool(ctx, fn, args)
    return result["content"][0]["text"], bool(result.get("is_error"))


def inbound(path, kind=None) -> list[dict]:
    conn = schema.connect(path / "host" / schema.INBOUND, readonly=True)
    try:
        rows = conn.execute("SELECT * FROM messages_in" + (" WHERE kind = ?" if kind else "") + " ORDER BY seq",
                            (kind,) if kind else ()).fetchall()
        return [dict(r, content=json.loads(r["content"])) for r in rows]
    finally:
        conn.close()


def system_texts(path) -> list[str]:
    return [r["content"]["text"] for r in inbound(path, "system")]


# --- the tools check before anything is queued ---------------------------------------------------

def test_tools_refuse_what_breaks_the_rules_and_queue_the_rest(tmp_path):
    from nanoclaw.sessions import store as host_store
    host_store.prepare(tmp_path, Target("telegram", "111"))
    ctx = agent_ctx(tmp_path)
    refusals = [
        (tools.propose_egress, {"host": "https://evil.com/x"}, "without scheme"),
        (tools.propose_egress, {"host": "*.com"}, "second-level"),
        (tools.propose_credential_route, {"host_or_path": "/v1/", "upstream": "https://x.com", "secret_name": "X_T"},
         "shadow the model route"),
        (tools.propose_credential_route, {"host_or_path": "/gh/", "upstream": "http://x.com", "secret_name": "X_T"},
         "https://"),
        (tools.propose_credential_route, {"host_or_path": "/gh/", "upstream": "https://x.com",
                                          "secret_name": "ANTHROPIC_API_KEY"}, "reserved for the host"),
        (tools.install_packages, {"apt": ["curl", "$(reboot)"]}, "not a Debian package name"),
        (tools.install_packages, {"npm": ["Left-Pad"]}, "not an npm package name"),
        (tools.install_packages, {"apt": [f"pkg{i}" for i in range(21)]}, "at most 20 packages"),
        (tools.install_packages, {}, "at least one"),
        (tools.add_mcp_server, {"name": "nanoclaw", "command": "x"}, "not 'nanoclaw'"),
        (tools.add_mcp_server, {"name": "gh", "command": "gh-mcp", "env": ["GITHUB_TOKEN", "TELEGRAM_BOT_TOKEN"]},
         "reserved for the host"),
        (tools.ask_operator, {"text": "  "}, "empty"),
    ]
    for fn, args, why in refusals:
        text, error = run_tool(ctx, fn, **args)
        assert error and why in text, (fn.__name__, args, text)
    assert ctx.store.out.execute("SELECT COUNT(*) FROM messages_out").fetchone()[0] == 0

    text, error = run_tool(ctx, tools.install_packages, apt="jq ripgrep", npm=["@scope/pkg"], reason="tools")
    assert not error and "install apt: jq ripgrep, npm: @scope/pkg" in text
    row = json.loads(ctx.store.out.execute("SELECT content FROM messages_out").fetchone()[0])
    assert row == {"op": "proposal", "ref": row["ref"], "kind": "install_packages",
                   "payload": {"apt": ["jq", "ripgrep"], "npm": ["@scope/pkg"], "pip": []}, "reason": "tools"}
    assert f"id={row['ref']}" in text
    ctx.store.close()


# --- the host checks again, shows a card, decides once ---------------------------------------------

def propose(app, path, kind, payload, reason="", ref="r1"):
    """What the tool writes (or a tampered sandbox could write): a proposal row."""
    agent = SessionStore.of_session(path)
    agent.write_out({"op": "proposal", "ref": ref, "kind": kind, "payload": payload, "reason": reason},
                    Target("telegram", "111"), kind="system")
    agent.close()
    deliver_session(path, app.config["NANOCLAW"])


def test_a_proposal_that_breaks_the_rules_never_reaches_the_owner(app, tg):
    path = session_path(app)
    propose(app, path, "egress", {"host": "10.0.0.1/admin"})
    propose(app, path, "install_packages", {"apt": ["a b"]}, ref="r2")
    propose(app, path, "teleport", {}, ref="r3")
    assert cards(tg) == [] and not PendingProposal.select().exists()
    told = system_texts(path)
    assert len(told) == 3 and all("refused by the host" in t for t in told)
    assert AuditLog.select().where(AuditLog.action == "proposal.refused").count() == 3


def test_egress_card_decided_once_by_someone_allowed(app, tg):
    path = session_path(app)
    propose(app, path, "egress", {"host": "API.github.com"}, reason="clone a repo")
    propose(app, path, "egress", {"host": "API.github.com"}, reason="clone a repo")  # the same row id? no: re-sent
    [card] = cards(tg)
    assert str(card["chat_id"]) == "111"  # the owner's DM
    assert "Andy asks: allow HTTPS to api.github.com" in shown(card) and "+ api.github.com" in shown(card)
    assert "Why: clone a repo" in shown(card)
    post(app, click(buttons(card)["✅ Approve"], ADA, card))
    assert toasts(tg)[-1] == "Only Olivia or an admin can decide this."
    post(app, click(buttons(card)["✅ Approve"], OWNER, card))
    assert toasts(tg)[-1] == "Approved: allow HTTPS to api.github.com."
    post(app, click(buttons(card)["❌ Reject"], OWNER, card))
    assert toasts(tg)[-1] == "Already approved by Olivia."
    policy = app.config["NANOCLAW"].data_dir / "policy" / "andy" / "egress.json"
    assert json.loads(policy.read_text())["allow"] == ["api.github.com"]
    assert any("HTTPS to api.github.com is now allowed" in t for t in system_texts(path))
    assert app.woken[-1] == "andy"
    entry = AuditLog.get(AuditLog.action == "proposal.approve")
    assert (entry.actor, entry.target, entry.detail["diff"], entry.detail["reason"]) == (
        "telegram:111", f"npr-{PendingProposal.get().token}", ["+ api.github.com"], "clone a repo")


def test_a_reply_to_the_card_rejects_with_a_reason(app, tg):
    path = session_path(app)
    propose(app, path, "credential_route", {"match": "/gh/", "upstream": "https://api.github.com",
                                            "secret": "GITHUB_TOKEN"})
    [card] = cards(tg)
    assert "/gh/ -> https://api.github.com with Authorization: Bearer $GITHUB_TOKEN" in shown(card)
    update = message(111, OWNER, "not this week")
    update["message"]["reply_to_message"] = {"message_id": card["_message_id"], "chat": update["message"]["chat"],
                                             "date": 0, "text": card["text"],
                                             "from": {"id": 7000001, "is_bot": True, "first_name": "Andy"}}
    before = len(inbound(path))
    post(app, update)
    assert texts(tg, 111)[-1] == "Rejected: a credential route /gh/ -> https://api.github.com (token $GITHUB_TOKEN)."
    assert edits(tg)[-1]["text"].endswith("Reason: not this week")
    assert PendingProposal.get().state == "rejected"
    new = inbound(path)[before:]
    assert [r["kind"] for r in new] == ["system"]  # the reply itself never reached the agent as a chat message
    assert "rejected your proposal id=r1" in new[0]["content"]["text"] and "not this week" in new[0]["content"]["text"]
    assert not (app.config["NANOCLAW"].data_dir / "policy" / "andy" / "credentials.json").exists()


def test_create_agent_only_for_an_admins_agent(app, tg):
    group_path = session_path(app, chat=-100200, sender=OWNER, title="Team", mention=True)
    propose(app, group_path, "create_agent", {"name": "Scout", "instructions": "Find things."})
    assert cards(tg) == [] and "only an admin's agent may create agents" in system_texts(group_path)[-1]
    dm_path = session_path(app)  # the owner's DM: an admin's agent
    propose(app, dm_path, "create_agent", {"name": "Scout", "instructions": "Find things."}, ref="r9")
    [card] = cards(tg)
    post(app, click(buttons(card)["✅ Approve"], OWNER, card))
    scout = AgentGroup.get(AgentGroup.folder == "scout")
    assert scout.instructions == "Find things."
    assert "Find things." in (app.config["NANOCLAW"].groups_dir / "scout" / "CLAUDE.md").read_text()


def test_the_card_can_add_the_new_agent_to_the_chat_it_was_asked_from(app, tg):
    """The owner's DM already has Andy: Scout answers there when addressed as @Scout; Andy keeps the rest."""
    dm_path = session_path(app)
    propose(app, dm_path, "create_agent", {"name": "Scout", "instructions": "Find things."}, ref="r5")
    [card] = cards(tg)
    assert list(buttons(card)) == ["✅ Approve", "✅ Approve and add to telegram 111", "❌ Reject"]
    post(app, click(buttons(card)["✅ Approve and add to telegram 111"], OWNER, card))
    assert AgentGroup.get(AgentGroup.folder == "scout")
    assert "It answers in" in system_texts(dm_path)[-1] and "@Scout" in system_texts(dm_path)[-1]
    app.woken.clear()
    post(app, message(111, OWNER, "@Scout find my keys"))
    post(app, message(111, OWNER, "what's for dinner?"))
    assert app.woken == ["scout", "andy"]  # Andy does not answer what was said to Scout
    scout_said = [m["content"]["text"] for m in inbound(app.config["NANOCLAW"].sessions_dir / "scout" /
                  Session.get(Session.agent_group == AgentGroup.get(AgentGroup.folder == "scout")).id, "chat")]
    assert scout_said == ["@Scout find my keys"]


def test_only_the_owner_or_a_global_admin_adds_the_new_agent_to_a_chat(app, tg):
    runner = app.test_cli_runner()
    assert runner.invoke(args=["nanoclaw", "user", "add", "telegram:222", "--role", "admin", "--agent",
                               "andy"]).exit_code == 0
    dm_path = session_path(app)
    propose(app, dm_path, "create_agent", {"name": "Scout"}, ref="r6")
    [card] = cards(tg)
    post(app, click(list(buttons(card).values())[1], person(222, "Bob"), card))
    assert toasts(tg)[-1].startswith("Only the owner or an admin of all agents can add the new agent")
    post(app, click(buttons(card)["✅ Approve"], person(222, "Bob"), card))  # a new agent is the owner's call
    assert toasts(tg)[-1] == "Only the owner can approve a new agent."
    assert not AgentGroup.select().where(AgentGroup.folder == "scout").exists()
    assert PendingProposal.get(PendingProposal.ref == "r6").state == "pending"


def test_create_agent_is_offered_only_to_an_admins_agent(app):
    from agent_runner.mcp_tools import tool_names
    from nanoclaw.sandboxes.manager import withheld_tools
    group_path = session_path(app, chat=-100200, sender=OWNER, title="Team", mention=True)
    dm_path = session_path(app)
    assert withheld_tools(group_path.name) == ("create_agent",)
    assert withheld_tools(dm_path.name) == ()
    assert withheld_tools("no-such-session") == ("create_agent",)
    spec = build_spec(app.config["NANOCLAW"], "andy", group_path.name, withheld_tools=withheld_tools(group_path.name))
    config = RunnerConfig.from_env(spec.env)
    assert "mcp__nanoclaw__create_agent" not in tool_names(config.withheld_tools)
    assert "mcp__nanoclaw__create_agent" in tool_names(RunnerConfig.from_env(
        build_spec(app.config["NANOCLAW"], "andy", dm_path.name, withheld_tools=withheld_tools(dm_path.name)).env
    ).withheld_tools)


def test_create_agent_is_checked_again_when_it_is_applied(app, tg):
    """Queued from the owner's DM; that owner's role is taken away before another owner approves."""
    from nanoclaw.models import UserRole
    dm_path = session_path(app)
    propose(app, dm_path, "create_agent", {"name": "Scout", "instructions": "Find things."}, ref="r7")
    [card] = cards(tg)
    runner = app.test_cli_runner()
    assert runner.invoke(args=["nanoclaw", "user", "add", "telegram:222", "--role", "owner"]).exit_code == 0
    UserRole.delete().where(UserRole.user == "telegram:111").execute()
    post(app, click(buttons(card)["✅ Approve"], person(222, "Bob"), card))
    assert not AgentGroup.select().where(AgentGroup.folder == "scout").exists()
    p = PendingProposal.get(PendingProposal.ref == "r7")
    assert p.state == "failed" and "no longer is one" in p.note
    assert "applying it failed: only an admin's agent may create agents" in system_texts(dm_path)[-1]


def test_apt_under_bubblewrap_is_refused_before_a_card_with_the_way_to_get_it(app, tg):
    path = session_path(app)
    propose(app, path, "install_packages", {"apt": ["jq"], "npm": []})
    assert cards(tg) == []
    said = system_texts(path)[-1]
    assert "apt packages need the Docker runtime" in said and "NANOCLAW_RUNTIME=docker" in said
    assert "npm and pip packages work here" in said


def test_pip_and_npm_under_bubblewrap_go_into_the_agents_prefix(app, tg):
    """The host installs the union of what was approved into the prefix (no image); the card says where."""
    installed = []
    path = session_path(app)
    propose(app, path, "install_packages", {"apt": [], "npm": ["left-pad"], "pip": ["requests"]})
    [card] = cards(tg)
    assert "+ npm: left-pad" in shown(card) and "+ pip: requests" in shown(card) and "+ image" not in shown(card)
    from nanoclaw.operator import apply as apply_mod
    agent = AgentGroup.get(AgentGroup.folder == "andy")
    outcome = apply_mod.apply_packages(app.config["NANOCLAW"], agent, {"apt": [], "npm": ["left-pad"], "pip": ["requests"]},
                                       install=lambda prefix, pip, npm: installed.append((prefix.name, pip, npm)))
    assert installed == [("andy", ["requests"], ["left-pad"])]
    assert outcome.restart and "+ into /workspace/packages (PATH, PYTHONPATH, NODE_PATH)" in outcome.diff
    assert AgentGroup.get_by_id(agent.id).container_config["packages"] == {"apt": [], "npm": ["left-pad"],
                                                                           "pip": ["requests"]}
    assert "image" not in AgentGroup.get_by_id(agent.id).container_config


def test_mcp_server_goes_into_the_sandbox_spec(app, tg):
    path = session_path(app)
    propose(app, path, "mcp_server", {"name": "fetch", "command": "python3", "args": ["-m", "fetcher"],
                                      "env": ["TZ"]})
    [card] = cards(tg)
    assert "+ fetch: python3 -m fetcher (env from the sandbox: TZ)" in shown(card)
    post(app, click(buttons(card)["✅ Approve"], OWNER, card))
    config = AgentGroup.get(AgentGroup.folder == "andy").container_config
    assert config["mcp_servers"]["fetch"]["command"] == "python3"
    from nanoclaw.sandboxes.manager import agent_capabilities
    spec = build_spec(app.config["NANOCLAW"], "andy", "s1", **agent_capabilities("andy"))
    servers = extra_mcp_servers({**spec.env, "TZ": "UTC"})
    assert servers == {"fetch": {"type": "stdio", "command": "python3", "args": ["-m", "fetcher"],
                                 "env": {"TZ": "UTC"}}}
    assert any("MCP server fetch was added" in t for t in system_texts(path))


# --- help requests -------------------------------------------------------------------------------

def ask_help(path, text="I need the VPN password policy", ref="h1"):
    agent = SessionStore.of_session(path)
    agent.write_out({"op": "help_request", "ref": ref, "text": text}, Target("telegram", "111"), kind="system")
    agent.close()


def test_help_on_the_page_and_dismissed_from_the_card(app, tg):
    settings = app.config["NANOCLAW"]
    path = session_path(app)
    ask_help(path)
    deliver_session(path, settings)
    ask_help(path, "second question", ref="h2")
    deliver_session(path, settings)
    first, second = cards(tg)
    assert "Andy needs help" in shown(first) and "I need the VPN password policy" in shown(first)
    listing = pending_items(settings, "telegram:111")
    items = {i.key: i for i in listing.items if i.key.startswith("nhr-")}
    assert len(items) == 2 and all(i.reply_prefix == "nhr" for i in items.values())
    assert [i for i in pending_items(settings, "telegram:666").items if i.key.startswith("nhr-")] == []
    h1 = HelpRequest.get(HelpRequest.ref == "h1")
    with pytest.raises(actions.NotAllowed, match="^Only Olivia"):
        page_reply("nhr", h1.token, "It is in the wiki", "telegram:666", settings, NO_WAKE)
    assert page_reply("nhr", h1.token, "It is in the wiki", "telegram:111", settings, NO_WAKE) == "Sent to Andy."
    [answer] = inbound(path, "answer")
    assert answer["content"]["help_ref"] == "h1" and answer["trigger"] == 1
    assert answer["content"]["text"].endswith("It is in the wiki")
    post(app, click(buttons(second)["Dismiss"], OWNER, second))
    assert toasts(tg)[-1] == "Dismissed; Andy was told."
    assert inbound(path, "answer")[-1]["content"]["answer"] == "(dismissed without an answer)"
    assert [i for i in pending_items(settings, "telegram:111").items if i.key.startswith("nhr-")] == []
    assert {a.action for a in AuditLog.select()} >= {"help.request", "help.answer", "help.dismiss"}


def test_page_lists_proposals_with_the_cards_buttons_and_forms(app, tg):
    from nanoclaw.approvals import actions
    from nanoclaw.channels.events import Action
    settings = app.config["NANOCLAW"]
    path = session_path(app)
    propose(app, path, "egress", {"host": "pypi.org"})
    [item] = [i for i in pending_items(settings, "telegram:111").items if i.key.startswith("npr-")]
    assert item.kind == "Network access" and [b[0] for b in item.buttons] == ["✅ Approve", "❌ Reject"]
    assert [f.name for f in item.forms] == ["npr.modify", "npr.reject"] and item.reply_prefix is None
    approve = dict(item.buttons)["✅ Approve"]  # the page's button posts the card's own action id
    assert actions.dispatch(Action("web", approve, "telegram:111", origin="page"), settings, NO_WAKE) == "Approved: allow HTTPS to pypi.org."
    assert edits(tg)[-1]["text"].startswith("✅ Approved by Olivia")


# --- pure pieces ---------------------------------------------------------------------------------

def test_group_image_tags_and_dockerfile():
    a = group_image_tag("sha256:base1", "Andy", ["jq", "curl"], [])
    assert a == group_image_tag("sha256:base1", "Andy", ["curl", "jq", "jq"], [])
    assert a.startswith("nanoclaw-agent-andy:") and a != group_image_tag("sha256:base1", "Andy", ["jq"], [])
    assert a != group_image_tag("sha256:base2", "Andy", ["jq", "curl"], [])  # a rebuilt base: a new image
    text = group_dockerfile("nanoclaw-agent:latest", ["jq"], ["@scope/x"], with_ca=True)
    assert text.splitlines()[0] == "FROM nanoclaw-agent:latest" and "USER 1000:1000" == text.splitlines()[-1]
    assert "install -y --no-install-recommends jq nodejs npm" in text and "npm install -g" in text
    assert "NODE_EXTRA_CA_CERTS=/tmp/build-ca/ca.crt" in text


def test_proxy_reloads_are_audited_without_values(app, tmp_path):
    from nanoclaw.proxy.policy_files import PolicyStore, audit_change, put_route
    store = PolicyStore(tmp_path, on_change=audit_change)
    store.get("andy")
    put_route(tmp_path, "andy", {"match": "/gh/", "upstream": "https://api.github.com", "secret": "GITHUB_TOKEN"})
    store.get("andy")
    (tmp_path / "andy" / "credentials.json").write_text("{oops")
    store.get("andy")
    reload, invalid = (AuditLog.get(AuditLog.action == a) for a in ("policy.reload", "policy.invalid"))
    assert reload.detail["diff"] == ["+ /gh/ -> https://api.github.com with Authorization: Bearer $GITHUB_TOKEN"]
    assert invalid.detail["kept"] == "the previous policy"


def test_the_page_can_modify_a_proposal_before_approving_it(app, tg):
    from nanoclaw.operator import proposals
    settings = app.config["NANOCLAW"]
    path = session_path(app)
    propose(app, path, "egress", {"host": "*.github.com"})
    p = PendingProposal.get()
    with pytest.raises(actions.NotAllowed, match="^Only"):
        proposals.modify(p.token, {"host": "api.github.com"}, "telegram:666", settings)
    ok, text = proposals.modify(p.token, {"host": "https://x"}, "telegram:111", settings)
    assert not ok and text.startswith("Not changed") and PendingProposal.get().payload == {"host": "*.github.com"}
    assert proposals.modify(p.token, {"host": "api.github.com"}, "telegram:111", settings, why="only the API") == (
        True, "Changed (host: *.github.com → api.github.com). It now reads: allow HTTPS to api.github.com. "
              "Approve or reject it now.")
    old_card, new_card = cards(tg)  # the chat card is replaced by one showing the new version
    assert edits(tg)[-1]["text"].startswith("✏️ Changed by Olivia on the page: allow HTTPS to api.github.com")
    assert "+ api.github.com" in shown(new_card) and "Changed on the page: host: *.github.com → api.github.com" \
        in shown(new_card)
    post(app, click(buttons(new_card)["✅ Approve"], OWNER, new_card))
    policy = settings.data_dir / "policy" / "andy" / "egress.json"
    assert json.loads(policy.read_text())["allow"] == ["api.github.com"]
    told = system_texts(path)[-1]
    assert "approved your proposal id=r1 (allow HTTPS to api.github.com) after changing it: " \
           "host: *.github.com → api.github.com (why: only the API)" in told
    entry = AuditLog.get(AuditLog.action == "proposal.modify")
    assert (entry.actor, entry.detail["before"], entry.detail["why"], entry.detail["diff"]) == (
        "telegram:111", "allow HTTPS to *.github.com", "only the API", ["+ api.github.com"])
    ok, text = proposals.modify(p.token, {"host": "pypi.org"}, "telegram:111", settings)
    assert not ok and text == "Already approved by Olivia. It can no longer be changed."


# --- smaller guarantees ----------------------------------------------------------------------------

def test_waiting_on_you_lists_the_newest_first(app, tg):
    settings = app.config["NANOCLAW"]
    path = session_path(app)
    for ref, text in (("h1", "first"), ("h2", "second")):
        ask_help(path, text, ref=ref)
        deliver_session(path, settings)
    propose(app, path, "egress", {"host": "pypi.org"}, ref="r3")
    keys = [i.key.split("-")[0] + ":" + i.body.split()[0] for i in pending_items(settings, "telegram:111").items]
    assert keys[0].startswith("npr:") and keys[1:] == ["nhr:second", "nhr:first"]


def test_a_page_answer_to_a_help_request_edits_the_chat_card(app, tg):
    settings = app.config["NANOCLAW"]
    path = session_path(app)
    ask_help(path)
    deliver_session(path, settings)
    h1 = HelpRequest.get(HelpRequest.ref == "h1")
    assert page_reply("nhr", h1.token, "It is in the wiki", "telegram:111", settings, NO_WAKE) == "Sent to Andy."
    edited = edits(tg)[-1]
    assert str(edited["message_id"]) == h1.card_message_id and "Olivia" in edited["text"]
    assert "It is in the wiki" in edited["text"]


def test_ask_operator_never_waits_longer_than_the_cap(app, tg, monkeypatch):
    monkeypatch.setattr(tools, "HELP_WAIT_S", 0.3)  # the cap is 60 s; a smaller one keeps the test short
    ctx = agent_ctx(session_path(app))
    started = __import__("time").monotonic()
    text, error = run_tool(ctx, tools.ask_operator, text="Which VPN profile?", wait_seconds=600)
    assert __import__("time").monotonic() - started < 5
    assert not error and text.startswith("pending, id=") and "within 0.3 s" in text


def test_a_proposal_changed_after_it_was_queued_is_checked_again_when_applied(app, tg):
    path = session_path(app)
    propose(app, path, "egress", {"host": "pypi.org"})
    p = PendingProposal.get()
    [card] = cards(tg)
    PendingProposal.update(payload={"host": "10.0.0.1/admin"}).where(PendingProposal.id == p.id).execute()
    post(app, click(buttons(card)["✅ Approve"], OWNER, card))
    p = PendingProposal.get_by_id(p.id)
    assert p.state == "failed"
    assert not (app.config["NANOCLAW"].data_dir / "policy" / "andy" / "egress.json").exists()
    assert "applying it failed" in system_texts(path)[-1]


# --- host secrets: only the owner grants one an agent's admins were not given (issue 15, hole 6) -----

def test_only_the_owner_grants_a_host_secret_the_agents_admins_were_not_given(app, tg):
    settings = app.config["NANOCLAW"]
    runner = app.test_cli_runner()
    assert runner.invoke(args=["nanoclaw", "user", "add", "telegram:555", "--name", "Adam", "--role", "admin",
                               "--agent", "andy"]).exit_code == 0
    post(app, message(555, person(555, "Adam"), "hi"))  # the admin's DM is known: cards could reach him
    path = session_path(app)
    route = {"match": "/gh/", "upstream": "https://api.github.com", "secret": "GITHUB_TOKEN"}
    propose(app, path, "credential_route", route, reason="read the issues", ref="c1")
    p = PendingProposal.get(PendingProposal.ref == "c1")
    assert p.approver_user_id == "telegram:111"  # the owner, not the agent's admin
    card = cards(tg)[-1]
    assert str(card["chat_id"]) == "111"
    assert "Only the owner can approve this: $GITHUB_TOKEN is a host secret this agent's admins were not given" \
        in shown(card)
    with pytest.raises(actions.NotAllowed, match=r"^Only the owner can grant \$GITHUB_TOKEN"):
        proposals.decide(p.token, "approve", "telegram:555", settings, NO_WAKE)
    assert PendingProposal.get_by_id(p.id).state == "pending"
    assert proposals.decide(p.token, "approve", "telegram:111", settings, NO_WAKE).startswith("Approved")

    # given to the agent's admins by the owner, the next such route is theirs to decide
    assert runner.invoke(args=["nanoclaw", "credentials", "delegate", "andy", "JIRA_TOKEN"]).exit_code == 0
    propose(app, path, "credential_route", {**route, "match": "/jira/", "secret": "JIRA_TOKEN"}, ref="c2")
    p2 = PendingProposal.get(PendingProposal.ref == "c2")
    assert p2.approver_user_id == "telegram:555" and "Only the owner" not in shown(cards(tg)[-1])
    assert proposals.decide(p2.token, "approve", "telegram:555", settings, NO_WAKE).startswith("Approved")
    listing = runner.invoke(args=["nanoclaw", "credentials", "list", "andy"]).output
    assert "/gh/ -> https://api.github.com" in listing and "$JIRA_TOKEN" in listing and "ghp_" not in listing


def test_a_proposal_and_a_help_request_nobody_decided_expire_and_the_agent_is_told(app, tg):
    from datetime import timedelta
    from nanoclaw.models import utcnow
    from nanoclaw.operator import expiry
    path = session_path(app)
    propose(app, path, "egress", {"host": "api.github.com"}, reason="to read issues", ref="r1")
    [card] = cards(tg)
    settings = app.config["NANOCLAW"]
    assert expiry.expire_open(settings, now=utcnow() + timedelta(hours=71)) == 0  # not yet
    assert expiry.expire_open(settings, now=utcnow() + timedelta(hours=73)) == 1
    p = PendingProposal.get()
    assert p.state == "expired" and p.decided_by == "system"
    assert edits(tg)[-1]["text"].startswith("⏱ Expired: nobody decided within 72 h: allow HTTPS to api.github.com")
    assert "Your proposal id=r1 (allow HTTPS to api.github.com) expired" in system_texts(path)[-1]
    post(app, click(buttons(card)["✅ Approve"], OWNER, card))  # a late click changes nothing
    assert toasts(tg)[-1] == "This proposal expired: nobody decided in time, and the agent was told."
    assert not (settings.data_dir / "policy" / "andy" / "egress.json").exists()
    assert AuditLog.select().where(AuditLog.action == "proposal.expire").count() == 1

    HelpRequest.create(session=Session.get(), agent_group=AgentGroup.get(AgentGroup.folder == "andy"), ref="h1",
                       text="where is the wiki?", created_at=utcnow() - timedelta(hours=80))
    assert expiry.expire_open(settings) == 1
    assert HelpRequest.get().state == "expired"
    assert "question to the operator id=h1 expired" in system_texts(path)[-1]
