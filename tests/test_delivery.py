"""Delivery: outbound rows reach the adapter once, retries with backoff, failure notice, targets checked."""
import json
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from nanoclaw.channels.base import DeliveryError, register
from nanoclaw.delivery import backoff, deliver_session
from nanoclaw.sessions import session_schema as schema
from nanoclaw.sessions.store import Target, prepare, set_destination, write_message


class Recorder:
    sent: list = []
    failures_left = 0
    retry_after = None

    def __init__(self, settings):
        pass

    def send_text(self, target, text):
        if Recorder.failures_left:
            Recorder.failures_left -= 1
            raise DeliveryError("429 Too Many Requests", retry_after=Recorder.retry_after)
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
    Recorder.sent, Recorder.failures_left, Recorder.retry_after = [], 0, None
    path = tmp_path / "s"
    prepare(path, Target("rec", "chat-1"))
    return path


def agent_writes(path, *ops, target=("rec", "chat-1", None), in_reply_to=None):
    conn = schema.connect(path / schema.OUTBOUND)
    for op in ops:
        seq = conn.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM messages_out").fetchone()[0]
        conn.execute("INSERT INTO messages_out (id, seq, in_reply_to, timestamp, channel_type, platform_id, thread_id,"
                     " content) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                     (uuid.uuid4().hex, seq, in_reply_to, schema.utc_now_iso(), *target, json.dumps(op)))
    conn.close()


def status(path):
    conn = schema.connect(path / schema.INBOUND)
    try:
        return [tuple(r) for r in conn.execute("SELECT status, tries, platform_message_id FROM delivered "
                                               "ORDER BY rowid")]
    finally:
        conn.close()


def test_text_edit_reaction_file_card_delivered_once(session):
    (session / "outbox" / "report.txt").write_text("numbers")
    agent_writes(session, {"op": "text", "text": "hi"}, {"op": "edit", "target_seq": 1, "text": "hi!"},
                 {"op": "reaction", "target_seq": 1, "emoji": "👍"}, {"op": "file", "path": "outbox/report.txt"},
                 {"op": "card", "title": "Q", "body": "b", "buttons": [{"label": "Yes", "action": "ncq-1:0"}]})
    assert deliver_session(session, settings=None) == 5
    assert Recorder.sent == [("text", "chat-1", "hi"), ("edit", "p1", "hi!"), ("react", "p1", "👍"),
                             ("file", "report.txt", "numbers"), ("card", "Q", (("Yes", "ncq-1:0"),))]
    assert deliver_session(session, settings=None) == 0
    assert len(Recorder.sent) == 5


def test_retry_with_backoff_then_success(session):
    Recorder.failures_left = 1
    agent_writes(session, {"op": "text", "text": "hello"})
    assert deliver_session(session, settings=None) == 0
    assert status(session)[0][:2] == ("retry", 1)
    assert deliver_session(session, settings=None) == 0  # not due yet
    later = datetime.now(timezone.utc) + timedelta(seconds=5)
    assert deliver_session(session, settings=None, now=later) == 1
    assert Recorder.sent == [("text", "chat-1", "hello")]


def test_three_failures_mark_failed_and_tell_the_user(session):
    Recorder.failures_left = 3
    agent_writes(session, {"op": "text", "text": "lost?"})
    t = datetime.now(timezone.utc)
    for i in range(3):
        deliver_session(session, settings=None, now=t + timedelta(seconds=60 * i))
    assert status(session)[0][:2] == ("failed", 3)
    assert Recorder.sent == [("text", "chat-1", "(I could not deliver a reply: 429 Too Many Requests)")]


def test_retry_after_is_honoured():
    assert backoff(1, 30) == 30
    assert backoff(1, None) == 1 and backoff(2, None) == 2 and backoff(3, None) == 4


def test_rows_for_foreign_chats_are_refused(session):
    agent_writes(session, {"op": "text", "text": "spam"}, target=("rec", "someone-else", None))
    set_destination(session, "team", Target("rec", "team-chat"))
    agent_writes(session, {"op": "text", "text": "to team"}, target=("rec", "team-chat", None))
    deliver_session(session, settings=None)
    assert Recorder.sent[1] == ("text", "team-chat", "to team")
    # the refusal is told in the session's own chat, never in the foreign one
    assert Recorder.sent[0][:2] == ("text", "chat-1") and "is not this session's chat" in Recorder.sent[0][2]
    assert len(Recorder.sent) == 2
    assert [s for s, _, _ in status(session)] == ["failed", "delivered"]


def test_file_outside_outbox_is_refused(session):
    agent_writes(session, {"op": "file", "path": "../inbound.db"})
    deliver_session(session, settings=None)
    assert status(session)[0][0] == "failed"
    assert all(kind != "file" for kind, *_ in Recorder.sent)


def test_completed_acks_are_copied_to_messages_in(session):
    mid = write_message(session, content={"text": "q"}, target=Target("rec", "chat-1"))
    conn = schema.connect(session / schema.OUTBOUND)
    conn.execute("INSERT INTO processing_ack VALUES (?, 'completed', ?)", (mid, schema.utc_now_iso()))
    conn.close()
    deliver_session(session, settings=None)
    conn = schema.connect(session / schema.INBOUND, readonly=True)
    assert conn.execute("SELECT status FROM messages_in").fetchone()[0] == "completed"
    conn.close()
