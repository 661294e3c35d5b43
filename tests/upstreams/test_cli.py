"""The model commands as an owner uses them (issue 41): `upstream add|list|remove|test`, `model
set|show|clear`, the one-line mistakes, the reserved secret names, and `doctor`'s upstream lines; the
probe and doctor speak to fake Messages APIs, never printing a secret."""
from __future__ import annotations

import json

import pytest

from nanoclaw.proposal_rules import RuleError, check_mcp_server, check_secret_name
from nanoclaw.upstreams.chains import Link, parse_fallback
from tests.fakes.model_api import FakeModel, Reply


@pytest.fixture
def cli(sqlite_app, monkeypatch):
    monkeypatch.setenv("LOCAL_KEY", "local-secret-value-123")
    runner = sqlite_app.test_cli_runner()
    assert runner.invoke(args=["nanoclaw", "agent", "create", "Andy"]).exit_code == 0

    def run(*args):
        return runner.invoke(args=["nanoclaw", *args])
    run.settings = sqlite_app.config["NANOCLAW"]
    return run


def test_fallbacks_name_an_upstream_only_when_one_is_registered():
    known = {"anthropic", "ollama"}
    assert parse_fallback("ollama:llama3.1:8b", "anthropic", known) == Link("ollama", "llama3.1:8b")
    assert parse_fallback("llama3.1:8b", "ollama", known) == Link("ollama", "llama3.1:8b")  # a model with a colon
    assert parse_fallback("claude-haiku-4-5", "anthropic", known) == Link("anthropic", "claude-haiku-4-5")
    with pytest.raises(RuleError):
        parse_fallback("bad model!", "anthropic", known)


def test_upstreams_and_a_model_chain_from_the_command_line(cli):
    with FakeModel(script=lambda req: Reply.say("ok", model=req.body["model"])) as local:
        assert cli("upstream", "add", "local", "--url", local.url, "--auth", "bearer", "--secret", "LOCAL_KEY",
                   "--prices", "free").exit_code == 0
        listed = cli("upstream", "list").output
        assert "local" in listed and "$LOCAL_KEY" in listed and "free" in listed and "local-secret-value" not in listed
        result = cli("model", "set", "andy", "claude-sonnet-4-5", "--fallback", "local:llama3.1:8b",
                     "--fallback", "claude-haiku-4-5", "--effort", "low", "--why", "cheaper evenings")
        assert result.exit_code == 0, result.output
        assert "1. anthropic:claude-sonnet-4-5" in result.output and "2. local:llama3.1:8b" in result.output
        assert "3. anthropic:claude-haiku-4-5" in result.output and "effort low" in result.output
        saved = json.loads((cli.settings.data_dir / "policy" / "andy" / "model.json").read_text())
        assert saved["fallbacks"][0] == {"upstream": "local", "model": "llama3.1:8b"}
        assert "anthropic:claude-sonnet-4-5" in cli("model", "show", "andy").output
        tested = cli("upstream", "test", "local")
        assert tested.exit_code == 0 and "llama3.1:8b answers" in tested.output
        assert local.model_calls()[-1].headers["authorization"] == "Bearer local-secret-value-123"
        assert "local-secret-value" not in tested.output
        refused = cli("upstream", "remove", "local")
        assert refused.exit_code == 2 and "andy use local" in refused.output  # in use: refused in one line
        assert cli("model", "clear", "andy").exit_code == 0
        assert "no model of its own" in cli("model", "show", "andy").output
        assert cli("upstream", "remove", "local").exit_code == 0
    from nanoclaw.models import AuditLog
    actions = [a.action for a in AuditLog.select().order_by(AuditLog.id)]
    for action in ("upstream.add", "model.set", "model.clear", "upstream.remove"):
        assert action in actions


