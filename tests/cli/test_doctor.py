"""`doctor` (issue 16): one line per check, ✓ or ✗ with the fix; exit 0 only when nothing failed.

Run through the real CLI against a fake model API (count_tokens), a fake Telegram and the real
bubblewrap runtime; never prints a secret."""
from __future__ import annotations

import re

import pytest

from conftest import require
from fakes.model_api import FakeModel
from fakes.telegram_api import TOKEN, FakeTelegram
from nanoclaw.app import create_app
from nanoclaw.cli.doctor import Finding
from nanoclaw.db import database
from nanoclaw.migrate import apply_pending
from nanoclaw.runtime import bwrap

KEY = "sk-ant-doctor-secret-0123456789"


@pytest.fixture
def fakes():
    with FakeModel() as model, FakeTelegram() as tg:
        model.valid_keys = {KEY}
        yield model, tg


def doctor(make_settings, sqlite_url, model, tg, *, owner=True, args=(), before=(), **env):
    env.setdefault("NANOCLAW_RUNTIME", "bwrap")
    app = create_app(make_settings(DATABASE_URL=sqlite_url, ANTHROPIC_API_KEY=KEY,
                                   ANTHROPIC_UPSTREAM_URL=model.url, TELEGRAM_BOT_TOKEN=TOKEN,
                                   TELEGRAM_API_BASE=tg.url, **env))
    database.connect(reuse_if_open=True)
    apply_pending(database.obj, log=lambda _l: None)
    runner = app.test_cli_runner()
    if owner:
        assert runner.invoke(args=["nanoclaw", "user", "add", "telegram:42", "--role", "owner"]).exit_code == 0
    for step in before:
        assert runner.invoke(args=["nanoclaw", *step]).exit_code == 0, step
    result = runner.invoke(args=["nanoclaw", "doctor", "--no-service", *args])
    database.close()
    assert KEY not in result.output and TOKEN not in result.output and "Traceback" not in result.output
    return result


def lines(result) -> dict[str, str]:
    return {line.split(":", 1)[0][2:]: line for line in result.output.splitlines() if line[:2] in ("✓ ", "✗ ", "· ")}


def test_a_ready_install_is_all_good(make_settings, sqlite_url, fakes):
    require(bwrap.probe() is None, "bubblewrap does not work here")
    model, tg = fakes
    result = doctor(make_settings, sqlite_url, model, tg)
    assert result.exit_code == 0, result.output
    found = lines(result)
    for name in ("model key", "sandbox", "data folder", "timezone", "Telegram", "owner"):
        assert found[name].startswith("✓"), result.output
    assert "@andy_test_bot, long polling" in found["Telegram"]
    assert "remote sandboxes" not in found  # they run here
    assert result.output.rstrip().endswith("all good")
    assert any(r.path == "/v1/messages/count_tokens" for r in model.requests)


def test_a_refused_key_fails_with_the_fix(make_settings, sqlite_url, fakes):
    model, tg = fakes
    model.valid_keys = {"sk-ant-some-other-key"}
    result = doctor(make_settings, sqlite_url, model, tg)
    assert result.exit_code == 1
    assert lines(result)["model key"].startswith("✗ model key: the key was refused (401)")


def test_a_webhook_left_registered_and_no_owner_are_named(make_settings, sqlite_url, fakes):
    require(bwrap.probe() is None, "bubblewrap does not work here")
    model, tg = fakes
    tg.webhook = {"url": "https://old.example.org/webhooks/telegram"}
    result = doctor(make_settings, sqlite_url, model, tg, owner=False)
    assert result.exit_code == 1
    found = lines(result)
    assert found["Telegram"].startswith("✗") and "telegram delete-webhook" in found["Telegram"]
    assert found["owner"].startswith("✗") and "nanoclaw pair" in found["owner"]
    assert "2 problem(s)" in result.output


def test_a_finding_is_one_line():
    assert Finding(True, "x", "fine").line() == "✓ x: fine"
    assert Finding(False, "x", "broken").line() == "✗ x: broken"
    assert Finding(None, "x", "not configured").line() == "· x: not configured"


def test_the_programs_a_configuration_starts():
    from nanoclaw.cli.doctor import expected_programs
    assert expected_programs({}) == ["web", "proxy"]
    assert expected_programs({"TELEGRAM_BOT_TOKEN": "1:a"}) == ["web", "proxy", "telegram-poll"]
    assert expected_programs({"TELEGRAM_BOT_TOKEN": "1:a", "TELEGRAM_WEBHOOK_SECRET": "s", "SLACK_APP_TOKEN": "xapp-1",
                              "DISCORD_BOT_TOKEN": "d"}) == ["web", "proxy", "discord-gateway", "slack-socket"]


def test_docker_the_image_built_from_these_sources_is_current(make_settings, sqlite_url, fakes):
    from nanoclaw.runtime import docker as docker_rt
    from nanoclaw.runtime.image import image_exists
    client, where = docker_rt.connect()
    require(client is not None, f"no Docker engine answers ({where})")
    model, tg = fakes
    settings = make_settings(DATABASE_URL=sqlite_url)
    require(image_exists(settings, client=client), "the agent image is not built (flask --app app nanoclaw image build)")
    result = doctor(make_settings, sqlite_url, model, tg, NANOCLAW_RUNTIME="docker")
    found = lines(result)
    assert found["agent image"] == "✓ agent image: nanoclaw-agent:latest is current", result.output
    assert found["sandbox"].startswith("✓ sandbox: docker started a sandbox"), result.output


