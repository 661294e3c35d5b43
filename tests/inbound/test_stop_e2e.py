"""/stop against a real sandbox on both runtimes: a turn in a 60-second tool step ends, the tool's
process with it; the chat is told "Stopped." and nothing of that turn comes after; the messages
count as answered; the sandbox stays up and the conversation goes on."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from nanoclaw.inbound import stopping
from nanoclaw.models import Session
from nanoclaw.sessions import session_schema as schema
from nanoclaw.sessions.store import session_path
from tests.fakes.model_api import Reply
from tests.inbound.test_intake import ANNA, SETUP
from tests.tg_flow import message, sandbox_service, texts

DONE = "Done with the long job."
HELLO = "Hello again."


def marker(runtime: str) -> str:
    return f"nanoclaw-stop-e2e-{os.getpid()}-{runtime}"


def scripted(mark: str):
    def script(req) -> Reply:
        if "long job" in req.current_prompt():
            if not req.turn_tool_results():
                return Reply.call("Bash", command=f"python3 -c 'import time; time.sleep(60)' {mark}", timeout=120_000,
                                  description="the long step")
            return Reply.say(DONE)
        return Reply.say(HELLO)
    return script


def tool_processes(mark: str) -> list[int]:
    """Processes on this machine whose command line carries the mark (a container's too: one kernel)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if mark.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def inbound_statuses(settings) -> dict[str, str]:
    session = Session.get()
    path = session_path(settings.sessions_dir, "andy", session.id) / "host" / schema.INBOUND
    conn = schema.connect(path, readonly=True)
    try:
        return {json.loads(r[0])["text"]: r[1] for r in conn.execute("SELECT content, status FROM messages_in")}
    finally:
        conn.close()


@pytest.mark.parametrize("runtime", ["bwrap", "docker"])
def test_stop_ends_a_turn_in_a_long_tool_step_and_the_conversation_goes_on(make_settings, sqlite_url, runtime):
    mark = marker(runtime)
    with sandbox_service(make_settings, sqlite_url, scripted(mark), runtime=runtime) as svc:
        for args in SETUP:
            svc.cli(*args)
        svc.post(message(4242, ANNA, "please run the long job"))
        svc.wait(lambda: tool_processes(mark), timeout=180, what="the long tool step running")
        svc.post(message(4242, ANNA, "/stop", command=True))
        assert stopping.STOPPED in texts(svc.tg, 4242)  # told at once, by the host
        svc.wait(lambda: not tool_processes(mark), timeout=30, what="the tool's process ended")
        svc.wait(lambda: inbound_statuses(svc.settings).get("please run the long job") == "completed",
                 timeout=60, what="the stopped turn's message counted as answered")
        svc.post(message(4242, ANNA, "still there?"))
        svc.wait(lambda: HELLO in texts(svc.tg, 4242), timeout=120, what="the next answer")
        said = [t for t in texts(svc.tg, 4242) if not t.startswith("⏳")]  # a long turn's status line aside
        assert said == [stopping.STOPPED, HELLO], said
        long_job = [r for r in svc.model.model_calls() if "long job" in r.current_prompt()]
        assert len(long_job) == 1 and not any(DONE in t for t in said)
        assert "/stop" not in inbound_statuses(svc.settings)  # never stored
