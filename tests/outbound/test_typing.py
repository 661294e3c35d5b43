"""Typing indicator: shown while the agent works on a chat message, repeated, bounded, never blocking."""
import logging
import threading
import time

import pytest

from nanoclaw.outbound import typing_indicator as ti
from nanoclaw.channels.base import DeliveryError, register
from nanoclaw.outbound.delivery import deliver_session, open_session
from nanoclaw.sessions import session_schema as schema
from nanoclaw.sessions.store import Target, prepare, write_message


class Typist:
    shown: list = []
    fail = False
    gate: threading.Event | None = None

    def __init__(self, settings):
        pass

    def typing(self, target, message_id=None):
        if Typist.gate is not None:
            Typist.gate.wait(5)
        if Typist.fail:
            raise DeliveryError("502 Bad Gateway")
        Typist.shown.append((target.platform_id, target.thread_id, message_id))

    def send_text(self, target, text):
        return "p1"


register("typist")(Typist)


@pytest.fixture
def session(tmp_path):
    Typist.shown, Typist.fail, Typist.gate = [], False, None
    ti._working.clear()
    path = tmp_path / "s"
    prepare(path, Target("typist", "chat-7", "topic-3"))
    schema.connect(path / "agent" / schema.OUTBOUND).close()  # the agent has opened its file
    return path


def agent_claims(path, message_id, status="processing"):
    conn = schema.connect(path / "agent" / schema.OUTBOUND)
    conn.execute("INSERT INTO processing_ack VALUES (?, ?, ?) ON CONFLICT (message_id) DO UPDATE SET "
                 "status = excluded.status", (message_id, status, schema.utc_now_iso()))
    conn.close()


def wait_shown(n, timeout=5):
    deadline = time.monotonic() + timeout
    while len(Typist.shown) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    return Typist.shown


def test_due_rules():
    w = ti.Working("m", since=100.0)
    assert ti.due(w, 100.0)
    w.last_sent = 100.0
    assert not ti.due(w, 103.9) and ti.due(w, 104.0)
    w.last_sent = 100.0 + ti.TYPING_MAX_S - 1
    assert not ti.due(w, 100.0 + ti.TYPING_MAX_S + 5)  # a turn that long stops saying it works


def test_shown_while_the_agent_works_on_a_chat_message_and_not_after(session):
    mid = write_message(session, content={"text": "hi", "message_id": "tg-55"}, target=Target("typist", "chat-7", "topic-3"))
    deliver_session(session, settings=None)
    assert ti.settle() and Typist.shown == []  # not claimed yet: the agent has not started
    agent_claims(session, mid)
    deliver_session(session, settings=None)
    assert wait_shown(1) == [("chat-7", "topic-3", "tg-55")]
    deliver_session(session, settings=None)  # a second later: not due again yet
    assert ti.settle() and len(Typist.shown) == 1
    agent_claims(session, mid, "completed")
    deliver_session(session, settings=None)
    assert ti.settle() and len(Typist.shown) == 1 and session not in ti._working


def test_repeated_every_few_seconds(session):
    mid = write_message(session, content={"text": "long job"}, target=None)
    agent_claims(session, mid)
    conn = open_session(session)
    try:
        assert ti.tick(conn, session, None, now=1000.0)
        wait_shown(1)
        assert not ti.tick(conn, session, None, now=1002.0)
        assert ti.tick(conn, session, None, now=1004.5)
        assert len(wait_shown(2)) == 2
    finally:
        conn.close()


def test_tasks_and_system_rows_show_nothing(session):
    mid = write_message(session, kind="task", content={"prompt": "daily summary"}, target=None)
    agent_claims(session, mid)
    deliver_session(session, settings=None)
    assert ti.settle() and Typist.shown == []


def test_a_slow_platform_never_holds_up_delivery_and_a_failure_is_only_logged(session, caplog):
    caplog.set_level(logging.INFO, "nanoclaw.typing")
    Typist.gate = threading.Event()
    mid = write_message(session, content={"text": "hi"}, target=None)
    agent_claims(session, mid)
    started = time.monotonic()
    deliver_session(session, settings=None)
    assert time.monotonic() - started < 1  # the call waits on its own thread
    Typist.fail = True
    Typist.gate.set()
    assert ti.settle() and Typist.shown == [] and "typing indicator" in caplog.text
