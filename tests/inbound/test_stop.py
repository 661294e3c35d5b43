"""/stop through the Telegram webhook, with a turn the runner holds (its claim in outbound.db): who
may stop it, what each refusal says, and that /stop itself is never stored. The runner's side, the
page and the CLI against real sandboxes are in test_stop_e2e.py."""
from __future__ import annotations

import json

import pytest

from nanoclaw.inbound import stopping
from nanoclaw.inbound.commands import for_another_bot, may_stop, parse
from nanoclaw.inbound.facts import AgentFacts, Facts
from nanoclaw.models import DroppedMessage, Session
from nanoclaw.sessions import session_schema as schema
from nanoclaw.sessions import turns
from nanoclaw.sessions.store import agent_part, outbound_db, session_path
from tests.fakes.telegram_api import USERNAME
from tests.inbound.test_commands import BOB, CARL, GROUP, OWNER, app, stored  # noqa: F401  (fixture)
from tests.tg_flow import cards, message, person, post, texts
from tests.tg_flow import tg  # noqa: F401  (the fake Bot API fixture)

DORA, ZED = person(666, "Dora"), person(999, "Zed")  # Dora: a member added below; Zed: a stranger


def test_stop_is_a_host_command_and_addressed_elsewhere_is_not_ours():
    assert parse("/stop") == "stop" and parse(f"/stop@{USERNAME}") == "stop"
    assert for_another_bot("/stop@otherbot", mentioned=False)
    assert not for_another_bot(f"/stop@{USERNAME}", mentioned=True)
    assert not for_another_bot("/stop", mentioned=False)
    assert may_stop(is_admin=True, started_it=False) and may_stop(is_admin=False, started_it=True)
    assert not may_stop(is_admin=False, started_it=False)


class _Wiring:
    def __init__(self, wid):
        self.id = wid


def _facts(*agents):
    return Facts(chat=None, thread_id=None, thread="", agents=tuple(agents))


def test_decide_who_stops_what():
    running = turns.Running(("m1", "m2"), "telegram:444", None)
    member = AgentFacts(_Wiring(1), "", known=True, admin=False, session=object())
    admin = AgentFacts(_Wiring(1), "", known=True, admin=True, session=object())
    stranger = AgentFacts(_Wiring(1), "", known=False, admin=False, session=object())
    assert stopping.decide(_facts(stranger), {1: running}, "telegram:999", public=False).stranger
    assert stopping.decide(_facts(member), {1: None}, "telegram:444", public=False).reply == stopping.NOTHING
    assert stopping.decide(_facts(member), {1: running}, "telegram:555", public=False).reply == stopping.ONLY
    assert stopping.decide(_facts(member), {1: running}, "telegram:444", public=False).stops
    assert stopping.decide(_facts(admin), {1: running}, "telegram:555", public=False).stops
    # in a public chat a person nobody added may stop the turn their own message started, no other
    assert stopping.decide(_facts(stranger), {1: running}, "telegram:444", public=True).stops
    assert stopping.decide(_facts(stranger), {1: running}, "telegram:999", public=True).reply == stopping.ONLY


def test_the_stop_option_keeps_order_and_reads_nothing_from_junk():
    value = turns.with_stopped(None, ["a", "b"])
    assert schema.stopped_ids(turns.with_stopped(value, ["a", "c"])) == ["b", "a", "c"]
    for junk in ("", "{", "{}", '"a"', "[1, null]"):
        assert schema.stopped_ids(junk) == []
    assert len(schema.stopped_ids(turns.with_stopped(value, [str(i) for i in range(500)]))) == turns.KEEP_STOPPED


def _session_path(app):
    session = Session.select().order_by(Session.created_at.desc()).get()
    return session_path(app.config["NANOCLAW"].sessions_dir, "andy", session.id)


