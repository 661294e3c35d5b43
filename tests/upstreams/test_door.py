"""Models at the door (issue 41): the real door on its unix socket, the real central database, and
fake Messages APIs as upstreams. An agent's calls go to its chain's upstreams with their credentials;
another model is refused; a failure before any byte is answered by the next link (once), a failure
after it is not retried; a chain that fails answers with the primary's status and a retry-after, and
its owner's outage is recorded once; a spent budget goes to the free links."""
from __future__ import annotations

import http.client
import json
import time
from dataclasses import replace

import pytest

from nanoclaw.models import AgentGroup, Session
from nanoclaw.operator import models as ops
from nanoclaw.proxy import ProxyServer
from nanoclaw.upstreams import failover
from nanoclaw.usage.tables import ModelOutage, ModelUsage
from tests.fakes.model_api import FakeModel, Reply
from tests.proxy.test_proxy import call

HOST_KEY = "sk-ant-host-key-never-elsewhere"


@pytest.fixture
def door(sqlite_app, monkeypatch):
    settings = sqlite_app.config["NANOCLAW"]
    runner = sqlite_app.test_cli_runner()
    for name in ("Andy", "Bea"):
        assert runner.invoke(args=["nanoclaw", "agent", "create", name]).exit_code == 0
    Session.create(id="s-andy", agent_group=AgentGroup.get(AgentGroup.folder == "andy"))
    monkeypatch.setenv("BACKUP_KEY", "backup-secret-value")
    with FakeModel() as primary, FakeModel() as backup, FakeModel() as local:
        settings = replace(settings, anthropic_upstream_url=primary.url, anthropic_api_key=HOST_KEY)
        ops.add_upstream(settings, "cli", "backup", backup.url, "bearer", "BACKUP_KEY", "default")
        ops.add_upstream(settings, "cli", "local", local.url, "none", None, "free")
        proxy = ProxyServer(settings, lambda: ["andy", "bea"], rescan_interval=0.2).start()
        proxy.fakes = {"anthropic": primary, "backup": backup, "local": local}
        proxy.settings = settings
        yield proxy
        proxy.stop()


def ask(door, model: str, folder: str = "andy", stream: bool = True, **extra):
    body = json.dumps({"model": model, "max_tokens": 50, "stream": stream,
                       "messages": [{"role": "user", "content": "hi"}], **extra}).encode()
    return call(door.proxy_dir / folder / "proxy.sock", body=body,
                headers={"content-type": "application/json", "x-api-key": "placeholder",
                         "x-nanoclaw-session": "s-andy" if folder == "andy" else ""})


def ledger(n: int, timeout: float = 10.0) -> list[ModelUsage]:
    deadline = time.monotonic() + timeout
    while sum(r.calls for r in ModelUsage.select()) < n:
        assert time.monotonic() < deadline, f"waited for {n} call(s) in the ledger"
        time.sleep(0.02)
    return list(ModelUsage.select())


def set_andy(door, model, *fallbacks, upstream=None):
    agent = AgentGroup.get(AgentGroup.folder == "andy")
    return ops.set_model(door.settings, "cli", agent, model, upstream, list(fallbacks))


def test_calls_go_to_the_chains_upstream_with_its_own_credential_and_other_models_are_refused(door):
    set_andy(door, "claude-sonnet-4-5", "backup:claude-haiku-4-5")
    assert ask(door, "claude-sonnet-4-5")[0] == 200
    [first] = door.fakes["anthropic"].model_calls()
    assert first.headers["x-api-key"] == HOST_KEY and first.body["model"] == "claude-sonnet-4-5"
    assert ask(door, "claude-haiku-4-5")[0] == 200  # the fallback's own model goes to its own upstream
    [second] = door.fakes["backup"].model_calls()
    assert second.headers["authorization"] == "Bearer backup-secret-value"
    assert "x-api-key" not in second.headers  # the host's own key never goes to another upstream
    status, _h, body = ask(door, "claude-opus-4-1")
    assert status == 400 and "claude-sonnet-4-5, claude-haiku-4-5" in json.loads(body)["error"]["message"]
    assert len(door.fakes["anthropic"].model_calls()) == 1
    # another agent's model (on another upstream) is not andy's to name
    ops.set_model(door.settings, "cli", AgentGroup.get(AgentGroup.folder == "bea"), "llama3.1:8b", "local")
    status, _h, body = ask(door, "llama3.1:8b")
    assert status == 400 and door.fakes["local"].model_calls() == []
    assert ask(door, "llama3.1:8b", folder="bea")[0] == 200 and len(door.fakes["local"].model_calls()) == 1
    ops.clear_model(door.settings, "cli", AgentGroup.get(AgentGroup.folder == "bea"))
    # bea without a chain: any model, on the default upstream, as before
    assert ask(door, "claude-opus-4-1", folder="bea")[0] == 200
    assert door.fakes["anthropic"].model_calls()[-1].body["model"] == "claude-opus-4-1"
    # the models list is the agent's own
    status, _h, body = call(door.proxy_dir / "andy" / "proxy.sock", method="GET", url="/v1/models", body=None)
    assert status == 200 and [m["id"] for m in json.loads(body)["data"]] == ["claude-sonnet-4-5", "claude-haiku-4-5"]


