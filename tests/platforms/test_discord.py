"""Discord: Ed25519-signed interactions (PING, button clicks answered in the HTTP response), REST out,
and Gateway MESSAGE_CREATE payloads converted and routed (the Gateway program's hand-off to the web
program: tests/platforms/test_discord_gateway_intake.py).

Payloads are the shapes of Discord's documentation (tests/fixtures/discord/); REST is a local fake
that answers like Discord (tests/fakes/discord_api.py). The Gateway websocket itself cannot be
reached offline: its payloads go through discord.py's own parser and our converter into the router.
"""
import copy
import dataclasses
import json
import time
import warnings
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from conftest import malformed_total, said_just_now
from nacl.signing import SigningKey

with warnings.catch_warnings():  # discord.py imports audioop (voice), deprecated in 3.11; we use no voice
    warnings.simplefilter("ignore", DeprecationWarning)
    import discord
    from discord.http import HTTPClient
    from discord.state import ConnectionState

from nanoclaw.sessions.wake import NO_WAKE
from nanoclaw.approvals import actions
from nanoclaw.app import create_app
from nanoclaw.channels.base import Card, DeliveryError
from nanoclaw.platforms.discord.adapter import DiscordAdapter, decided_card
from nanoclaw.platforms.discord.messages import message_to_event, payload_from_message
from nanoclaw.db import database
from nanoclaw.outbound.delivery import deliver_session
from nanoclaw.migrate import apply_pending
from nanoclaw.models import AcceptedEvent, Session
from nanoclaw.inbound.router import route
from nanoclaw.sessions import session_schema as schema
from nanoclaw.sessions.store import Target, prepare
from tests.fakes.discord_api import BOT_ID, RATE_LIMITED, TOKEN, FakeDiscord, discord_error
from tests.platforms.kits import nothing_stored

FIXTURES = Path(__file__).parent.parent / "fixtures" / "discord"
USER_ID = "80351110224678912"
DM_CHANNEL = "1349960312012886066"
GUILD_CHANNEL = "1349960187106246708"
THREAD = "1350048067616768012"
KEY = SigningKey.generate()
PUBLIC_KEY = KEY.verify_key.encode().hex()


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def signed(payload, key: SigningKey = KEY, timestamp: int | None = None) -> tuple[bytes, dict]:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    ts = str(int(time.time()) if timestamp is None else timestamp)
    signature = key.sign(ts.encode() + body).signature.hex()
    return body, {"X-Signature-Ed25519": signature, "X-Signature-Timestamp": ts, "Content-Type": "application/json"}


@pytest.fixture
def discord_api():
    with FakeDiscord() as fake:
        yield fake


def discord_settings(make_settings, api_url, **extra):
    return make_settings(DISCORD_BOT_TOKEN=TOKEN, DISCORD_PUBLIC_KEY=PUBLIC_KEY, DISCORD_APPLICATION_ID=BOT_ID,
                         DISCORD_API_BASE=api_url, **extra)


@pytest.fixture
def settings(make_settings, discord_api):
    return discord_settings(make_settings, discord_api.url)


@pytest.fixture
def app(make_settings, db_url, discord_api):
    """The conftest app (SQLite and PostgreSQL) with Discord configured against the fake REST API."""
    app = create_app(discord_settings(make_settings, discord_api.url, DATABASE_URL=db_url))
    database.connect(reuse_if_open=True)
    apply_pending(database.obj, log=lambda _l: None)
    yield app
    database.close()


@pytest.fixture
def tst_clicks():
    clicks = []

    @actions.register_action("tst")
    def handle(action, ident, value, settings, wake):
        clicks.append((action.action_id, action.user_id, action.message_id))
        return f"Chosen: {value}"
    yield clicks
    actions._HANDLERS.pop("tst", None)


def post(app, payload, **kw):
    body, headers = signed(payload, **kw)
    return app.test_client().post("/webhooks/discord/interactions", data=body, headers=headers)



def session_rows(app, session) -> list[dict]:
    path = app.config["NANOCLAW"].sessions_dir / session.agent_group.folder / session.id / "host" / schema.INBOUND
    conn = schema.connect(path, readonly=True)
    try:
        return [dict(r) for r in conn.execute("SELECT * FROM messages_in ORDER BY seq")]
    finally:
        conn.close()


