"""Approvals end to end through the real Telegram channel module and a fake Bot API:
a stranger's message → a card in the approver's DM → a click webhook → the message replayed into
the agent's session (and, once, all the way to the agent's answer through a real bwrap sandbox)."""
from __future__ import annotations

import json
import time
from datetime import datetime, timezone

import pytest

from nanoclaw.sessions.wake import NO_WAKE
from nanoclaw.approvals.common import Candidate, choose_approver, where
from nanoclaw.models import (AgentGroup, AgentGroupMember, AuditLog, DroppedMessage, MessagingGroup,
                             PendingChannelApproval, PendingSenderApproval, Session, UserDm, Wiring)
from nanoclaw.sessions import session_schema as schema
from nanoclaw.sessions.store import Target
from tests.tg_flow import tg  # noqa: F401  (the fake Bot API fixture)
from tests.tg_flow import (telegram_app, buttons, cards, click, edits, message, person, post, sandbox_service,
                           shown, texts, toasts)

OWNER, BOB, CARL, ADA = person(111, "Olivia"), person(444, "Bob"), person(555, "Carl"), person(666, "Ada")
GROUP = -100777


# --- pure ------------------------------------------------------------------------------------

def test_approver_is_the_first_reachable_tier_preferring_the_same_platform():
    tg, sl = Target("telegram", "1"), Target("slack", "D1")
    group_admins = [Candidate("slack:U1", (sl,)), Candidate("telegram:2", (Target("telegram", "2"),))]
    global_admins = [Candidate("telegram:3", (Target("telegram", "3"),))]
    owners = [Candidate("telegram:1", (tg,))]
    assert choose_approver([group_admins, global_admins, owners], "telegram") == ("telegram:2", Target("telegram", "2"))
    assert choose_approver([group_admins, global_admins, owners], "discord") == ("slack:U1", sl)
    unreachable = [Candidate("telegram:9", ())]
    assert choose_approver([unreachable, [], owners], "telegram") == ("telegram:1", tg)
    assert choose_approver([unreachable, [], []], "telegram") is None


def test_where_says_it_in_plain_words():
    assert where("group", "telegram", "Team", "-1") == "in the Telegram group 'Team'"
    assert where("dm", "whatsapp", None, "49") == "in a direct message on WhatsApp"
    assert where("group", "slack", None, "C1") == "in a Slack group (id C1)"


# --- flows through the Telegram webhook --------------------------------------------------------

@pytest.fixture
def app(make_settings, db_url, tg):
    with telegram_app(make_settings, db_url, tg) as app:
        yield app


def cli(app, *args):
    result = app.test_cli_runner().invoke(args=["nanoclaw", *args])
    assert result.exit_code == 0, result.output
    return result


def owner_with_andy(app):
    cli(app, "agent", "create", "Andy")
    cli(app, "user", "add", "telegram:111", "--role", "owner", "--name", "Olivia")
    cli(app, "wire", "telegram", "111", "andy")  # the owner's own DM with the bot


def inbound(app, folder: str) -> list[dict]:
    out = []
    for session in Session.select().join(AgentGroup).where(AgentGroup.folder == folder):
        path = app.config["NANOCLAW"].sessions_dir / folder / session.id / "host" / schema.INBOUND
        conn = schema.connect(path, readonly=True)
        try:
            out += [dict(r, content=json.loads(r["content"])) for r in conn.execute("SELECT * FROM messages_in ORDER BY seq")]
        finally:
            conn.close()
    return out