@pytest.mark.parametrize("failure", [Reply.error(529, "Overloaded"), Reply.error(500), Reply.error(429),
                                     Reply(stream_error="overloaded_error")], ids=["529", "500", "429", "sse-error"])
def test_a_failure_before_any_byte_is_answered_by_the_next_model_once(door, failure):
    set_andy(door, "claude-sonnet-4-5", "backup:claude-haiku-4-5")
    door.fakes["anthropic"].script = [failure]
    door.fakes["backup"].script = lambda req: Reply.say("from the backup", model=req.body["model"])
    status, _h, body = ask(door, "claude-sonnet-4-5")
    assert status == 200 and b"from the backup" in body and b"Overloaded" not in body
    assert [c.body["model"] for c in door.fakes["backup"].model_calls()] == ["claude-haiku-4-5"]  # model rewritten
    [row] = ledger(1)
    assert (row.upstream, row.asked_model, row.model, row.switched) == ("backup", "claude-haiku-4-5",
                                                                        "claude-haiku-4-5", 1)


def test_a_failure_after_the_first_byte_is_not_retried(door):
    set_andy(door, "claude-sonnet-4-5", "backup:claude-haiku-4-5")
    door.fakes["anthropic"].script = [Reply.say("a long answer that breaks", cut_after=2)]
    with pytest.raises(http.client.IncompleteRead) as broken:  # cut off, as the provider cut it
        ask(door, "claude-sonnet-4-5")
    assert b"message_start" in broken.value.partial and b"message_stop" not in broken.value.partial
    assert door.fakes["backup"].model_calls() == []


def test_a_chain_that_fails_answers_the_primarys_status_with_a_retry_after_and_one_outage(door):
    set_andy(door, "claude-sonnet-4-5", "backup:claude-haiku-4-5")
    door.fakes["anthropic"].script = lambda req: Reply.error(529, "Overloaded")
    door.fakes["backup"].script = lambda req: Reply.error(503, "down")
    for _ in range(2):
        status, headers, body = ask(door, "claude-sonnet-4-5")
        assert status == 529 and json.loads(body)["error"]["type"] == "overloaded_error"
        assert int(headers["retry-after"]) >= failover.BREAKER_OPEN_S
    [outage] = list(ModelOutage.select())
    assert outage.agent_folder == "andy" and outage.ended_at is None and outage.status == 529
    door.fakes["anthropic"].script = None
    door.fakes["backup"].script = None
    door.model_api.breaker.success("anthropic")
    assert ask(door, "claude-sonnet-4-5")[0] == 200
    deadline = time.monotonic() + 10  # recorded once the answer went out
    while ModelOutage.get().ended_at is None:
        assert time.monotonic() < deadline, "the next answer did not end the outage"
        time.sleep(0.02)


def test_an_upstream_that_keeps_failing_is_skipped_for_a_while(door):
    set_andy(door, "claude-sonnet-4-5", "backup:claude-haiku-4-5")
    door.fakes["anthropic"].script = lambda req: Reply.error(529)
    for _ in range(failover.BREAKER_FAILURES):
        assert ask(door, "claude-sonnet-4-5")[0] == 200
    tried = len(door.fakes["anthropic"].model_calls())
    assert ask(door, "claude-sonnet-4-5")[0] == 200
    assert len(door.fakes["anthropic"].model_calls()) == tried  # open: not asked at all
    assert len(door.fakes["backup"].model_calls()) == failover.BREAKER_FAILURES + 1


def test_a_spent_budget_goes_to_the_chains_free_model_and_free_calls_cost_nothing(door):
    runner_cli = door.settings
    set_andy(door, "claude-sonnet-4-5", "local:llama3.1:8b")
    assert ops.current(runner_cli, AgentGroup.get(AgentGroup.folder == "andy")).fallbacks[0].model == "llama3.1:8b"
    from nanoclaw.operator.budgets import set_budget
    set_budget("cli", AgentGroup.get(AgentGroup.folder == "andy"), daily=0.0001)
    door.fakes["anthropic"].script = lambda req: Reply.say("paid", model="claude-sonnet-4-5", input_tokens=100_000)
    door.fakes["local"].script = lambda req: Reply.say("free", model="llama3.1:8b")
    door.model_api.spending.limits.forget()
    assert b"paid" in ask(door, "claude-sonnet-4-5")[2]  # the first call goes and spends it
    ledger(1)
    status, _h, body = ask(door, "claude-sonnet-4-5")
    assert status == 200 and b"free" in body  # spent: the free link, not a 402
    assert [c.body["model"] for c in door.fakes["local"].model_calls()] == ["llama3.1:8b"]
    rows = {r.upstream: r for r in ledger(2)}
    assert rows["local"].cost_micro_usd == 0 and rows["anthropic"].cost_micro_usd > 0
    set_andy(door, "claude-sonnet-4-5")  # no free link left: refused
    assert ask(door, "claude-sonnet-4-5")[0] == 402
