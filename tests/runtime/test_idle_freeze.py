"""A warm sandbox's CLI is stopped while the chat is quiet and continued by the next message
(issue 19: an idle CLI wakes every second on its own; a stopped one costs nothing)."""
from __future__ import annotations

from pathlib import Path

import pytest

from nanoclaw.runtime.bwrap import _descendants
from tests.outbound.test_nudges import OWNER, _script
from tests.tg_flow import message, sandbox_service, texts

from agent_runner import freezer  # noqa: E402 - container/ is on sys.path (tests/conftest.py)


def test_the_cli_is_stopped_only_after_the_quiet_time_and_only_once():
    assert not freezer.is_due(idle_since=100.0, now=109.9, after_s=10, frozen=False)
    assert freezer.is_due(idle_since=100.0, now=110.0, after_s=10, frozen=False)
    assert not freezer.is_due(idle_since=100.0, now=500.0, after_s=10, frozen=True)
    assert not freezer.is_due(idle_since=100.0, now=500.0, after_s=0, frozen=False)  # switched off


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _cli_of(svc) -> int | None:
    """The host pid of the sandbox's Claude CLI (the SDK starts it with --input-format stream-json)."""
    runtime = svc.runtime
    names = runtime.list_sandboxes(svc.settings.install_id)
    if len(names) != 1:
        return None
    if runtime.name == "docker":
        root = runtime.client.containers.get(names[0]).attrs["State"]["Pid"]
    else:
        root = runtime.pid_of(names[0])
    for pid in _descendants(root) if root else []:
        try:
            if b"stream-json" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        except OSError:
            continue
    return None


@pytest.mark.parametrize("runtime", ["bwrap", "docker"])
def test_an_idle_cli_is_stopped_and_the_next_message_continues_it(make_settings, sqlite_url, runtime):
    quiet = lambda **kw: make_settings(NANOCLAW_FREEZE_IDLE_S="1", **kw)  # noqa: E731
    with sandbox_service(quiet, sqlite_url, _script, runtime=runtime) as svc:
        svc.cli("agent", "create", "Andy")
        svc.cli("user", "add", "telegram:111", "--role", "owner", "--name", "Olivia")
        svc.cli("wire", "telegram", "111", "andy", "--kind", "dm")
        svc.post(message(111, OWNER, "first"))
        svc.wait(lambda: len(texts(svc.tg, 111)) >= 1, timeout=60, what="the first answer")
        cli = svc.wait(lambda: _cli_of(svc), timeout=30, what="the sandbox's CLI")
        svc.wait(lambda: _state(cli) == "T", timeout=30, what="the idle CLI to be stopped")

        svc.post(message(111, OWNER, "second"))
        svc.wait(lambda: len(texts(svc.tg, 111)) >= 2, timeout=60, what="the second answer")
        assert texts(svc.tg, 111) == ["answer to first", "answer to second"]
        assert _cli_of(svc) == cli  # the same CLI answered: continued, not started again
