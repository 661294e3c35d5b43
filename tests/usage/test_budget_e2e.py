"""A budget end to end (issue 31): the real runner in a bubblewrap sandbox, the real SDK and CLI, the
proxy door counting from the fake model's own usage. A tiny daily budget; the first message spends
it; the next is refused before any request reaches the model, the chat is told once in plain words,
the owner gets a card, and pressing "Raise by $5" answers the message that waited."""
from __future__ import annotations

from nanoclaw.usage.tables import BudgetEvent, ModelUsage
from tests.fakes.model_api import Reply
from tests.tg_flow import buttons, cards, click, message, person, sandbox_service, texts

OWNER = person(111, "Olivia")


def brain(req):
    prompt = req.current_prompt()
    text = "Second answer." if "second question" in prompt else "First answer."
    return Reply.say(text, model="claude-sonnet-4-5-20250929", input_tokens=100_000)  # $0.30 a call


def test_a_spent_budget_holds_the_message_until_the_owner_raises_it(make_settings, sqlite_url):
    with sandbox_service(make_settings, sqlite_url, brain, TZ="Europe/Berlin") as svc:
        svc.cli("agent", "create", "Andy")
        svc.cli("user", "add", "telegram:111", "--role", "owner", "--name", "Olivia")
        svc.cli("wire", "telegram", "111", "andy")
        svc.cli("budget", "set", "andy", "--daily", "0.20", "--why", "a test of the cap")

        svc.post(message(111, OWNER, "hello"))
        svc.wait(lambda: "First answer." in texts(svc.tg, 111), what="the first answer")
        svc.wait(lambda: sum(r.calls for r in ModelUsage.select()) >= 1, what="the call in the ledger")
        calls = len(svc.model.model_calls())

        svc.post(message(111, OWNER, "the second question"))
        told = svc.wait(lambda: [t for t in texts(svc.tg, 111) if "used up its daily budget" in t], what="the notice")
        assert len(told) == 1 and "$0.30 of $0.20" in told[0] and "Your message waits" in told[0]
        assert "CET" in told[0] or "+01" in told[0] or "00:00" in told[0]   # the owner's midnight
        card = svc.wait(lambda: next((c for c in cards(svc.tg) if "budget is used up" in c["text"]), None),
                        what="the owner's card")
        assert len(svc.model.model_calls()) == calls        # refused before it left the machine
        assert "Second answer." not in texts(svc.tg, 111)
        assert BudgetEvent.get(BudgetEvent.kind == "block").session_id

        svc.post(click(buttons(card)["Raise by $5"], OWNER, card))
        svc.wait(lambda: "Second answer." in texts(svc.tg, 111), what="the waiting message answered")
        assert len([t for t in texts(svc.tg, 111) if "used up its daily budget" in t]) == 1  # told once
        assert not [t for t in texts(svc.tg, 111) if t.startswith("Sorry")]  # waited, never failed
