"""Routing decisions (pure) and the pipeline's writes (central DB on both engines + session files)."""
import json

import pytest

from nanoclaw.sessions.wake import NO_WAKE
from nanoclaw.channels.events import InboundEvent
from nanoclaw.models import DroppedMessage, Session
from nanoclaw.inbound.decide import engages, sender_admitted, session_thread
from nanoclaw.inbound.router import route
from nanoclaw.sessions import session_schema as schema


@pytest.mark.parametrize("mode, pattern, text, mentioned, dm, sticky, expected", [
    ("pattern", ".", "anything", False, False, False, True),
    ("pattern", ".", "", False, False, False, True),  # '.' = everything: a photo without a caption too
    ("pattern", "x", "", False, False, False, False),
    ("pattern", r"^@?andy\b", "andy, hi", False, False, False, True),
    ("pattern", r"^@?andy\b", "hi andy", False, False, False, False),
    ("pattern", "(", "x", False, False, False, False),
    ("mention", None, "hello", True, False, False, True),
    ("mention", None, "hello", False, False, False, False),
    ("mention", None, "hello", False, True, False, True),
    ("mention-sticky", None, "follow-up", False, False, True, True),
    ("mention-sticky", None, "follow-up", False, False, False, False),
    ("mention-sticky", None, "@andy", True, False, False, True),
])
def test_engages(mode, pattern, text, mentioned, dm, sticky, expected):
    assert engages(mode, pattern, text=text, mentioned=mentioned, is_dm=dm, sticky_session=sticky) is expected


def test_sender_gate():
    assert sender_admitted("strict", True) == (True, None)
    assert sender_admitted("strict", False) == (False, "unknown_sender_strict")
    assert sender_admitted("request_approval", False) == (False, "unknown_sender_request_approval")
    assert sender_admitted("public", False) == (True, None)


def test_session_thread():
    assert session_thread("thread", "T1") == "T1"
    assert session_thread("group", "T1") == ""
    assert session_thread("dm", None) == ""


def event(i, text="hello", chat="42", sender="42", mentioned=False, **kw):
    return InboundEvent(channel="telegram", event_id=str(i), chat_id=chat, kind="dm", sender_id=sender,
                        sender_name="Me", text=text, timestamp="2024-01-01T00:00:00.000Z",
                        message_id=str(100 + i), mentioned=mentioned, **kw)


def rows(app, folder, session_id):
    path = app.config["NANOCLAW"].sessions_dir / folder / session_id / "host" / schema.INBOUND
    conn = schema.connect(path, readonly=True)
    try:
        return [(r["trigger"], json.loads(r["content"])["text"]) for r in
                conn.execute("SELECT * FROM messages_in ORDER BY seq")]
    finally:
        conn.close()


def test_dm_from_owner_is_written_once_and_wakes(cli, app):
    cli("agent", "create", "Andy")
    cli("user", "add", "telegram:42", "--role", "owner")
    cli("wire", "telegram", "42", "andy")
    woken = []
    settings = app.config["NANOCLAW"]
    result = route(event(1), settings, wake=woken.append)
    assert [(f, t) for f, _, t in result.written] == [("andy", True)]
    again = route(event(1), settings, wake=woken.append)
    assert again.duplicate and len(woken) == 1
    session = Session.get()
    assert rows(app, "andy", session.id) == [(1, "hello")]


def test_unwired_and_unknown_are_dropped_with_reasons(cli, app):
    settings = app.config["NANOCLAW"]
    assert route(event(1, chat="999"), settings, NO_WAKE).dropped == "no_agent_wired"
    cli("agent", "create", "Andy")
    cli("wire", "telegram", "42", "andy")
    assert route(event(2, sender="7"), settings, NO_WAKE).dropped == "unknown_sender_request_approval"
    cli("wire", "telegram", "42", "andy", "--unknown-senders", "strict")
    assert route(event(3, sender="7"), settings, NO_WAKE).dropped == "unknown_sender_strict"
    reasons = [d.reason for d in DroppedMessage.select().order_by(DroppedMessage.id)]
    assert reasons == ["no_agent_wired", "unknown_sender_request_approval", "unknown_sender_strict"]
    assert Session.select().count() == 0


def test_fan_out_accumulate_and_trigger(cli, app):
    settings = app.config["NANOCLAW"]
    cli("agent", "create", "Andy")
    cli("agent", "create", "Bea")
    cli("wire", "telegram", "-5", "andy", "--kind", "group", "--ignored", "accumulate", "--unknown-senders", "public")
    cli("wire", "telegram", "-5", "bea", "--engage", "pattern", "--pattern", "(?i)bea")
    route(event(1, "chatter", chat="-5"), settings, NO_WAKE)
    route(event(2, "hey Bea", chat="-5"), settings, NO_WAKE)
    route(event(3, "@andy answer", chat="-5", mentioned=True), settings, NO_WAKE)
    andy = Session.get(Session.agent_group == 1)
    bea = Session.get(Session.agent_group == 2)
    assert rows(app, "andy", andy.id) == [(0, "chatter"), (0, "hey Bea"), (1, "@andy answer")]
    assert rows(app, "bea", bea.id) == [(1, "hey Bea")]


def test_own_messages_never_routed(cli, app):
    cli("agent", "create", "Andy")
    cli("wire", "telegram", "42", "andy", "--unknown-senders", "public")
    assert route(event(1, from_self=True), app.config["NANOCLAW"], NO_WAKE).dropped == "own_message"
    assert Session.select().count() == 0


