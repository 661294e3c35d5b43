"""WhatsApp Cloud API: signed webhooks in (verify before parse, dedup, route, button taps), Graph calls out.

Webhook payloads are the shapes of Meta's documentation (tests/fixtures/whatsapp/); the Graph API
is a local fake that answers like Graph (tests/fakes/whatsapp_api.py).
"""
import copy
import hashlib
import hmac
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from conftest import malformed_total, said_just_now

from nanoclaw.approvals import actions
from nanoclaw.app import create_app
from nanoclaw.channels.base import Card, DeliveryError
from nanoclaw.channels.events import Action
from nanoclaw.channels.download import AttachmentError
from nanoclaw.platforms.whatsapp.adapter import WhatsAppAdapter, media_intact, parse_payload
from nanoclaw.db import database
from nanoclaw.outbound.delivery import deliver_session
from nanoclaw.migrate import apply_pending
from nanoclaw.models import AcceptedEvent, Session
from nanoclaw.sessions import session_schema as schema
from nanoclaw.sessions.store import Target, prepare
from tests.fakes.whatsapp_api import PHONE_NUMBER_ID, RATE_LIMITED, TOKEN, FakeWhatsApp, graph_error
from tests.platforms.kits import nothing_stored

FIXTURES = Path(__file__).parent.parent / "fixtures" / "whatsapp"
SECRET = "wa-app-secret"
VERIFY = "wa-verify-token"
WA_ID = "16505551234"


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def signed(payload, secret: str = SECRET) -> tuple[bytes, dict]:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    sig = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return body, {"X-Hub-Signature-256": f"sha256={sig}", "Content-Type": "application/json"}


@pytest.fixture
def wa_api():
    with FakeWhatsApp() as fake:
        yield fake


@pytest.fixture
def settings(make_settings, wa_api):
    return make_settings(WHATSAPP_TOKEN=TOKEN, WHATSAPP_APP_SECRET=SECRET, WHATSAPP_VERIFY_TOKEN=VERIFY,
                         WHATSAPP_PHONE_NUMBER_ID=PHONE_NUMBER_ID, WHATSAPP_API_BASE=wa_api.url)


@pytest.fixture
def app(make_settings, db_url, wa_api):
    """The conftest app (SQLite and PostgreSQL) with WhatsApp configured against the fake Graph."""
    app = create_app(make_settings(DATABASE_URL=db_url, WHATSAPP_TOKEN=TOKEN, WHATSAPP_APP_SECRET=SECRET,
                                   WHATSAPP_VERIFY_TOKEN=VERIFY, WHATSAPP_PHONE_NUMBER_ID=PHONE_NUMBER_ID,
                                   WHATSAPP_API_BASE=wa_api.url))
    database.connect(reuse_if_open=True)
    apply_pending(database.obj, log=lambda _l: None)
    yield app
    database.close()


@pytest.fixture
def wired(cli):
    assert cli("agent", "create", "Andy").exit_code == 0
    assert cli("user", "add", f"whatsapp:{WA_ID}", "--role", "owner").exit_code == 0
    assert cli("wire", "whatsapp", WA_ID, "andy").exit_code == 0


def post(app, payload, headers=None, secret=SECRET):
    body, sig_headers = signed(payload, secret)
    return app.test_client().post("/webhooks/whatsapp", data=body, headers=sig_headers if headers is None else headers)


def session_messages(app) -> list[dict]:
    session = Session.get()
    path = app.config["NANOCLAW"].sessions_dir / session.agent_group.folder / session.id / "host" / schema.INBOUND
    conn = schema.connect(path, readonly=True)
    try:
        return [dict(r) for r in conn.execute("SELECT * FROM messages_in ORDER BY seq")]
    finally:
        conn.close()



# --- inbound ---------------------------------------------------------------------------------------

def test_subscription_check_echoes_the_challenge_only_for_our_token(app):
    client = app.test_client()
    ok = client.get("/webhooks/whatsapp", query_string={"hub.mode": "subscribe", "hub.verify_token": VERIFY,
                                                        "hub.challenge": "1158201444"})
    assert ok.status_code == 200 and ok.data == b"1158201444" and ok.mimetype == "text/plain"
    wrong = client.get("/webhooks/whatsapp", query_string={"hub.mode": "subscribe", "hub.verify_token": "guess",
                                                           "hub.challenge": "1158201444"})
    assert wrong.status_code == 403 and b"1158201444" not in wrong.data
    no_mode = client.get("/webhooks/whatsapp", query_string={"hub.verify_token": VERIFY, "hub.challenge": "1"})
    assert no_mode.status_code == 403


