"""Faults (issue 15): kill any process of the running service at a random moment during traffic,
20 rounds, on both runtimes: every message the service acknowledged is answered, and none twice.
The one exception is the documented one (docs/security.md): a reply whose sending process was killed
between marking it `sending` and the platform receiving it counts as sent, so it may be lost, never
doubled. Such a reply must be on record as interrupted, and there can be no more of them than kills
of the web worker or its master.

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
from nanoclaw.outbound.delivery import INTERRUPTED
from tests.web.test_chat_e2e import runtime_available

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


def chat_texts(tg: FakeTelegram) -> list[str]:
    """The texts of the messages that reached the chat, in order."""
    return [str((call.json or {}).get("text") or call.form.get("text") or "")
            for call in tg.accepted(lambda r: r.path.endswith("/sendMessage"))]


def answers(tg: FakeTelegram) -> Counter:
    """marker -> how many replies carrying it reached the chat."""
    seen: Counter = Counter()
    for text in chat_texts(tg):
        if text.startswith("ack "):
            seen.update(set(MARKER.findall(text)))
    return seen


def session_dbs(svc):
    """(folder, a read-only connection on its inbound.db with outbound.db attached as `ob`) for each
    session; sqlite3.Error reaches the caller (a file mid-write)."""
    for folder in sorted((svc.root / "data" / "sessions").glob("*/*")):
        conn = sqlite3.connect(f"file:{folder / 'host' / 'inbound.db'}?mode=ro", uri=True)
        try:
            conn.execute("ATTACH ? AS ob", (f"file:{folder / 'agent' / 'outbound.db'}?mode=ro",))
            yield folder, conn
        finally:
            conn.close()


def trail(svc, tg: FakeTelegram, model: FakeModel, markers: list[str]) -> str:
    """Where each of these markers went: the model turns whose prompt carried it, the chat replies,
    the transcript, and the session's rows (inbound status and tries, the runner's ack, the replies
    written and their delivery)."""
    patterns = {m: re.compile(rf"{m}\b") for m in markers}
    lines = []
    calls = model.model_calls()
    sends = chat_texts(tg)
    for m, pattern in patterns.items():
        turns = [i for i, r in enumerate(calls) if pattern.search(r.current_prompt())]
        lines.append(f"{m}: in model calls {turns} of {len(calls)}")
        for i in turns:
            said = [j for j, msg in enumerate(calls[i].messages) if pattern.search(json.dumps(msg.get("content")))]
            at = time.strftime("%H:%M:%S", time.gmtime(calls[i].received_at))
            lines.append(f"  call {i} at {at}: {len(calls[i].messages)} messages, the marker in {said}; "
                         f"prompt ...{calls[i].current_prompt()[-200:]!r}")
        lines.append(f"{m}: in chat messages {[i for i, t in enumerate(sends) if pattern.search(t)]} of {len(sends)}")

    def carried(text: str) -> list[str]:
        return [m for m, pattern in patterns.items() if pattern.search(text)]
    try:
        for folder, conn in session_dbs(svc):
            for transcript in sorted(folder.glob("agent/home/.claude/projects/*/*.jsonl")):
                for n, line in enumerate(transcript.read_text(errors="replace").splitlines()):
                    if found := carried(line):
                        entry = json.loads(line) if line.startswith("{") else {}
                        lines.append(f"transcript {transcript.stem[:8]} line {n}: {entry.get('type')} "
                                     f"{str(entry.get('uuid'))[:8]}<-{str(entry.get('parentUuid'))[:8]} {found}")
            for m in markers:
                for mid, status, tries, ack in conn.execute(
                        "SELECT m.id, m.status, m.tries, a.status || ' ' || a.status_changed FROM messages_in m "
                        "LEFT JOIN ob.processing_ack a ON a.message_id = m.id WHERE m.content LIKE ?",
                        (f'%"note {m}"%',)):
                    lines.append(f"{m}: {mid} {status} tries={tries} ack={ack}")
            for seq, ts, text, sent in conn.execute(
                    "SELECT o.seq, o.timestamp, o.content, d.status || ' tries ' || d.tries || ' ' || "
                    "COALESCE(d.last_error, '') FROM ob.messages_out o LEFT JOIN delivered d "
                    "ON d.message_out_id = o.id"):
                if carried(text):
                    lines.append(f"reply seq {seq} at {ts}: {text[:160]} delivered={sent}")
    except sqlite3.Error as exc:
        lines.append(f"sessions: {exc}")
    return "\n".join(lines)


def interrupted_replies(svc) -> list[str]:
    """The texts of replies the service settled as sent after their sender was killed mid-send."""
    try:
        return [text for _folder, conn in session_dbs(svc) for (text,) in conn.execute(
            "SELECT o.content FROM ob.messages_out o JOIN delivered d ON d.message_out_id = o.id "
            "WHERE d.last_error = ?", (INTERRUPTED,))]
    except sqlite3.Error:  # a file mid-write: asked again on the next look
        return []


def counted_as_sent(svc) -> set[str]:
    return {m for text in interrupted_replies(svc) for m in MARKER.findall(text)}


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
    while time.monotonic() < deadline and not set(acknowledged) <= set(answers(tg)) | counted_as_sent(svc):
        time.sleep(1)
    seen = answers(tg)
    lost = [m for m in acknowledged if m not in seen]
    twice = sorted(m for m, count in seen.items() if count > 1)
    interrupted = counted_as_sent(svc)
    # the documented loss: whole replies on record as interrupted, at most one per web process killed
    by_rule = [m for m in lost if m in interrupted]
    replies_cut = [t for t in interrupted_replies(svc) if MARKER.search(t)]
    lost = [m for m in lost if m not in interrupted]
    web_kills = sum(1 for role in killed if role.startswith("web"))
    assert (lost, twice) == ([], []) and len(replies_cut) <= web_kills, \
        f"killed {Counter(killed)}\n{trail(svc, tg, model, lost + twice + by_rule)}\n{svc.log()[-4000:]}"
    assert len(set(killed)) >= 3, killed  # the rounds reached several kinds of process
    print(f"killed {dict(Counter(killed))}; {len(acknowledged)} messages acknowledged, each answered once"
          + (f" but {by_rule}, whose reply was cut off by a kill mid-send (counted as sent)" if by_rule else ""))
