"""Matrix end to end against a real Synapse (issue 32): the matrix-sync program (the real one, a
subprocess) syncs the bot's account and hands events to the web program over HTTP; the agent runs
in a real sandbox (real SDK and CLI against the scripted model); people are plain HTTP clients of
the homeserver, as Element is.

Pairing by DM and a DM answered; a file each way; a room where only a mention engages, answered in a
thread that then stays engaged; a stranger's approval decided by the owner with a reaction; an
agent's question refused for the wrong person and answered by the one asked; invites from strangers
declined; an encrypted room told plainly that it cannot be read; the listener killed mid-sync and
every message answered exactly once."""
from __future__ import annotations

import contextlib
import io
import re
import threading
import uuid

import pytest
from PIL import Image

from conftest import require
from tests.fakes.model_api import SENTINEL, SENTINEL_ANSWER, Reply
from tests.platforms import synapse as synapse_mod
from tests.platforms.synapse import Synapse
from tests.platforms.listener_program import ListenerProgram
from tests.tg_flow import sandbox_service

INSTALL_SECRET = "matrix-e2e-install-secret-0123456789abcdef"
NOTES = b"Decisions: ship on Friday.\nBudget: 1200 EUR, approved.\n"
ASK = "mcp__nanoclaw__ask_user_question"
MAKE_CHART = "python3 -c \"from PIL import Image; Image.new('RGB', (64, 48), 'teal').save('chart.png')\""


ESSAY = " ".join(f"e{i:03x}" for i in range(200))  # 6 s at one word every 30 ms


def brain(req):
    prompt, results = req.current_prompt(), req.turn_tool_results()
    if "write the essay" in prompt:
        return Reply.say(ESSAY, chunk_delay_s=0.03)
    if "[attachment: " in prompt and not results:
        line = next(l for l in prompt.splitlines() if l.startswith("[attachment: "))
        return Reply.call("Read", file_path=line[len("[attachment: "):].split(" (", 1)[0])
    if results and "1200 EUR" in results[0].text:
        return Reply.say("From your notes: 1200 EUR.")
    if "what is in this picture?" in prompt and req.blocks("image"):
        return Reply.say("A teal rectangle.")
    if "send me the chart" in prompt:
        if not results:
            return Reply.call("Bash", command=MAKE_CHART)
        if len(results) == 1:
            return Reply.call("mcp__nanoclaw__send_file", path="chart.png", text="the chart")
        return Reply.say("Sent.")
    if "ask me" in prompt:
        if not results:
            return Reply.call(ASK, title="Dinner", question="Pizza or pasta?", options=["Pizza", "Pasta"])
        return Reply.say(f"Answer: {results[0].text}")
    seen = re.findall(r"\bm(\d+)\b", prompt.split("</context>")[-1])
    if seen:
        return Reply.say("got " + " ".join(f"m{n}" for n in seen))
    said = re.findall(r">([^<]*)</message>", prompt)
    return Reply.say(f"You said: {said[-1].strip() if said else '?'}")


@pytest.fixture(scope="module")
def synapse():
    ok, why = synapse_mod.available()
    require(ok, why)
    server = Synapse().start()
    yield server
    server.stop()


