"""Start-up after a killed web worker (the real app, database and background, a fake Telegram): a
reply the dead worker was sending is settled as sent in every session before anything is sent,
also in a session woken while the new process starts (the start-up sweep skips those; their
half-sent reply used to stay 'sending' for good, neither sent nor on record as cut off)."""
from __future__ import annotations

import sqlite3

import pytest
from apscheduler.schedulers.background import BackgroundScheduler

from nanoclaw.lifecycle.background import Background
from nanoclaw.models import Session
from nanoclaw.outbound.delivery import INTERRUPTED
from nanoclaw.sessions import session_schema as schema
from tests.tg_flow import tg  # noqa: F401  (the fake Bot API fixture)
from tests.tg_flow import OLIVIA_AND_ANDY, message, person, post, telegram_app

from agent_runner.store import SessionStore  # noqa: E402
from agent_runner.targets import Target

OWNER = person(111, "Olivia")


@pytest.fixture
def app(make_settings, sqlite_url, tg):
    with telegram_app(make_settings, sqlite_url, tg, *OLIVIA_AND_ANDY) as app:
        yield app


def half_sent(app, text: str):
    """A session whose runner wrote a reply that the previous web worker was sending when killed."""
    post(app, message(111, OWNER, "hello"))
    session = Session.get()
    path = app.config["NANOCLAW"].sessions_dir / "andy" / session.id
    agent = SessionStore.of_session(path)
    agent.write_out({"op": "text", "text": text}, Target("telegram", "111"))
    agent.close()
    out_id = sqlite3.connect(path / "agent" / schema.OUTBOUND).execute("SELECT id FROM messages_out").fetchone()[0]
    conn = schema.connect(path / "host" / schema.INBOUND)
    conn.execute("INSERT INTO delivered (message_out_id, status, tries) VALUES (?, 'sending', 0)", (out_id,))
    conn.close()
    return path, out_id


def delivered(path, out_id):
    conn = sqlite3.connect(path / "host" / schema.INBOUND)
    try:
        return conn.execute("SELECT status, last_error FROM delivered WHERE message_out_id = ?", (out_id,)).fetchone()
    finally:
        conn.close()


def test_a_reply_cut_off_by_a_killed_worker_is_settled_even_in_a_session_woken_at_start_up(app, tg):
    path, out_id = half_sent(app, "Here is your answer")
    bg = Background(settings=app.config["NANOCLAW"], manager=None, lock_handle=None,
                    scheduler=BackgroundScheduler(timezone="UTC"))
    bg.watch(path)  # a message for this session arrived while the new process was starting
    try:
        bg.startup()
        assert delivered(path, out_id) == ("delivered", INTERRUPTED)  # on record: it may not have arrived
    finally:
        bg._stop.set()
        if bg._thread is not None:
            bg._thread.join(10)
    assert not [c for c in tg.calls("sendMessage") if "Here is your answer" in str(c.json)]  # never sent twice


def test_a_stop_during_start_up_ends(app, monkeypatch):
    """SIGTERM while the start-up job runs (here: settling a predecessor's sends): the stop waits for
    it and ends. Before, APScheduler's shutdown held its job-store lock while waiting for the job,
    and the job waited for that lock to add its next job: the web program hung until killed."""
    import threading

    from nanoclaw.lifecycle import background
    inside, go_on = threading.Event(), threading.Event()

    def slow_settle(refs):
        inside.set()
        go_on.wait(30)
        return 0
    monkeypatch.setattr(background.sweep, "settle_half_sent", slow_settle)
    settings = app.config["NANOCLAW"]
    bg = Background(settings=settings, manager=None, lock_handle=open(settings.data_dir / "scheduler.lock", "a+"))
    bg.start()
    assert inside.wait(30), "the start-up never began"
    stopping = threading.Thread(target=bg.shutdown, daemon=True)
    stopping.start()
    waited = threading.Timer(1.0, go_on.set)  # the stop is under way when the start-up goes on
    waited.start()
    stopping.join(40)
    assert not stopping.is_alive(), "the stop hung behind the start-up"