def click(custom_id: str, message: dict | None = None, interaction_id: str = "1350071226466304003") -> dict:
    payload = copy.deepcopy(fixture("interaction_component_click"))
    payload["id"], payload["data"]["custom_id"] = interaction_id, custom_id
    if message is not None:
        payload["message"] = message
    return payload


# --- interactions endpoint ---------------------------------------------------------------------------

def test_ping_is_answered_with_pong(app):
    resp = post(app, fixture("interaction_ping"))
    assert resp.status_code == 200 and resp.get_json() == {"type": 1}
    assert nothing_stored()


@pytest.mark.parametrize("how", ["missing timestamp", "stale timestamp", "garbage signature"])  # the rest: test_contract
def test_unverified_interactions_are_refused_and_nothing_runs(app, tst_clicks, how):
    payload = click("tst-9:yes")
    body, headers = signed(payload, key=SigningKey.generate() if how == "wrong key" else KEY,
                           timestamp=int(time.time()) - 301 if how == "stale timestamp" else None)
    if how == "tampered body":
        body = body.replace(b"tst-9:yes", b"tst-9:no!")
    elif how == "missing signature":
        del headers["X-Signature-Ed25519"]
    elif how == "missing timestamp":
        del headers["X-Signature-Timestamp"]
    elif how == "garbage signature":
        headers["X-Signature-Ed25519"] = "zz" * 64
    resp = app.test_client().post("/webhooks/discord/interactions", data=body, headers=headers)
    assert resp.status_code == 401
    assert tst_clicks == [] and nothing_stored()


def test_a_timestamp_within_five_minutes_is_accepted(app, tst_clicks):
    assert post(app, click("tst-9:yes"), timestamp=int(time.time()) - 240).status_code == 200
    assert len(tst_clicks) == 1


def test_malformed_but_signed_is_acknowledged_and_counted(app):
    before = malformed_total("discord")
    for body in (b"{not json", {"id": "1", "no": "type"}):
        response = post(app, body)
        assert response.status_code == 200 and response.json == {"type": 6}  # an answer that changes nothing
    no_custom_id = click("x")
    del no_custom_id["data"]["custom_id"]
    assert post(app, no_custom_id).status_code == 200
    assert nothing_stored()
    assert malformed_total("discord") == before + 3


def test_card_click_round_trip_updates_the_card_in_the_response(app, discord_api, tst_clicks):
    adapter = DiscordAdapter(app.config["NANOCLAW"])
    card_id = adapter.send_card(Target("discord", GUILD_CHANNEL), Card(
        "Deploy?", "Ship version 2 to production", (("Yes, ship it", "tst-1:yes"), ("No", "tst-1:no"))))
    card = discord_api.messages[card_id]
    clicked = card["components"][0]["components"][0]["custom_id"]
    assert clicked == "tst-1:yes"
    resp = post(app, click(clicked, message=card))
    assert resp.status_code == 200
    assert tst_clicks == [("tst-1:yes", f"discord:{USER_ID}", card_id)]
    answer = resp.get_json()
    assert answer["type"] == 7  # UPDATE_MESSAGE: the card edited in place, within the HTTP response
    assert answer["data"]["content"] == "**Deploy?**\nShip version 2 to production\n\n→ Chosen: yes — Nell"
    assert answer["data"]["components"] == []
    # a replayed interaction (same id) is acknowledged without running the handler again
    again = post(app, click(clicked, message=card))
    assert again.status_code == 200 and again.get_json() == {"type": 6} and len(tst_clicks) == 1


def test_click_in_a_dm_names_the_user(app, tst_clicks):
    payload = click("tst-2:ok")
    member = payload.pop("member")
    payload.pop("guild_id")
    payload["user"] = member["user"]
    resp = post(app, payload)
    assert resp.get_json()["data"]["content"].endswith("→ Chosen: ok — Nelly")
    assert tst_clicks[0][1] == f"discord:{USER_ID}"


def test_a_new_decision_replaces_the_old_one():
    once = decided_card("**Q**\nbody", "Allowed", "Nell")["data"]["content"]
    twice = decided_card(once, "Already answered", "Bob")["data"]["content"]
    assert twice == "**Q**\nbody\n\n→ Already answered — Bob"
    long = decided_card("x" * 2000, "Allowed", "Nell")["data"]["content"]
    assert len(long) <= 2000 and long.endswith("→ Allowed — Nell")


