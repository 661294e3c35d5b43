"""Telegram by long polling, the whole service (issue 16): `make run`'s supervisord starts the
`telegram-poll` program when a bot token is set and no webhook secret; a DM pushed at the fake Bot
API is answered through a real sandbox. Killing the poller and the web program at random moments
(10 rounds) loses no update and answers none twice."""
from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter

import pytest

from conftest import require
from fakes.model_api import FakeModel
from fakes.telegram_api import TOKEN, FakeTelegram
from service_harness import SupervisedService
from tests.lifecycle.test_faults_e2e import OWNER, answer, answers

ROUNDS = 10


def update(n: int) -> dict:
    return {"update_id": 920000000 + n, "message": {
        "message_id": 2000 + n, "from": {"id": OWNER, "is_bot": False, "first_name": "Alice"},
        "chat": {"id": OWNER, "type": "private", "first_name": "Alice"}, "date": int(time.time()),
        "text": f"note fault-{n}"}}


@pytest.fixture
def service(tmp_path):
    require(__import__("shutil").which("bwrap") is not None, "bubblewrap is not installed")
    with FakeModel(script=answer) as model, FakeTelegram() as tg:
        svc = SupervisedService(tmp_path, {
            "NANOCLAW_RUNTIME": "bwrap", "ANTHROPIC_UPSTREAM_URL": model.url,
            "ANTHROPIC_API_KEY": "sk-ant-poll-secret", "TELEGRAM_API_BASE": tg.url, "TELEGRAM_BOT_TOKEN": TOKEN},
            [["agent", "create", "Andy"], ["user", "add", f"telegram:{OWNER}", "--role", "owner"],
             ["wire", "telegram", str(OWNER), "andy"]])
        try:
            yield svc, tg
        finally:
            svc.stop()


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_polled_updates_are_answered_once_while_the_poller_and_web_are_killed(service):
    svc, tg = service
    wait_for(lambda: "telegram-poll" in svc.roles(), 30, "the telegram-poll program")
    tg.push_update(update(0))
    wait_for(lambda: answers(tg).get("fault-0") == 1, 90, "the first answer")

    rnd = random.Random(16)
    killed, n = [], 0
    for _ in range(ROUNDS):
        for _ in range(rnd.randint(1, 3)):
            n += 1
            tg.push_update(update(n))
        time.sleep(rnd.uniform(0.2, 2.0))
        roles = {k: v for k, v in svc.roles().items() if k in ("telegram-poll", "web-master", "web-worker")}
        if not roles:
            continue
        role = rnd.choice(sorted(roles))
        try:
            os.kill(rnd.choice(roles[role]), signal.SIGKILL)
            killed.append(role)
        except ProcessLookupError:
            continue
    markers = {f"fault-{i}" for i in range(n + 1)}
    wait_for(lambda: markers <= set(answers(tg)), 240, f"answers to all {n + 1} updates")
    seen = answers(tg)
    assert sorted(m for m, c in seen.items() if c > 1) == [], (Counter(killed), svc.log()[-4000:])
    assert {"telegram-poll", "web-worker"} <= set(killed) or len(set(killed)) >= 2, killed
    print(f"killed {dict(Counter(killed))}; {n + 1} updates, each answered once")


def test_doctor_sees_the_running_programs(service):
    import subprocess
    import sys
    from pathlib import Path
    svc, _tg = service
    wait_for(lambda: "telegram-poll" in svc.roles(), 30, "the telegram-poll program")
    flask = str(Path(sys.executable).parent / "flask")
    done = subprocess.run([flask, "--app", "app", "nanoclaw", "doctor"], env=svc.env, capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parents[2])
    line = [x for x in done.stdout.splitlines() if x.startswith(("✓ service", "✗ service"))]
    assert line and line[0].startswith("✓ service: running: web, proxy, telegram-poll; healthy"), done.stdout
    assert "sk-ant-poll-secret" not in done.stdout and TOKEN not in done.stdout
    # a program that stopped is named, and doctor fails
    import xmlrpc.client
    from supervisor.xmlrpc import SupervisorTransport
    transport = SupervisorTransport(None, None, serverurl=f"unix://{svc.root / 'data' / 'supervisor.sock'}")
    xmlrpc.client.ServerProxy("http://127.0.0.1", transport=transport).supervisor.stopProcess("telegram-poll")
    done = subprocess.run([flask, "--app", "app", "nanoclaw", "doctor"], env=svc.env, capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 1 and "✗ service: not running: telegram-poll (STOPPED)" in done.stdout, done.stdout