@pytest.mark.parametrize("args, says", [
    (("upstream", "add", "Bad_Name", "--url", "https://x.example", "--auth", "none"), "lower-case letter"),
    (("upstream", "add", "anthropic", "--url", "https://x.example", "--auth", "none"), "default upstream"),
    (("upstream", "add", "plain", "--url", "http://203.0.113.9:11434", "--auth", "none"), "https"),
    (("upstream", "add", "keyless", "--url", "https://x.example", "--auth", "bearer"), "--secret"),
    (("model", "set", "andy", "m", "--upstream", "nowhere"), "no model upstream named 'nowhere'"),
    (("model", "set", "andy", "bad model!"), "not a model id"),
    (("model", "set", "nobody", "m"), "no agent with folder"),
    (("upstream", "test", "nowhere"), "no model upstream"),
])
def test_mistakes_are_one_line(cli, args, says):
    result = cli(*args)
    assert result.exit_code in (1, 2) and says in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_an_upstreams_secret_name_is_reserved_for_routes_and_mcp_servers(cli):
    assert check_secret_name("OPENROUTER_API_KEY") == "OPENROUTER_API_KEY"
    assert cli("upstream", "add", "openrouter", "--url", "https://openrouter.ai/api", "--auth", "bearer",
               "--secret", "OPENROUTER_API_KEY").exit_code == 0
    with pytest.raises(RuleError, match="reserved"):
        check_secret_name("OPENROUTER_API_KEY")
    with pytest.raises(RuleError, match="reserved"):
        check_mcp_server("leak", "python3", [], ["OPENROUTER_API_KEY"])
    refused = cli("credentials", "add", "andy", "/or/", "https://openrouter.ai", "OPENROUTER_API_KEY")
    assert refused.exit_code == 2 and "reserved" in refused.output


def test_doctor_checks_each_upstream_with_the_agents_models_and_says_what_to_fix(cli):
    with FakeModel(script=lambda req: Reply.say("ok", model=req.body["model"])) as good, \
            FakeModel(script=lambda req: Reply.error(401, "invalid key")) as bad:
        assert cli("upstream", "add", "good", "--url", good.url, "--auth", "none", "--prices", "free").exit_code == 0
        assert cli("upstream", "add", "bad", "--url", bad.url, "--auth", "x-api-key", "--secret",
                   "LOCAL_KEY").exit_code == 0
        assert cli("model", "set", "andy", "qwen3:4b", "--upstream", "good").exit_code == 0
        from nanoclaw.cli.doctor import check_upstreams
        found = {f.name: f for f in check_upstreams(cli.settings)}
        assert found["upstream good"].ok and "qwen3:4b answers" in found["upstream good"].detail
        assert "used by andy" in found["upstream good"].detail
        assert not found["upstream bad"].ok and "credential was refused (401)" in found["upstream bad"].detail
        assert "$LOCAL_KEY" in found["upstream bad"].detail and "local-secret-value" not in found["upstream bad"].detail


def test_doctor_says_plainly_what_a_subscription_token_means(make_settings):
    from nanoclaw.cli.doctor import check_subscription
    only_token = check_subscription(make_settings(CLAUDE_CODE_OAUTH_TOKEN="sk-ant-oat01-x"))
    assert "may not be allowed by the provider's terms" in only_token.detail and "API key" in only_token.detail
    both = check_subscription(make_settings(CLAUDE_CODE_OAUTH_TOKEN="sk-ant-oat01-x", ANTHROPIC_API_KEY="sk-ant-k"))
    assert "wins" in both.detail


def test_an_outage_is_told_to_the_owner_once_and_marked_when_the_agent_answers_again(make_settings, sqlite_url):
    from nanoclaw.operator import outages
    from nanoclaw.proxy.outages import Outages
    from nanoclaw.usage.tables import ModelOutage
    from tests.tg_flow import OLIVIA_AND_ANDY, Telegram, edits, sent, telegram_app
    with Telegram() as tg, telegram_app(make_settings, sqlite_url, tg, *OLIVIA_AND_ANDY) as app:
        settings = app.config["NANOCLAW"]
        seen = Outages()
        seen.started("andy", "anthropic", 529, "Overloaded")
        seen.started("andy", "anthropic", 529, "Overloaded")  # the same outage: no second row
        assert outages.tell(settings, None) == 1 and outages.tell(settings, None) == 0
        [card] = [c for c in sent(tg) if "models are not answering" in c["text"]]
        assert str(card["chat_id"]) == "111" and "upstream test anthropic" in card["text"]
        seen.ended("andy")
        outages.tell(settings, None)
        assert any("answers again" in e["text"] for e in edits(tg))
        assert ModelOutage.select().count() == 1
        seen.started("andy", "anthropic", 503, "down")  # a new outage after the recovery: a new card
        assert outages.tell(settings, None) == 1