def test_remote_sandboxes_name_what_an_agent_has_here_that_they_would_lack(make_settings, sqlite_url, fakes, tmp_path):
    """Issue 44: on another machine an agent's extra mounts are refused (its approved packages come
    through the door); doctor says which agents, and what to do."""
    from nanoclaw.cli.doctor import remote_gaps
    from nanoclaw.models import AgentGroup
    model, tg = fakes
    settings = make_settings(DATABASE_URL=sqlite_url)
    (settings.data_dir / "packages" / "andy" / "python").mkdir(parents=True)
    (settings.data_dir / "packages" / "andy" / "python" / "requests.py").write_text("# approved\n")
    (settings.data_dir / "packages" / "empty").mkdir()
    create_app(settings)
    database.connect(reuse_if_open=True)
    apply_pending(database.obj, log=lambda _l: None)
    AgentGroup.create(folder="andy", name="Andy", container_config={"mounts": [{"host_path": str(tmp_path),
                                                                              "name": "notes"}]})
    AgentGroup.create(folder="bob", name="Bob", container_config={})
    database.close()
    result = doctor(make_settings, sqlite_url, model, tg, NANOCLAW_RUNTIME="kubernetes",
                    NANOCLAW_DOOR_LISTEN="127.0.0.1:1", NANOCLAW_DOOR_URL="https://127.0.0.1:1")
    line = lines(result)["remote sandboxes"]
    assert line.startswith("✗") and "andy: its extra mounts (its sandboxes are refused)" in line
    assert "packages" not in line
    assert "bob" not in line and "empty" not in line and "NANOCLAW_SESSION_TRANSPORT=files" in line
    assert result.exit_code == 1
    assert remote_gaps({"bob": {}}) == []


def test_web_search_is_checked_with_one_real_query_only_when_asked(make_settings, sqlite_url, fakes, monkeypatch):
    """Issue 62: the provider and its key are named; `--search` makes one query, priced as "(doctor)"."""
    from tests.fakes.search_api import BRAVE_KEY, FakeSearch
    model, tg = fakes
    with FakeSearch() as search:
        search.results = [("Tea", "https://example.org/tea", "about tea")]
        monkeypatch.delenv("BRAVE_API_KEY", raising=False)
        missing = lines(doctor(make_settings, sqlite_url, model, tg, NANOCLAW_SEARCH="brave",
                               NANOCLAW_SEARCH_URL=search.url))["web search"]
        assert missing.startswith("✗") and "BRAVE_API_KEY" in missing and search.requests == []
        monkeypatch.setenv("BRAVE_API_KEY", BRAVE_KEY)
        quiet = doctor(make_settings, sqlite_url, model, tg, NANOCLAW_SEARCH="brave", NANOCLAW_SEARCH_URL=search.url)
        assert lines(quiet)["web search"].startswith("✓") and search.requests == []
        spent = doctor(make_settings, sqlite_url, model, tg, args=("--search",), NANOCLAW_SEARCH="brave",
                       NANOCLAW_SEARCH_URL=search.url, NANOCLAW_SEARCH_PRICE="0.005")
        assert "answered one query with 1 result(s)" in lines(spent)["web search"] and len(search.requests) == 1
        assert BRAVE_KEY not in spent.output
        database.connect(reuse_if_open=True)
        row = database.execute_sql("SELECT cost_micro_usd FROM model_usage WHERE agent_folder = '(doctor)'").fetchone()
        database.close()
        assert row[0] == 5000


def test_the_browser_is_checked_with_a_blank_page_in_its_sandbox_once_an_agent_may_use_it(make_settings, sqlite_url,
                                                                                           fakes):
    """Issue 62, item 7: where the browser would run; with an agent allowed it, a real Chromium opens a
    blank page in its own sandbox; NANOCLAW_BROWSERS=0 says it is off."""
    from nanoclaw.reading.browser_sandbox import where
    require(not isinstance(where(make_settings(NANOCLAW_RUNTIME="bwrap")), str), "no browser can run here")
    model, tg = fakes
    idle = lines(doctor(make_settings, sqlite_url, model, tg))["browser"]
    assert "would run in bwrap" in idle and "no agent has it on" in idle
    used = doctor(make_settings, sqlite_url, model, tg,
                  before=(("agent", "create", "Andy"), ("internet", "set", "andy", "--browser", "on")))
    assert re.match(r"✓ browser: Chromium opened a blank page \('blank'\) in its bwrap sandbox in [0-9.]+ s",
                    lines(used)["browser"])
    off = lines(doctor(make_settings, sqlite_url, model, tg, NANOCLAW_BROWSERS="0"))["browser"]
    assert "NANOCLAW_BROWSERS=0" in off


def test_doctor_on_a_database_not_migrated_yet_says_what_to_run(make_settings, tmp_path):
    """Before `migrate`, doctor used to end in a traceback (no such table); now one line and exit 2."""
    from nanoclaw.app import create_app
    app = create_app(make_settings(DATABASE_URL=f"sqlite:///{tmp_path / 'fresh.db'}"))
    try:
        result = app.test_cli_runner().invoke(args=["nanoclaw", "doctor", "--no-service"])
    finally:
        database.close()
    assert result.exit_code == 2 and "migration(s) pending; run: flask --app app nanoclaw migrate" in result.output
    assert "Traceback" not in result.output
