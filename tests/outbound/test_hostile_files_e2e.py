"""One agent cannot stop delivery for every chat (issue 39, item 3): a real agent in a real sandbox,
steered by its model, makes a FIFO and a sparse 20 GB file in its own outbox and writes `file` rows
naming them straight into its outbound.db. The host must neither block on the FIFO nor copy the
sparse file: both rows fail with a reason the agent's chat is told, and another person's chat, with
another agent, is answered meanwhile. Before, the one delivery thread waited in open() on the FIFO
for ever and no chat got an answer again."""
from __future__ import annotations

import os
import tempfile

from tests.fakes.model_api import Reply
from tests.tg_flow import message, person, sandbox_service, sent, texts

OWNER = person(111, "Olivia")
FRIEND = person(222, "Farid")

PLANT = r'''
import json, os, sqlite3, uuid
S = "/workspace/session"
os.makedirs(S + "/outbox", exist_ok=True)
os.mkfifo(S + "/outbox/pipe.txt")
with open(S + "/outbox/huge.bin", "wb") as f:
    f.truncate(20 << 30)
out = sqlite3.connect(S + "/outbound.db", isolation_level=None)
route = sqlite3.connect("file:/workspace/inbound/inbound.db?mode=ro", uri=True).execute(
    "SELECT channel_type, platform_id FROM routing").fetchone()
for name in ("pipe.txt", "huge.bin"):
    seq = out.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM messages_out").fetchone()[0]
    out.execute("INSERT INTO messages_out (id, seq, timestamp, kind, channel_type, platform_id, content) "
                "VALUES (?, ?, '2026-01-01T00:00:00.000Z', 'chat', ?, ?, ?)",
                (uuid.uuid4().hex, seq, route[0], route[1], json.dumps({"op": "file", "path": "outbox/" + name})))
print("PLANTED")
'''


def brain(req):
    prompt, results = req.current_prompt(), req.turn_tool_results()
    if "send me the files" in prompt:
        if not results:
            return Reply.call("Bash", command="python3 - <<'EOF'\n" + PLANT + "EOF\n")
        return Reply.say("Sent them.")
    return Reply.say("Hello from Bea.")


def test_a_fifo_and_a_sparse_file_in_one_outbox_stop_no_other_chat(make_settings, sqlite_url):
    with sandbox_service(make_settings, sqlite_url, brain) as svc:
        for args in (("agent", "create", "Andy"), ("agent", "create", "Bea"),
                     ("user", "add", "telegram:111", "--role", "owner"), ("user", "add", "telegram:222", "--role", "member", "--agent", "bea"),
                     ("wire", "telegram", "111", "andy"), ("wire", "telegram", "222", "bea")):
            svc.cli(*args)
        staging_before = set(os.listdir(tempfile.gettempdir()))
        svc.post(message(111, OWNER, "send me the files"))
        svc.wait(lambda: "Sent them." in texts(svc.tg, 111), what="the hostile turn's answer")
        svc.post(message(222, FRIEND, "hi"))
        svc.wait(lambda: "Hello from Bea." in texts(svc.tg, 222), what="the other chat's answer")
        told = svc.wait(lambda: [t for t in texts(svc.tg, 111) if "could not deliver" in t and "refused" in t]
                        if len([t for t in texts(svc.tg, 111) if "could not deliver" in t]) >= 2 else None,
                        what="both refusals told in the agent's chat")
        assert any("not a file in the outbox" in t for t in told)
        assert any("more than this platform takes" in t for t in told)
        assert not sent(svc.tg, "sendDocument") and not sent(svc.tg, "sendPhoto")
        grown = [n for n in set(os.listdir(tempfile.gettempdir())) - staging_before if n.startswith("nanoclaw-send-")]
        assert grown == []  # no copy left behind (and none was made of 20 GB)
