"""A streamed answer survives kills (issue 63): the service as `make run` starts it (supervisord,
gunicorn, the proxy), a real bubblewrap sandbox, the scripted model writing word by word into a
Telegram group. SIGKILL of the web worker while the live message grows, and of the sandbox's runner
while it grows: each time the finished answer reaches the group once and whole, and every live message
the service showed is deleted (the next web worker takes up the one its predecessor showed, from the
host's record of it)."""
from __future__ import annotations

import json
import os
import signal
import time

import pytest

from conftest import require
from fakes.model_api import FakeModel, Reply
from fakes.telegram_api import TOKEN
from service_harness import SupervisedService, post
from tests.tg_flow import Telegram, sent
from tests.web.test_chat_e2e import runtime_available

SECRET = "wh-secret_stream-faults-0123456789"
OWNER, GROUP = 111222333, -100333
ANSWER = {tag: " ".join(f"{tag}{i:03x}" for i in range(400)) for tag in ("web", "run")}  # 12 s each


def brain(req) -> Reply:
    for tag, text in ANSWER.items():
        if f"kill {tag}" in req.current_prompt():
            return Reply.say(text, chunk_delay_s=0.03)
    return Reply.say("ok")


def update(n: int, text: str) -> bytes:
    return json.dumps({"update_id": 920000000 + n, "message": {
        "message_id": 2000 + n, "from": {"id": OWNER, "is_bot": False, "first_name": "Alice"},
        "chat": {"id": GROUP, "type": "supergroup", "title": "Team"}, "date": int(time.time()),
        "text": f"@andy_test_bot {text}", "entities": [{"offset": 0, "length": 14, "type": "mention"}]}}).encode()


def wait(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := predicate():
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def service(tmp_path):
    from nanoclaw.config import Settings
    ok, why = runtime_available("bwrap", Settings.load(environ={"NANOCLAW_DATA_DIR": str(tmp_path / "probe"),
                                                                "NANOCLAW_RUNTIME": "bwrap"},
                                                       dotenv_path=tmp_path / "none.env"))
    require(ok, why)
    with FakeModel(script=brain) as model, Telegram() as tg:
        svc = SupervisedService(tmp_path, {
            "NANOCLAW_RUNTIME": "bwrap", "ANTHROPIC_UPSTREAM_URL": model.url, "ANTHROPIC_API_KEY": "sk-ant-stream",
            "TELEGRAM_API_BASE": tg.url, "TELEGRAM_BOT_TOKEN": TOKEN, "TELEGRAM_WEBHOOK_SECRET": SECRET,
            "NANOCLAW_PROGRESS_EDIT_S": "1"},
            [["agent", "create", "Andy"], ["user", "add", f"telegram:{OWNER}", "--role", "owner"],
             ["wire", "telegram", str(GROUP), "andy", "--kind", "group"]])
        try:
            yield svc, tg
        finally:
            svc.stop()


@pytest.mark.parametrize("tag, role", [("web", "web-worker"), ("run", "sandbox-runner")])
def test_a_kill_mid_stream_neither_doubles_nor_cuts_the_answer(service, tag, role):
    svc, tg = service
    n = 1 if tag == "web" else 2
    assert post(svc.port, "/webhooks/telegram", update(n, f"please kill {tag}"),
                {"X-Telegram-Bot-Api-Secret-Token": SECRET})[0] == 200
    def in_group():
        return [m for m in sent(tg) if str(m.get("chat_id")) == str(GROUP)]

    def live_ids():
        return {m["_message_id"] for m in in_group() if ANSWER[tag].startswith(m["text"]) and m["text"] != ANSWER[tag]}
    wait(live_ids, 120, "the live message")
    wait(lambda: [e for e in sent(tg, "editMessageText") if int(e["message_id"]) in live_ids()], 30, "an edit of it")
    pid = wait(lambda: svc.roles().get(role), 30, f"the {role}")[0]
    os.kill(pid, signal.SIGKILL)
    if role == "web-worker":
        svc.wait_healthy(60)
    wait(lambda: [m for m in in_group() if m["text"] == ANSWER[tag]], 180, "the answer")
    assert [m["text"] for m in in_group()].count(ANSWER[tag]) == 1  # once, whole

    def deleted():
        return {int(d["message_id"]) for d in sent(tg, "deleteMessage")}
    wait(lambda: live_ids() <= deleted(), 60, "every live message deleted")
    assert [m["text"] for m in in_group()].count(ANSWER[tag]) == 1