# --- gateway → router -----------------------------------------------------------------------------------

def test_converter_reads_dm_guild_thread_reply_and_echo():
    dm = message_to_event(fixture("gateway_message_dm"), bot_id=BOT_ID)
    assert (dm.kind, dm.chat_id, dm.sender_id, dm.sender_name) == ("dm", DM_CHANNEL, USER_ID, "Nelly")
    assert dm.mentioned and not dm.from_self and said_just_now(dm.timestamp)  # 2025: a week past

    guild = message_to_event(fixture("gateway_message_guild_mention"), bot_id=BOT_ID, bot_name="Andy")
    # a guild channel is threaded: a top-level message may start a thread, which gets its id
    assert (guild.kind, guild.chat_id, guild.thread_id, guild.thread_root) == ("thread", GUILD_CHANNEL, None,
                                                                               "1350046344613494824")
    assert guild.mentioned and guild.sender_name == "Nell" and guild.text == "@Andy what's on the agenda today?"
    assert not message_to_event(fixture("gateway_message_guild_mention"), bot_id="42").mentioned

    thread_info = {"id": THREAD, "type": 11, "parent_id": GUILD_CHANNEL}
    thread = message_to_event(fixture("gateway_message_thread"), bot_id=BOT_ID, channel=thread_info)
    assert (thread.kind, thread.chat_id, thread.thread_id) == ("thread", GUILD_CHANNEL, THREAD)
    assert not thread.mentioned and thread.attachments[0]["filename"] == "budget.csv"
    unknown = message_to_event(fixture("gateway_message_thread"), bot_id=BOT_ID)
    assert (unknown.kind, unknown.chat_id) == ("thread", THREAD)  # not known to be a thread: a channel

    reply = message_to_event(fixture("gateway_message_reply"), bot_id=BOT_ID)
    assert reply.reply_to.message_id == "1350046360325357630"
    assert reply.reply_to.text == "Today: standup at 10, budget review at 2." and reply.reply_to.sender_name == "andy"
    assert reply.mentioned  # a reply to our message addresses us

    echo = message_to_event(fixture("gateway_message_bot_echo"), bot_id=BOT_ID)
    assert echo.from_self and echo.sender_is_bot
    assert message_to_event(fixture("gateway_member_join"), bot_id=BOT_ID) is None


def test_forwards_and_empty_messages():
    forward = fixture("gateway_message_reply")["d"]
    forward["message_reference"]["type"] = 1
    assert message_to_event(forward, bot_id=BOT_ID).reply_to is None
    empty = fixture("gateway_message_dm")["d"]
    empty["content"] = ""  # what arrives without the message-content intent
    assert message_to_event(empty, bot_id=BOT_ID) is None


@pytest.fixture
def wired(cli):
    assert cli("agent", "create", "Andy").exit_code == 0
    assert cli("user", "add", f"discord:{USER_ID}", "--role", "owner").exit_code == 0
    assert cli("wire", "discord", DM_CHANNEL, "andy").exit_code == 0


def test_wired_dm_is_routed_once_and_our_echo_never(app, wired):
    settings = app.config["NANOCLAW"]
    event = message_to_event(fixture("gateway_message_dm"), bot_id=BOT_ID)
    assert route(event, settings, NO_WAKE).written and route(event, settings, NO_WAKE).duplicate
    [row] = session_rows(app, Session.get())
    assert json.loads(row["content"])["text"] == "Can you summarise yesterday's meeting notes?"
    assert (row["trigger"], row["platform_id"]) == (1, DM_CHANNEL)
    echo = message_to_event(fixture("gateway_message_bot_echo"), bot_id=BOT_ID)
    assert route(echo, settings, NO_WAKE).dropped == "own_message"
    assert len(session_rows(app, Session.get())) == 1 and AcceptedEvent.select().count() == 1


def discordpy_messages(*names: str, cdn: str | None = None) -> list:
    """Gateway payloads through discord.py's own parser (what on_message receives); `cdn`: the
    host that serves their attachments instead of cdn.discordapp.com (a fake)."""
    got = []
    intents = discord.Intents.default()
    intents.message_content = True
    state = ConnectionState(dispatch=lambda event, *args: got.append(args[0]) if event == "message" else None,
                            handlers={}, hooks={}, http=HTTPClient(None), intents=intents)
    state._add_guild_from_data(fixture("gateway_guild_create")["d"])
    for name in names:
        payload = fixture(name)["d"]
        if cdn:
            payload = json.loads(json.dumps(payload).replace("https://cdn.discordapp.com", cdn))
        state.parse_message_create(payload)
    return got


