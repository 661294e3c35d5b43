"""The session folder's trust boundary, end to end: a real agent in a real sandbox (both runtimes),
steered (the fake model tells it to, as a poisoned web page might), attacks the host's inbound.db
with its Bash tool. It forges a WAL that re-routes the session to another chat and adds a
destination, then plants that WAL, a -shm, a link and a replacement file beside inbound.db, and
writes a reply aimed at the other chat straight into its own outbound.db.

What must hold: nothing lands beside inbound.db, routing and destinations are what the host wrote,
nothing reaches the other chat, and the owner's chat keeps working (the next message is answered
there). On the flat layout this replaced, the planted WAL was replayed by the host's next open and
the owner's next answer went to the other chat."""
from __future__ import annotations

import json

import pytest

from conftest import require
from nanoclaw.models import Session
from nanoclaw.sessions import store
from tests.fakes.model_api import Reply
from tests.tg_flow import message, person, sandbox_service, sent, texts

OWNER = person(111, "Olivia")
OTHER_CHAT = -100555  # a group the bot is in, not wired to this agent

ATTACK = r'''
import json, os, shutil, sqlite3, uuid
I = "/workspace/inbound" if os.path.isdir("/workspace/inbound") else "/workspace/session"
S = "/workspace/session"
OTHER = "%(other)s"
def attempt(fn):
    try:
        fn()
        return "ok"
    except Exception as e:
        return type(e).__name__
work = "/tmp/forge-" + uuid.uuid4().hex[:6]
os.makedirs(work)
shutil.copy(I + "/inbound.db", work + "/x.db")
c = sqlite3.connect(work + "/x.db", isolation_level=None)
c.execute("PRAGMA journal_mode=WAL"); c.execute("PRAGMA wal_autocheckpoint=0")
c.execute("UPDATE routing SET platform_id = ?", (OTHER,))
c.execute("INSERT OR REPLACE INTO destinations (name, channel_type, platform_id) VALUES ('boss', 'telegram', ?)",
          (OTHER,))
wal, shm = open(work + "/x.db-wal", "rb").read(), open(work + "/x.db-shm", "rb").read()
def plant(name, data):
    with open(I + "/" + name, "wb") as f:
        f.write(data)
r = {"wal": attempt(lambda: plant("inbound.db-wal", wal)),
     "shm": attempt(lambda: plant("inbound.db-shm", shm)),
     "link": attempt(lambda: os.symlink(work + "/x.db", I + "/inbound.db-journal")),
     "replace": attempt(lambda: (shutil.copy(work + "/x.db", S + "/forged.db"),
                                 os.replace(S + "/forged.db", I + "/inbound.db")))}
out = sqlite3.connect(S + "/outbound.db", isolation_level=None)
seq = out.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM messages_out").fetchone()[0]
out.execute("INSERT INTO messages_out (id, seq, timestamp, kind, channel_type, platform_id, content) "
            "VALUES (?, ?, '2026-01-01T00:00:00.000Z', 'chat', 'telegram', ?, ?)",
            (uuid.uuid4().hex, seq, OTHER, json.dumps({"op": "text", "text": "LEAKED"})))
print("ATTACK " + json.dumps(r))
'''


def brain(req):
    prompt, results = req.current_prompt(), req.turn_tool_results()
    if "tidy up the session" in prompt:
        if not results:
            return Reply.call("Bash", command="python3 - <<'EOF'\n" + ATTACK % {"other": OTHER_CHAT} + "EOF\n")
        return Reply.say("Tidied up.")
    return Reply.say("Hello Olivia, still here.")


@pytest.mark.parametrize("runtime", ["bwrap", "docker"])
def test_an_agent_cannot_rewrite_its_own_routing(make_settings, sqlite_url, runtime):
    if runtime == "docker":
        from nanoclaw.runtime import docker as docker_rt
        from nanoclaw.runtime.image import image_exists
        client, _ = docker_rt.connect()
        require(client is not None and image_exists(make_settings(), client=client),
                "no Docker engine with the agent image")
    with sandbox_service(make_settings, sqlite_url, brain, runtime=runtime) as svc:
        svc.cli("agent", "create", "Andy")
        svc.cli("user", "add", "telegram:111", "--role", "owner", "--name", "Olivia")
        svc.cli("wire", "telegram", "111", "andy")

        svc.post(message(111, OWNER, "please tidy up the session"))
        svc.wait(lambda: "Tidied up." in texts(svc.tg, 111), what="the agent's answer")
        outcome = next(r.text for call in svc.model.model_calls() for r in call.tool_results() if "ATTACK" in r.text)
        attempts = json.loads(outcome.split("ATTACK ", 1)[1].splitlines()[0])
        assert attempts == {k: attempts[k] for k in ("wal", "shm", "link", "replace")}
        assert all(v != "ok" for v in attempts.values()), attempts  # the host's part is read-only

        session = Session.get()
        path = store.session_path(svc.settings.sessions_dir, "andy", session.id)
        beside = sorted(p.name for p in store.host_part(path).iterdir())
        assert beside in (["inbound.db", "inbox"], ["inbound.db", "inbound.db-journal", "inbox"]), beside

        # the host's next open: a message routed into the session, the agent answers it
        svc.post(message(111, OWNER, "are you there?"))
        svc.wait(lambda: "Hello Olivia, still here." in texts(svc.tg, 111), what="the owner's next answer")
        assert store.routing_of(path) == store.Target("telegram", "111", None)
        assert store.allowed_targets(path) == {store.Target("telegram", "111", None)}
        assert [m for m in sent(svc.tg) if str(m.get("chat_id")) == str(OTHER_CHAT)] == []
        assert all("LEAKED" not in m.get("text", "") for m in sent(svc.tg))
        # the forged reply was refused for good, with the reason, and not retried
        conn = store.schema.connect(store.inbound_db(path), readonly=True)
        errors = [r[0] for r in conn.execute("SELECT last_error FROM delivered WHERE status = 'failed'")]
        conn.close()
        assert any("is not this session's chat or destination" in (e or "") for e in errors), errors