@contextlib.contextmanager
def matrix_service(make_settings, sqlite_url, synapse, tmp_path):
    from werkzeug.serving import make_server
    bot = synapse.register(f"andy{uuid.uuid4().hex[:6]}")
    bot.set_name("Andy")
    matrix = {"MATRIX_HOMESERVER": synapse.url, "MATRIX_USER_ID": bot.user_id, "MATRIX_ACCESS_TOKEN": bot.token}
    with sandbox_service(make_settings, sqlite_url, brain, NANOCLAW_SECRET_KEY=INSTALL_SECRET,
                         NANOCLAW_PROGRESS_EDIT_S=1, **matrix) as svc:
        server = make_server("127.0.0.1", 0, svc.app, threaded=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        settings = svc.settings
        listener = ListenerProgram("matrix", {**matrix, "NANOCLAW_DATA_DIR": str(settings.data_dir), "NANOCLAW_GROUPS_DIR":
                             str(settings.groups_dir), "DATABASE_URL": sqlite_url, "TZ": "UTC",
                             "NANOCLAW_SECRET_KEY": INSTALL_SECRET, "NANOCLAW_PORT": str(server.server_port),
                             "NANOCLAW_ENV_FILE": str(tmp_path / "none.env"),
                             "NANOCLAW_MOUNT_ALLOWLIST": str(settings.mount_allowlist)},
                            tmp_path / "matrix-sync.log").start()
        svc.bot, svc.listener = bot, listener
        try:
            synced = settings.data_dir / "matrix" / "sync.json"
            svc.wait(synced.exists, 60, what=f"the first sync (log: {listener.log})")
            yield svc
        finally:
            listener.stop()
            server.shutdown()


@pytest.fixture
def matrix(make_settings, sqlite_url, synapse, tmp_path):
    with matrix_service(make_settings, sqlite_url, synapse, tmp_path) as svc:
        svc.synapse = synapse
        yield svc


def person(svc, name: str):
    who = svc.synapse.register(f"{name}{uuid.uuid4().hex[:6]}")
    who.set_name(name.capitalize())
    return who


def bot_texts(svc, who, room, limit: int = 100) -> list[str]:
    return [e["content"].get("body", "") for e in who.from_bot(room, svc.bot.user_id, limit)]


def wait_text(svc, who, room, predicate, what):
    return svc.wait(lambda: next((t for t in bot_texts(svc, who, room) if predicate(t)), None), what=what)


def dm_with_owner(svc):
    alice = person(svc, "alice")
    svc.cli("agent", "create", "Andy")
    svc.cli("user", "add", f"matrix:{alice.user_id}", "--role", "owner", "--name", "Alice")
    room = alice.create_room(invite=[svc.bot.user_id], direct=True)
    svc.wait(lambda: svc.bot.user_id in alice.joined(room), what="the bot joining the owner's DM")
    svc.cli("wire", "matrix", room, "andy", "--kind", "dm")
    return alice, room


# --- DMs, pairing, files -------------------------------------------------------------------------

def test_pairing_by_dm_then_answers_and_files_both_ways(matrix):
    svc = matrix
    svc.cli("agent", "create", "Andy")
    code = svc.cli("pair", "andy").output.split("\n\n")[1].strip()
    alice = person(svc, "alice")
    room = alice.create_room(invite=[svc.bot.user_id], direct=True)  # no owner yet: a pairing code is open
    svc.wait(lambda: svc.bot.user_id in alice.joined(room), what="the bot joining the DM to pair")
    alice.say(room, code)
    svc.wait(lambda: bot_texts(svc, alice, room), what="the pairing confirmation")

    alice.say(room, "hello there")
    wait_text(svc, alice, room, lambda t: t == "You said: hello there", "the answer in the DM")

    alice.send_file(room, NOTES, "notes.txt", "text/plain", caption="what did we decide?")
    wait_text(svc, alice, room, lambda t: "1200 EUR" in t, "the answer about the file")

    picture = io.BytesIO()
    Image.new("RGB", (300, 200), "teal").save(picture, "PNG")
    alice.send_file(room, picture.getvalue(), "shot.png", "image/png", "m.image", caption="what is in this picture?")
    wait_text(svc, alice, room, lambda t: t == "A teal rectangle.", "the answer about the picture")
    seen = next(c for c in svc.model.model_calls() if c.blocks("image"))
    assert seen.blocks("image")[0]["source"]["media_type"] == "image/png"

    alice.say(room, "send me the chart")
    image = svc.wait(lambda: next((e for e in alice.from_bot(room, svc.bot.user_id)
                                   if e["content"].get("msgtype") == "m.image"), None), what="the chart")
    assert image["content"]["body"] == "the chart" and image["content"]["filename"] == "chart.png"
    assert Image.open(io.BytesIO(alice.download(image["content"]["url"]))).size == (64, 48)


def test_a_long_answer_grows_in_one_message_then_arrives_whole_and_once(matrix):
    svc = matrix
    alice, room = dm_with_owner(svc)
    alice.say(room, "write the essay")
    wait_text(svc, alice, room, lambda t: t == ESSAY, "the answer")
    bot = [e for e in alice.timeline(room, 400) if e["sender"] == svc.bot.user_id]
    edits = [e for e in bot if (e["content"].get("m.relates_to") or {}).get("rel_type") == "m.replace"]
    assert len(edits) >= 2, bot  # one message, replaced (m.replace) as the answer grew
    assert all(ESSAY.startswith(e["content"]["m.new_content"]["body"]) for e in edits)
    assert len({e["content"]["m.relates_to"]["event_id"] for e in edits}) == 1
    live = edits[0]["content"]["m.relates_to"]["event_id"]
    answers = [e for e in bot if e["content"].get("body") == ESSAY and "m.relates_to" not in e["content"]]
    assert len(answers) == 1  # the finished answer: a new message, once

    def redacted():
        return any(e["type"] == "m.room.redaction" and live in (e.get("redacts"), e["content"].get("redacts"))
                   for e in alice.timeline(room, 400))
    svc.wait(redacted, what="the growing message redacted")


def test_invites_from_strangers_are_declined(matrix):
    svc = matrix
    dm_with_owner(svc)
    mallory = person(svc, "mallory")
    room = mallory.create_room(invite=[svc.bot.user_id], direct=True)
    state = f"/_matrix/client/v3/rooms/{room}/state/m.room.member/{svc.bot.user_id}"
    svc.wait(lambda: mallory.call("GET", state).get("membership") == "leave", what="the invite declined")


def test_an_encrypted_room_is_told_it_cannot_be_read(matrix):
    svc = matrix
    alice, _dm = dm_with_owner(svc)
    room = alice.create_room(invite=[svc.bot.user_id], direct=True, encrypted=True)
    notice = svc.wait(lambda: next((e for e in alice.timeline(room) if e.get("sender") == svc.bot.user_id
                                    and e["type"] == "m.room.message"), None), what="the notice")
    assert notice["content"]["msgtype"] == "m.notice" and "end-to-end encrypted" in notice["content"]["body"]
    alice.send(room, {"algorithm": "m.megolm.v1.aes-sha2", "ciphertext": "AwgAEnAC…", "device_id": "DEV",
                      "sender_key": "key", "session_id": "sess"}, "m.room.encrypted")
    alice.say(_dm, "still here?")
    wait_text(svc, alice, _dm, lambda t: t == "You said: still here?", "the DM still answered")
    assert len([e for e in alice.timeline(room) if e.get("sender") == svc.bot.user_id
                and e["type"] == "m.room.message"]) == 1  # told once, not per message


# --- a room: mentions, threads, cards ------------------------------------------------------------

def test_room_mentions_threads_approvals_and_questions(matrix):
    svc = matrix
    alice, dm = dm_with_owner(svc)
    alice.say(dm, "hi")  # the host learns where the owner's DM is (cards go there)
    wait_text(svc, alice, dm, lambda t: t == "You said: hi", "the DM answered")
    bob, carol = person(svc, "bob"), person(svc, "carol")
    svc.cli("user", "add", f"matrix:{carol.user_id}", "--role", "member", "--agent", "andy", "--name", "Carol")
    room = alice.create_room(invite=[svc.bot.user_id, bob.user_id, carol.user_id], name="Household")
    bob.join(room)
    carol.join(room)
    svc.wait(lambda: svc.bot.user_id in alice.joined(room), what="the bot joining the room")
    svc.cli("wire", "matrix", room, "andy", "--kind", "thread")

    alice.say(room, "dinner at 7?")  # no mention: not for the bot
    asked = alice.say(room, "what is on tonight?", mention=svc.bot.user_id)
    reply = svc.wait(lambda: next((e for e in alice.from_bot(room, svc.bot.user_id)), None), what="the thread reply")
    relation = reply["content"]["m.relates_to"]
    assert relation["rel_type"] == "m.thread" and relation["event_id"] == asked
    assert "what is on tonight?" in reply["content"]["body"] and "dinner" not in reply["content"]["body"]
    alice.say(room, "and tomorrow?", thread=asked)  # the thread stays engaged without a mention
    follow = wait_text(svc, alice, room, lambda t: t == "You said: and tomorrow?", "the answer in the thread")
    assert follow

    # a stranger: the owner is asked in her DM, and chooses with a reaction
    bob.say(room, "can I join in?", mention=svc.bot.user_id)
    card = svc.wait(lambda: next((e for e in alice.from_bot(dm, svc.bot.user_id)
                                  if "wants to talk to Andy" in e["content"]["body"]), None), what="the sender card")
    assert "1. ✅ Allow" in card["content"]["body"] and "2. 🚫 Deny" in card["content"]["body"]
    alice.react(dm, card["event_id"], "1️⃣")
    wait_text(svc, alice, room, lambda t: t.startswith("You said:") and t.endswith("can I join in?"),
              "the stranger's message answered")

    # an agent's question to Carol: Bob's answer is refused, Carol's taken
    q_root = carol.say(room, "please ask me", mention=svc.bot.user_id)
    question = svc.wait(lambda: next((e for e in alice.from_bot(room, svc.bot.user_id)
                                      if "Pizza or pasta?" in e["content"]["body"]), None), what="the question")
    assert question["content"]["m.relates_to"]["event_id"] == q_root
    refused = bob.send(room, {"msgtype": "m.text", "body": "1", "m.relates_to": {
        "rel_type": "m.thread", "event_id": q_root, "is_falling_back": False,
        "m.in_reply_to": {"event_id": question["event_id"]}}})
    carol.send(room, {"msgtype": "m.text", "body": "2", "m.relates_to": {
        "rel_type": "m.thread", "event_id": q_root, "is_falling_back": False,
        "m.in_reply_to": {"event_id": question["event_id"]}}})
    answer = wait_text(svc, alice, room, lambda t: t.startswith("Answer:"), "the agent's use of the answer")
    assert "Pasta" in answer and "Pizza" not in answer
    told = next(e for e in alice.from_bot(room, svc.bot.user_id)
                if e["content"].get("m.relates_to", {}).get("m.in_reply_to", {}).get("event_id") == refused)
    assert told["content"]["msgtype"] == "m.notice" and "who was asked" in told["content"]["body"]


# --- the listener dies mid-sync ------------------------------------------------------------------

def test_the_listener_killed_mid_sync_loses_and_repeats_nothing(matrix):
    svc = matrix
    alice, room = dm_with_owner(svc)
    for n in (1, 2, 3):
        alice.say(room, f"m{n}")
    svc.listener.kill()  # whatever it was doing: syncing, handing over, about to save the token
    for n in (4, 5):
        alice.say(room, f"m{n}")
    svc.listener.start()
    wanted = {f"m{n}" for n in range(1, 6)}

    def answered():
        seen = [w for t in bot_texts(svc, alice, room) if t.startswith("got ") for w in t.split()[1:]]
        return seen if set(seen) >= wanted else None
    svc.wait(answered, what="every message answered")
    settled(svc, alice, room)  # a quiet period, not the instant the last word arrived
    seen = [w for t in bot_texts(svc, alice, room) if t.startswith("got ") for w in t.split()[1:]]
    assert sorted(seen) == sorted(wanted), seen  # each exactly once


def answered_marks(svc, who, room) -> list[str]:
    return [w for t in bot_texts(svc, who, room, limit=1000) if t.startswith("got ") for w in t.split()[1:]]


def settled(svc, who, room) -> None:
    """The sentinel said and answered: whatever was still on its way has arrived by now."""
    who.say(room, SENTINEL)
    wait_text(svc, who, room, lambda t: t == SENTINEL_ANSWER, "the sentinel's answer")


def test_more_than_a_timelines_worth_while_the_listener_was_down_is_paged_back_and_answered_once(matrix):
    """130 messages while the listener is down: its next /sync holds the newest 100 (limited); the
    rest are paged back from the old token, so every one is answered, once, also after a quiet
    period (the sentinel)."""
    from nanoclaw.platforms.matrix.listener import TIMELINE_LIMIT
    svc = matrix
    alice, room = dm_with_owner(svc)
    alice.say(room, "m0")
    wait_text(svc, alice, room, lambda t: t == "got m0", "the first answer")
    svc.listener.kill()
    count = TIMELINE_LIMIT + 30
    for n in range(1, count + 1):
        alice.say(room, f"m{n}")
    svc.listener.start()
    wanted = {f"m{n}" for n in range(count + 1)}
    svc.wait(lambda: set(answered_marks(svc, alice, room)) >= wanted, timeout=240, what="every message answered")
    settled(svc, alice, room)
    assert sorted(answered_marks(svc, alice, room)) == sorted(wanted)  # each exactly once
    assert "older event(s) fetched that the sync left out" in svc.listener.log.read_text()
