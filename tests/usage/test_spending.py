"""The proxy counts every model call of an agent from the response itself and refuses the next one
once the agent's budget is spent, before it leaves the machine (real door on its unix socket, real
central database, a fake Messages API)."""
from __future__ import annotations

import json

import pytest

from nanoclaw.models import AgentGroup, Session
from nanoclaw.proxy import ProxyServer
from nanoclaw.usage.tables import BudgetEvent, ModelUsage
from tests.fakes.model_api import FakeModel, Reply
from tests.proxy.test_proxy import call


@pytest.fixture
def door(sqlite_app, cli):
    settings = sqlite_app.config["NANOCLAW"]
    assert cli("agent", "create", "Andy").exit_code == 0
    assert cli("agent", "create", "Bea").exit_code == 0
    Session.create(id="s-andy", agent_group=AgentGroup.get(AgentGroup.folder == "andy"))
    Session.create(id="s-bea", agent_group=AgentGroup.get(AgentGroup.folder == "bea"))
    with FakeModel(script=lambda req: Reply.say("ok", model="claude-sonnet-4-5-20250929", input_tokens=100_000)) \
            as model:
        from dataclasses import replace
        proxy = ProxyServer(replace(settings, anthropic_upstream_url=model.url, anthropic_api_key="sk-ant-x"),
                            lambda: ["andy", "bea"], rescan_interval=0.2).start()
        proxy.model = model
        yield proxy
        proxy.stop()


def recorded(calls: int, timeout: float = 10.0) -> None:
    """Wait until the proxy has written `calls` calls to the ledger."""
    waited(lambda: sum(r.calls for r in ModelUsage.select()) >= calls, f"the ledger to get {calls} call(s)", timeout)


def waited(done, what: str, timeout: float = 10.0):
    import time
    deadline = time.monotonic() + timeout
    while not (found := done()):
        assert time.monotonic() < deadline, f"waited for {what}"
        time.sleep(0.02)
    return found


def ask(proxy, folder: str, session: str = "", stream: bool = True):
    headers = {"content-type": "application/json", "x-api-key": "placeholder"}
    if session:
        headers["x-nanoclaw-session"] = session
    body = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 10, "stream": stream,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()
    return call(proxy.proxy_dir / folder / "proxy.sock", body=body, headers=headers)


@pytest.fixture
def cli(sqlite_app):
    runner = sqlite_app.test_cli_runner()
    return lambda *args: runner.invoke(args=["nanoclaw", *args])


def test_each_call_is_counted_for_its_agent_and_session(door):
    assert ask(door, "andy", "s-andy")[0] == 200
    assert ask(door, "andy", "s-andy", stream=False)[0] == 200
    assert ask(door, "andy", "s-bea")[0] == 200   # another agent's session: not believed
    recorded(3)  # after the response went out, not before: the caller has every byte first
    rows = {(r.agent_folder, r.session_id): r for r in ModelUsage.select()}
    mine = rows[("andy", "s-andy")]
    assert (mine.calls, mine.input_tokens, mine.output_tokens, mine.model) == (2, 200_000, 10,
                                                                              "claude-sonnet-4-5-20250929")
    assert mine.cost_micro_usd == 2 * (100_000 * 3 + 5 * 15) and not mine.unpriced
    assert rows[("andy", "")].calls == 1 and ("bea", "s-bea") not in rows
    assert all("x-nanoclaw-session" not in r.headers for r in door.model.model_calls())  # goes no further


def test_a_spent_budget_refuses_the_next_call_before_it_leaves(door, cli):
    assert cli("budget", "set", "andy", "--daily", "0.40", "--why", "test").exit_code == 0
    assert ask(door, "andy", "s-andy")[0] == 200               # $0.30075: 75 % of it
    recorded(1)
    assert not BudgetEvent.select().exists()
    assert ask(door, "andy", "s-andy")[0] == 200               # $0.60015: over the line (this call goes)
    recorded(2)  # the warning is recorded after the call is, in the same step after the response
    warn = waited(lambda: BudgetEvent.get_or_none(BudgetEvent.kind == "warn"), "the warning")
    assert warn.period.startswith("day:") and warn.spent_micro_usd == 600_150
    before = len(door.model.model_calls())
    status, _headers, body = ask(door, "andy", "s-andy")
    assert status == 402 and len(door.model.model_calls()) == before   # refused here, never sent
    assert "daily budget of agent 'andy' is used up ($0.60 of $0.40)" in json.loads(body)["error"]["message"]
    block = BudgetEvent.get(BudgetEvent.kind == "block")
    assert block.session_id == "s-andy" and block.told_at is None
    assert ask(door, "bea")[0] == 200                          # another agent is not held
    assert cli("budget", "set", "andy", "--daily", "5").exit_code == 0
    door.model_api.spending.limits.forget()
    assert ask(door, "andy", "s-andy")[0] == 200               # raised: it goes again


def test_a_model_the_table_does_not_know_is_priced_at_the_dearest_rate(door):
    door.model.script = lambda req: Reply.say("ok", model="claude-new-9", input_tokens=1_000)
    assert ask(door, "andy")[0] == 200
    recorded(1)
    row = ModelUsage.get()
    assert row.unpriced and row.priced_as == "claude-opus-4-1" and row.cost_micro_usd == 1_000 * 15 + 5 * 75
