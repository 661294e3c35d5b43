"""Telegram: verified webhooks in (routed, refused, deduped), Bot API calls out (against a fake Bot API)."""
from __future__ import annotations

import time

import json
import logging
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from conftest import malformed_total, said_just_now

from nanoclaw.approvals import actions
from nanoclaw.app import create_app
from nanoclaw.channels.base import Card, DeliveryError
from nanoclaw.channels.download import AttachmentError
from nanoclaw.platforms.telegram.adapter import TelegramAdapter, split_message, utf16_len
from nanoclaw.db import database
from nanoclaw.outbound.delivery import deliver_session
from nanoclaw.migrate import apply_pending
from nanoclaw.models import DroppedMessage, Session
from nanoclaw.sessions import session_schema as schema
from nanoclaw.sessions.store import Target, prepare
from tests.fakes.telegram_api import TOKEN, FakeTelegram
from tests.platforms.kits import nothing_stored, rows

FIXTURES = Path(__file__).parent.parent / "fixtures" / "telegram"
SECRET = "wh-secret_0123456789-abcdef"
ALICE, GROUP, FORUM = "111222333", "-1001234567890", "-1009876543210"


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


@pytest.fixture
def fake():
    with FakeTelegram() as server:
        yield server


def _app(make_settings, db_url, fake, **env):
    base = dict(DATABASE_URL=db_url, TELEGRAM_BOT_TOKEN=TOKEN, TELEGRAM_WEBHOOK_SECRET=SECRET,
                TELEGRAM_API_BASE=fake.url)
    base.update(env)
    app = create_app(make_settings(**{k: v for k, v in base.items() if v is not None}))
    database.connect(reuse_if_open=True)
    apply_pending(database.obj, log=lambda _l: None)
    return app


@pytest.fixture
def app(make_settings, db_url, fake):
    """A migrated app wired to the fake Bot API, on SQLite and PostgreSQL."""
    yield _app(make_settings, db_url, fake)
    database.close()


@pytest.fixture
def adapter(make_settings, fake):
    return TelegramAdapter(make_settings(TELEGRAM_BOT_TOKEN=TOKEN, TELEGRAM_WEBHOOK_SECRET=SECRET,
                                         TELEGRAM_API_BASE=fake.url))


def run_cli(app, *args):
    return app.test_cli_runner().invoke(args=["nanoclaw", *args])


def post(app, payload, secret: str | None = SECRET, raw: bytes | None = None):
    headers = {"Content-Type": "application/json"}
    if secret is not None:
        headers["X-Telegram-Bot-Api-Secret-Token"] = secret
    body = raw if raw is not None else json.dumps(payload).encode()
    return app.test_client().post("/webhooks/telegram", data=body, headers=headers)




def wire_alice(app):
    run_cli(app, "agent", "create", "Andy")
    run_cli(app, "user", "add", f"telegram:{ALICE}", "--role", "owner")
    assert run_cli(app, "wire", "telegram", ALICE, "andy").exit_code == 0


# --- inbound: verification, routing, dedup -----------------------------------------------------

def test_wired_dm_is_routed_into_its_session(app, fake):
    wire_alice(app)
    update = fixture("private_message")
    update["message"]["date"] = sent = int(time.time()) - 60  # Telegram's time, kept within a week of now
    resp = post(app, update)
    assert resp.status_code == 200
    [row] = rows(app, Session.get())
    assert row["text"] == "Hello Andy, what's on today?" and row["trigger"] == 1
    assert row["sender"] == "Alice Example" and row["sender_id"] == f"telegram:{ALICE}"
    assert row["timestamp"] == time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(sent)) and row["message_id"] == "10"
    assert fake.requests == []  # a plain DM needs no Bot API call to be understood


@pytest.mark.parametrize("raw", [b"not json", b"[1, 2]", b'{"message": {"text": "no update id"}}',
                                 b'{"update_id": 5, "message": {"text": "no chat", "date": 1}}',
                                 b'{"update_id": 6, "message": {"chat": {"id": 1, "type": "private"}, '
                                 b'"text": "no date", "message_id": 1}}',
                                 b"\xff\xfe garbage"])
