"""End to end: `chat` → router → session → real sandbox → real SDK + CLI → proxy → fake model → reply printed."""
import os
import shutil

import pytest

from conftest import require
from fakes.model_api import FakeModel, Reply
from nanoclaw.runtime import docker as docker_rt
from nanoclaw.runtime.image import image_exists

SECRET = "sk-ant-host-secret-0123456789"


def runtime_available(name, settings):
    if name == "bwrap":
        return shutil.which("bwrap") is not None, "bubblewrap is not installed"
    client, where = docker_rt.connect()
    if client is None:
        return False, f"no Docker engine ({where})"
    return image_exists(settings, client=client), f"no agent image {settings.agent_image} (flask nanoclaw image build)"


@pytest.fixture(params=["bwrap", "docker"])
def runtime_name(request):
    return request.param


@pytest.fixture
def e2e(runtime_name, make_settings, sqlite_url, tmp_path, monkeypatch):
    from nanoclaw.app import create_app
    from nanoclaw.db import database
    from nanoclaw.migrate import apply_pending
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)  # as a user who exported it would have
    with FakeModel(script=lambda req: Reply.say(f"echo: {req.current_prompt()}")) as model:
        settings = make_settings(DATABASE_URL=sqlite_url, ANTHROPIC_UPSTREAM_URL=model.url,
                                 ANTHROPIC_API_KEY=SECRET, NANOCLAW_RUNTIME=runtime_name,
                                 NANOCLAW_INSTALL_ID=f"test-{os.getpid()}")
        ok, why = runtime_available(runtime_name, settings)
        require(ok, why)
        app = create_app(settings)
        database.connect(reuse_if_open=True)
        apply_pending(database.obj, log=lambda _l: None)
        runner = app.test_cli_runner()
        run = lambda *a: runner.invoke(args=["nanoclaw", *a])  # noqa: E731
        assert run("agent", "create", "Andy").exit_code == 0
        yield run, model
        database.close()


def test_chat_prints_the_agents_reply(e2e):
    run, model = e2e
    result = run("chat", "andy", "hello there", "--timeout", "120")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("echo: ") and "hello there</message>" in result.output
    call = model.model_calls()[0]
    assert call.headers.get("x-api-key") == SECRET  # injected by the proxy, outside the sandbox
    assert '<context timezone="UTC" />' in call.current_prompt()


def test_send_message_tool_round_trip(e2e):
    run, model = e2e
    model.script = [Reply.call("mcp__nanoclaw__send_message", text="progress: halfway"), Reply.say("done")]
    result = run("chat", "andy", "work on it", "--timeout", "120")
    assert result.exit_code == 0, result.output
    assert result.output.strip().splitlines()[-2:] == ["progress: halfway", "done"]


def test_no_secret_reaches_the_agent(e2e):
    run, model = e2e
    model.script = [Reply.call("Bash", command="env; cat /proc/1/environ | tr '\\0' '\\n'"), Reply.say("looked")]
    result = run("chat", "andy", "show me your environment", "--timeout", "120")
    assert result.exit_code == 0, result.output
    results = [r.text for r in model.model_calls()[-1].turn_tool_results()]
    assert results and "PATH=" in results[0] and "HOME=/workspace/session/home" in results[0]  # it really ran
    assert SECRET not in " ".join(results)
    for call in model.model_calls():
        assert SECRET not in call.all_text()


def test_model_failure_is_a_short_message_and_exit_1(e2e):
    run, model = e2e
    model.script = [Reply.error(500, "overloaded")] * 10
    result = run("chat", "andy", "hi", "--timeout", "120")
    assert result.exit_code == 1
    assert "retried" in result.output.lower() or "failed" in result.output.lower()
    assert "Traceback" not in result.output


def test_unknown_agent_is_one_line(e2e):
    run, _ = e2e
    result = run("chat", "ghost", "hi")
    assert result.exit_code == 2 or result.exit_code == 1
    assert "no agent with folder 'ghost'" in result.output
