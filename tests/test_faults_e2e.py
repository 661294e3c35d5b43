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
import sqlite3
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


def trail(svc, tg: FakeTelegram, model: FakeModel, markers: list[str]) -> str:
    """Where each of these markers went: the model turns whose prompt carried it, the chat replies,
    and the session's rows (inbound status and tries, the runner's ack, the replies written)."""
    lines = []
    calls = model.model_calls()
    for m in markers:
        pattern = re.compile(rf"{m}\b")
        turns = [i for i, r in enumerate(calls) if pattern.search(r.current_prompt())]
        lines.append(f"{m}: in model calls {turns} of {len(calls)}")
        for i in turns:
            said = [j for j, msg in enumerate(calls[i].messages) if pattern.search(json.dumps(msg.get("content")))]
            at = time.strftime("%H:%M:%S", time.gmtime(calls[i].received_at))
            lines.append(f"  call {i} at {at}: {len(calls[i].messages)} messages, the marker in {said}; "
                         f"prompt ...{calls[i].current_prompt()[-200:]!r}")
    for folder in (svc.root / "data" / "sessions").glob("*/*"):
        try:
            inbound = sqlite3.connect(f"file:{folder / 'host' / 'inbound.db'}?mode=ro", uri=True)
            outbound = sqlite3.connect(f"file:{folder / 'agent' / 'outbound.db'}?mode=ro", uri=True)
            for m in markers:
                for mid, status, tries in inbound.execute(
                        "SELECT id, status, tries FROM messages_in WHERE content LIKE ?", (f'%"note {m}"%',)):
                    ack = outbound.execute("SELECT status, status_changed FROM processing_ack WHERE message_id = ?",
                                           (mid,)).fetchall()
                    lines.append(f"{m}: {mid} {status} tries={tries} ack={ack}")
            for seq, ts, text in outbound.execute("SELECT seq, timestamp, content FROM messages_out"):
                found = [m for m in markers if re.search(rf"{m}\b", text)]
                if found:
                    lines.append(f"reply seq {seq} at {ts}: {text[:160]}")
        except sqlite3.Error as exc:
            lines.append(f"{folder}: {exc}")
    return "\n".join(lines)


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
            yield svc, tg, model
        finally:
            svc.stop()


def test_killing_any_process_loses_no_message_and_answers_none_twice(service):
    svc, tg, model = service
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
    assert (lost, twice) == ([], []), \
        f"killed {Counter(killed)}\n{trail(svc, tg, model, lost + twice)}\n{svc.log()[-4000:]}"
    assert len(set(killed)) >= 3, killed  # the rounds reached several kinds of process
    print(f"killed {dict(Counter(killed))}; {len(acknowledged)} messages acknowledged, each answered once")
