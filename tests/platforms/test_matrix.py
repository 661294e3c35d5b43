"""The Matrix adapter against a real Synapse (what a person sees of each call), the card choices, and
the listener's reading of /sync; without a sandbox (tests/platforms/test_matrix_e2e.py has one)."""
from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from conftest import require
from nanoclaw.channels import choices
from nanoclaw.channels.base import Card, DeliveryError
from nanoclaw.channels.download import AttachmentTooLarge
from nanoclaw.platforms.matrix import adapter as mxa
from nanoclaw.platforms.matrix.adapter import MatrixAdapter
from nanoclaw.platforms.matrix.listener import RoomState, handovers
from nanoclaw.sessions.store import Target
from tests.platforms import synapse as synapse_mod
from tests.platforms.synapse import Synapse


@pytest.fixture(scope="module")
def synapse():
    ok, why = synapse_mod.available()
    require(ok, why)
    server = Synapse().start()
    yield server
    server.stop()


def bot_and_alice(synapse, app):
    """A bot and Alice in a DM room of their own, and the app's settings speaking as the bot."""
    bot = synapse.register(f"andy{uuid.uuid4().hex[:6]}")
    alice = synapse.register(f"alice{uuid.uuid4().hex[:6]}")
    room = alice.create_room(invite=[bot.user_id], direct=True)
    bot.join(room)
    settings = app.config["NANOCLAW"]
    settings = type(settings)(**{**settings.__dict__, "platform": {
        "MATRIX_HOMESERVER": synapse.url, "MATRIX_USER_ID": bot.user_id, "MATRIX_ACCESS_TOKEN": bot.token}})
    return settings, bot, alice, room


@pytest.fixture
def talk(synapse, app):
    """A bot and Alice in a room of their own; the adapter speaks as the bot."""
    settings, bot, alice, room = bot_and_alice(synapse, app)
    return MatrixAdapter(settings), bot, alice, room


def test_text_edit_reaction_redaction_and_typing(talk):
    adapter, bot, alice, room = talk
    target = Target("matrix", room)
    first = adapter.send_text(target, "draft")
    adapter.edit_text(target, first, "final answer")
    adapter.react(target, first, "👍")
    gone = adapter.send_text(target, "⏳ Working…")
    adapter.delete_message(target, gone)
    adapter.typing(target)
    events = {e["event_id"]: e for e in alice.timeline(room)}
    edit = next(e for e in events.values() if e["content"].get("m.relates_to", {}).get("rel_type") == "m.replace")
    assert edit["content"]["m.new_content"]["body"] == "final answer" and edit["content"]["m.relates_to"]["event_id"] == first
    reaction = next(e for e in events.values() if e["type"] == "m.reaction")
    assert reaction["content"]["m.relates_to"] == {"rel_type": "m.annotation", "event_id": first, "key": "👍"}
    assert events[gone]["content"] == {}  # redacted: the body is gone for everyone


def test_a_reply_in_a_thread_stays_in_the_thread(talk):
    adapter, bot, alice, room = talk
    root = alice.say(room, "start here")
    sent = adapter.send_text(Target("matrix", room, root), "in the thread")
    event = next(e for e in alice.timeline(room) if e["event_id"] == sent)
    assert event["content"]["m.relates_to"]["rel_type"] == "m.thread"
    assert event["content"]["m.relates_to"]["event_id"] == root


def test_files_both_ways_over_authenticated_media(talk, tmp_path):
    adapter, bot, alice, room = talk
    report = tmp_path / "report.csv"
    report.write_bytes(b"a,b\n1,2\n")
    sent = adapter.send_file(Target("matrix", room), report, "the numbers")
    event = next(e for e in alice.timeline(room) if e["event_id"] == sent)
    assert event["content"]["msgtype"] == "m.file" and event["content"]["body"] == "the numbers"
    assert alice.download(event["content"]["url"]) == b"a,b\n1,2\n"
    mxc = alice.upload(b"x" * 5000, "big.bin", "application/octet-stream")
    assert adapter.fetch_attachment({"mxc": mxc, "name": "big.bin"}) == ("big.bin", b"x" * 5000)
    adapter.settings = type(adapter.settings)(**{**adapter.settings.__dict__, "attachment_max_bytes": 1024})
    with pytest.raises(AttachmentTooLarge):
        adapter.fetch_attachment({"mxc": mxc})


