"""The webhook intake: the platform's acknowledgement waits only for the dedup insert; routing runs
after it on the intake thread; an event a dead process acknowledged is routed by the recovery pass.

Telegram updates go through the real webhook into the real central DB (SQLite and PostgreSQL)
and the session's real inbound.db."""
from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from datetime import timedelta

import pytest

from nanoclaw.sessions.wake import NO_WAKE
from nanoclaw import service
from nanoclaw.inbound import intake
from nanoclaw.models import AcceptedEvent
from nanoclaw.models import Session, utcnow
from nanoclaw.sessions import session_schema as schema
from nanoclaw.sessions import store
from tests.tg_flow import message, person, post, telegram_app, tg  # noqa: F401  (tg is a fixture)

ANNA = person(4242, "Anna")
SETUP = (("agent", "create", "Andy"), ("user", "add", "telegram:4242", "--role", "owner"),
         ("wire", "telegram", "4242", "andy"))


def session_texts(app) -> list[str]:
    """The chat lines in the DM's session, in order."""
    settings = app.config["NANOCLAW"]
    texts = []
    for session in Session.select():
        path = store.session_path(settings.sessions_dir, session.agent_group.folder, session.id)
        if not (path / "host" / schema.INBOUND).exists():
            continue
        conn = schema.connect(path / "host" / schema.INBOUND, readonly=True)
        try:
            texts += [json.loads(r[0])["text"] for r in conn.execute("SELECT content FROM messages_in ORDER BY seq")]
        except sqlite3.OperationalError:
            continue  # the router is creating this session's database right now: nothing in it yet
        finally:
            conn.close()
    return texts


def the_session_path(app):
    settings = app.config["NANOCLAW"]
    session = Session.get()
    return store.session_path(settings.sessions_dir, session.agent_group.folder, session.id)


def unrouted_rows() -> int:
    return AcceptedEvent.select().where(AcceptedEvent.routed_at.is_null(),
                                          AcceptedEvent.payload.is_null(False)).count()


@pytest.fixture
def app(make_settings, db_url, tg):  # noqa: F811
    with telegram_app(make_settings, db_url, tg, *SETUP) as app:
        thread = service.start_intake(app)
        try:
            yield app
        finally:
            service.stop_intake(app)
            assert not thread._thread.is_alive()


def test_the_acknowledgement_does_not_wait_for_a_slow_session_write(app):
    post(app, message(4242, ANNA, "first"))
    assert app.extensions["nanoclaw.intake"].wait_idle(10)
    assert session_texts(app) == ["first"]
    lock = store._write_lock(the_session_path(app))
    lock.acquire()  # someone else is writing this session's inbound.db for 3 s
    slow_writer = threading.Timer(3, lock.release)
    slow_writer.start()
    started = time.monotonic()
    post(app, message(4242, ANNA, "second"))  # asserts 200
    assert time.monotonic() - started < 2
    assert session_texts(app) == ["first"]  # acknowledged, not written yet
    slow_writer.join()
    assert app.extensions["nanoclaw.intake"].wait_idle(10)
    assert session_texts(app) == ["first", "second"]
    assert app.woken == ["andy", "andy"]
    assert unrouted_rows() == 0


def test_a_redelivered_update_is_acknowledged_and_written_once(app):
    update = message(4242, ANNA, "only once")
    post(app, update)
    post(app, update)
    assert app.extensions["nanoclaw.intake"].wait_idle(10)
    assert session_texts(app) == ["only once"]
    row = AcceptedEvent.get()
    assert row.routed_at is not None and row.payload is None  # routed: the copy of the event is dropped


def test_the_agent_is_woken_only_after_its_messages_are_committed(app):
    seen = []

    def wake(folder, session_id):  # what a starting sandbox would find
        path = store.session_path(app.config["NANOCLAW"].sessions_dir, folder, session_id)
        conn = schema.connect(path / "host" / schema.INBOUND, readonly=True)
        seen.append(conn.execute("SELECT COUNT(*) FROM messages_in").fetchone()[0])
        conn.close()
    app.extensions["nanoclaw.wake"].connect(wake)
    thread = app.extensions["nanoclaw.intake"]
    post(app, message(4242, ANNA, "warm up"))
    assert thread.wait_idle(10)
    lock = store._write_lock(the_session_path(app))
    lock.acquire()  # three updates queue up meanwhile and are routed in one round
    slow_writer = threading.Timer(2, lock.release)
    slow_writer.start()
    for n in range(3):
        post(app, message(4242, ANNA, f"burst {n}"))
    slow_writer.join()
    assert thread.wait_idle(10)
    assert seen[0] == 1 and seen[-1] == 4


def test_an_event_acknowledged_by_a_process_that_died_is_routed_at_start_up(app):
    service.stop_intake(app)
    dead = intake.IntakeThread(app.config["NANOCLAW"], lambda: None)  # never started: the worker died
    app.extensions["nanoclaw.intake"] = dead
    post(app, message(4242, ANNA, "sent just before the crash"))
    app.extensions.pop("nanoclaw.intake")
    assert session_texts(app) == [] and unrouted_rows() == 1
    bg = service.start(app, None)  # the next start of the web program
    try:
        assert bg.ready.wait(20)
        assert session_texts(app) == ["sent just before the crash"]
        assert unrouted_rows() == 0
    finally:
        bg.shutdown()
    service.start_intake(app)