def test_signed_dm_is_routed_into_the_session(app, wired):
    resp = post(app, fixture("text_message"))
    assert resp.status_code == 200
    [row] = session_messages(app)
    content = json.loads(row["content"])
    assert row["trigger"] == 1 and (row["channel_type"], row["platform_id"]) == ("whatsapp", WA_ID)
    assert content["text"] == "Does it come in another color?"
    assert content["sender"] == "Sheena Nelson" and content["sender_id"] == f"whatsapp:{WA_ID}"
    assert said_just_now(row["timestamp"])  # the fixture's 2025 is more than a week ago


@pytest.mark.parametrize("how", ["not sha256"])  # unsigned, signed wrong, changed: tests/platforms/test_contract.py
def test_unverified_posts_are_refused_and_nothing_is_stored(app, wired, how):
    payload = fixture("text_message")
    body, headers = signed(payload, "someone-else" if how == "wrong secret" else SECRET)
    if how == "tampered body":
        body = body.replace(b"another color", b"another colour")
    elif how == "missing header":
        del headers["X-Hub-Signature-256"]
    elif how == "not sha256":
        headers["X-Hub-Signature-256"] = headers["X-Hub-Signature-256"].replace("sha256=", "sha1=")
    resp = app.test_client().post("/webhooks/whatsapp", data=body, headers=headers)
    assert resp.status_code == 401
    assert nothing_stored()


def test_malformed_but_signed_is_acknowledged_and_counted(app, wired):
    before = malformed_total("whatsapp")
    assert post(app, b"{not json").status_code == 200
    assert post(app, {"object": "whatsapp_business_account", "entry": "nope"}).status_code == 200
    broken = fixture("text_message")
    del broken["entry"][0]["changes"][0]["value"]["messages"][0]["from"]
    assert post(app, broken).status_code == 200
    assert nothing_stored()
    assert malformed_total("whatsapp") == before + 3


def test_duplicate_delivery_is_routed_once(app, wired):
    assert post(app, fixture("text_message")).status_code == 200
    assert post(app, fixture("text_message")).status_code == 200
    assert len(session_messages(app)) == 1
    assert AcceptedEvent.select().count() == 1


def test_status_callbacks_are_acknowledged_and_ignored(app, wired):
    assert post(app, fixture("status_delivered")).status_code == 200
    assert nothing_stored()


def test_parsing_replies_media_and_taps():
    reply = parse_payload(fixture("reply_message")).events[0]
    assert reply.reply_to.message_id == "wamid.HBgLMTY1MDM4Nzk0MzkVAgARGBI3NjBBNEQwQkNFNUJCOURCRTAA"
    assert reply.kind == "dm" and reply.mentioned and not reply.from_self
    image = parse_payload(fixture("image_message")).events[0]
    assert image.text == "Is this the right part?"
    assert image.attachments == ({"type": "image", "media_id": "1003383421387256", "mime_type": "image/jpeg"},)
    tap = parse_payload(fixture("button_reply"))
    assert tap.events == [] and tap.actions == [Action(
        channel="whatsapp", action_id="nsa-17:allow", user_id=f"whatsapp:{WA_ID}", chat_id=WA_ID,
        message_id="wamid.HBgLMTY1MDM4Nzk0MzkVAgARGBJDQjZCMzlEQUE4OTJBMTE4RTUA",
        event_id="wamid.HBgLMTY1MDM4Nzk0MzkVAgASGBQzQTg1MjVCRjRGRkJEOTBFNjE0MQA=", raw={"title": "Allow"},
        user_name="Sheena Nelson")]
    row = parse_payload(fixture("list_reply")).actions[0]
    assert row.action_id == "ncq-4:2" and row.user_id == f"whatsapp:{WA_ID}"
    assert parse_payload(fixture("status_delivered")).events == []


# --- card round trips ------------------------------------------------------------------------------

@pytest.fixture
def tst_clicks():
    clicks = []

    @actions.register_action("tst")
    def handle(action, ident, value, settings, wake):
        clicks.append((action.action_id, action.user_id, action.message_id))
        return f"Chosen: {value}"
    yield clicks
    actions._HANDLERS.pop("tst", None)


def tap(reply_type: str, action_id: str, card_id: str, wamid: str) -> dict:
    payload = copy.deepcopy(fixture("button_reply" if reply_type == "button_reply" else "list_reply"))
    message = payload["entry"][0]["changes"][0]["value"]["messages"][0]
    message["id"], message["context"]["id"] = wamid, card_id
    message["interactive"][reply_type]["id"] = action_id
    return payload


