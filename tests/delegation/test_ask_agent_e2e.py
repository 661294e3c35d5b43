"""Agents asking agents over a link the owner made (issue 65, items 2-4). Real sandboxes (one per
agent), real SDK and CLI, the scripted model, the fake Telegram: andy asks finance and gets its answer
inside one turn (wait), or later as a message (no wait); finance asking andy back is refused as a loop;
finance's turn never sees the owner's private memory, nor andy's turn finance's link memory; without a
link the tool is not offered and the op, forced, is refused."""
from __future__ import annotations

import json

import pytest

from tests.fakes.model_api import Reply
from tests.inbound.test_intake import ANNA, SETUP
from tests.tg_flow import message, sandbox_service, texts

CANARY = "ZX-OWNER-PRIVATE-4711"
TOOL = "mcp__nanoclaw__ask_agent"


def brain(req) -> Reply:
    prompt, results = req.current_prompt(), req.turn_tool_results()
    if "ZX-Q3" in prompt and "agent:andy" in prompt:  # finance, asked by andy
        if "loop please" in prompt and not results:
            return Reply.call(TOOL, agent="andy", text="who asked?", wait=True)
        if results:
            return Reply.say("finance could not: " + results[-1].text[:200])
        return Reply.say("The Q3 budget is 42k (ZX-FINANCE-ANSWER)")
    if "answer from another agent" in prompt and not results:  # andy, the answer arrived as a message
        return Reply.say("relayed: " + ("42k" if "42k" in prompt else "?"))
    for word, wait in (("ask-wait", True), ("ask-later", False), ("ask-loop", True)):
        if word in prompt:
            if not results:
                text = "What is the ZX-Q3 budget?" + (" loop please" if word == "ask-loop" else "")
                return Reply.call(TOOL, agent="finance", text=text, wait=wait)
            return Reply.say(f"{word} got: " + results[-1].text[-300:])
    return Reply.say("ok")


@pytest.mark.parametrize("runtime", ["bwrap", "docker"])
def test_andy_asks_finance_over_a_link(make_settings, sqlite_url, runtime):
    with sandbox_service(make_settings, sqlite_url, brain, runtime=runtime) as svc:
        for args in (*SETUP, ("agent", "create", "Finance")):
            svc.cli(*args)
        svc.cli("memory", "edit", "andy", "--user", "telegram:4242", "--text", f"door code {CANARY}")
        svc.cli("memory", "edit", "finance", "--user", "telegram:4242", "--text", "salary ZX-FINANCE-PRIVATE")
        svc.post(message(4242, ANNA, "hello"))
        svc.wait(lambda: "ok" in texts(svc.tg, 4242), timeout=120, what="the first answer")
        assert TOOL not in svc.model.model_calls()[-1].tool_names(), "ask_agent offered without a link"

        svc.cli("agent", "link", "andy", "finance", "--mode", "allowed")
        svc.cli("agent", "link", "finance", "andy", "--mode", "allowed")
        for name in svc.runtime.list_sandboxes(svc.settings.install_id):
            svc.runtime.stop(name)  # the tool is offered from the next start
        svc.post(message(4242, ANNA, "ask-wait"))
        svc.wait(lambda: any(t.startswith("ask-wait got:") for t in texts(svc.tg, 4242)), timeout=180,
                 what="andy's answer with finance's inside")
        said = next(t for t in texts(svc.tg, 4242) if t.startswith("ask-wait got:"))
        assert "42k" in said and "UNTRUSTED DATA" in said and "END UNTRUSTED DATA" in said
        asked = [m for m in svc.model.model_calls() if "agent:andy" in m.current_prompt()]
        assert asked and all(CANARY not in json.dumps(m.body) for m in asked), "finance saw the owner's memory"
        assert all("question from another agent" in m.current_prompt() and "UNTRUSTED DATA" in m.current_prompt()
                   for m in asked), "andy's words reached finance outside the envelope"
        assert not any("ZX-FINANCE-PRIVATE" in json.dumps(m.body) for m in svc.model.model_calls()), \
            "finance's memory with the owner reached a conversation between agents"

        svc.post(message(4242, ANNA, "ask-later"))
        svc.wait(lambda: "relayed: 42k" in texts(svc.tg, 4242), timeout=180, what="the answer relayed later")
        assert any(t.startswith("ask-later got: Asked finance") for t in texts(svc.tg, 4242))

        svc.post(message(4242, ANNA, "ask-loop"))
        svc.wait(lambda: any(t.startswith("ask-loop got:") for t in texts(svc.tg, 4242)), timeout=180,
                 what="the loop refused")
        said = next(t for t in texts(svc.tg, 4242) if t.startswith("ask-loop got:"))
        assert "finance could not:" in said and "loop is refused" in said


