"""Slack: signed webhooks in (routed, refused, deduped, url_verification, buttons), Web API out (fake Slack)."""
from __future__ import annotations

import hashlib
import hmac
import json
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import urlencode

import pytest

from conftest import malformed_total, said_just_now

from nanoclaw.approvals import actions
from nanoclaw.app import create_app
from nanoclaw.channels.base import Card, DeliveryError
from nanoclaw.platforms.slack.adapter import SlackAdapter, emoji_name, plain_text
from nanoclaw.db import database
from nanoclaw.outbound.delivery import deliver_session
from nanoclaw.migrate import apply_pending
from nanoclaw.models import DroppedMessage, Session
from nanoclaw.sessions import session_schema as schema, store
from nanoclaw.sessions.store import Target, prepare
from tests.fakes.slack_api import BOT_USER_ID, SIGNING_SECRET, TOKEN, FakeSlack
from tests.platforms.kits import nothing_stored, rows

FIXTURES = Path(__file__).parent.parent / "fixtures" / "slack"
ALICE, DM, GENERAL = "U0ALICE01", "D0DMALICE", "C0GENERAL"


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


@pytest.fixture
def fake():
    with FakeSlack() as server:
        yield server


def _app(make_settings, db_url, fake, **env):
    base = dict(DATABASE_URL=db_url, SLACK_BOT_TOKEN=TOKEN, SLACK_SIGNING_SECRET=SIGNING_SECRET, SLACK_API_BASE=fake.api)
    base.update(env)
    app = create_app(make_settings(**{k: v for k, v in base.items() if v is not None}))
    database.connect(reuse_if_open=True)
    apply_pending(database.obj, log=lambda _l: None)
    return app


@pytest.fixture
def app(make_settings, db_url, fake):
    """A migrated app wired to the fake Slack, on SQLite and PostgreSQL."""
    yield _app(make_settings, db_url, fake)
    database.close()


@pytest.fixture
def adapter(make_settings, fake):
    return SlackAdapter(make_settings(SLACK_BOT_TOKEN=TOKEN, SLACK_SIGNING_SECRET=SIGNING_SECRET,
                                      SLACK_API_BASE=fake.api))


def run_cli(app, *args):
    return app.test_cli_runner().invoke(args=["nanoclaw", *args])


def signed(body: bytes, secret: str = SIGNING_SECRET, timestamp: int | None = None) -> dict:
    ts = str(int(time.time()) if timestamp is None else timestamp)
    digest = hmac.new(secret.encode(), f"v0:{ts}:".encode() + body, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest}"}


def post(app, kind: str, body: bytes, headers: dict | None = None, content_type="application/json"):
    headers = signed(body) if headers is None else headers
    return app.test_client().post(f"/webhooks/slack/{kind}", data=body,
                                  headers={"Content-Type": content_type, **headers})


def post_event(app, payload: dict, **extra_headers):
    body = json.dumps(payload).encode()
    return post(app, "events", body, {**signed(body), **extra_headers})


def post_click(app, payload: dict):
    body = urlencode({"payload": json.dumps(payload)}).encode()
    return post(app, "actions", body, content_type="application/x-www-form-urlencoded")




def wire_alice(app):
    run_cli(app, "agent", "create", "Andy")
    run_cli(app, "user", "add", f"slack:{ALICE}", "--role", "owner")
    assert run_cli(app, "wire", "slack", DM, "andy").exit_code == 0


# --- inbound: verification, routing, dedup -----------------------------------------------------

def test_a_slow_user_lookup_never_holds_up_the_acknowledgement(app, fake):
    """Slack wants the 200 within 3 s. The sender's name (users.info) is looked up on the intake
    thread, after the acknowledgement; the stored message still carries it."""
    from nanoclaw import service
    wire_alice(app)
    fake.users_info_delay = 2.5
    thread = service.start_intake(app)
    try:
        started = time.monotonic()
        assert post_event(app, fixture("dm_message")).status_code == 200
        assert time.monotonic() - started < 1.0
        assert thread.wait_idle(10)
    finally:
        service.stop_intake(app)
    [row] = rows(app, Session.get())
    assert row["sender"] == "alice" and len(fake.calls("users.info")) == 1