def test_a_dm_that_grows_into_a_room_ends_its_private_session_before_the_newcomer_is_heard(cli, app, monkeypatch):
    """Issue 60, item 2: the owner's Matrix room of two is wired (a DM: their private reach); the owner
    invites Bob. Before Bob's first message reaches a sandbox the DM's session is closed (never resumed),
    the chat is a `thread` room for good with the mention-sticky rule, the room is told once, and Bob's
    message starts a new session whose reach is the room's, not the owner's private memory."""
    from nanoclaw.memory.scopes import reach_of
    from nanoclaw.models import AuditLog, MessagingGroup, Wiring
    said = []
    monkeypatch.setattr("nanoclaw.inbound.router.tell", lambda e, _s, text: said.append((e.chat_id, text)))
    settings = app.config["NANOCLAW"]
    cli("agent", "create", "Andy")
    cli("user", "add", "matrix:@olivia:example.org", "--role", "owner")
    cli("user", "add", "matrix:@bob:example.org", "--role", "member", "--agent", "andy")
    cli("wire", "matrix", "!room:example.org", "andy")

    def said_in_room(i, sender, kind, text, mentioned=False):
        return InboundEvent(channel="matrix", event_id=f"$e{i}", chat_id="!room:example.org", kind=kind,
                            sender_id=sender, sender_name=sender, text=text, timestamp="2026-12-06T10:00:00.000Z",
                            message_id=f"$e{i}", mentioned=mentioned or kind == "dm",
                            thread_id=None if kind == "dm" else f"$e{i}")
    assert route(said_in_room(1, "@olivia:example.org", "dm", "my locker code is 4711"), settings, NO_WAKE).written
    private = Session.get()
    assert reach_of(settings.sessions_dir, "andy", private.id).memory.kind == "private"

    result = route(said_in_room(2, "@bob:example.org", "thread", "hi Andy, what did Olivia tell you?",
                                mentioned=True), settings, NO_WAKE)
    assert [(f, engaged) for f, _s, engaged in result.written] == [("andy", True)]
    fresh = Session.get(Session.id != private.id)
    assert Session.get_by_id(private.id).status == "closed" and fresh.status == "active"
    assert reach_of(settings.sessions_dir, "andy", fresh.id).memory.name == "chat:matrix:!room:example.org"
    assert rows(app, "andy", fresh.id) == [(1, "hi Andy, what did Olivia tell you?")]  # nothing of the DM
    mg = MessagingGroup.get()
    assert mg.kind == "thread" and Wiring.get().engage_mode == "mention-sticky"
    assert len(said) == 1 and "fresh conversation" in said[0][1]
    # one way, and told once: the next message (even one that says two members again) changes nothing
    route(said_in_room(3, "@olivia:example.org", "dm", "ok"), settings, NO_WAKE)
    assert MessagingGroup.get().kind == "thread" and len(said) == 1
    assert AuditLog.select().where(AuditLog.action == "chat.grown").count() == 1


def test_a_second_person_in_a_dm_ends_its_private_reach_even_when_the_event_still_says_dm(cli, app, monkeypatch):
    """Issue 60, item 2, decided per message: a homeserver's member count can lag (or a platform can leave it
    out), so Bob's message arrives marked `dm` in Olivia's room. The sender is not the DM's person: the chat
    grows all the same before Bob is heard, and Bob is never recorded as the owner of that DM."""
    from nanoclaw.inbound.grown import grown_to
    from nanoclaw.memory.scopes import reach_of
    from nanoclaw.models import MessagingGroup, UserDm
    assert grown_to("dm", "dm", "matrix", "matrix:@o:x", "matrix:@o:x") is None
    assert grown_to("dm", "dm", "matrix", None, "matrix:@o:x") is None  # nobody's DM yet: the first sender's
    assert grown_to("dm", "dm", "matrix", "matrix:@o:x", "matrix:@bob:x") == "thread"
    assert grown_to("dm", "dm", "discord", "discord:1", "discord:2") == "group"
    assert grown_to("group", "dm", "matrix", None, "matrix:@o:x") is None
    said = []
    monkeypatch.setattr("nanoclaw.inbound.router.tell", lambda e, _s, text: said.append(text))
    settings = app.config["NANOCLAW"]
    cli("agent", "create", "Andy")
    cli("user", "add", "matrix:@olivia:example.org", "--role", "owner")
    cli("wire", "matrix", "!room:example.org", "andy", "--unknown-senders", "public")

    def said_in_room(i, sender, text):
        return InboundEvent(channel="matrix", event_id=f"$e{i}", chat_id="!room:example.org", kind="dm",
                            sender_id=sender, sender_name=sender, text=text, timestamp="2026-12-06T10:00:00.000Z",
                            message_id=f"$e{i}", mentioned=True)
    assert route(said_in_room(1, "@olivia:example.org", "my locker code is 4711"), settings, NO_WAKE).written
    private = Session.get()
    assert reach_of(settings.sessions_dir, "andy", private.id).memory.kind == "private"
    result = route(said_in_room(2, "@bob:example.org", "what is the code?"), settings, NO_WAKE)
    assert result.written, result
    fresh = Session.get(Session.id != private.id)
    assert Session.get_by_id(private.id).status == "closed"
    assert reach_of(settings.sessions_dir, "andy", fresh.id).memory.name == "chat:matrix:!room:example.org"
    assert rows(app, "andy", fresh.id) == [(1, "what is the code?")]
    assert MessagingGroup.get().kind == "thread" and len(said) == 1
    assert [d.user_id for d in UserDm.select()] == ["matrix:@olivia:example.org"]
