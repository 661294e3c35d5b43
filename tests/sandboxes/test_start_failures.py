"""A sandbox that fails to start is not restarted every 10 s in silence: after three failed starts in
a row the chat is told once, with the reason from the sandbox's log, and further starts back off;
a start whose runner comes up resets the count. Real bwrap and Docker sandboxes whose runner entry
is broken (it dies on an import error), a Docker image tag that is missing, and the real Telegram
adapter against a fake Bot API."""
from __future__ import annotations

import os
import time
import uuid

import pytest

from fakes.telegram_api import TOKEN, FakeTelegram
from nanoclaw.sandboxes import manager as sandboxes
from nanoclaw.service import tell_owner
from nanoclaw.runtime import bwrap as bwrap_rt
from nanoclaw.runtime import docker as docker_rt
from nanoclaw.sandboxes.manager import SandboxManager, sandbox_name
from nanoclaw.sessions import store
from nanoclaw.sandboxes.start_failures import (MAX_BACKOFF_S, NOTICE_AFTER, StartState, came_up, short_reason,
                                               should_tell, wait_s)
from nanoclaw.db import database
from tests.conftest import _build_app, require

FOLDER, CHAT = "andy", store.Target("telegram", "4242")
BROKEN = "import nanoclaw_missing_dependency  # a runner whose requirements are not installed\n"
WORKING = ("import os, pathlib, time\n"
           "(pathlib.Path(os.environ['NANOCLAW_SESSION_DIR']) / 'heartbeat').touch()\n"
           "time.sleep(60)\n")


# --- pure ------------------------------------------------------------------------------------------

def test_backoff_starts_after_the_notice_and_doubles_up_to_five_minutes():
    assert [wait_s(n, 1000.0, 1000.0) for n in range(NOTICE_AFTER)] == [0.0] * NOTICE_AFTER
    waits = [wait_s(n, 1000.0, 1000.0) for n in range(NOTICE_AFTER, NOTICE_AFTER + 7)]
    assert waits == [20.0, 40.0, 80.0, 160.0, 300.0, 300.0, 300.0] and max(waits) == MAX_BACKOFF_S
    assert wait_s(NOTICE_AFTER, 1000.0, 1015.0) == 5.0 and wait_s(NOTICE_AFTER, 1000.0, 1030.0) == 0.0


def test_a_start_counts_as_up_once_the_runner_touched_its_heartbeat():
    assert came_up(100.0, 100.5) and not came_up(100.0, 99.0) and not came_up(100.0, None)
    assert not should_tell(StartState(failures=NOTICE_AFTER - 1))
    assert should_tell(StartState(failures=NOTICE_AFTER)) and not should_tell(StartState(failures=9, told=True))


def test_the_reason_is_the_line_that_says_what_went_wrong():
    traceback = ("2026-01-01 INFO agent_runner: runner start\nTraceback (most recent call last):\n"
                 '  File "<frozen runpy>", line 198, in _run_module_as_main\n'
                 "ModuleNotFoundError: No module named 'claude_agent_sdk'\n")
    assert short_reason(traceback) == "ModuleNotFoundError: No module named 'claude_agent_sdk'"
    assert short_reason("bwrap: Can't find source path /nope: No such file or directory\n").startswith("bwrap: Can't")
    assert short_reason("") == "it stopped right after starting"
    assert short_reason("x" * 500).endswith("…") and len(short_reason("x" * 500)) == 200


# --- real sandboxes --------------------------------------------------------------------------------

@pytest.fixture
def tg():
    with FakeTelegram() as fake:
        yield fake


def runner_dir(root, source: str):
    """A runner entry (`python -m agent_runner`) with `source` as its __main__."""
    d = root / f"runner-{uuid.uuid4().hex[:6]}"
    (d).mkdir()
    (d / "__init__.py").write_text("")
    (d / "__main__.py").write_text(source)
    return d


def make_runtime(kind: str, settings):
    if kind == "docker":
        client, where = docker_rt.connect()
        require(client is not None, f"no Docker engine answers ({where})")
        try:
            client.images.get(settings.agent_image)
        except Exception:  # noqa: BLE001
            require(False, f"no image {settings.agent_image} (flask --app app nanoclaw image build)")
        return docker_rt.DockerRuntime(client, image=settings.agent_image)
    problem = bwrap_rt.probe()
    require(problem is None, f"bubblewrap does not work here: {problem}")
    return bwrap_rt.BwrapRuntime(settings.data_dir / "run" / "bwrap")


@pytest.fixture
def bound_db(sqlite_url):
    """The central database a start reads (the agent group's settings), migrated and bound: this
    file's tests must not lean on one an earlier test left bound."""
    yield sqlite_url
    database.close()


