"""The path people take to a local or another hosted model (issue 41): a real LiteLLM proxy as the
agent's model upstream, routing the Messages API to an OpenAI-compatible chat-completions server
(faked: no model runs here). A turn in which the model calls a tool answers through it: the real SDK
and CLI in a real sandbox, LiteLLM translating both ways, the door holding LiteLLM's key."""
from __future__ import annotations

import pytest

from conftest import require
from nanoclaw.usage.tables import ModelUsage
from tests.fakes.openai_api import Answer, FakeOpenAI
from tests.tg_flow import message, person, sandbox_service, texts
from tests.upstreams import litellm as litellm_mod

OWNER = person(111, "Olivia")


def chat_brain(body: dict) -> Answer:
    """Call Bash first; once its result is in the conversation, say what it printed."""
    results = [m for m in body.get("messages", []) if m.get("role") == "tool"]
    if not results:
        return Answer(text="Let me check.", tool=("Bash", {"command": "echo tool-ran-$((6*7))",
                                                           "description": "print a number"}))
    content = results[-1].get("content")
    text = content if isinstance(content, str) else " ".join(p.get("text", "") for p in content or [])
    return Answer(text=f"The tool said {text.strip()}")


@pytest.fixture(scope="module")
def gateway():
    ok, why = litellm_mod.available()
    require(ok, why)
    with FakeOpenAI(script=chat_brain) as backend:
        proxy = litellm_mod.LiteLLM({"local-chat": f"{backend.url}/v1"}).start()
        proxy.backend = backend
        yield proxy
        proxy.stop()


def test_a_turn_with_a_tool_call_answers_through_litellm(make_settings, sqlite_url, gateway, monkeypatch):
    monkeypatch.setenv("LITELLM_KEY", litellm_mod.MASTER_KEY)
    with sandbox_service(make_settings, sqlite_url, None) as svc:
        for args in (("agent", "create", "Andy"), ("user", "add", "telegram:111", "--role", "owner"),
                     ("wire", "telegram", "111", "andy"),
                     ("upstream", "add", "litellm", "--url", gateway.url, "--auth", "x-api-key", "--secret",
                      "LITELLM_KEY", "--prices", "free"),
                     ("model", "set", "andy", "local-chat", "--upstream", "litellm")):
            svc.cli(*args)
        svc.post(message(111, OWNER, "what does the tool say?"))
        svc.wait(lambda: any("The tool said tool-ran-42" in t for t in texts(svc.tg, 111)), timeout=120,
                 what="the answer after the tool call, through LiteLLM")
        assert svc.model.model_calls() == []  # nothing went to the default upstream
        models = {r["body"]["model"] for r in gateway.backend.requests}
        assert models == {"local-chat"}, models
        assert any(m.get("role") == "tool" for r in gateway.backend.requests for m in r["body"]["messages"])
        svc.wait(lambda: ModelUsage.select().where(ModelUsage.upstream == "litellm").exists(), what="the ledger")
        assert all(r.cost_micro_usd == 0 for r in ModelUsage.select().where(ModelUsage.upstream == "litellm"))