def test_malformed_is_acknowledged_logged_counted_and_nothing_stored(app, raw, caplog):
    """Authentic but unreadable: 200 (Telegram would retry anything else, forever), one log line, counted."""
    wire_alice(app)
    before = malformed_total("telegram")
    with caplog.at_level(logging.WARNING, logger="nanoclaw.webhooks"):
        assert post(app, None, raw=raw).status_code == 200
    assert nothing_stored()
    assert malformed_total("telegram") == before + 1
    assert len([r for r in caplog.records if "malformed" in r.getMessage()]) == 1


def test_duplicate_delivery_is_routed_once(app):
    wire_alice(app)
    assert post(app, fixture("private_message")).status_code == 200
    assert post(app, fixture("private_message")).status_code == 200
    assert len(rows(app, Session.get())) == 1


def test_edit_arrives_as_a_marked_new_message(app):
    wire_alice(app)
    post(app, fixture("private_message"))
    post(app, fixture("edited_message"))
    first, edit = rows(app, Session.get())
    assert edit["text"] == "(edited) Hello Andy, what's on tomorrow?"
    assert said_just_now(edit["timestamp"]) and edit["message_id"] == first["message_id"] == "10"


def test_own_bot_message_is_never_routed(app):
    run_cli(app, "agent", "create", "Andy")
    run_cli(app, "wire", "telegram", GROUP, "andy", "--kind", "group", "--engage", "pattern", "--pattern", ".",
            "--unknown-senders", "public")
    assert post(app, fixture("bot_echo")).status_code == 200
    assert nothing_stored()
    assert post(app, fixture("other_bot")).status_code == 200  # another bot is an ordinary sender
    [row] = rows(app, Session.get())
    assert row["text"] == "Rain expected at 18:00"


def test_group_engages_only_when_the_bot_is_addressed(app, fake):
    run_cli(app, "agent", "create", "Andy")
    run_cli(app, "wire", "telegram", GROUP, "andy", "--kind", "group", "--unknown-senders", "public")
    for name in ("group_plain", "group_other_mention", "group_mention", "group_reply_to_bot", "group_text_mention"):
        assert post(app, fixture(name)).status_code == 200
    texts = [r["text"] for r in rows(app, Session.get())]
    assert texts == ["👋 @andy_test_bot book a table for four", "yes, 7pm please", "Andy can you help"]
    assert [d.reason for d in DroppedMessage.select().order_by(DroppedMessage.id)] == ["no_agent_engaged"] * 2
    assert len(fake.calls("getMe")) == 1  # the bot's username is asked for once


def test_forum_topics_get_sessions_of_their_own(app):
    run_cli(app, "agent", "create", "Andy")
    run_cli(app, "wire", "telegram", FORUM, "andy", "--kind", "thread", "--unknown-senders", "public")
    post(app, fixture("topic_message"))
    post(app, fixture("topic_reply"))  # sticky: the follow-up in the same topic engages too
    session = Session.get()
    assert session.thread_id == "200"
    first, second = rows(app, session)
    assert "reply_to" not in first  # the topic's opening message is not a reply
    assert second["reply_to"] == {"id": "230", "sender": "Alice Example",
                                  "text": "@andy_test_bot status of the release?"}


def test_unsubscribed_and_service_updates_are_acknowledged_and_ignored(app):
    wire_alice(app)
    assert post(app, fixture("my_chat_member")).status_code == 200
    assert post(app, fixture("service_message")).status_code == 200
    assert nothing_stored()


# --- parsing, one fixture at a time ----------------------------------------------------------

def parse(adapter, name):
    parsed = adapter.parse_update(fixture(name))
    return parsed.events[0] if parsed.events else None


