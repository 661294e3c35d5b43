"""Real-shaped payloads, each with the outcome a user would see (issue 15, "bad input").

Every file under tests/fixtures/ follows the platform's documentation, including the odd shapes
platforms really send: a Telegram channel post without `from`, an anonymous group admin, a chat
without `type`, a click on a card too old to read; a Slack edit with the new text nested, another
app's message with `bot_id` and no subtype, a select menu asking for options; WhatsApp receipts,
a removed reaction, an unsupported message; a Discord click with neither `member` nor `user`.

Each goes through the real webhook route, signed; the outcome is read from what the service did:
the event it accepted for routing (who the agent will see as the sender, in which chat), the answer
the platform got, or that nothing was accepted and the malformed counter moved."""
from __future__ import annotations

import json

import pytest

from conftest import malformed_total
from tests.platforms.test_webhook_properties import (DISCORD_KEY, SLACK_SECRET, TG_SECRET, WA_SECRET, closed_port, fixture,
                                     post_discord, post_slack_action, post_slack_event, post_telegram,
                                     post_whatsapp)
from nanoclaw.app import create_app
from nanoclaw.config import Settings
from nanoclaw.db import database
from nanoclaw.migrate import apply_pending
from nanoclaw.models import AcceptedEvent

BOT_ID = "7000001"             # the Telegram bot of the fixtures (token prefix)
SLACK_BOT_USER = "U0BOTANDY"   # the Slack bot user of the fixtures


class HeldIntake:
    def submit(self, row_ids):
        pass


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    root = tmp_path_factory.mktemp("shapes")
    dead = closed_port()   # platform APIs unreachable: outcomes come from the payload alone
    settings = Settings.load(environ={
        "NANOCLAW_DATA_DIR": str(root / "data"), "NANOCLAW_GROUPS_DIR": str(root / "groups"), "TZ": "UTC",
        "DATABASE_URL": f"sqlite:///{root / 'data' / 'nanoclaw.db'}",
        "NANOCLAW_MOUNT_ALLOWLIST": str(root / "allow.json"),
        "TELEGRAM_BOT_TOKEN": f"{BOT_ID}:AAH-token", "TELEGRAM_WEBHOOK_SECRET": TG_SECRET,
        "TELEGRAM_API_BASE": dead,
        "SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": SLACK_SECRET, "SLACK_API_BASE": dead,
        "SLACK_BOT_USER_ID": SLACK_BOT_USER,
        "WHATSAPP_TOKEN": "wa-token", "WHATSAPP_APP_SECRET": WA_SECRET, "WHATSAPP_VERIFY_TOKEN": "v",
        "WHATSAPP_PHONE_NUMBER_ID": "106540352242922", "WHATSAPP_API_BASE": dead,
        "DISCORD_BOT_TOKEN": "d-token", "DISCORD_PUBLIC_KEY": DISCORD_KEY.verify_key.encode().hex(),
        "DISCORD_APPLICATION_ID": "999", "DISCORD_API_BASE": dead}, dotenv_path=root / "none.env")
    app = create_app(settings)
    # routing held back (an intake that keeps what it is given), so each accepted event stays in
    # inbound_events exactly as the router will read it
    app.extensions["nanoclaw.intake"] = HeldIntake()
    database.connect(reuse_if_open=True)
    apply_pending(database.obj, log=lambda _l: None)
    yield app
    database.close()


def accepted(channel: str, event_id: str) -> dict | None:
    """The event the webhook accepted for routing, as the router will read it; None if none."""
    row = AcceptedEvent.get_or_none((AcceptedEvent.channel == channel) & (AcceptedEvent.event_id == event_id))
    return json.loads(row.payload) if row is not None else None


def messages_accepted() -> int:
    """Messages accepted for routing (a click's dedup record carries no payload)."""
    return AcceptedEvent.select().where(AcceptedEvent.payload.is_null(False)).count()


POSTERS = {"telegram": post_telegram, "slack": post_slack_event, "slack-actions": post_slack_action,
           "whatsapp": post_whatsapp, "discord": post_discord}