@pytest.fixture(params=["bwrap", "docker"])
def setup(request, make_settings, tg, tmp_path, bound_db):
    settings = make_settings(TELEGRAM_BOT_TOKEN=TOKEN, TELEGRAM_API_BASE=tg.url, TELEGRAM_WEBHOOK_SECRET="s" * 20,
                             NANOCLAW_INSTALL_ID=f"sf-{os.getpid()}-{uuid.uuid4().hex[:4]}", DATABASE_URL=bound_db)
    _build_app(settings)
    runtime = make_runtime(request.param, settings)
    session_id = store.new_session_id()
    path = store.session_path(settings.sessions_dir, FOLDER, session_id)
    store.prepare(path, CHAT)
    store.write_message(path, content={"text": "good morning", "sender": "Olga"}, target=CHAT)
    (settings.proxy_dir / FOLDER).mkdir(parents=True)
    (settings.proxy_dir / FOLDER / "proxy.sock").touch()  # the door is not what fails here
    name = sandbox_name(settings.install_id, FOLDER, session_id)
    yield settings, runtime, session_id, name
    runtime.stop(name, timeout=1)


def wait_gone(runtime, name, timeout=30.0):
    deadline = time.monotonic() + timeout
    while runtime.is_running(name):
        assert time.monotonic() < deadline, f"{name} is still running"
        time.sleep(0.05)


def sent(tg) -> list[str]:
    return [c["text"] for c in tg.calls("sendMessage")]


def test_a_runner_that_crashes_at_start_is_told_once_then_backed_off(setup, tg, monkeypatch, tmp_path):
    settings, runtime, session_id, name = setup
    monkeypatch.setattr(sandboxes, "RUNNER_DIR", runner_dir(tmp_path, BROKEN))
    manager = SandboxManager(settings, runtime, on_refused=tell_owner(settings), capabilities_for=lambda _f: {})
    for attempt in range(NOTICE_AFTER):  # what the sweep does every 10 s: the session has due work
        assert manager.wake(FOLDER, session_id), f"start {attempt + 1} was not tried"
        wait_gone(runtime, name)
        assert sent(tg) == []
    assert manager.wake(FOLDER, session_id) is False  # the third failure is judged: told, and backing off
    [notice] = sent(tg)
    assert notice.startswith("(Your agent could not start: ModuleNotFoundError: No module named "
                             "'nanoclaw_missing_dependency'. It failed to start 3 times in a row")
    assert [str(c["chat_id"]) for c in tg.calls("sendMessage")] == ["4242"]
    state = manager.failures.state(name)
    assert state.failures == NOTICE_AFTER

    assert manager.wake(FOLDER, session_id) is False  # 10 s later, say: still waiting, nothing started
    assert not runtime.is_running(name) and manager.failures.state(name).failures == NOTICE_AFTER

    state.last_failure_at -= wait_s(state.failures, 0, 0)  # the backoff has passed: one more try
    assert manager.wake(FOLDER, session_id)
    wait_gone(runtime, name)
    assert manager.wake(FOLDER, session_id) is False and manager.failures.state(name).failures == NOTICE_AFTER + 1
    assert len(sent(tg)) == 1  # told once per streak

    monkeypatch.setattr(sandboxes, "RUNNER_DIR", runner_dir(tmp_path, WORKING))  # the owner fixed it
    manager.failures.state(name).last_failure_at -= MAX_BACKOFF_S
    assert manager.wake(FOLDER, session_id)
    heartbeat = store.session_path(settings.sessions_dir, FOLDER, session_id) / "agent" / "heartbeat"
    deadline = time.monotonic() + 30
    while not heartbeat.exists():
        assert time.monotonic() < deadline, "the fixed runner never came up"
        time.sleep(0.05)
    manager.stop(FOLDER, session_id)
    assert manager.failures.state(name) is None  # a start that came up resets the count

    monkeypatch.setattr(sandboxes, "RUNNER_DIR", runner_dir(tmp_path, BROKEN))  # broken again: a new streak
    assert manager.wake(FOLDER, session_id)
    wait_gone(runtime, name)
    assert manager.wake(FOLDER, session_id) and manager.failures.state(name).failures == 1
    assert len(sent(tg)) == 1


def test_a_missing_image_tag_is_not_pulled_and_is_told_once(make_settings, tg, bound_db):
    settings = make_settings(TELEGRAM_BOT_TOKEN=TOKEN, TELEGRAM_API_BASE=tg.url, TELEGRAM_WEBHOOK_SECRET="s" * 20,
                             NANOCLAW_INSTALL_ID=f"sf-{os.getpid()}", DATABASE_URL=bound_db)
    _build_app(settings)
    runtime = make_runtime("docker", settings)
    session_id = store.new_session_id()
    path = store.session_path(settings.sessions_dir, FOLDER, session_id)
    store.prepare(path, CHAT)
    (settings.proxy_dir / FOLDER).mkdir(parents=True)
    (settings.proxy_dir / FOLDER / "proxy.sock").touch()
    manager = SandboxManager(settings, runtime, on_refused=tell_owner(settings),
                             capabilities_for=lambda _f: {"image": "nanoclaw-agent-gone:0123456789ab"})
    started = time.monotonic()
    for _ in range(NOTICE_AFTER + 2):
        assert manager.wake(FOLDER, session_id) is False
    assert time.monotonic() - started < 5  # no registry lookups
    assert manager.failures.state(sandbox_name(settings.install_id, FOLDER, session_id)).failures == NOTICE_AFTER
    assert sent(tg) == ["(Your agent could not start: no image nanoclaw-agent-gone:0123456789ab on this Docker "
                        "engine (agent images are built here, never pulled). It failed to start 3 times in a row; "
                        "I will keep trying, less often (at most every 5 minutes), and the details are in the "
                        "service log)"]