def test_the_ledger_keeps_upstream_asked_and_answered_model_on_both_databases(app):
    """Migration 0016 made the ledger anew (SQLite cannot change a UNIQUE constraint in place): one row
    per upstream, model asked and model answered, summed in place on SQLite and PostgreSQL alike."""
    from datetime import date

    from nanoclaw.usage import ledger, prices
    from nanoclaw.usage.tables import ModelUsage
    table = prices.load()
    day = date(2026, 11, 26)
    for switched in (False, True, True):
        ledger.record("andy", "s1", "claude-haiku-4-5", prices.Tokens(100, 10), prices.price_of("claude-haiku-4-5", table),
                      day, upstream="backup" if switched else "anthropic", asked_model="claude-haiku-4-5",
                      switched=switched)
    rows = {(r.upstream, r.asked_model, r.model): r for r in ModelUsage.select()}
    assert rows[("backup", "claude-haiku-4-5", "claude-haiku-4-5")].calls == 2
    assert rows[("backup", "claude-haiku-4-5", "claude-haiku-4-5")].switched == 2
    assert rows[("anthropic", "claude-haiku-4-5", "claude-haiku-4-5")].switched == 0
    out = app.test_cli_runner().invoke(args=["nanoclaw", "usage", "--days", "3660"]).output
    assert "backup" in out and "2 call(s) answered by a fallback" in out


def test_a_scoped_admin_may_put_an_agent_only_on_upstreams_the_owner_granted(cli):
    """Issue 60, item 8: an admin of Andy cannot move it to the upstream the owner priced free (its calls
    are never refused for a budget) until the owner grants it; every upstream not priced free is granted
    until the first grant or revoke (installs before grants keep working); the owner is not held back."""
    from nanoclaw.models import AgentGroup, AuditLog
    from nanoclaw.operator import models as ops
    assert cli("user", "add", "telegram:7", "--role", "admin", "--agent", "andy").exit_code == 0
    assert cli("upstream", "add", "local", "--url", "http://127.0.0.1:9", "--auth", "none", "--prices", "free"
               ).exit_code == 0
    assert cli("upstream", "add", "paid", "--url", "http://127.0.0.1:9", "--auth", "none").exit_code == 0
    settings, andy = cli.settings, AgentGroup.get(AgentGroup.folder == "andy")
    assert ops.granted(settings, andy) == {"anthropic", "paid"}
    with pytest.raises(ops.ModelRefused, match="not granted to andy.*upstream grant andy local"):
        ops.set_model(settings, "telegram:7", andy, "llama3.1:8b", "local")
    with pytest.raises(ops.ModelRefused, match="'local' is not granted"):
        ops.set_model(settings, "telegram:7", andy, "claude-sonnet-4-5", fallbacks=["local:llama3.1:8b"])
    assert not (settings.data_dir / "policy" / "andy" / "model.json").exists()  # nothing written
    ops.set_model(settings, "telegram:7", andy, "claude-sonnet-4-5", "paid")  # granted: goes
    granted = cli("upstream", "grant", "andy", "local", "--why", "the home GPU")
    assert granted.exit_code == 0 and "anthropic, local, paid" in granted.output
    ops.set_model(settings, "telegram:7", andy, "llama3.1:8b", "local")
    assert cli("upstream", "revoke", "andy", "paid").exit_code == 0
    with pytest.raises(ops.ModelRefused):
        ops.set_model(settings, "telegram:7", andy, "claude-sonnet-4-5", "paid")
    with pytest.raises(ops.ModelRefused, match="only the owner"):
        ops.grant(settings, "telegram:7", andy, "paid", True)
    wrong = cli("upstream", "grant", "andy", "nowhere")
    assert wrong.exit_code == 2 and "no model upstream 'nowhere'" in wrong.output
    assert [a.action for a in AuditLog.select().where(AuditLog.action.startswith("upstream.g") |
                                                      AuditLog.action.startswith("upstream.r"))] == \
        ["upstream.grant", "upstream.revoke"]
