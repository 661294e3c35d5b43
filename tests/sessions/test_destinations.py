"""Destinations (issue 17): every chat an agent is wired to is one of its destinations, and the
operator names others; the agent is told them in its system prompt and `to` reaches exactly them.
The real CLI, a real sandbox with the real SDK and CLI against the fake model, a fake Telegram."""
from __future__ import annotations

from fakes.model_api import Reply
from nanoclaw.sessions.destinations import chat_name, name_problem
from tests.inbound.test_intake import ANNA
from tests.tg_flow import message, sandbox_service, texts

SEND = "mcp__nanoclaw__send_message"


def test_names():
    assert chat_name("telegram", "-100777", "Family Chat!") == "family-chat"
    assert chat_name("slack", "C0GENERAL", None) == "slack-c0general"
    assert name_problem("ops") is None and name_problem("Ops Team") and name_problem("")


def script(req):
    results = req.turn_tool_results()
    if len(results) == 0:
        return Reply.call(SEND, text="Status: all green.", to="ops")
    if len(results) == 1:
        return Reply.call(SEND, text="hello?", to="somewhere-else")
    return Reply.say(f"Done. {results[-1].text}")


def test_an_agent_sends_to_its_destinations_and_nowhere_else(make_settings, sqlite_url):
    with sandbox_service(make_settings, sqlite_url, script) as svc:
        for args in (("agent", "create", "Andy"), ("user", "add", "telegram:4242", "--role", "owner"),
                     ("wire", "telegram", "4242", "andy"),
                     ("wire", "telegram", "-100777", "andy", "--kind", "group", "--name", "Family"),
                     ("destination", "add", "andy", "ops", "telegram", "-100888")):
            svc.cli(*args)
        listed = svc.cli("destination", "list", "andy").output
        assert "family" in listed and "ops" in listed and "telegram:-100888" in listed
        bad = svc.app.test_cli_runner().invoke(args=["nanoclaw", "destination", "add", "andy", "Ops Team",
                                                     "telegram", "1"])
        assert bad.exit_code == 2 and "not a destination name" in bad.output

        svc.post(message(4242, ANNA, "tell ops the status"))
        svc.wait(lambda: any(t.startswith("Done.") for t in texts(svc.tg, 4242)), what="the answer")
        assert texts(svc.tg, -100888) == ["Status: all green."]
        done = [t for t in texts(svc.tg, 4242) if t.startswith("Done.")][0]
        assert "unknown destination 'somewhere-else'" in done and "valid names:" in done and "ops" in done
        system = svc.model.model_calls()[0].system_text()
        assert "ops (telegram -100888)" in system and "family (Family (telegram group))" in system

        svc.cli("destination", "remove", "andy", "ops")
        assert "ops" not in svc.cli("destination", "list", "andy").output.split()
        gone = svc.app.test_cli_runner().invoke(args=["nanoclaw", "destination", "remove", "andy", "ops"])
        assert gone.exit_code == 2 and "no added destination" in gone.output