def test_a_spoken_answer_is_a_voice_message_with_its_text(talk, tmp_path):
    adapter, _bot, alice, room = talk
    spoken = tmp_path / "answer.ogg"
    spoken.write_bytes(b"OggS" + bytes(200))
    sent = adapter.send_file(Target("matrix", room), spoken, "It is sunny.", voice=True)
    event = next(e for e in alice.timeline(room) if e["event_id"] == sent)
    content = event["content"]
    assert content["msgtype"] == "m.audio" and "org.matrix.msc3245.voice" in content
    assert content["body"] == "It is sunny." and content["info"]["mimetype"] == "audio/ogg"
    assert alice.download(content["url"]) == spoken.read_bytes()


def test_a_card_is_numbered_and_only_its_own_record_says_what_a_number_means(talk):
    adapter, bot, alice, room = talk
    card = Card("New sender", "Bob wants to talk to Andy — allow?", (("✅ Allow", "nsa-tok:allow"),
                                                                     ("🚫 Deny", "nsa-tok:deny")))
    card_id = adapter.send_card(Target("matrix", room), card)
    body = next(e for e in alice.timeline(room) if e["event_id"] == card_id)["content"]["body"]
    assert "1. ✅ Allow\n2. 🚫 Deny" in body and "1️⃣ 2️⃣" in body
    assert choices.chosen("matrix", room, card_id, 2) == "nsa-tok:deny"
    assert choices.chosen("matrix", room, card_id, 3) is None
    assert choices.chosen("matrix", "!elsewhere:localhost", card_id, 1) is None  # another room's message
    plain = alice.say(room, "not a card")
    assert choices.chosen("matrix", room, plain, 1) is None


def handover(room: str, sender: str, content: dict, event_type: str = "m.room.message", members: int = 2) -> dict:
    return {"kind": "event", "room_id": room, "members": members, "event": {
        "type": event_type, "event_id": f"${uuid.uuid4().hex}:localhost", "sender": sender,
        "origin_server_ts": 1732610000000, "content": content}}


def test_a_reply_or_a_reaction_to_a_card_is_a_choice_and_to_anything_else_a_message(talk):
    adapter, bot, alice, room = talk
    card_id = adapter.send_card(Target("matrix", room), Card("Pick", "", (("Pizza", "ncq-t:0"), ("Pasta", "ncq-t:1"))))
    reply = adapter.parse(handover(room, alice.user_id, {"msgtype": "m.text", "body": f"> <{bot.user_id}> Pick\n\n2",
                                                         "m.relates_to": {"m.in_reply_to": {"event_id": card_id}}}))
    assert [(a.action_id, a.user_id, a.message_id) for a in reply.actions] == [("ncq-t:1", f"matrix:{alice.user_id}",
                                                                              card_id)]
    keycap = adapter.parse(handover(room, alice.user_id, {"m.relates_to": {
        "rel_type": "m.annotation", "event_id": card_id, "key": "1️⃣"}}, "m.reaction"))
    assert [a.action_id for a in keycap.actions] == ["ncq-t:0"]
    other = alice.say(room, "a question of mine")
    plain = adapter.parse(handover(room, alice.user_id, {"msgtype": "m.text", "body": "2",
                                                         "m.relates_to": {"m.in_reply_to": {"event_id": other}}}))
    assert plain.actions == [] and [e.text for e in plain.events] == ["2"]


@hsettings(max_examples=200, deadline=None)
@given(st.text(max_size=30))
def test_any_reply_text_names_at_most_one_option(text):
    n = choices.number_in(text)
    assert n is None or 1 <= n <= 99


def test_numbers_as_people_write_them():
    assert [choices.number_in(t) for t in ("2", " 2. ", "#3 please", "1) yes", "2️⃣", "2⃣", "12", "two", "", "2nd",
                                           "-1")] == [2, 2, 3, 1, 2, 2, 12, None, None, None, None]


def test_invites_are_taken_from_the_owner_or_an_admin_or_to_pair():
    assert mxa.may_join({"owner"}, False, False) and mxa.may_join({"admin"}, False, False)
    assert not mxa.may_join({"member"}, False, True) and not mxa.may_join(set(), False, True)
    assert mxa.may_join(set(), True, True) and not mxa.may_join(set(), True, False)  # pairing: a DM only