def test_button_card_round_trip(app, wa_api, tst_clicks):
    adapter = WhatsAppAdapter(app.config["NANOCLAW"])
    card_id = adapter.send_card(Target("whatsapp", WA_ID), Card("Deploy?", "Ship version 2 to production",
                                                                (("Yes, ship it", "tst-1:yes"), ("No", "tst-1:no"))))
    [sent] = wa_api.messages("interactive")
    assert sent["interactive"]["type"] == "button"
    clicked = sent["interactive"]["action"]["buttons"][0]["reply"]["id"]
    assert clicked == "tst-1:yes"
    assert post(app, tap("button_reply", clicked, card_id, "wamid.TAP1")).status_code == 200
    assert tst_clicks == [("tst-1:yes", f"whatsapp:{WA_ID}", card_id)]
    [ack] = wa_api.messages("text")
    assert ack["text"]["body"] == "Chosen: yes" and ack["context"] == {"message_id": card_id} and ack["to"] == WA_ID
    # Meta redelivers the same tap: acknowledged, not run again
    assert post(app, tap("button_reply", clicked, card_id, "wamid.TAP1")).status_code == 200
    assert len(tst_clicks) == 1 and len(wa_api.messages("text")) == 1


def test_list_card_round_trip(app, wa_api, tst_clicks):
    adapter = WhatsAppAdapter(app.config["NANOCLAW"])
    options = tuple((f"Option {i}", f"tst-2:{i}") for i in range(5))
    card_id = adapter.send_card(Target("whatsapp", WA_ID), Card("Pick a slot", "When?", options))
    [sent] = wa_api.messages("interactive")
    rows = sent["interactive"]["action"]["sections"][0]["rows"]
    assert sent["interactive"]["type"] == "list" and [r["id"] for r in rows] == [a for _, a in options]
    assert post(app, tap("list_reply", rows[3]["id"], card_id, "wamid.TAP2")).status_code == 200
    assert tst_clicks == [("tst-2:3", f"whatsapp:{WA_ID}", card_id)]
    assert wa_api.messages("text")[-1]["text"]["body"] == "Chosen: 3"


# --- outbound --------------------------------------------------------------------------------------

def test_long_text_is_split_at_4096_on_paragraphs(settings, wa_api):
    paragraphs = [f"Paragraph {i}. " + "word " * 300 for i in range(10)]
    first = WhatsAppAdapter(settings).send_text(Target("whatsapp", WA_ID), "\n\n".join(paragraphs))
    bodies = [m["text"]["body"] for m in wa_api.messages("text")]
    assert len(bodies) > 2 and all(len(b) <= 4096 for b in bodies)
    assert all(b.startswith("Paragraph ") for b in bodies)  # each chunk starts at a paragraph
    assert " ".join(bodies).split() == "\n\n".join(paragraphs).split()
    assert first == "wamid.FAKE000001"
    assert wa_api.requests[0].headers["authorization"] == f"Bearer {TOKEN}"


def test_a_long_text_cut_short_by_a_429_resumes_without_repeats(settings, wa_api):
    adapter, target = WhatsAppAdapter(settings), Target("whatsapp", WA_ID)
    text = "\n\n".join(f"Part {i}. " + "word " * 700 for i in range(3))
    wa_api.fail_next(429, RATE_LIMITED, match=lambda r: (r.json or {}).get("text", {}).get("body", "").startswith("Part 1"))
    with pytest.raises(DeliveryError):
        adapter.send_text(target, text)
    first = adapter.send_text(target, text)  # delivery's retry of the same row
    assert [m["text"]["body"][:6] for m in wa_api.messages("text")] == ["Part 0", "Part 1", "Part 2"]
    assert first == "wamid.FAKE000001"


def test_react_edit_and_typing(settings, wa_api):
    adapter, target = WhatsAppAdapter(settings), Target("whatsapp", WA_ID)
    adapter.react(target, "wamid.OLD", "👍")
    adapter.edit_text(target, "wamid.OLD", "corrected answer")
    adapter.typing(target, "wamid.IN")
    reaction, edit = wa_api.messages()
    assert reaction["reaction"] == {"message_id": "wamid.OLD", "emoji": "👍"}
    assert edit["text"]["body"] == "(edited) corrected answer" and edit["context"] == {"message_id": "wamid.OLD"}
    read = wa_api.requests[-1].json
    assert read == {"messaging_product": "whatsapp", "status": "read", "message_id": "wamid.IN",
                    "typing_indicator": {"type": "text"}}


def test_file_is_uploaded_then_sent_as_a_document(settings, wa_api, tmp_path):
    report = tmp_path / "report.pdf"
    report.write_bytes(b"%PDF-1.4 fake")
    WhatsAppAdapter(settings).send_file(Target("whatsapp", WA_ID), report, "Your report")
    upload = wa_api.requests[0]
    assert upload.path == f"/{PHONE_NUMBER_ID}/media"
    assert upload.form == {"messaging_product": "whatsapp", "type": "application/pdf"}
    assert upload.files["file"] == ("report.pdf", b"%PDF-1.4 fake", "application/pdf")
    [doc] = wa_api.messages("document")
    assert doc["document"] == {"id": "10000000000001", "filename": "report.pdf", "caption": "Your report"}