def test_an_ask_link_waits_on_a_card_and_approve_always_makes_it_allowed(make_settings, sqlite_url):
    from nanoclaw.delegation.tables import AgentLink
    from tests.operator.test_operator_e2e import reply_to
    from tests.tg_flow import buttons, cards, click, shown, toasts

    with sandbox_service(make_settings, sqlite_url, brain) as svc:
        for args in (*SETUP, ("agent", "create", "Finance"), ("agent", "link", "andy", "finance", "--mode", "ask"),
                     ("egress", "add", "finance", "api.bank.example")):
            svc.cli(*args)
        svc.post(message(4242, ANNA, "ask-wait"))
        svc.wait(lambda: cards(svc.tg), timeout=120, what="the card for finance's owner")
        [first] = cards(svc.tg)
        assert "Andy wants to ask Finance" in shown(first) and "What is the ZX-Q3 budget?" in shown(first)
        assert "Finance can reach api.bank.example" in shown(first)
        assert not any("agent:andy" in m.current_prompt() for m in svc.model.model_calls()), "asked before approval"
        svc.post(reply_to(first, ANNA, "not the budget, not today"))  # a reply rejects, with its reason
        svc.wait(lambda: any(t.startswith("ask-wait got:") for t in texts(svc.tg, 4242)), timeout=120,
                 what="andy told of the rejection")
        said = next(t for t in texts(svc.tg, 4242) if t.startswith("ask-wait got:"))
        assert "finance's owner rejected the ask: not the budget, not today" in said

        svc.post(message(4242, ANNA, "ask-wait"))
        svc.wait(lambda: len(cards(svc.tg)) == 2, timeout=120, what="the second card")
        second = cards(svc.tg)[1]
        svc.post(click(buttons(second)["✅ Approve always"], ANNA, second))
        assert toasts(svc.tg)[-1].startswith("Approved: later asks")
        svc.wait(lambda: sum(t.startswith("ask-wait got:") for t in texts(svc.tg, 4242)) == 2, timeout=180,
                 what="andy's answer after the approval")
        assert "42k" in [t for t in texts(svc.tg, 4242) if t.startswith("ask-wait got:")][-1]
        assert AgentLink.get().mode == "allowed"

        svc.post(message(4242, ANNA, "ask-later"))
        svc.wait(lambda: "relayed: 42k" in texts(svc.tg, 4242), timeout=180, what="an ask with no card now")
        assert len(cards(svc.tg)) == 2


def test_with_room_for_one_sandbox_a_waited_ask_is_still_answered_and_a_spent_budget_says_so(make_settings,
                                                                                             sqlite_url):
    from nanoclaw.usage import ledger, prices

    with sandbox_service(make_settings, sqlite_url, brain, MAX_CONCURRENT_CONTAINERS="1") as svc:
        for args in (*SETUP, ("agent", "create", "Finance"), ("agent", "link", "andy", "finance", "--mode", "allowed")):
            svc.cli(*args)
        svc.post(message(4242, ANNA, "ask-wait"))  # andy holds the one sandbox while it waits on finance
        svc.wait(lambda: any(t.startswith("ask-wait got:") for t in texts(svc.tg, 4242)), timeout=180,
                 what="finance's answer with capacity 1")
        assert "42k" in next(t for t in texts(svc.tg, 4242) if t.startswith("ask-wait got:"))

        svc.cli("budget", "set", "finance", "--daily", "0.50", "--why", "test")
        ledger.record("finance", "s1", "claude-sonnet-4-5", prices.Tokens(input=400_000),
                      prices.price_of("claude-sonnet-4-5", prices.load(None)), ledger.today(svc.settings.timezone))
        manager = svc.app.extensions["nanoclaw.wake"].manager
        svc.wait(lambda: manager.budget.spent_up("finance"), what="the budget change seen (its cache is told)")
        calls = len(svc.model.model_calls())
        svc.post(message(4242, ANNA, "ask-loop"))  # any waited ask: refused at once, finance never started
        svc.wait(lambda: any(t.startswith("ask-loop got:") for t in texts(svc.tg, 4242)), timeout=120,
                 what="the refusal")
        said = next(t for t in texts(svc.tg, 4242) if t.startswith("ask-loop got:"))
        assert "finance's budget is spent" in said
        assert not any("agent:andy" in m.current_prompt() for m in svc.model.model_calls()[calls:])