def test_discordpy_messages_are_routed_like_the_payloads(app, cli, wired, discord_api):
    assert cli("wire", "discord", GUILD_CHANNEL, "andy", "--kind", "thread", "--engage", "pattern",
               "--pattern", ".").exit_code == 0
    settings = app.config["NANOCLAW"]
    budget = b"item,amount\nvenue,1200\n"
    discord_api.add_attachment(THREAD, "budget.csv", budget, "text/csv; charset=utf-8",
                               attachment_id="1350069746283872256")
    dm, mention, in_thread = discordpy_messages("gateway_message_dm", "gateway_message_guild_mention",
                                                "gateway_message_thread", cdn=discord_api.url)
    for message, name in ((dm, "gateway_message_dm"), (mention, "gateway_message_guild_mention")):
        payload, channel = payload_from_message(message)
        ours, theirs = (message_to_event(p, bot_id=BOT_ID, channel=channel) for p in (payload, fixture(name)))
        # the fixture's 2025 is more than a week ago: both are said now, a moment apart
        assert dataclasses.replace(ours, timestamp="") == dataclasses.replace(theirs, timestamp="")
        assert said_just_now(ours.timestamp) and said_just_now(theirs.timestamp)
    for message in (dm, mention, in_thread):
        payload, channel = payload_from_message(message)
        assert route(message_to_event(payload, bot_id=BOT_ID, channel=channel, bot_name="Andy"), settings, NO_WAKE).written
    sessions = {(s.messaging_group.platform_id, s.thread_id): s for s in Session.select()}
    mention_id = "1350046344613494824"  # a top-level message: its answer goes into a thread under it
    assert set(sessions) == {(DM_CHANNEL, ""), (GUILD_CHANNEL, mention_id), (GUILD_CHANNEL, THREAD)}
    [thread_row] = session_rows(app, sessions[(GUILD_CHANNEL, THREAD)])
    assert thread_row["thread_id"] == THREAD and json.loads(thread_row["content"])["text"] == "and the budget item, please"
    [attachment] = json.loads(thread_row["content"])["attachments"]  # saved where the agent can read it
    assert attachment["path"] == "/workspace/inbound/inbox/1350049740376539187/budget.csv"
    session = sessions[(GUILD_CHANNEL, THREAD)]
    assert (settings.sessions_dir / "andy" / session.id / "host" / "inbox" / "1350049740376539187" / "budget.csv"
            ).read_bytes() == budget
    [mention_row] = session_rows(app, sessions[(GUILD_CHANNEL, mention_id)])
    assert mention_row["trigger"] == 1 and json.loads(mention_row["content"])["text"] == "@Andy what's on the agenda today?"


def test_threads_are_threads_a_top_level_mention_is_answered_in_a_thread_under_it(app, cli, wired, discord_api):
    """The rule Slack follows, on Discord: a wired guild channel (kind thread: mention-sticky, a
    session per thread); a top-level mention is answered in a new thread started from it; later
    messages there are answered without a mention; another thread without a mention is not."""
    from agent_runner.store import SessionStore  # noqa: E402
    assert cli("wire", "discord", GUILD_CHANNEL, "andy", "--kind", "thread").exit_code == 0
    settings = app.config["NANOCLAW"]
    mention = fixture("gateway_message_guild_mention")
    root = mention["d"]["id"]
    discord_api.said(GUILD_CHANNEL, root)
    assert route(message_to_event(mention, bot_id=BOT_ID, bot_name="Andy"), settings, NO_WAKE).written
    session = Session.get()
    assert session.thread_id == root
    path = settings.sessions_dir / "andy" / session.id

    def answer(text: str) -> None:
        agent = SessionStore.of_session(path)
        agent.write_out({"op": "text", "text": text}, agent.routing())
        agent.close()
        assert deliver_session(path, settings) == 1
    answer("Today: standup at 10, budget review at 2.")
    assert discord_api.threads[root]["parent_id"] == GUILD_CHANNEL
    assert discord_api.threads[root]["name"] == "Today: standup at 10, budget review at 2."
    assert [m["content"] for m in discord_api.posted(root)] == ["Today: standup at 10, budget review at 2."]
    assert discord_api.posted(GUILD_CHANNEL) == []  # nothing at the channel's top level

    in_our_thread = fixture("gateway_message_thread")
    in_our_thread["d"].update(channel_id=root, id="1350049740376539999", attachments=[])
    event = message_to_event(in_our_thread, bot_id=BOT_ID, channel={"id": root, "type": 11, "parent_id": GUILD_CHANNEL})
    assert route(event, settings, NO_WAKE).written == [("andy", session.id, True)]  # no mention needed there
    answer("Budget: venue 1200.")
    assert [m["content"] for m in discord_api.posted(root)][-1] == "Budget: venue 1200."
    assert len(discord_api.threads) == 1

    elsewhere = fixture("gateway_message_thread")
    elsewhere["d"].update(attachments=[])
    event = message_to_event(elsewhere, bot_id=BOT_ID, channel={"id": THREAD, "type": 11, "parent_id": GUILD_CHANNEL})
    assert not route(event, settings, NO_WAKE).written  # another thread, no mention: not for us
    assert Session.select().count() == 1