def _claim_all(path) -> list[str]:
    """The runner took every pending message into its turn (its claims, in its own file)."""
    inbound = schema.connect(path / "host" / schema.INBOUND, readonly=True)
    ids = [r[0] for r in inbound.execute("SELECT id FROM messages_in WHERE status = 'pending'")]
    inbound.close()
    agent_part(path).mkdir(parents=True, exist_ok=True)
    out = schema.connect(outbound_db(path))
    out.executemany("INSERT OR IGNORE INTO processing_ack (message_id, status, status_changed) "
                    "VALUES (?, 'processing', ?)",
                    [(i, schema.utc_now_iso()) for i in ids])
    out.close()
    return ids


def _stopped(path) -> list[str]:
    conn = schema.connect(path / "host" / schema.INBOUND, readonly=True)
    try:
        row = conn.execute("SELECT value FROM options WHERE key = ?", (schema.STOP_OPTION,)).fetchone()
    finally:
        conn.close()
    return schema.stopped_ids(row[0] if row else None)


def test_nothing_running_says_so_and_stores_nothing(app, tg):  # noqa: F811
    post(app, message(111, OWNER, "/stop"))
    assert texts(tg, 111) == [stopping.NOTHING]
    assert stored(app) == []


def test_the_owner_stops_a_dm_turn_and_stop_is_never_stored(app, tg):  # noqa: F811
    post(app, message(111, OWNER, "write me a long essay"))
    path = _session_path(app)
    ids = _claim_all(path)
    post(app, message(111, OWNER, "/stop"))
    assert texts(tg, 111) == [stopping.STOPPED]
    assert _stopped(path) == ids
    assert [t for t, _c, _tr in stored(app)] == ["write me a long essay"]
    assert turns.running(path) is None  # what is stopped no longer counts as running
    post(app, message(111, OWNER, "/stop"))
    assert texts(tg, 111)[-1] == stopping.NOTHING


def test_in_a_group_only_the_starter_or_an_admin_stops_and_a_strangers_stop_is_a_card(app, tg):  # noqa: F811
    app.test_cli_runner().invoke(args=["nanoclaw", "user", "add", "telegram:666", "--agent", "andy"])
    post(app, message(GROUP, BOB, "summarise the thread", title="Team", mention=True))
    path = _session_path(app)
    ids = _claim_all(path)
    post(app, message(GROUP, DORA, f"/stop@{USERNAME}", title="Team", command=True))  # another member
    assert texts(tg, GROUP) == [stopping.ONLY] and _stopped(path) == []
    post(app, message(GROUP, OWNER, "/stop@otherbot", title="Team", command=True))  # another bot's
    assert texts(tg, GROUP) == [stopping.ONLY] and _stopped(path) == []
    assert DroppedMessage.select().where(DroppedMessage.reason == "for_another_bot").count() == 1
    post(app, message(GROUP, ZED, f"/stop@{USERNAME}", title="Team", command=True))  # a stranger
    assert _stopped(path) == [] and len(cards(tg)) == 1 and "wants to talk" in cards(tg)[0]["text"]
    post(app, message(GROUP, BOB, f"/stop@{USERNAME}", title="Team", command=True))  # the one who asked
    assert texts(tg, GROUP)[-1] == stopping.STOPPED and _stopped(path) == ids
    assert not any(t.startswith("/stop") for t, _c, _tr in stored(app))


def test_an_admin_stops_a_members_turn(app, tg):  # noqa: F811
    post(app, message(GROUP, BOB, "summarise the thread", title="Team", mention=True))
    path = _session_path(app)
    ids = _claim_all(path)
    post(app, message(GROUP, CARL, f"/stop@{USERNAME}", title="Team", command=True))
    assert texts(tg, GROUP) == [stopping.STOPPED] and _stopped(path) == ids


@pytest.mark.parametrize("value", ["not json", json.dumps({"ids": ["x"]})])
def test_a_stop_option_that_cannot_be_read_stops_nothing(value):
    assert schema.stopped_ids(value) == []