# --- the listener's reading of /sync -----------------------------------------------------------

def sync_with(room_id: str, state: list[dict], timeline: list[dict], invite: dict | None = None) -> dict:
    rooms = {"join": {room_id: {"state": {"events": state}, "timeline": {"events": timeline}}}}
    if invite:
        rooms["invite"] = invite
    return {"next_batch": "s2", "rooms": rooms}


def member(user: str, membership: str = "join", name: str | None = None) -> dict:
    return {"type": "m.room.member", "state_key": user, "sender": user, "event_id": f"$m{uuid.uuid4().hex}",
            "content": {"membership": membership, **({"displayname": name} if name else {})}}


def message(sender: str, body: str) -> dict:
    return {"type": "m.room.message", "sender": sender, "event_id": f"${uuid.uuid4().hex}",
            "content": {"msgtype": "m.text", "body": body}}


def test_sync_hands_over_messages_with_the_rooms_members_and_names():
    rooms: dict[str, RoomState] = {}
    sync = sync_with("!r:x", [member("@andy:x"), member("@alice:x", name="Alice"),
                              {"type": "m.room.name", "state_key": "", "content": {"name": "Kitchen"}}],
                     [message("@alice:x", "hi"), member("@bob:x", name="Bob"), message("@bob:x", "hello")])
    out = handovers(sync, rooms, history=True, user_id="@andy:x")
    assert [(h["event"]["content"]["body"], h["members"], h["sender_name"], h["room_name"]) for h in out] == \
        [("hi", 2, "Alice", "Kitchen"), ("hello", 3, "Bob", "Kitchen")]
    assert handovers(sync_with("!r:x", [], [member("@bob:x", "leave")]), rooms, True, "@andy:x") == []
    assert len(rooms["!r:x"].members) == 2


def test_the_first_sync_hands_over_no_history_but_answers_invites():
    invite = {"!new:x": {"invite_state": {"events": [
        {"type": "m.room.member", "state_key": "@andy:x", "sender": "@alice:x",
         "content": {"membership": "invite", "is_direct": True}}]}}}
    out = handovers(sync_with("!r:x", [member("@alice:x")], [message("@alice:x", "old")], invite), {}, history=False,
                    user_id="@andy:x")
    assert [(h["kind"], h["room_id"], h["inviter"], h["is_direct"]) for h in out] == [("invite", "!new:x", "@alice:x",
                                                                                      True)]


def test_the_inviter_is_the_sender_of_the_bots_own_invite_not_what_the_inviting_server_lists():
    """invite_state is stripped state the inviting server chooses: a stranger's server can list a member
    event "from the owner" first. Only the bot's own invite event (signed, checked by its homeserver)
    names who invited it."""
    forged = {"type": "m.room.member", "state_key": "@olivia:home", "sender": "@olivia:home",
              "content": {"membership": "invite", "is_direct": True}}
    real = {"type": "m.room.member", "state_key": "@andy:home", "sender": "@mallory:evil", "event_id": "$inv",
            "content": {"membership": "invite", "is_direct": True}}
    join_rules = {"type": "m.room.join_rules", "state_key": "", "sender": "@mallory:evil",
                  "content": {"join_rule": "invite"}}
    invite = {"!trap:evil": {"invite_state": {"events": [forged, join_rules, real]}}}
    out = handovers({"next_batch": "s3", "rooms": {"invite": invite}}, {}, history=True, user_id="@andy:home")
    assert [(h["room_id"], h["inviter"], h["event"]["event_id"]) for h in out] == [("!trap:evil", "@mallory:evil", "$inv")]
    # an invite list without the bot's own invite event names nobody: nothing is handed over
    alone = {"!trap:evil": {"invite_state": {"events": [forged, join_rules]}}}
    assert handovers({"next_batch": "s4", "rooms": {"invite": alone}}, {}, history=True, user_id="@andy:home") == []


