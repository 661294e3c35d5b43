"""Record tests/fixtures/matrix/ from a real Synapse (issue 45): people do what they do in Element
(a DM, a named room, a mention, a thread, a reply with its fallback, a photo, a voice note, an edit,
a reaction, an encrypted message, the bot's own echo, a stranger's invite), the bot's account syncs
as the matrix-sync program does, and each hand-over is written exactly as the listener builds it
(nanoclaw.platforms.matrix.listener.handovers), with cases.json naming each outcome from what the
person did.

    python -m tests.platforms.record_matrix            # rewrites tests/fixtures/matrix/
    python -m tests.platforms.record_matrix --out DIR  # somewhere else

The homeserver is named example.org (the contract kit's bot is @andy:example.org); nothing leaves
127.0.0.1. tests/platforms/test_matrix_fixtures.py records again on each run and fails when what
Synapse sends no longer has the committed fixtures' shape.
"""
from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path
from urllib.parse import quote

from nanoclaw.platforms.matrix.listener import handovers

from .synapse import Synapse

SERVER_NAME = "example.org"
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "matrix"
ABOUT = ("Each payload here is what the matrix-sync program hands over for one event, recorded from a real "
         "Synapse by tests/platforms/record_matrix.py (people acting as Element does), with the outcome a user "
         "would see (tests/platforms/test_contract.py). State events (joins, names) are never handed over: the "
         "listener keeps them as room facts.")


def _jpeg() -> bytes:
    from PIL import Image
    out = io.BytesIO()
    Image.new("RGB", (394, 398), (40, 120, 60)).save(out, "JPEG")
    return out.getvalue()


def _ogg() -> bytes:
    return b"OggS" + bytes(8188)  # the listener reads the event's info, not the audio


def act(server: Synapse) -> dict:
    """What the people do; returns the ids the cases name."""
    andy = server.register("andy")
    alice, bob, mallory = server.register("alice"), server.register("bob"), server.register("mallory")
    for person, name in ((andy, "Andy"), (alice, "Alice"), (bob, "Bob"), (mallory, "Mallory")):
        person.set_name(name)
    ids: dict = {}
    dm = ids["dm"] = alice.create_room(invite=[andy.user_id], direct=True)
    andy.join(dm)
    ids["dm_message"] = alice.send(dm, {"msgtype": "m.text", "body": "Can you check my calendar for Friday?",
                                        "m.mentions": {}})
    ids["own_echo"] = andy.send(dm, {"msgtype": "m.text", "body": "Shall I book the table?"})
    ids["reply_with_fallback"] = alice.send(dm, {
        "msgtype": "m.text", "body": f"> <{andy.user_id}> Shall I book the table?\n\nyes please",
        "format": "org.matrix.custom.html",
        "formatted_body": f'<mx-reply><blockquote><a href="https://matrix.to/#/{dm}/{ids["own_echo"]}">In reply to</a> '
                          f'<a href="https://matrix.to/#/{andy.user_id}">{andy.user_id}</a><br>Shall I book the table?'
                          "</blockquote></mx-reply>yes please",
        "m.relates_to": {"m.in_reply_to": {"event_id": ids["own_echo"]}}, "m.mentions": {"user_ids": [andy.user_id]}})
    ids["edit"] = alice.send(dm, {"msgtype": "m.text", "body": "* Can you check my calendar for Saturday?",
                                  "m.new_content": {"msgtype": "m.text", "body": "Can you check my calendar for Saturday?"},
                                  "m.relates_to": {"rel_type": "m.replace", "event_id": ids["dm_message"]},
                                  "m.mentions": {}})
    photo = _jpeg()
    ids["image_mxc"] = alice.upload(photo, "IMG_2231.jpg", "image/jpeg")
    ids["image_size"] = len(photo)
    ids["image_message"] = alice.send(dm, {
        "msgtype": "m.image", "body": "what plant is this?", "filename": "IMG_2231.jpg", "url": ids["image_mxc"],
        "info": {"mimetype": "image/jpeg", "size": len(photo), "w": 394, "h": 398}, "m.mentions": {}})
    voice = _ogg()
    ids["voice_mxc"] = alice.upload(voice, "Voice message.ogg", "audio/ogg")
    ids["voice_size"] = len(voice)
    ids["voice_message"] = alice.send(dm, {
        "msgtype": "m.audio", "body": "Voice message", "filename": "Voice message.ogg", "url": ids["voice_mxc"],
        "info": {"mimetype": "audio/ogg", "size": len(voice), "duration": 4200},
        "org.matrix.msc1767.audio": {"duration": 4200, "waveform": [0, 120, 300, 512, 200, 0]},
        "org.matrix.msc3245.voice": {}, "m.mentions": {}})
    ids["encrypted"] = alice.send(dm, {
        "algorithm": "m.megolm.v1.aes-sha2", "ciphertext": "AwgAEnACgAkLmt6qF84IK++J7UDH2Za1YVchHyprqTqsg",
        "device_id": "RJYKSTBOIE", "sender_key": "IlRMeOPX2e0MurIyfWEucYBRVOEEUMrOHqn/8mLqMjA",
        "session_id": "X3lUlvLELLYxeTx4yOVu6UDpasGEVO0Jbu+QFnm0cKQ"}, "m.room.encrypted")

    room = ids["room"] = alice.create_room(invite=[andy.user_id, bob.user_id], name="Household")
    andy.join(room)
    bob.join(room)
    ids["room_mention"] = alice.send(room, {
        "msgtype": "m.text", "body": "Andy: what did we decide about the budget?", "format": "org.matrix.custom.html",
        "formatted_body": f'<a href="https://matrix.to/#/{andy.user_id}">Andy</a>: what did we decide about the budget?',
        "m.mentions": {"user_ids": [andy.user_id]}})
    ids["room_plain"] = bob.send(room, {"msgtype": "m.text", "body": "dinner at 7?", "m.mentions": {}})
    ids["room_legacy_mention"] = alice.send(room, {"msgtype": "m.text", "body": f"{andy.user_id} are you there?"})
    ids["thread_reply"] = alice.say(room, "and the week after?", thread=ids["room_mention"])
    ids["reaction"] = alice.react(room, ids["room_plain"], "👍")

    ids["invite_room"] = mallory.create_room(invite=[andy.user_id], direct=True)
    ids["andy"] = andy
    return ids


