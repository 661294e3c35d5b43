"""Faults (issue 15): kill any process of the running service at a random moment during traffic,
20 rounds, on both runtimes: every message the service acknowledged is answered, and none twice.

The service runs as `make run` starts it (supervisord: gunicorn web, whose worker holds the
background, and the proxy), with a real sandbox, the real SDK and CLI, a fake Telegram and a
scripted fake model that answers each turn with the markers of its prompt. A sender posts one
DM after another; like Telegram, it sends an update again until it is acknowledged with 200. A
killer SIGKILLs one process each round, picked at random among those running: the gunicorn
master, its worker, the proxy, the sandbox's runner, the sandbox's CLI."""
from __future__ import annotations

import json
import os
import random
import re
import signal
import threading
import time
from collections import Counter

import pytest

from conftest import require
from fakes.model_api import FakeModel, Reply
from fakes.telegram_api import TOKEN, FakeTelegram
from service_harness import SupervisedService, post
from nanoclaw.config import Settings
from test_chat_e2e import runtime_available

ROUNDS = 20
SECRET = "wh-secret_faults-0123456789"
OWNER = 111222333
MARKER = re.compile(r"fault-\d+")


def answer(req) -> Reply:
    found = sorted(set(MARKER.findall(req.current_prompt())), key=lambda m: int(m.split("-")[1]))
    return Reply.say("ack " + " ".join(found) if found else "ok")


def update(n: int) -> bytes:
    return json.dumps({"update_id": 910000000 + n, "message": {
        "message_id": 1000 + n, "from": {"id": OWNER, "is_bot": False, "first_name": "Alice"},
        "chat": {"id": OWNER, "type": "private", "first_name": "Alice"}, "date": int(time.time()),
        "text": f"note fault-{n}"}}).encode()


def answers(tg: FakeTelegram) -> Counter:
    """marker -> how many replies carrying it reached the chat."""
    seen: Counter = Counter()
    for call in tg.accepted(lambda r: r.path.endswith("/sendMessage")):
        text = str((call.json or {}).get("text") or call.form.get("text") or "")
        if text.startswith("ack "):
            seen.update(set(MARKER.findall(text)))
    return seen


class Sender(threading.Thread):
    """One DM after another, each sent again until acknowledged (as Telegram does)."""

    def __init__(self, port: int):
        super().__init__(name="fault-sender", daemon=True)
        self.port, self.acknowledged, self.stop = port, [], threading.Event()

    def run(self):
        n = 0
        while not self.stop.is_set():
            n += 1
            body = update(n)
            while True:
                status, _ = post(self.port, "/webhooks/telegram", body, {"X-Telegram-Bot-Api-Secret-Token": SECRET})
                if status == 200:
                    self.acknowledged.append(f"fault-{n}")
                    break
                if self.stop.wait(0.5):
                    return
            self.stop.wait(0.4)


@pytest.fixture(params=["bwrap", "docker"])
def service(request, tmp_path):
    runtime_name = request.param
    ok, why = runtime_available(runtime_name, Settings.load(environ={
        "NANOCLAW_DATA_DIR": str(tmp_path / "probe"), "NANOCLAW_RUNTIME": runtime_name},
        dotenv_path=tmp_path / "none.env"))
    require(ok, why)
    with FakeModel(script=answer) as model, FakeTelegram() as tg:
        svc = SupervisedService(tmp_path, {
            "NANOCLAW_RUNTIME": runtime_name, "ANTHROPIC_UPSTREAM_URL": model.url,
            "ANTHROPIC_API_KEY": "sk-ant-faults-secret", "TELEGRAM_API_BASE": tg.url, "TELEGRAM_BOT_TOKEN": TOKEN,
            "TELEGRAM_WEBHOOK_SECRET": SECRET},
            [["agent", "create", "Andy"], ["user", "add", f"telegram:{OWNER}", "--role", "owner"],
             ["wire", "telegram", str(OWNER), "andy"]])
        try:
            yield svc, tg
        finally:
            svc.stop()


def test_killing_any_process_loses_no_message_and_answers_none_twice(service):
    svc, tg = service
    rnd = random.Random(15)
    sender = Sender(svc.port)
    sender.start()
    killed = []
    try:
        for _ in range(ROUNDS):
            time.sleep(rnd.uniform(1.0, 4.0))
            roles = svc.roles()
            require(roles, "no process of the service found to kill")
            role = rnd.choice(sorted(roles))
            pid = rnd.choice(roles[role])
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(role)
            except ProcessLookupError:
                continue  # it ended on its own meanwhile
            if role.startswith("web") or role == "proxy":
                svc.wait_healthy(60)
    finally:
        sender.stop.set()
        sender.join(30)
    acknowledged = list(sender.acknowledged)
    assert len(acknowledged) >= ROUNDS, (killed, svc.log()[-3000:])
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not set(acknowledged) <= set(answers(tg)):
        time.sleep(1)
    seen = answers(tg)
    lost = [m for m in acknowledged if m not in seen]
    twice = sorted(m for m, count in seen.items() if count > 1)
    assert (lost, twice) == ([], []), f"killed {Counter(killed)}\n{svc.log()[-4000:]}"
    assert len(set(killed)) >= 3, killed  # the rounds reached several kinds of process
    print(f"killed {dict(Counter(killed))}; {len(acknowledged)} messages acknowledged, each answered once")