def test_url_verification_echoes_the_challenge(app):
    resp = post_event(app, fixture("url_verification"))
    assert resp.status_code == 200
    assert resp.get_json() == {"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}
    assert nothing_stored()


def test_wired_dm_is_routed_into_its_session(app, fake):
    wire_alice(app)
    assert post_event(app, fixture("dm_message")).status_code == 200
    [row] = rows(app, Session.get())
    assert row["text"] == "Hi Andy & team, what's the plan (https://example.org/plan)?"
    assert row["sender"] == "alice" and row["sender_id"] == f"slack:{ALICE}" and row["trigger"] == 1
    assert said_just_now(row["timestamp"]) and row["message_id"] == "1700000000.000100"


def _tampered(body: bytes) -> tuple[bytes, dict]:
    return body.replace(b"Hi Andy", b"Hi Eve!"), signed(body)


@pytest.mark.parametrize("how", ["no timestamp", "stale timestamp", "future timestamp", "garbage timestamp",
                                 "v1 scheme"])  # (unsigned, signed wrong, changed: tests/platforms/test_contract.py)
def test_forged_or_replayed_requests_are_refused_and_nothing_stored(app, fake, how):
    wire_alice(app)
    body = json.dumps(fixture("dm_message")).encode()
    headers = signed(body)
    if how == "wrong secret":
        headers = signed(body, secret="not-the-signing-secret")
    elif how == "tampered body":
        body, headers = _tampered(body)
    elif how == "no signature":
        headers.pop("X-Slack-Signature")
    elif how == "no timestamp":
        headers.pop("X-Slack-Request-Timestamp")
    elif how == "no headers":
        headers = {}
    elif how == "stale timestamp":
        headers = signed(body, timestamp=int(time.time()) - 301)
    elif how == "future timestamp":
        headers = signed(body, timestamp=int(time.time()) + 301)
    elif how == "garbage timestamp":
        headers = {**headers, "X-Slack-Request-Timestamp": "yesterday"}
    elif how == "v1 scheme":
        headers = {**headers, "X-Slack-Signature": headers["X-Slack-Signature"].replace("v0=", "v1=")}
    assert post(app, "events", body, headers).status_code == 401
    assert nothing_stored() and fake.requests == []


def test_a_click_with_a_bad_signature_runs_nothing(app, fake):
    clicks = []
    actions.register_action("tst")(lambda *a: clicks.append(a))
    payload = fixture("block_actions")
    body = urlencode({"payload": json.dumps(payload)}).encode()
    resp = post(app, "actions", body, signed(body, secret="forged"), content_type="application/x-www-form-urlencoded")
    assert resp.status_code == 401 and clicks == [] and fake.requests == [] and nothing_stored()


@pytest.mark.parametrize("kind, body", [
    ("events", b"not json"), ("events", b"[]"), ("events", b'{"type": "url_verification"}'),
    ("events", b'{"type": "event_callback", "event_id": "Ev1"}'),
    ("events", b'{"type": "event_callback", "event": {"type": "message", "text": "no channel"}}'),
    ("actions", b"payload=not-json"), ("actions", b"nothing=here"), ("actions", b'payload={"type":"block_actions"}'),
])
def test_malformed_is_acknowledged_counted_and_nothing_stored(app, kind, body):
    wire_alice(app)
    before = malformed_total("slack")
    assert post(app, kind, body).status_code == 200
    assert nothing_stored()
    assert malformed_total("slack") == before + 1


def test_unknown_webhook_path_is_404(app):
    assert post(app, "interactions", b"{}").status_code == 404


def test_retries_and_double_deliveries_are_routed_once(app):
    wire_alice(app)
    run_cli(app, "wire", "slack", GENERAL, "andy", "--kind", "group", "--unknown-senders", "public")
    assert post_event(app, fixture("dm_message")).status_code == 200
    retry = post_event(app, fixture("dm_message"), **{"X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"})
    assert retry.status_code == 200
    # one mention arrives twice, as `message` and as `app_mention` (different event_ids)
    assert post_event(app, fixture("channel_message_mention")).status_code == 200
    assert post_event(app, fixture("app_mention")).status_code == 200
    dm = Session.get(Session.messaging_group == 1)
    channel = Session.get(Session.messaging_group == 2)
    assert [r["text"] for r in rows(app, dm)] == ["Hi Andy & team, what's the plan (https://example.org/plan)?"]
    assert [(r["text"], r["trigger"]) for r in rows(app, channel)] == [("@U0BOTANDY summarize the thread", 1)]


def test_own_and_other_bot_messages_and_edits_are_not_routed(app, fake):
    wire_alice(app)
    for name in ("bot_echo", "bot_message_subtype", "message_changed", "message_deleted"):
        assert post_event(app, fixture(name)).status_code == 200
    assert nothing_stored()
    assert len(fake.calls("auth.test")) == 1  # who we are is asked once


def test_channel_engages_on_mention_only_and_threads_get_their_own_session(app):
    run_cli(app, "agent", "create", "Andy")
    run_cli(app, "wire", "slack", GENERAL, "andy", "--kind", "thread", "--unknown-senders", "public")
    post_event(app, fixture("channel_message"))   # no mention: dropped
    post_event(app, fixture("thread_reply"))      # mention inside a thread
    assert [d.reason for d in DroppedMessage.select()] == ["no_agent_engaged"]
    session = Session.get()
    assert session.thread_id == "1700000020.000300"
    [row] = rows(app, session)
    assert row["text"] == "@U0BOTANDY and the follow-ups?" and row["trigger"] == 1


def test_file_share_keeps_the_message_and_saves_the_file(app, fake):
    wire_alice(app)
    csv = b"month,total\n" + b"2023-11,2048\n" * 100
    fake.add_file("report.csv", csv, "text/csv", file_id="F0REPORT01")
    share = fixture("file_share")
    share["event"]["files"][0]["url_private"] = share["event"]["files"][0]["url_private"].replace(
        "https://files.slack.com", fake.url)  # the fake is files.slack.com
    post_event(app, share)
    session = Session.get()
    [row] = rows(app, session)
    assert row["text"] == "the report"
    path = "/workspace/inbound/inbox/D0DMALICE_1700000080.001000/report.csv"
    assert row["attachments"] == [{"kind": "file", "name": "report.csv", "mime": "text/csv", "size": len(csv),
                                   "path": path}]
    folder = app.config["NANOCLAW"].sessions_dir / "andy" / session.id
    assert (folder / "host" / path.removeprefix("/workspace/inbound/")).read_bytes() == csv


def test_configured_bot_user_id_skips_auth_test(make_settings, fake):
    adapter = SlackAdapter(make_settings(SLACK_BOT_TOKEN=TOKEN, SLACK_SIGNING_SECRET=SIGNING_SECRET,
                                         SLACK_API_BASE=fake.api, SLACK_BOT_USER_ID=BOT_USER_ID))
    echo = adapter.parse_events(json.dumps(fixture("bot_echo")).encode()).events[0]
    mention = adapter.parse_events(json.dumps(fixture("channel_message_mention")).encode()).events[0]
    assert echo.from_self and mention.mentioned and fake.calls("auth.test") == []


def test_unknown_identity_treats_every_bot_post_as_ours(make_settings):
    adapter = SlackAdapter(make_settings(SLACK_BOT_TOKEN=TOKEN, SLACK_SIGNING_SECRET=SIGNING_SECRET,
                                         SLACK_API_BASE="http://127.0.0.1:9"))
    echo = adapter.parse_events(json.dumps(fixture("bot_echo")).encode()).events[0]
    assert echo.from_self  # no loop even when auth.test cannot be reached


# --- buttons: card out, click in, acknowledged ---------------------------------------------------

def test_card_button_round_trip(app, fake):
    wire_alice(app)
    clicks = []

    @actions.register_action("tst")
    def on_click(action, ident, value, settings, wake):
        clicks.append((action.user_id, action.chat_id, action.message_id, ident, value))
        return f"Done: {value}"

    adapter = SlackAdapter(app.config["NANOCLAW"])
    ts = adapter.send_card(Target("slack", DM), Card("Allow Bob?", "Bob <bob@x> wants to talk to Andy.",
                                                     (("Allow", "tst-17:allow"), ("Deny", "tst-17:deny"))))
    [sent] = fake.calls("chat.postMessage")
    section, buttons = sent["blocks"]
    assert section["text"]["text"] == "*Allow Bob?*\nBob &lt;bob@x&gt; wants to talk to Andy."
    allow = buttons["elements"][0]
    assert (allow["text"]["text"], allow["action_id"], allow["value"]) == ("Allow", "tst-17:allow", "tst-17:allow")

    payload = fixture("block_actions")
    payload["container"]["message_ts"] = payload["message"]["ts"] = ts
    payload["actions"][0].update(action_id=allow["action_id"], value=allow["value"])
    payload["response_url"] = fake.response_url("click1")
    assert post_click(app, payload).status_code == 200
    assert clicks == [(f"slack:{ALICE}", DM, ts, "17", "allow")]
    assert fake.responses() == [{"response_type": "ephemeral", "replace_original": False, "text": "Done: allow"}]

    assert post_click(app, payload).status_code == 200  # the same interaction again: not run twice
    assert len(clicks) == 1


# --- outbound -----------------------------------------------------------------------------------

def test_long_text_is_split_and_escaped(adapter, fake):
    paragraphs = [f"Part {i}: " + "word " * 700 + "end." for i in range(3)]
    adapter.send_text(Target("slack", GENERAL, "1700000020.000300"), "\n\n".join(paragraphs))
    calls = fake.calls("chat.postMessage")
    assert [c["text"] for c in calls] == paragraphs
    assert all(c["thread_ts"] == "1700000020.000300" and c["channel"] == GENERAL for c in calls)
    fake.requests.clear()
    adapter.send_text(Target("slack", GENERAL), "ping <!channel> & <https://evil|click>")
    [call] = fake.calls("chat.postMessage")
    assert call["text"] == "ping &lt;!channel&gt; &amp; &lt;https://evil|click&gt;" and "thread_ts" not in call


def test_edit_react_and_file_upload_flow(adapter, fake, tmp_path):
    target = Target("slack", DM)
    ts = adapter.send_text(target, "draft")
    adapter.edit_text(target, ts, "final")
    for emoji in ("👍", "❤️", ":tada:", "white_check_mark", "🦩"):
        adapter.react(target, ts, emoji)
    report = tmp_path / "report.csv"
    report.write_bytes(b"a,b\n1,2\n")
    file_id = adapter.send_file(target, report, "the numbers")
    assert fake.calls("chat.update") == [{"channel": DM, "ts": ts, "text": "final"}]
    assert [c["name"] for c in fake.calls("reactions.add")] == ["thumbsup", "heart", "tada", "white_check_mark",
                                                                "thumbsup"]
    [slot] = fake.calls("files.getUploadURLExternal")
    assert slot == {"filename": "report.csv", "length": "8"}
    assert fake.uploads[file_id] == b"a,b\n1,2\n"
    [done] = fake.calls("files.completeUploadExternal")
    assert json.loads(done["files"]) == [{"id": file_id, "title": "report.csv"}]
    assert done["channel_id"] == DM and done["initial_comment"] == "the numbers"
    assert adapter.typing(target) is None  # Slack has no bot typing indicator


def test_429_gives_retry_after_and_config_errors_are_permanent(adapter, fake, make_settings):
    fake.rate_limit("chat.postMessage", retry_after=7)
    with pytest.raises(DeliveryError) as err:
        adapter.send_text(Target("slack", DM), "hi")
    assert err.value.retry_after == 7 and not err.value.permanent
    fake.fail_next(200, {"ok": False, "error": "channel_not_found"})
    with pytest.raises(DeliveryError) as err:
        adapter.send_text(Target("slack", "C0GONE"), "hi")
    assert err.value.permanent and "channel_not_found" in str(err.value)
    wrong = SlackAdapter(make_settings(SLACK_BOT_TOKEN="xoxb-wrong", SLACK_API_BASE=fake.api))
    with pytest.raises(DeliveryError) as err:
        wrong.send_text(Target("slack", DM), "hi")
    assert err.value.permanent and "invalid_auth" in str(err.value) and "xoxb" not in str(err.value)


def test_delivery_429_then_success_sends_exactly_once(fake, tmp_path, make_settings):
    settings = make_settings(SLACK_BOT_TOKEN=TOKEN, SLACK_API_BASE=fake.api)
    session = tmp_path / "session"
    prepare(session, Target("slack", DM))
    conn = schema.connect(session / "agent" / schema.OUTBOUND)
    conn.execute("INSERT INTO messages_out (id, seq, timestamp, channel_type, platform_id, content) "
                 "VALUES (?, 1, ?, 'slack', ?, ?)",
                 (uuid.uuid4().hex, schema.utc_now_iso(), DM, json.dumps({"op": "text", "text": "Booked."})))
    conn.close()
    fake.rate_limit("chat.postMessage", retry_after=2)
    assert deliver_session(session, settings) == 0
    assert deliver_session(session, settings) == 0  # Retry-After not over yet
    later = datetime.now(timezone.utc) + timedelta(seconds=3)
    assert deliver_session(session, settings, now=later) == 1
    assert deliver_session(session, settings, now=later + timedelta(seconds=60)) == 0
    assert [c["text"] for c in fake.calls("chat.postMessage")] == ["Booked."]


# --- pure helpers ------------------------------------------------------------------------------

def test_plain_text_and_emoji_names():
    assert plain_text("<@U1> see <#C2|general> and <https://a.b/c|docs> or <https://x.y> &lt;3 <!here>") == \
        "@U1 see #general and docs (https://a.b/c) or https://x.y <3 @here"
    assert plain_text("<!subteam^S1|@devs> ping") == "@devs ping"
    assert emoji_name("✅") == "white_check_mark" and emoji_name("⚠️") == "warning"
    assert emoji_name(":+1:") == "+1" and emoji_name("🦩") == "thumbsup"


def channel_event(text: str, ts: str, thread_ts: str | None = None, n: int = 0) -> dict:
    payload = fixture("channel_message_mention")
    payload["event"].update(text=text, ts=ts, event_ts=ts)
    if thread_ts:
        payload["event"]["thread_ts"] = thread_ts
    payload["event_id"] = f"Ev0THREAD{n:03d}"
    return payload


def test_a_wired_channel_answers_a_mention_in_its_own_thread_and_sticks_there(app):
    """Issue 17: a channel wired with no --kind gets per-thread sessions with mention-sticky."""
    run_cli(app, "agent", "create", "Andy")
    assert "(thread)" in run_cli(app, "wire", "slack", GENERAL, "andy", "--unknown-senders", "public").output
    post_event(app, channel_event("<@U0BOTANDY> what's the plan?", "1700000100.000100", n=1))  # top level
    post_event(app, channel_event("and the budget?", "1700000101.000100", "1700000100.000100", n=2))  # its thread
    post_event(app, channel_event("unrelated chatter", "1700000102.000100", "1700000050.000100", n=3))  # another
    post_event(app, channel_event("top-level chatter", "1700000103.000100", n=4))
    session = Session.get()
    assert session.thread_id == "1700000100.000100"  # the mention started a thread: its session
    assert [(r["text"], r["trigger"]) for r in rows(app, session)] == [
        ("@U0BOTANDY what's the plan?", 1), ("and the budget?", 1)]
    routing = store.routing_of(app.config["NANOCLAW"].sessions_dir / "andy" / session.id)
    assert routing.thread_id == "1700000100.000100"  # answers go under the mention
    assert [d.reason for d in DroppedMessage.select()] == ["no_agent_engaged", "no_agent_engaged"]
