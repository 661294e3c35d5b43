"""An agent's model end to end (issue 41): the real SDK and its CLI in a real sandbox (both runtimes),
the door in front of two fake Messages APIs. Set to model M, every call the CLI makes names M; when
the primary answers 529, the fallback answers, once: the person gets one answer, and the ledger and
/metrics show the switch."""
from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from conftest import require
from nanoclaw.usage.tables import ModelUsage
from tests.fakes.model_api import FakeModel, Reply
from tests.tg_flow import message, person, sandbox_service, texts

OWNER = person(111, "Olivia")


def failovers(agent: str, to: str) -> float:
    return sum(s.value for m in REGISTRY.collect() if m.name == "nanoclaw_model_failovers"
               for s in m.samples if s.name.endswith("_total") and s.labels.get("agent") == agent
               and s.labels.get("to_upstream") == to)


@pytest.mark.parametrize("runtime", ["bwrap", "docker"])
def test_the_agents_model_is_sent_and_a_529_is_answered_by_the_fallback_once(make_settings, sqlite_url, runtime):
    if runtime == "docker":
        from tests.web.test_chat_e2e import runtime_available
        require(*runtime_available("docker", make_settings()))
    primary_script = {"overloaded": False}

    def primary(req):
        if primary_script["overloaded"] and "second" in req.current_prompt():
            return Reply.error(529, "Overloaded")
        return Reply.say(f"primary: {req.current_prompt()[-40:]}", model=req.body["model"])

    with FakeModel(script=lambda req: Reply.say("backup answers", model=req.body["model"])) as backup, \
            sandbox_service(make_settings, sqlite_url, primary, runtime=runtime) as svc:
        for args in (("agent", "create", "Andy"), ("user", "add", "telegram:111", "--role", "owner"),
                     ("wire", "telegram", "111", "andy"),
                     ("upstream", "add", "backup", "--url", backup.url, "--auth", "none"),
                     ("model", "set", "andy", "claude-sonnet-4-5", "--fallback", "backup:claude-haiku-4-5")):
            svc.cli(*args)
        before = failovers("andy", "backup")
        svc.post(message(111, OWNER, "the first question"))
        svc.wait(lambda: any(t.startswith("primary:") for t in texts(svc.tg, 111)), what="the primary's answer")
        sent = {c.body["model"] for c in svc.model.model_calls()}
        assert sent == {"claude-sonnet-4-5"}, sent  # the CLI's every call, helpers' too, names the agent's model

        primary_script["overloaded"] = True
        svc.post(message(111, OWNER, "the second question"))
        svc.wait(lambda: "backup answers" in texts(svc.tg, 111), what="the fallback's answer")
        assert texts(svc.tg, 111).count("backup answers") == 1
        assert not any("Overloaded" in t or "529" in t for t in texts(svc.tg, 111))  # the sandbox never saw it
        assert {c.body["model"] for c in backup.model_calls()} == {"claude-haiku-4-5"}
        svc.wait(lambda: ModelUsage.select().where(ModelUsage.upstream == "backup").exists(), what="the ledger")
        row = ModelUsage.get(ModelUsage.upstream == "backup")
        assert row.switched >= 1 and row.asked_model == "claude-haiku-4-5"
        assert failovers("andy", "backup") >= before + 1
        usage = svc.cli("usage", "andy").output
        assert "backup" in usage and "answered by a fallback" in usage

        # a new model from the next turn: the running sandbox restarts, on the same conversation
        running = svc.runtime.list_sandboxes(svc.settings.install_id)
        assert running
        svc.cli("model", "set", "andy", "claude-opus-4-1")
        assert svc.runtime.list_sandboxes(svc.settings.install_id) == []
        svc.post(message(111, OWNER, "the third question"))
        svc.wait(lambda: any("third question" in t for t in texts(svc.tg, 111)), what="the answer on the new model")
        third = [c for c in svc.model.model_calls() if "third question" in c.current_prompt()]
        assert third and {c.body["model"] for c in third} == {"claude-opus-4-1"}
        assert "the first question" in third[-1].all_text()  # the conversation went on