def test_parse_kinds_mentions_and_replies(adapter):
    dm = parse(adapter, "private_message")
    assert (dm.kind, dm.chat_id, dm.sender_id, dm.mentioned, dm.event_id) == ("dm", ALICE, ALICE, True, "900000001")
    mention = parse(adapter, "group_mention")
    assert (mention.kind, mention.mentioned, mention.thread_id) == ("group", True, None)
    assert parse(adapter, "group_other_mention").mentioned is False
    assert parse(adapter, "group_plain").mentioned is False
    reply = parse(adapter, "group_reply_to_bot")
    assert reply.mentioned and reply.reply_to.sender_name == "Andy" and reply.reply_to.text == "Which time should I book?"
    assert parse(adapter, "group_text_mention").mentioned
    topic = parse(adapter, "topic_message")
    assert (topic.kind, topic.thread_id, topic.reply_to, topic.mentioned) == ("thread", "200", None, True)
    general = fixture("topic_message")  # a forum's General topic: no topic id, but still a forum
    for key in ("message_thread_id", "is_topic_message", "reply_to_message"):
        general["message"].pop(key, None)
    general_event = adapter.parse_update(general).events[0]
    assert (general_event.kind, general_event.thread_id) == ("thread", None)
    echo, other = parse(adapter, "bot_echo"), parse(adapter, "other_bot")
    assert (echo.from_self, echo.sender_is_bot) == (True, True)
    assert (other.from_self, other.sender_is_bot) == (False, True)


def test_parse_attachments_as_metadata(adapter):
    doc = parse(adapter, "document_message")
    assert doc.text == "please file this"
    assert doc.attachments == ({"kind": "document", "file_id": "BQACAgIAAxkBAAIBZ2V", "name": "invoice.pdf",
                                "mime": "application/pdf", "size": 48213},)
    photo = parse(adapter, "photo_message")
    assert photo.text == "" and photo.attachments[0]["file_id"] == "AgACAgIAAxk-large"
    assert parse(adapter, "service_message") is None


def test_fetch_attachment_uses_getfile_then_the_file_server(adapter, fake):
    data = b"%PDF-1.4 invoice"
    fake.add_file(data, file_id="BQACAgIAAxkBAAIBZ2V", file_path="documents/file_12.pdf")
    [doc] = parse(adapter, "document_message").attachments
    assert adapter.fetch_attachment(doc) == ("invoice.pdf", data)
    assert [r.path for r in fake.requests] == [f"/bot{TOKEN}/getFile", f"/file/bot{TOKEN}/documents/file_12.pdf"]
    with pytest.raises(AttachmentError) as refused:
        adapter.fetch_attachment({**doc, "file_id": "BQACgone"})
    assert "invalid file_id" in str(refused.value) and TOKEN not in str(refused.value)


def test_mentions_still_parse_when_getme_fails(adapter, fake):
    fake.fail_next(500, {"ok": False, "error_code": 500, "description": "Internal Server Error"})
    assert parse(adapter, "group_mention").mentioned is False  # not recognisable yet, but no crash
    assert parse(adapter, "group_reply_to_bot").mentioned is True  # replies need no username


# --- buttons: card out, click in, answered -----------------------------------------------------

def test_card_button_round_trip(app, fake):
    wire_alice(app)
    clicks = []

    @actions.register_action("tst")
    def on_click(action, ident, value, settings, wake):
        clicks.append((action.user_id, action.chat_id, action.message_id, ident, value))
        return f"Done: {value}"

    adapter = TelegramAdapter(app.config["NANOCLAW"])
    card_id = adapter.send_card(Target("telegram", ALICE), Card("Allow Bob?", "Bob <bob@x> wants to talk to Andy.",
                                                               (("Allow", "tst-17:allow"), ("Deny", "tst-17:deny"))))
    [sent] = fake.calls("sendMessage")
    assert sent["parse_mode"] == "HTML" and sent["text"] == "<b>Allow Bob?</b>\n\nBob &lt;bob@x&gt; wants to talk to Andy."
    allow = sent["reply_markup"]["inline_keyboard"][0][0]
    assert allow == {"text": "Allow", "callback_data": "tst-17:allow"}

    update = fixture("callback_query")
    update["callback_query"]["data"] = allow["callback_data"]
    update["callback_query"]["message"]["message_id"] = int(card_id)
    assert post(app, update).status_code == 200
    assert clicks == [(f"telegram:{ALICE}", ALICE, card_id, "17", "allow")]
    [answer] = fake.calls("answerCallbackQuery")
    assert answer == {"callback_query_id": "4382bfdwdsb323b2d9", "text": "Done: allow"}

    assert post(app, update).status_code == 200  # Telegram redelivers: not run twice,
    assert len(clicks) == 1
    # but answered again (without text): the first answer may be what never arrived
    assert fake.calls("answerCallbackQuery")[1:] == [{"callback_query_id": "4382bfdwdsb323b2d9"}]


