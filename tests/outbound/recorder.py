"""The recording adapter delivery tests share ("rec"), and how they lay out a session.

One module, imported by one name (tests.outbound.recorder) wherever it is used: a test module
imported twice under two names would register a second Recorder class and the first one's tests
would watch an adapter nobody calls.
"""
import json
import uuid

import pytest

from nanoclaw.channels.base import DeliveryError, register
from nanoclaw.sessions import session_schema as schema
from nanoclaw.sessions.store import Target, prepare


class Recorder:
    sent: list = []
    failures_left = 0
    retry_after = None
    failure = None  # what send_text raises while failures_left; default a 429

    def __init__(self, settings):
        pass

    def send_text(self, target, text):
        if Recorder.failures_left:
            Recorder.failures_left -= 1
            raise Recorder.failure or DeliveryError("429 Too Many Requests", retry_after=Recorder.retry_after)
        Recorder.sent.append(("text", target.platform_id, text))
        return f"p{len(Recorder.sent)}"

    def edit_text(self, target, pid, text):
        Recorder.sent.append(("edit", pid, text))

    def react(self, target, pid, emoji):
        Recorder.sent.append(("react", pid, emoji))

    def send_file(self, target, path, caption):
        Recorder.sent.append(("file", path.name, path.read_text()))
        return "f1"

    def send_card(self, target, card):
        Recorder.sent.append(("card", card.title, card.buttons))
        return "c1"


register("rec")(Recorder)


@pytest.fixture
def session(tmp_path):
    Recorder.sent, Recorder.failures_left, Recorder.retry_after, Recorder.failure = [], 0, None, None
    path = tmp_path / "s"
    prepare(path, Target("rec", "chat-1"))
    return path


def agent_writes(path, *ops, target=("rec", "chat-1", None), in_reply_to=None):
    conn = schema.connect(path / "agent" / schema.OUTBOUND)
    for op in ops:
        seq = conn.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM messages_out").fetchone()[0]
        conn.execute("INSERT INTO messages_out (id, seq, in_reply_to, timestamp, channel_type, platform_id, thread_id,"
                     " content) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                     (uuid.uuid4().hex, seq, in_reply_to, schema.utc_now_iso(), *target, json.dumps(op)))
    conn.close()