def test_where_no_thread_can_be_started_the_answer_goes_to_the_channel(settings, discord_api, caplog):
    # the message is not one a thread can be started from here (another channel's, as Discord sees it)
    discord_api.said("1349960187106246799", "1350046344613494824")
    mid = DiscordAdapter(settings).send_text(Target("discord", GUILD_CHANNEL, "1350046344613494824"), "hello")
    assert discord_api.messages[mid]["channel_id"] == GUILD_CHANNEL
    assert "answering in the channel" in caplog.text


# --- outbound --------------------------------------------------------------------------------------------

def test_long_text_is_split_at_2000_and_never_pings(settings, discord_api):
    paragraphs = [f"Paragraph {i}. " + "word " * 150 for i in range(8)]
    first = DiscordAdapter(settings).send_text(Target("discord", DM_CHANNEL), "\n\n".join(paragraphs))
    posted = discord_api.posted(DM_CHANNEL)
    assert len(posted) > 2 and all(len(m["content"]) <= 2000 for m in posted)
    assert all(m["content"].startswith("Paragraph ") for m in posted)
    assert " ".join(m["content"] for m in posted).split() == "\n\n".join(paragraphs).split()
    assert first == posted[0]["id"] and all(m["allowed_mentions"] == {"parse": []} for m in posted)


def test_a_long_text_cut_short_by_a_429_resumes_without_repeats(settings, discord_api):
    adapter, target = DiscordAdapter(settings), Target("discord", DM_CHANNEL)
    text = "\n\n".join(f"Part {i}. " + "word " * 350 for i in range(3))
    discord_api.fail_next(429, RATE_LIMITED, match=lambda r: (r.json or {}).get("content", "").startswith("Part 1"))
    with pytest.raises(DeliveryError):
        adapter.send_text(target, text)
    first = adapter.send_text(target, text)  # delivery's retry of the same row
    posted = discord_api.posted(DM_CHANNEL)
    assert [m["content"][:6] for m in posted] == ["Part 0", "Part 1", "Part 2"] and first == posted[0]["id"]


def test_edit_react_typing_and_threads(settings, discord_api):
    adapter = DiscordAdapter(settings)
    in_thread = Target("discord", GUILD_CHANNEL, THREAD)
    mid = adapter.send_text(in_thread, "draft")
    adapter.edit_text(in_thread, mid, "final answer")
    adapter.react(in_thread, mid, "👍")
    adapter.react(in_thread, mid, "<:nanoclaw:1350000000000000001>")
    adapter.typing(in_thread)
    assert [(m["channel_id"], m["content"]) for m in discord_api.posted()] == [(THREAD, "final answer")]
    assert discord_api.reactions == [(THREAD, mid, "👍"), (THREAD, mid, "nanoclaw:1350000000000000001")]
    put = [r for r in discord_api.requests if r.method == "PUT"][0]
    assert put.raw_path.endswith("/reactions/%F0%9F%91%8D/@me")
    assert discord_api.typing == [THREAD]
    with pytest.raises(DeliveryError) as exc:
        adapter.edit_text(in_thread, "1", "no such message")
    assert exc.value.permanent and "10008" in str(exc.value)