def test_the_bots_messages_mention_nobody_whatever_the_agent_writes(synapse, app):
    """An answer holding a member's display name (or @room) does not notify anyone: each message and
    edit says m.mentions {} (seen from Alice's notifications on a real Synapse)."""
    bot = synapse.register(f"andy{uuid.uuid4().hex[:6]}")
    alice = synapse.register(f"alice{uuid.uuid4().hex[:6]}")
    bob = synapse.register(f"bob{uuid.uuid4().hex[:6]}")
    alice.set_name("Alicia")
    room = alice.create_room(invite=[bot.user_id, bob.user_id], name="Kitchen")
    bot.join(room)
    bob.join(room)
    settings = app.config["NANOCLAW"]
    settings = type(settings)(**{**settings.__dict__, "platform": {
        "MATRIX_HOMESERVER": synapse.url, "MATRIX_USER_ID": bot.user_id, "MATRIX_ACCESS_TOKEN": bot.token}})
    adapter = MatrixAdapter(settings)
    target = Target("matrix", room)
    said = adapter.send_text(target, "Alicia, @room: dinner is at eight")
    adapter.edit_text(target, said, "Alicia, @room: dinner is at nine")
    card = adapter.send_card(target, Card("Alicia, pick one", "Alicia: @room", (("one", "a"), ("two", "b"))))
    sentinel = bob.say(room, "Alicia, the sentinel")  # a person's mention: this one does notify her
    events = {e["event_id"]: e for e in alice.timeline(room)}
    for event_id in (said, card):
        assert events[event_id]["content"]["m.mentions"] == {}
    edit = next(e for e in events.values() if e["content"].get("m.relates_to", {}).get("rel_type") == "m.replace")
    assert edit["content"]["m.mentions"] == {} and edit["content"]["m.new_content"]["m.mentions"] == {}
    highlighted = set()
    for note in alice.call("GET", "/_matrix/client/v3/notifications?limit=50")["notifications"]:
        if any(isinstance(a, dict) and a.get("set_tweak") == "highlight" and a.get("value", True) for a in note["actions"]):
            highlighted.add(note["event"]["event_id"])
    assert sentinel in highlighted  # the check can see a mention
    assert not highlighted & {said, card, edit["event_id"]}


def test_an_encrypted_room_is_known_from_its_state():
    rooms: dict[str, RoomState] = {}
    handovers(sync_with("!e:x", [{"type": "m.room.encryption", "state_key": "",
                                  "content": {"algorithm": "m.megolm.v1.aes-sha2"}}], []), rooms, True, "@andy:x")
    assert rooms["!e:x"].encrypted


def test_errors_never_carry_the_token(synapse, app):
    settings = app.config["NANOCLAW"]
    settings = type(settings)(**{**settings.__dict__, "platform": {
        "MATRIX_HOMESERVER": synapse.url, "MATRIX_USER_ID": "@ghost:localhost", "MATRIX_ACCESS_TOKEN": "syt_secret_X"}})
    with pytest.raises(DeliveryError) as err:
        MatrixAdapter(settings).send_text(Target("matrix", "!nowhere:localhost"), "hi")
    assert err.value.permanent and "syt_secret_X" not in str(err.value) and "401" in str(err.value)
    json.dumps(str(err.value))


# --- doctor and login ----------------------------------------------------------------------------

def test_doctor_checks_the_homeserver_the_token_and_the_sync(synapse):
    from nanoclaw.platforms.matrix.doctor import check
    bot = synapse.register(f"andy{uuid.uuid4().hex[:6]}")
    good = {"MATRIX_HOMESERVER": synapse.url, "MATRIX_USER_ID": bot.user_id, "MATRIX_ACCESS_TOKEN": bot.token}
    found = check(good)
    assert found.ok is True and bot.user_id in found.line() and "syncing" in found.line()
    refused = check({**good, "MATRIX_ACCESS_TOKEN": "syt_wrong"})
    assert refused.ok is False and "refused" in refused.detail and "syt_wrong" not in refused.line()
    other = synapse.register(f"bea{uuid.uuid4().hex[:6]}")
    assert "belongs to" in check({**good, "MATRIX_ACCESS_TOKEN": other.token}).detail
    dead = check({**good, "MATRIX_HOMESERVER": "http://127.0.0.1:9"})
    assert dead.ok is False and "MATRIX_HOMESERVER" in dead.detail
    assert check({}) is None