def test_unknown_or_forged_button_is_still_answered(app, fake):
    wire_alice(app)
    update = fixture("callback_query")
    update["callback_query"]["data"] = "zzz-1:boom"
    assert post(app, update).status_code == 200
    [answer] = fake.calls("answerCallbackQuery")
    assert answer["callback_query_id"] == "4382bfdwdsb323b2d9" and "no longer handled" in answer["text"]


def test_card_action_id_over_64_bytes_is_refused_before_sending(adapter, fake):
    with pytest.raises(DeliveryError) as err:
        adapter.send_card(Target("telegram", ALICE), Card("t", "b", (("x", "tst-1:" + "é" * 30),)))
    assert err.value.permanent and fake.requests == []


# --- outbound -----------------------------------------------------------------------------------

def test_long_text_is_split_on_paragraphs_and_fits_in_utf16(adapter, fake):
    paragraphs = [f"Paragraph {i}. " + "word " * 700 + "end." for i in range(3)]
    adapter.send_text(Target("telegram", ALICE), "\n\n".join(paragraphs))
    sent = [c["text"] for c in fake.calls("sendMessage")]
    assert sent == paragraphs

    fake.requests.clear()
    emoji = "🎉" * 3000  # 3000 characters, 6000 UTF-16 units: one part would be refused
    adapter.send_text(Target("telegram", ALICE), emoji)
    parts = [c["text"] for c in fake.calls("sendMessage")]
    assert len(parts) == 2 and "".join(parts) == emoji and all(utf16_len(p) <= 4096 for p in parts)


def test_split_message_keeps_everything_and_each_part_fits():
    text = "Line one\n" + "a " * 3000 + "\n\n" + "😀" * 2500 + " end"
    parts = split_message(text)
    assert all(utf16_len(p) <= 4096 for p in parts)
    assert "".join(parts).replace("\n", "").replace(" ", "") == text.replace("\n", "").replace(" ", "")


def test_topic_replies_go_into_the_topic(adapter, fake):
    adapter.send_text(Target("telegram", FORUM, "200"), "in the topic")
    [call] = fake.calls("sendMessage")
    assert call["chat_id"] == FORUM and call["message_thread_id"] == 200


def test_edit_react_file_typing(adapter, fake, tmp_path):
    target = Target("telegram", ALICE)
    mid = adapter.send_text(target, "draft")
    adapter.edit_text(target, mid, "final")
    adapter.react(target, mid, "❤️")
    adapter.react(target, mid, "✅")  # not a Telegram reaction: a near match is used
    report = tmp_path / "report.csv"
    report.write_bytes(b"a,b\n1,2\n")
    file_id = adapter.send_file(target, report, "the numbers")
    adapter.typing(target)
    assert fake.calls("editMessageText") == [{"chat_id": ALICE, "message_id": int(mid), "text": "final"}]
    assert [c["reaction"][0]["emoji"] for c in fake.calls("setMessageReaction")] == ["❤", "👌"]
    [doc] = fake.calls("sendDocument")
    assert doc["chat_id"] == ALICE and doc["caption"] == "the numbers"
    assert doc["_files"]["document"][:2] == ("report.csv", b"a,b\n1,2\n") and file_id.isdigit()
    assert fake.calls("sendChatAction") == [{"chat_id": ALICE, "action": "typing"}]


def test_429_gives_retry_after_and_4xx_is_permanent(adapter, fake):
    fake.rate_limit("sendMessage", retry_after=3)
    with pytest.raises(DeliveryError) as err:
        adapter.send_text(Target("telegram", ALICE), "hi")
    assert err.value.retry_after == 3 and not err.value.permanent
    fake.fail_next(400, {"ok": False, "error_code": 400, "description": "Bad Request: chat not found"})
    with pytest.raises(DeliveryError) as err:
        adapter.send_text(Target("telegram", "999"), "hi")
    assert err.value.permanent and "chat not found" in str(err.value)