# (platform, fixture, the event id it would be stored under, expected outcome)
#   event:    accepted for routing, with these fields
#   ignored:  200, nothing accepted (not a message to answer, or our own)
#   answer:   the body the platform gets back, nothing accepted
#   malformed: 200 (or the platform's answer), nothing accepted, counted once
CASES = [
    ("telegram", "private_message", "900000001",
     {"event": {"kind": "dm", "chat_id": "111222333", "sender_id": "111222333", "sender_name": "Alice Example",
                "mentioned": True, "sender_is_bot": False}}),
    ("telegram", "channel_post", "900000101", {"ignored": True}),
    ("telegram", "anonymous_admin", "900000102",
     {"event": {"kind": "group", "chat_id": "-1001800000002", "sender_id": "-1001800000002",
                "sender_name": "Family", "sender_is_bot": False, "chat_name": "Family"}}),
    ("telegram", "chat_without_type", "900000103",
     {"event": {"kind": "dm", "chat_id": "111222333", "sender_name": "Alice Example", "mentioned": True}}),
    ("telegram", "callback_inaccessible", "900000104", {"ignored": True}),
    ("telegram", "service_message", None, {"ignored": True}),
    ("telegram", "my_chat_member", None, {"ignored": True}),
    ("telegram", "bot_echo", None, {"ignored": True}),
    ("slack", "dm_message", "D0DMALICE:1700000000.000100",
     {"event": {"kind": "dm", "chat_id": "D0DMALICE", "sender_id": "U0ALICE01", "mentioned": True}}),
    ("slack", "other_app_message", "C0GENERAL:1700000201.000100",
     {"event": {"kind": "thread", "chat_id": "C0GENERAL", "thread_id": "1700000201.000100",
                "sender_id": "U0GHBOT01", "sender_is_bot": True,
                "from_self": False, "mentioned": False}}),
    ("slack", "message_changed", None, {"ignored": True}),
    ("slack", "message_deleted", None, {"ignored": True}),
    ("slack", "bot_message_subtype", None, {"ignored": True}),
    ("slack", "bot_echo", None, {"ignored": True}),
    ("slack", "app_rate_limited", None, {"ignored": True}),
    ("slack", "url_verification", None, {"answer": "challenge"}),
    ("slack-actions", "block_suggestion", None, {"answer": {"options": []}}),
    ("whatsapp", "text_message", None, {"event": {"kind": "dm", "chat_id": "16505551234",
                                                  "sender_name": "Sheena Nelson"}}),
    ("whatsapp", "status_delivered", None, {"ignored": True}),
    ("whatsapp", "status_failed", None, {"ignored": True}),
    ("whatsapp", "reaction_removed", None, {"ignored": True}),
    ("whatsapp", "unsupported_message", None, {"ignored": True}),
    ("discord", "interaction_ping", None, {"answer": {"type": 1}}),
    ("discord", "interaction_command_dm", None, {"answer_type": 4}),
    ("discord", "interaction_no_member_or_user", None, {"malformed": {"type": 6}}),
]


def event_id_of(platform: str, payload: dict, given: str | None) -> str | None:
    if given is not None or platform != "whatsapp":
        return given
    messages = payload["entry"][0]["changes"][0]["value"].get("messages") or []
    return messages[0]["id"] if messages else None


@pytest.mark.parametrize("platform,name,event_id,expected", CASES, ids=[f"{c[0]}/{c[1]}" for c in CASES])
def test_a_real_shape_has_its_outcome(app, platform, name, event_id, expected):
    payload = fixture(platform.split("-")[0], name)
    channel = platform.split("-")[0]
    before_events = messages_accepted()
    before_malformed = malformed_total(channel)
    resp = POSTERS[platform](app.test_client(), payload)

    assert resp.status_code == 200, resp.get_data(as_text=True)
    event_id = event_id_of(platform, payload, event_id)
    if "event" in expected:
        stored = accepted(channel, event_id)
        assert stored is not None, f"{name}: not accepted for routing"
        assert {k: stored[k] for k in expected["event"]} == expected["event"]
        return
    assert messages_accepted() == before_events, f"{name}: something was accepted"
    if "answer" in expected:
        want = expected["answer"]
        if want == "challenge":
            want = {"challenge": payload["challenge"]}
        assert resp.get_json() == want
    elif "answer_type" in expected:
        assert resp.get_json()["type"] == expected["answer_type"]
    elif "malformed" in expected:
        assert resp.get_json() == expected["malformed"]
        assert malformed_total(channel) == before_malformed + 1
    else:
        assert malformed_total(channel) == before_malformed, f"{name}: counted as malformed"