def iso(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def test_stranger_in_a_group_is_approved_by_the_owner_and_the_message_replayed(app, tg):
    owner_with_andy(app)
    cli(app, "wire", "telegram", str(GROUP), "andy", "--kind", "group")
    said_at = int(time.time()) - 120
    post(app, message(GROUP, BOB, "can you book a table?", title="Team", mention=True, date=said_at))

    assert not Session.select().exists()
    assert [d.reason for d in DroppedMessage.select()] == ["unknown_sender_request_approval"]
    [card] = cards(tg)
    assert str(card["chat_id"]) == "111"  # the owner's DM
    assert "Bob (telegram:444) wants to talk to Andy in the Telegram group 'Team' — allow?" in shown(card)
    assert "can you book a table?" in shown(card)
    choice = buttons(card)
    assert set(choice) == {"✅ Allow", "🚫 Deny"}

    post(app, message(GROUP, BOB, "hello??", title="Team", mention=True))  # a repeat while pending
    assert len(cards(tg)) == 1 and PendingSenderApproval.select().count() == 1

    post(app, click(choice["✅ Allow"], BOB, card))  # the stranger cannot let himself in
    assert toasts(tg)[-1] == "Only Olivia or an admin can decide this."
    assert PendingSenderApproval.select().count() == 1 and not Session.select().exists()

    post(app, click(choice["✅ Allow"], OWNER, card))
    assert toasts(tg)[-1] == "Allowed: Bob can talk to Andy now."
    [edit] = edits(tg)
    assert (str(edit["chat_id"]), edit["message_id"]) == ("111", card["_message_id"])
    assert edit["text"] == "✅ Allowed by Olivia: Bob (telegram:444) can now talk to Andy in the Telegram group 'Team'."
    [row] = inbound(app, "andy")
    assert row["content"]["text"].endswith("can you book a table?") and row["trigger"] == 1
    assert row["timestamp"] == iso(said_at)  # replayed with its original time
    assert app.woken == ["andy"]
    assert AgentGroupMember.select().where(AgentGroupMember.user == "telegram:444").count() == 1
    assert [(a.actor, a.action) for a in AuditLog.select().where(AuditLog.action.startswith("approval.sender"))] \
        == [("router", "approval.sender.request"), ("telegram:111", "approval.sender.allow")]

    post(app, click(choice["🚫 Deny"], OWNER, card))  # a second click changes nothing
    assert toasts(tg)[-1] == "Already decided: allowed by Olivia."
    assert len(edits(tg)) == 1 and AgentGroupMember.select().count() == 1

    post(app, message(GROUP, BOB, "thanks!", title="Team", mention=True))  # a member now: straight through
    assert [r["content"]["text"].split()[-1] for r in inbound(app, "andy")] == ["table?", "thanks!"]
    assert len(cards(tg)) == 1


def test_chatter_that_no_agent_would_use_asks_nobody(app, tg):
    owner_with_andy(app)
    cli(app, "wire", "telegram", str(GROUP), "andy", "--kind", "group")  # mention, ignored: drop
    post(app, message(GROUP, BOB, "anyone for lunch?", title="Team"))  # not addressed to the bot
    assert cards(tg) == [] and not PendingSenderApproval.select().exists()
    assert [d.reason for d in DroppedMessage.select()] == ["unknown_sender_request_approval"]
    cli(app, "wire", "telegram", str(GROUP), "andy", "--ignored", "accumulate")  # now it would be context
    post(app, message(GROUP, BOB, "anyone?", title="Team"))
    assert len(cards(tg)) == 1


def test_a_denied_chat_stays_quiet(app, tg):
    owner_with_andy(app)
    cli(app, "wire", "telegram", str(GROUP), "andy", "--kind", "group")
    MessagingGroup.update(denied_at=datetime.now(timezone.utc).replace(tzinfo=None)) \
        .where(MessagingGroup.platform_id == str(GROUP)).execute()
    post(app, message(GROUP, OWNER, "hello?", title="Team", mention=True))
    post(app, message(GROUP, BOB, "hello?", title="Team", mention=True))
    assert cards(tg) == [] and not Session.select().exists()
    assert [(d.reason, d.content) for d in DroppedMessage.select()] == [("denied_channel", None)] * 2


def test_deny_drops_and_remembers_nothing(app, tg):
    owner_with_andy(app)
    cli(app, "wire", "telegram", str(GROUP), "andy", "--kind", "group")
    post(app, message(GROUP, BOB, "let me in", title="Team", mention=True))
    [card] = cards(tg)
    post(app, click(buttons(card)["🚫 Deny"], OWNER, card))
    assert toasts(tg)[-1] == "Denied: Bob was not let in."
    assert edits(tg)[-1]["text"] == "🚫 Denied by Olivia: Bob (telegram:444) may not talk to Andy in the Telegram group 'Team'."
    assert not Session.select().exists() and not AgentGroupMember.select().exists()
    assert not PendingSenderApproval.select().exists()
    post(app, message(GROUP, BOB, "please?", title="Team", mention=True))  # asks afresh
    assert len(cards(tg)) == 2 and "please?" in shown(cards(tg)[1])


def test_the_agent_groups_admin_approves_first_and_an_admin_may_answer_for_them(app, tg):
    owner_with_andy(app)
    cli(app, "user", "add", "telegram:555", "--role", "admin", "--agent", "andy", "--name", "Carl")
    cli(app, "wire", "telegram", "555", "andy")  # Carl's DM
    cli(app, "wire", "telegram", str(GROUP), "andy", "--kind", "group")
    post(app, message(GROUP, BOB, "hi", title="Team", mention=True))
    [card] = cards(tg)
    assert str(card["chat_id"]) == "555"  # the agent group's admin comes before the owner
    post(app, click(buttons(card)["✅ Allow"], ADA, card))  # nobody
    assert toasts(tg)[-1] == "Only Carl or an admin can decide this."
    post(app, click(buttons(card)["✅ Allow"], OWNER, card))  # an owner may answer for them
    assert toasts(tg)[-1].startswith("Allowed")
    assert edits(tg)[-1]["text"].startswith("✅ Allowed by Olivia:")


def test_no_approver_means_no_pending_row_and_nothing_blocked(app, tg):
    cli(app, "agent", "create", "Andy")
    cli(app, "wire", "telegram", str(GROUP), "andy", "--kind", "group")
    post(app, message(GROUP, BOB, "anyone?", title="Team", mention=True))
    assert cards(tg) == [] and not PendingSenderApproval.select().exists()
    assert [d.reason for d in DroppedMessage.select()] == ["unknown_sender_request_approval"]
    owner_with_andy_later = ("user", "add", "telegram:111", "--role", "owner", "--name", "Olivia")
    cli(app, *owner_with_andy_later)
    cli(app, "wire", "telegram", "111", "andy")
    post(app, message(GROUP, BOB, "anyone now?", title="Team", mention=True))  # an owner exists now: a card
    assert len(cards(tg)) == 1


def test_dms_are_remembered_for_cards(app, tg):
    owner_with_andy(app)
    post(app, message(111, OWNER, "hi"))
    assert [(d.channel_type, d.platform_id) for d in UserDm.select()] == [("telegram", "111")]


# --- unknown chats ---------------------------------------------------------------------------

def test_an_unknown_group_keeps_only_metadata_unless_the_bot_is_addressed(app, tg):
    owner_with_andy(app)
    post(app, message(GROUP, BOB, "chatting among ourselves", title="Team"))
    assert not MessagingGroup.select().where(MessagingGroup.platform_id == str(GROUP)).exists()
    [drop] = DroppedMessage.select()
    assert (drop.reason, drop.platform_id, drop.sender_id, drop.content) == \
        ("no_agent_wired", str(GROUP), "telegram:444", None)
    assert cards(tg) == []
    post(app, message(GROUP, BOB, "are you there?", title="Team", mention=True))
    mg = MessagingGroup.get(MessagingGroup.platform_id == str(GROUP))
    assert (mg.kind, mg.name) == ("group", "Team")
    assert len(cards(tg)) == 1


def test_new_chat_connected_to_an_existing_agent(app, tg):
    owner_with_andy(app)
    cli(app, "agent", "create", "Bea")
    post(app, message(GROUP, BOB, "first try", title="Team", mention=True))
    post(app, message(GROUP, BOB, "second try", title="Team", mention=True))  # replaces the stored one
    [card] = cards(tg)
    assert str(card["chat_id"]) == "111"
    assert "Bob (telegram:444) is writing to the bot in the Telegram group 'Team', and no agent answers " \
           "there yet. Connect it to which agent?" in shown(card)
    choice = buttons(card)
    assert list(choice) == ["Andy", "Bea", "➕ Create new", "Ignore"]
    assert PendingChannelApproval.select().count() == 1

    post(app, click(choice["Bea"], BOB, card))
    assert toasts(tg)[-1] == "Only Olivia or an admin can decide this."
    post(app, click(choice["Bea"], OWNER, card))
    assert toasts(tg)[-1] == "Connected to Bea."
    assert edits(tg)[-1]["text"] == "🔌 Connected by Olivia: Bea now answers in the Telegram group 'Team'."
    wiring = Wiring.get(Wiring.agent_group == AgentGroup.get(AgentGroup.folder == "bea"))
    assert (wiring.engage_mode, wiring.messaging_group.platform_id) == ("mention", str(GROUP))  # group default
    assert [r["content"]["text"] for r in inbound(app, "bea")] == ["@andy_test_bot second try"]
    assert app.woken == ["bea"]
    assert AgentGroupMember.select().where(AgentGroupMember.user == "telegram:444").count() == 1
    post(app, click(choice["Ignore"], OWNER, card))
    assert toasts(tg)[-1] == "Already decided: connected by Olivia."


def test_new_chat_with_a_new_agent_named_by_free_text(app, tg):
    owner_with_andy(app)
    cli(app, "agent", "create", "Bea")
    post(app, message(GROUP, BOB, "help with research", title="Lab", mention=True))
    [card] = cards(tg)
    post(app, click(buttons(card)["➕ Create new"], OWNER, card))
    assert toasts(tg)[-1] == "Reply with the new agent's name."
    assert edits(tg)[-1]["text"] == "➕ Olivia is creating a new agent for the chat in the Telegram group 'Lab'."
    assert texts(tg, 111)[-1] == ("What should the new agent for the chat in the Telegram group 'Lab' be called? "
                                  "Reply with a name (or 'cancel').")
    post(app, message(111, OWNER, "Research Helper"))  # the owner's DM is wired to Andy: not for Andy
    assert inbound(app, "andy") == []
    agent = AgentGroup.get(AgentGroup.folder == "research-helper")
    assert agent.name == "Research Helper"
    settings = app.config["NANOCLAW"]
    assert "Research Helper" in (settings.groups_dir / "research-helper" / "CLAUDE.md").read_text()
    assert texts(tg, 111)[-1] == ("Created the agent Research Helper (folder research-helper); it now answers "
                                  "in the Telegram group 'Lab'.")
    assert edits(tg)[-1]["text"] == "➕ Created by Olivia: Research Helper now answers in the Telegram group 'Lab'."
    assert [r["content"]["text"] for r in inbound(app, "research-helper")] == ["@andy_test_bot help with research"]
    assert app.woken == ["research-helper"]
    assert not PendingChannelApproval.select().exists()
    post(app, message(111, OWNER, "and now for Andy"))  # the next DM is an ordinary message again
    assert [r["content"]["text"] for r in inbound(app, "andy")] == ["and now for Andy"]


def test_new_chat_ignored_then_asked_again(app, tg):
    owner_with_andy(app)
    cli(app, "agent", "create", "Bea")
    post(app, message(222, ADA, "hello bot"))  # a stranger's DM: a new chat
    [card] = cards(tg)
    assert "Ada (telegram:666) is writing to the bot in a direct message on Telegram" in shown(card)
    post(app, click(buttons(card)["Ignore"], OWNER, card))
    assert toasts(tg)[-1] == "Ignored."
    assert edits(tg)[-1]["text"] == "Ignored by Olivia: no agent answers in a direct message on Telegram."
    assert not Wiring.select().join(MessagingGroup).where(MessagingGroup.platform_id == "222").exists()
    assert not Session.select().where(Session.messaging_group.is_null(False)).join(MessagingGroup) \
        .where(MessagingGroup.platform_id == "222").exists()
    post(app, message(222, ADA, "hello again"))
    assert len(cards(tg)) == 2


def test_owner_in_a_new_chat_with_one_agent_is_wired_silently(app, tg):
    owner_with_andy(app)
    post(app, message(GROUP, OWNER, "you're in this group now", title="Family", mention=True))
    assert cards(tg) == []
    wiring = Wiring.select().join(MessagingGroup).where(MessagingGroup.platform_id == str(GROUP)).get()
    assert wiring.engage_mode == "mention"
    assert [r["content"]["text"] for r in inbound(app, "andy")] == ["@andy_test_bot you're in this group now"]
    assert AuditLog.select().where(AuditLog.action == "approval.channel.autowire").count() == 1


def test_owner_in_a_new_chat_with_two_agents_gets_a_card(app, tg):
    owner_with_andy(app)
    cli(app, "agent", "create", "Bea")
    post(app, message(GROUP, OWNER, "which of you?", title="Family", mention=True))
    [card] = cards(tg)
    assert "Olivia (telegram:111) is writing to the bot in the Telegram group 'Family'" in shown(card)


# --- the operator page shows the same rows; deciding there is the same handler ----------------

def test_deciding_on_the_page_runs_the_same_handlers(app, tg):
    """The operator page sends the card's own action ids (channel 'web', no chat) and replies to
    a "name the new agent" item through pending.reply."""
    from nanoclaw.approvals import actions, pending
    from nanoclaw.channels.events import Action
    owner_with_andy(app)
    cli(app, "agent", "create", "Bea")
    cli(app, "wire", "telegram", str(GROUP), "andy", "--kind", "group")
    post(app, message(GROUP, BOB, "hi there", title="Team", mention=True))  # unknown sender
    post(app, message(-100888, ADA, "hello", title="Lab", mention=True))  # unknown chat
    sender_card, chat_card = cards(tg)
    settings = app.config["NANOCLAW"]
    assert actions.dispatch(Action("web", buttons(sender_card)["✅ Allow"], "telegram:444", origin="page"), settings, NO_WAKE) == \
        "Only Olivia or an admin can decide this."
    answer = actions.dispatch(Action("web", buttons(sender_card)["✅ Allow"], "telegram:111", origin="page"), settings, NO_WAKE)
    assert answer.startswith("Allowed") and edits(tg)[-1]["text"].startswith("✅ Allowed by Olivia")
    create = buttons(chat_card)["➕ Create new"]
    assert actions.dispatch(Action("web", create, "telegram:111", origin="page"), settings, NO_WAKE) == "Reply with the new agent's name."
    assert texts(tg, 111)[-1].startswith("What should the new agent")  # asked in the owner's DM too
    ident = create.split("-", 1)[1].split(":")[0]
    with pytest.raises(actions.NotAllowed, match="^Only Olivia or an admin can decide this.$"):
        pending.reply("nca", ident, "Lab Helper", "telegram:444", settings, NO_WAKE)
    assert pending.reply("nca", ident, "Lab Helper", "telegram:111", settings, NO_WAKE) == \
        "Created the agent Lab Helper (folder lab-helper); it now answers in the Telegram group 'Lab'."
    assert [r["content"]["text"] for r in inbound(app, "lab-helper")] == ["@andy_test_bot hello"]
    assert pending.reply("nca", ident, "Again", "telegram:111", settings, NO_WAKE) == \
        "Already decided: a new agent was created by Olivia."


# --- the whole way: the agent answers through a real sandbox -----------------------------------

def test_allowed_stranger_gets_the_agents_answer_through_a_real_sandbox(make_settings, sqlite_url):
    from tests.fakes.model_api import Reply
    with sandbox_service(make_settings, sqlite_url, lambda req: Reply.say("Booked: table for four at 8.")) as svc:
        owner_with_andy(svc.app)
        svc.cli("wire", "telegram", str(GROUP), "andy", "--kind", "group")
        svc.post(message(GROUP, BOB, "book a table for four", title="Team", mention=True))
        [card] = cards(svc.tg)
        svc.post(click(buttons(card)["✅ Allow"], OWNER, card))
        svc.wait(lambda: texts(svc.tg, GROUP), what="the agent's answer in the group")
        assert texts(svc.tg, GROUP) == ["Booked: table for four at 8."]
        prompt = svc.model.model_calls()[0].current_prompt()
        assert '<message sender="Bob"' in prompt and "book a table for four</message>" in prompt
