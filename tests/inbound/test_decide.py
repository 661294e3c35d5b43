"""The router's decision for one message, over facts built by hand: no database, no files."""
from __future__ import annotations

from types import SimpleNamespace as NS

from nanoclaw.inbound.decide import CREATE, USE, chat_step, plan
from nanoclaw.inbound.facts import AgentFacts, Facts


def wiring(id_, mode="mention", pattern=None, scope="all", ignored="drop"):
    return NS(id=id_, engage_mode=mode, engage_pattern=pattern, sender_scope=scope, ignored_message_policy=ignored)


def chat(kind="group", policy="request_approval"):
    return NS(kind=kind, unknown_sender_policy=policy)


def agent(id_, name="Andy", known=True, admin=False, session=None, **w):
    return AgentFacts(wiring(id_, **w), name, known, admin, session)


def facts(*agents, kind="group", policy="request_approval"):
    return Facts(chat(kind, policy), None, "", tuple(agents))


def test_a_dm_engages_its_agent():
    p = plan(facts(agent(1, mode="pattern", pattern="."), kind="dm"), text="hi", mentioned=True, sender_is_bot=False)
    assert [(d.agent.wiring.id, d.engaged) for d in p.deliveries] == [(1, True)]


def test_in_a_group_only_a_mention_engages_and_chatter_is_dropped_or_kept():
    unmentioned = plan(facts(agent(1), agent(2, "Bea", ignored="accumulate")), text="lunch?", mentioned=False,
                       sender_is_bot=False)
    assert [(d.agent.wiring.id, d.engaged) for d in unmentioned.deliveries] == [(2, False)]
    mentioned = plan(facts(agent(1)), text="@bot lunch?", mentioned=True, sender_is_bot=False)
    assert [d.engaged for d in mentioned.deliveries] == [True]


def test_naming_one_agent_leaves_the_others_out():
    p = plan(facts(agent(1, "Andy", mode="pattern", pattern="."), agent(2, "Bea", mode="pattern", pattern=".")),
             text="@Bea what's up", mentioned=False, sender_is_bot=False)
    assert [(d.agent.name, d.engaged) for d in p.deliveries] == [("Bea", True)]


def test_a_stranger_gets_one_card_for_the_first_agent_that_would_have_used_the_message():
    p = plan(facts(agent(1, known=False, ignored="accumulate"), agent(2, "Bea", known=False)), text="@bot hi",
             mentioned=True, sender_is_bot=False)
    assert p.deliveries == () and p.ask_about.wiring.id == 1 and p.drop_reason == "unknown_sender_request_approval"
    bot = plan(facts(agent(1, known=False)), text="@bot hi", mentioned=True, sender_is_bot=True)
    assert bot.ask_about is None
    public = plan(facts(agent(1, known=False), policy="public"), text="@bot hi", mentioned=True, sender_is_bot=False)
    assert [d.engaged for d in public.deliveries] == [True]


def test_an_admin_only_command_from_a_member_is_answered_and_never_written():
    member = plan(facts(agent(1, mode="pattern", pattern=".")), text="/clear", mentioned=False, sender_is_bot=False)
    assert member.deliveries == () and member.refused_command == "Only an admin can use /clear here."
    assert member.drop_reason == "command_refused"
    admin = plan(facts(agent(1, admin=True, mode="pattern", pattern=".")), text="/clear", mentioned=False,
                 sender_is_bot=False)
    assert [d.command for d in admin.deliveries] == ["clear"]


def test_known_only_wirings_ignore_strangers_even_in_a_public_chat():
    p = plan(facts(agent(1, known=False, scope="known", mode="pattern", pattern="."), policy="public"), text="hi",
             mentioned=False, sender_is_bot=False)
    assert p.deliveries == () and p.drop_reason == "no_agent_engaged"


def test_the_chat_step():
    assert chat_step("dm", False, found=False, denied=False) == CREATE
    assert chat_step("group", True, found=False, denied=False) == CREATE
    assert chat_step("group", False, found=False, denied=False) == "no_agent_wired"
    assert chat_step("group", True, found=True, denied=True) == "denied_channel"
    assert chat_step("group", False, found=True, denied=False) == USE