def bot_sync(andy) -> dict:
    """The bot's sync of everything so far, as one page per room (what the listener reads)."""
    flt = json.dumps({"room": {"timeline": {"limit": 100}}})
    return andy.call("GET", f"/_matrix/client/v3/sync?filter={quote(flt)}&timeout=0")


def record(out: Path) -> list[str]:
    """Record into `out`; returns the fixture names written."""
    server = Synapse(server_name=SERVER_NAME).start()
    try:
        ids = act(server)
        andy = ids.pop("andy")
        items = handovers(bot_sync(andy), {}, True, andy.user_id)
    finally:
        server.stop()
    by_event = {item["event"].get("event_id"): item for item in items if item["kind"] == "event"}
    invite = next(item for item in items if item["kind"] == "invite" and item["room_id"] == ids["invite_room"])
    out.mkdir(parents=True, exist_ok=True)
    names = ["dm_message", "own_echo", "reply_with_fallback", "edit", "image_message", "voice_message", "encrypted",
             "room_mention", "room_plain", "room_legacy_mention", "thread_reply", "reaction"]
    for name in names:
        (out / f"{name}.json").write_text(json.dumps(by_event[ids[name]], indent=2, ensure_ascii=False) + "\n")
    (out / "invite_from_stranger.json").write_text(json.dumps(invite, indent=2, ensure_ascii=False) + "\n")
    (out / "cases.json").write_text(json.dumps(cases(ids), indent=1, ensure_ascii=False) + "\n")
    return names + ["invite_from_stranger"]


def cases(ids: dict) -> dict:
    """Each fixture's outcome, from what the person did (not from what the code makes of it)."""
    return {"about": ABOUT,
            "fuzz": [{"fixture": name} for name in ("dm_message", "room_mention", "image_message", "thread_reply",
                                                     "voice_message")],
            "cases": [
                {"fixture": "dm_message", "event_id": ids["dm_message"], "expect": {"event": {
                    "kind": "dm", "chat_id": ids["dm"], "sender_id": f"@alice:{SERVER_NAME}", "sender_name": "Alice",
                    "mentioned": True, "thread_id": None, "text": "Can you check my calendar for Friday?"}}},
                {"fixture": "room_mention", "event_id": ids["room_mention"], "expect": {"event": {
                    "kind": "thread", "chat_id": ids["room"], "mentioned": True, "thread_id": ids["room_mention"],
                    "chat_name": "Household"}}},
                {"fixture": "room_plain", "event_id": ids["room_plain"], "expect": {"event": {
                    "kind": "thread", "mentioned": False, "sender_name": "Bob"}}},
                {"fixture": "room_legacy_mention", "event_id": ids["room_legacy_mention"],
                 "expect": {"event": {"mentioned": True}}},
                {"fixture": "thread_reply", "event_id": ids["thread_reply"], "expect": {"event": {
                    "kind": "thread", "thread_id": ids["room_mention"], "reply_to": None, "mentioned": False}}},
                {"fixture": "reply_with_fallback", "event_id": ids["reply_with_fallback"], "expect": {"event": {
                    "text": "yes please", "reply_to": {"message_id": ids["own_echo"], "sender_name": None,
                                                       "text": None}}}},
                {"fixture": "image_message", "event_id": ids["image_message"], "expect": {"event": {
                    "text": "what plant is this?", "attachments": [{
                        "kind": "image", "mxc": ids["image_mxc"], "name": "IMG_2231.jpg", "mime": "image/jpeg",
                        "size": ids["image_size"]}]}}},
                {"fixture": "voice_message", "event_id": ids["voice_message"], "expect": {"event": {
                    "text": "", "attachments": [{
                        "kind": "voice", "mxc": ids["voice_mxc"], "name": "Voice message.ogg", "mime": "audio/ogg",
                        "size": ids["voice_size"], "duration": 4.2}]}}},
                {"fixture": "reaction", "expect": {"ignored": True}},
                {"fixture": "edit", "expect": {"ignored": True}},
                {"fixture": "encrypted", "expect": {"ignored": True}},
                {"fixture": "own_echo", "expect": {"ignored": True}},
                {"fixture": "invite_from_stranger", "expect": {"ignored": True}},
            ]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=FIXTURES, help="Where to write (default: %(default)s).")
    args = parser.parse_args()
    names = record(args.out)
    print(f"recorded {len(names)} fixtures and cases.json in {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