def test_login_with_a_password_keeps_one_token_for_every_program(synapse, app, cli):
    import os
    import stat
    bot = synapse.register(f"andy{uuid.uuid4().hex[:6]}", password="a long matrix password")
    settings = app.config["NANOCLAW"]
    app.config["NANOCLAW"] = settings = type(settings)(**{**settings.__dict__, "platform": {
        "MATRIX_HOMESERVER": synapse.url, "MATRIX_USER_ID": bot.user_id, "MATRIX_PASSWORD": "a long matrix password"}})
    result = cli("matrix", "login")
    assert result.exit_code == 0, result.output
    kept = settings.data_dir / "matrix" / "account.json"
    assert stat.S_IMODE(os.stat(kept).st_mode) == 0o600 and "a long matrix password" not in kept.read_text()
    alice = synapse.register(f"alice{uuid.uuid4().hex[:6]}")
    room = alice.create_room(invite=[bot.user_id], direct=True)
    bot.join(room)
    sent = MatrixAdapter(settings).send_text(Target("matrix", room), "logged in")
    assert any(e["event_id"] == sent for e in alice.timeline(room))
    wrong = type(settings)(**{**settings.__dict__, "platform": {**settings.platform, "MATRIX_PASSWORD": "nope"}})
    (settings.data_dir / "other").mkdir()  # no kept token there: it logs in again, and is refused
    app.config["NANOCLAW"] = type(wrong)(**{**wrong.__dict__, "data_dir": settings.data_dir / "other"})
    result = cli("matrix", "login")
    assert result.exit_code != 0 and "could not log in" in result.output and "Traceback" not in result.output


def test_the_sync_token_stays_put_while_the_web_program_is_down_and_moves_past_what_it_refuses(synapse, app,
                                                                                               monkeypatch):
    """The real listener against Synapse, handing over to a web program that answers as scripted. While it
    is down or restarting (503, no answer) the same event is offered again and the token stays; once it
    takes the event, the token moves. An event a running web program refuses five times in a row (500) is
    set aside with the reason (issue 60) and the sync goes on past it: the next event is handed over."""
    import asyncio
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from nanoclaw.inbound.set_aside import SetAsideEvent
    from nanoclaw.platforms.matrix import listener as listening
    from nanoclaw.platforms.matrix.listener import SyncListener
    monkeypatch.setattr(listening, "backoff", lambda failures: 0.05)
    settings, bot, alice, room = bot_and_alice(synapse, app)
    web = {"script": [], "events": []}

    class Web(BaseHTTPRequestHandler):
        def do_POST(self):
            item = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            status = web["script"].pop(0) if web["script"] else 200
            web["events"].append((item["event"].get("event_id"), status))
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_args):
            pass
    server = ThreadingHTTPServer(("127.0.0.1", 0), Web)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    listener = SyncListener(settings, web_url=f"http://127.0.0.1:{server.server_address[1]}", timeout_ms=0)

    def answers(event_id):
        return [status for e, status in web["events"] if e == event_id]

    async def run() -> None:
        await listener.connect()
        try:
            assert await listener.run_once(first=True) == 0  # the account's first sync: no history
            start = listener.since()
            web["script"] = [503, 503, 503]
            said = alice.say(room, "while the web program is down")
            once = asyncio.ensure_future(listener.run_once(first=False))
            while len(web["events"]) < 2:
                await asyncio.sleep(0.02)
            assert listener.since() == start and not once.done()  # offered again, the token where it was
            assert await once == 0 and listener.since() != start
            assert answers(said) == [503, 503, 503, 200]  # the same event each time, until taken

            moved = listener.since()
            web["script"] = [500] * 20
            refused = alice.say(room, "a payload the web program cannot take")
            assert await listener.run_once(first=False) == 0
            assert answers(refused) == [500] * 5 and listener.since() != moved
            web["script"] = []
            after = alice.say(room, "and the next one")
            assert await listener.run_once(first=False) == 0
            assert answers(after) == [200]
        finally:
            await listener.client.api.session.close()
    try:
        asyncio.run(run())
    finally:
        server.shutdown()
    with app.app_context():
        kept = list(SetAsideEvent.select())
    assert [(k.channel, k.event_key, k.reason) for k in kept] == [
        ("matrix", kept[0].event_key, "5 times in a row (last: HTTP 500)")]
    assert "a payload the web program cannot take" in kept[0].payload