def test_file_goes_as_multipart_with_payload_json(settings, discord_api, tmp_path):
    chart = tmp_path / "chart.png"
    chart.write_bytes(b"\x89PNG fake")
    DiscordAdapter(settings).send_file(Target("discord", DM_CHANNEL), chart, "This week's chart")
    upload = discord_api.requests[0]
    assert json.loads(upload.form["payload_json"])["content"] == "This week's chart"
    assert json.loads(upload.form["payload_json"])["attachments"] == [{"id": 0, "filename": "chart.png"}]
    assert upload.files["files[0]"] == ("chart.png", b"\x89PNG fake", "image/png")
    [message] = discord_api.posted()
    assert message["attachments"][0]["filename"] == "chart.png"


def test_cards_fit_discords_component_limits(settings, discord_api):
    adapter, target = DiscordAdapter(settings), Target("discord", GUILD_CHANNEL)
    adapter.send_card(target, Card("Allow Bob?", "Bob wants to talk", (("Allow", "tst-3:allow"), ("Deny", "tst-3:deny"))))
    seven = tuple((f"Option {i}", f"tst-4:{i}") for i in range(7))
    adapter.send_card(target, Card("Pick", "one of seven", seven))
    thirty = tuple((f"Option {i}", f"tst-5:{i}") for i in range(30))
    adapter.send_card(target, Card("Pick", "one of thirty", thirty))
    small, medium, big1, big2 = discord_api.posted()
    assert [len(r["components"]) for r in small["components"]] == [2]
    assert [len(r["components"]) for r in medium["components"]] == [5, 2]
    assert [len(r["components"]) for r in big1["components"]] == [5, 5, 5, 5, 5]
    assert [len(r["components"]) for r in big2["components"]] == [5]
    assert [b["custom_id"] for m in (big1, big2) for r in m["components"] for b in r["components"]] == \
        [a for _, a in thirty]
    with pytest.raises(DeliveryError) as exc:
        adapter.send_card(target, Card("Too long", "", (("x", "tst-6:" + "y" * 100),)))
    assert exc.value.permanent and len(discord_api.posted()) == 4


@pytest.mark.parametrize("body, headers, retry_after", [
    (RATE_LIMITED, {"Retry-After": "2"}, 1.234),
    ({"message": "You are being rate limited.", "global": True}, {"Retry-After": "3"}, 3.0),
])
def test_429_raises_with_retry_after(settings, discord_api, body, headers, retry_after):
    discord_api.fail_next(429, body, headers)
    with pytest.raises(DeliveryError) as exc:
        DiscordAdapter(settings).send_text(Target("discord", DM_CHANNEL), "hello")
    assert exc.value.retry_after == retry_after and not exc.value.permanent
    assert discord_api.posted() == []


def test_other_client_errors_are_permanent(settings, discord_api):
    discord_api.fail_next(*discord_error(403, 50001, "Missing Access"))
    with pytest.raises(DeliveryError) as exc:
        DiscordAdapter(settings).send_text(Target("discord", DM_CHANNEL), "hello")
    assert exc.value.permanent and "50001" in str(exc.value)


def test_delivery_after_a_429_sends_exactly_once(settings, discord_api, tmp_path):
    path = tmp_path / "session"
    prepare(path, Target("discord", DM_CHANNEL))
    conn = schema.connect(path / "agent" / schema.OUTBOUND)
    conn.execute("INSERT INTO messages_out (id, seq, timestamp, channel_type, platform_id, content) "
                 "VALUES ('m1', 1, ?, 'discord', ?, ?)",
                 (schema.utc_now_iso(), DM_CHANNEL, json.dumps({"op": "text", "text": "the answer"})))
    conn.close()
    discord_api.fail_next(429, {**RATE_LIMITED, "retry_after": 12.5})
    now = datetime.now(timezone.utc)
    assert deliver_session(path, settings, now=now) == 0
    assert deliver_session(path, settings, now=now + timedelta(seconds=10)) == 0  # Discord asked for 12.5 s
    assert deliver_session(path, settings, now=now + timedelta(seconds=13)) == 1
    assert deliver_session(path, settings, now=now + timedelta(seconds=60)) == 0
    assert [m["content"] for m in discord_api.posted()] == ["the answer"]
    assert len(discord_api.requests) == 2