def test_an_event_whose_routing_fails_stays_until_it_can_be_routed(app, caplog):
    settings = app.config["NANOCLAW"]
    blocker = settings.sessions_dir / "andy"
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("not a folder")  # the session folder cannot be made
    with caplog.at_level(logging.ERROR, logger="nanoclaw.intake"):
        post(app, message(4242, ANNA, "kept"))
        assert app.extensions["nanoclaw.intake"].wait_idle(10)
    assert "routing telegram event" in caplog.text and "will be retried" in caplog.text
    assert unrouted_rows() == 1
    assert intake.recover(settings, NO_WAKE, older_than_s=0) == 0  # still failing: still kept
    assert unrouted_rows() == 1
    blocker.unlink()
    assert intake.recover(settings, NO_WAKE, older_than_s=0) == 1
    assert session_texts(app) == ["kept"] and unrouted_rows() == 0


def test_an_event_that_fails_for_an_hour_is_logged_whole_and_set_aside(app, caplog):
    settings = app.config["NANOCLAW"]
    blocker = settings.sessions_dir / "andy"
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("not a folder")
    post(app, message(4242, ANNA, "the words are in the log"))
    assert app.extensions["nanoclaw.intake"].wait_idle(10)
    AcceptedEvent.update(received_at=utcnow() - timedelta(hours=2)).execute()
    with caplog.at_level(logging.ERROR, logger="nanoclaw.intake"):
        intake.recover(settings, NO_WAKE, older_than_s=0)
    assert "giving up on accepted event" in caplog.text and "the words are in the log" in caplog.text
    assert unrouted_rows() == 0


def test_without_an_intake_thread_the_request_routes_inline(make_settings, db_url, tg):  # noqa: F811
    with telegram_app(make_settings, db_url, tg, *SETUP) as app:
        post(app, message(4242, ANNA, "no thread here"))
        assert session_texts(app) == ["no thread here"] and unrouted_rows() == 0


def test_our_own_bots_message_is_never_stored(app):
    bot = {"id": 7000001, "is_bot": True, "first_name": "Andy"}
    update = message(4242, ANNA, "echo")
    update["message"]["from"] = bot
    post(app, update)
    assert app.extensions["nanoclaw.intake"].wait_idle(10)
    assert AcceptedEvent.select().count() == 0 and session_texts(app) == []


def test_a_batch_keeps_each_sessions_writes_together_or_not_at_all(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    target = store.Target("telegram", "1")
    store.prepare(a, target)
    store.prepare(b, target)
    with pytest.raises(RuntimeError), store.batched():
        store.write_message(a, content={"text": "a1"}, target=target)
        store.write_message(b, content={"text": "b1"}, target=target)
        raise RuntimeError("routing failed half way")
    with store.batched():
        store.write_message(a, content={"text": "a2"}, target=target)
        store.write_message(a, content={"text": "a3"}, target=target)
    for path, expected in ((a, ["a2", "a3"]), (b, [])):
        conn = schema.connect(path / "host" / schema.INBOUND, readonly=True)
        rows = [json.loads(r[0])["text"] for r in conn.execute("SELECT content FROM messages_in ORDER BY seq")]
        conn.close()
        assert rows == expected


def test_a_round_keeps_only_yes_answers(app):
    """Inside an intake round a sender found known stays known (the events arrived together); a
    sender not known is asked again each time, since a gate may add them in the same round."""
    from nanoclaw.inbound import lookups
    from nanoclaw.models import AgentGroup, AgentGroupMember, User

    andy = AgentGroup.get(AgentGroup.folder == "andy")
    User.create(id="telegram:77", name="Bea")
    with lookups.routing_round():
        assert not lookups.is_known("telegram:77", andy.id)
        member = AgentGroupMember.create(user="telegram:77", agent_group=andy)
        assert lookups.is_known("telegram:77", andy.id)  # the "no" was not kept
        member.delete_instance()
        assert lookups.is_known("telegram:77", andy.id)  # the "yes" is kept for the round
        lookups.forget()
        assert not lookups.is_known("telegram:77", andy.id)
    AgentGroupMember.create(user="telegram:77", agent_group=andy)
    assert lookups.is_known("telegram:77", andy.id)  # outside a round: read every time
    AgentGroupMember.delete().execute()
    assert not lookups.is_known("telegram:77", andy.id)


def test_an_event_with_files_is_routed_alone_and_in_order():
    from nanoclaw.channels.events import InboundEvent

    def ev(n, files=()):
        return n, InboundEvent(channel="telegram", event_id=str(n), chat_id="1", kind="dm", sender_id="1",
                               sender_name="A", text=str(n), timestamp="2026-11-22T00:00:00.000Z",
                               attachments=files)
    photo = ({"kind": "photo", "file_id": "x"},)
    runs = intake.segments([ev(1), ev(2), ev(3, photo), ev(4), (5, None), ev(6, photo), ev(7, photo)])
    assert [(batched, [n for n, _ in items]) for batched, items in runs] == [
        (True, [1, 2]), (False, [3]), (True, [4, 5]), (False, [6]), (False, [7])]