def test_the_token_never_appears_in_an_error(make_settings):
    closed = TelegramAdapter(make_settings(TELEGRAM_BOT_TOKEN=TOKEN, TELEGRAM_API_BASE="http://127.0.0.1:9"))
    with pytest.raises(DeliveryError) as err:
        closed.send_text(Target("telegram", ALICE), "hi")
    assert TOKEN not in str(err.value) and TOKEN.split(":")[1] not in str(err.value)


# --- through delivery -------------------------------------------------------------------------

def agent_writes(path: Path, text: str):
    conn = schema.connect(path / "agent" / schema.OUTBOUND)
    conn.execute("INSERT INTO messages_out (id, seq, timestamp, channel_type, platform_id, content) "
                 "VALUES (?, 1, ?, 'telegram', ?, ?)",
                 (uuid.uuid4().hex, schema.utc_now_iso(), ALICE, json.dumps({"op": "text", "text": text})))
    conn.close()


def test_delivery_429_then_success_sends_exactly_once(adapter, fake, tmp_path, make_settings):
    settings = make_settings(TELEGRAM_BOT_TOKEN=TOKEN, TELEGRAM_API_BASE=fake.url)
    session = tmp_path / "session"
    prepare(session, Target("telegram", ALICE))
    agent_writes(session, "Your table is booked.")
    fake.rate_limit("sendMessage", retry_after=3)
    assert deliver_session(session, settings) == 0
    assert deliver_session(session, settings) == 0  # retry_after not over yet
    later = datetime.now(timezone.utc) + timedelta(seconds=4)
    assert deliver_session(session, settings, now=later) == 1
    assert deliver_session(session, settings, now=later + timedelta(seconds=60)) == 0
    assert [c["text"] for c in fake.calls("sendMessage")] == ["Your table is booked."]


def test_a_long_reply_cut_by_429_resumes_without_repeating_parts(fake, tmp_path, make_settings):
    settings = make_settings(TELEGRAM_BOT_TOKEN=TOKEN, TELEGRAM_API_BASE=fake.url)
    session = tmp_path / "session"
    prepare(session, Target("telegram", ALICE))
    agent_writes(session, "first part " * 300 + "\n\n" + "second part " * 300)
    seen = []
    fake.fail_next(429, {"ok": False, "error_code": 429, "description": "Too Many Requests: retry after 2",
                         "parameters": {"retry_after": 2}},
                   match=lambda r: r.path.endswith("/sendMessage") and seen.append(1) is None and len(seen) == 2)
    assert deliver_session(session, settings) == 0
    later = datetime.now(timezone.utc) + timedelta(seconds=3)
    assert deliver_session(session, settings, now=later) == 1
    texts = [c["text"] for c in fake.calls("sendMessage")]
    assert len(texts) == 2 and texts[0].startswith("first part") and texts[1].startswith("second part")


# --- the set-webhook command -------------------------------------------------------------------

def test_set_webhook_registers_url_secret_and_updates(app, fake):
    result = run_cli(app, "telegram", "set-webhook", "https://bot.example.org/webhooks/telegram")
    assert result.exit_code == 0, result.output
    [call] = fake.calls("setWebhook")
    assert call["url"] == "https://bot.example.org/webhooks/telegram" and call["secret_token"] == SECRET
    assert call["allowed_updates"] == ["message", "edited_message", "callback_query"]
    info = run_cli(app, "telegram", "webhook-info")
    assert "url: https://bot.example.org/webhooks/telegram" in info.output


def test_set_webhook_explains_what_is_missing(make_settings, db_url, fake):
    app = _app(make_settings, db_url, fake, TELEGRAM_WEBHOOK_SECRET=None)
    try:
        result = run_cli(app, "telegram", "set-webhook", "https://bot.example.org/webhooks/telegram")
        assert result.exit_code == 2 and "TELEGRAM_WEBHOOK_SECRET is not set" in result.output
        result = run_cli(app, "telegram", "set-webhook", "http://bot.example.org/webhooks/telegram")
        assert result.exit_code == 2
        assert fake.calls("setWebhook") == []
    finally:
        database.close()