def test_cards_fit_whatsapps_limits(settings, wa_api):
    adapter, target = WhatsAppAdapter(settings), Target("whatsapp", WA_ID)
    adapter.send_card(target, Card("Allow Bob?", "Bob wants to talk to Andy",
                                   (("Allow for this conversation only", "tst-3:allow"), ("Deny", "tst-3:deny"))))
    buttons = wa_api.messages("interactive")[0]["interactive"]
    assert buttons["header"] == {"type": "text", "text": "Allow Bob?"}
    titles = [b["reply"]["title"] for b in buttons["action"]["buttons"]]
    assert titles == ["Allow for this conv…", "Deny"] and all(len(t) <= 20 for t in titles)
    many = tuple((f"Choice number {i}", f"tst-4:{i}") for i in range(12))
    adapter.send_card(target, Card("Which?", "Pick one", many))
    lists = wa_api.messages("interactive")[1:]
    rows = [r["id"] for m in lists for r in m["interactive"]["action"]["sections"][0]["rows"]]
    assert [m["interactive"]["type"] for m in lists] == ["list", "list"] and rows == [a for _, a in many]


@pytest.mark.parametrize("status, body, headers, retry_after", [
    (429, RATE_LIMITED, {"Retry-After": "7"}, 7.0),
    (429, RATE_LIMITED, {}, 30.0),
    (400, {"error": {"message": "(#80007) Rate limit issues", "type": "OAuthException", "code": 80007}}, {}, 30.0),
])
def test_rate_limits_raise_with_retry_after(settings, wa_api, status, body, headers, retry_after):
    wa_api.fail_next(status, body, headers)
    with pytest.raises(DeliveryError) as exc:
        WhatsAppAdapter(settings).send_text(Target("whatsapp", WA_ID), "hello")
    assert exc.value.retry_after == retry_after and not exc.value.permanent
    assert wa_api.messages() == []


def test_other_client_errors_are_permanent(settings, wa_api):
    wa_api.fail_next(*graph_error("Message failed to send because more than 24 hours have passed", 131047))
    with pytest.raises(DeliveryError) as exc:
        WhatsAppAdapter(settings).send_text(Target("whatsapp", WA_ID), "hello")
    assert exc.value.permanent and "131047" in str(exc.value)


def test_delivery_after_a_429_sends_exactly_once(settings, wa_api, tmp_path):
    path = tmp_path / "session"
    prepare(path, Target("whatsapp", WA_ID))
    conn = schema.connect(path / "agent" / schema.OUTBOUND)
    conn.execute("INSERT INTO messages_out (id, seq, timestamp, channel_type, platform_id, content) "
                 "VALUES ('m1', 1, ?, 'whatsapp', ?, ?)",
                 (schema.utc_now_iso(), WA_ID, json.dumps({"op": "text", "text": "the answer"})))
    conn.close()
    wa_api.fail_next(429, RATE_LIMITED, {"Retry-After": "20"})
    now = datetime.now(timezone.utc)
    assert deliver_session(path, settings, now=now) == 0
    assert deliver_session(path, settings, now=now + timedelta(seconds=10)) == 0  # Graph asked for 20 s
    assert deliver_session(path, settings, now=now + timedelta(seconds=21)) == 1
    assert deliver_session(path, settings, now=now + timedelta(seconds=60)) == 0
    assert [m["text"]["body"] for m in wa_api.messages()] == ["the answer"]
    assert len(wa_api.requests) == 2


# --- media users send ---------------------------------------------------------------------------

def test_fetch_attachment_asks_graph_for_the_media_url_then_downloads(settings, wa_api):
    ogg = b"OggS" + bytes(range(200))
    wa_api.add_media(ogg, "audio/ogg; codecs=opus", media_id="2013512409105417")
    adapter = WhatsAppAdapter(settings)
    name, data = adapter.fetch_attachment({"type": "audio", "media_id": "2013512409105417",
                                           "mime_type": "audio/ogg; codecs=opus"})
    assert data == ogg and name.startswith("audio.")  # a voice note has no file name
    with pytest.raises(AttachmentError, match="would not describe it"):
        adapter.fetch_attachment({"type": "image", "media_id": "999"})
    with pytest.raises(AttachmentError, match="no usable media id"):
        adapter.fetch_attachment({"type": "image", "media_id": "../messages"})


def test_media_must_match_what_graph_said():
    data = b"hello"
    assert media_intact(data, "5", hashlib.sha256(data).hexdigest())
    assert media_intact(data, 5, "not-a-hex-digest=")  # the webhook's base64 form is not checked
    assert not media_intact(data[:4], "5", None)                          # cut short
    assert not media_intact(b"hellO", "5", hashlib.sha256(data).hexdigest())  # damaged
