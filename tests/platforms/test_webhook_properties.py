"""What no platform's contract covers: the Discord Gateway's signed hand-off (Hypothesis: any JSON,
and real Gateway payloads with a part swapped or removed, never a 5xx), the shapes a fuzzer found
500s with on the landed service, and that the service still routes a message after all that
(issue 15, "bad input"). Each platform's webhook is fuzzed in tests/platforms/test_contract.py.

One app (SQLite, the real routes, routing inline) has all five platforms configured; their APIs
point at a closed port, so a look-up the parsers make fails fast, as a platform outage would."""
from __future__ import annotations

import hashlib
import hmac
import json
import socket
import time
from pathlib import Path
from urllib.parse import urlencode

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from nacl.signing import SigningKey

from nanoclaw.app import create_app
from nanoclaw.platforms.discord import handoff
from nanoclaw.config import Settings
from nanoclaw.db import database
from nanoclaw.migrate import apply_pending
from nanoclaw.models import AcceptedEvent

FIXTURES = Path(__file__).parent.parent / "fixtures"
TG_SECRET, SLACK_SECRET, WA_SECRET = "tg-secret_0123456789", "slack-signing-secret", "wa-app-secret"
DISCORD_KEY = SigningKey.generate()
EXAMPLES = settings(max_examples=300, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    root = tmp_path_factory.mktemp("props")
    dead = closed_port()
    settings_ = Settings.load(environ={
        "NANOCLAW_DATA_DIR": str(root / "data"), "NANOCLAW_GROUPS_DIR": str(root / "groups"), "TZ": "UTC",
        "DATABASE_URL": f"sqlite:///{root / 'data' / 'nanoclaw.db'}",
        "NANOCLAW_MOUNT_ALLOWLIST": str(root / "allow.json"),
        "TELEGRAM_BOT_TOKEN": "7000001:AAH-token", "TELEGRAM_WEBHOOK_SECRET": TG_SECRET, "TELEGRAM_API_BASE": dead,
        "SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": SLACK_SECRET, "SLACK_API_BASE": dead,
        "SLACK_BOT_USER_ID": "UBOT",
        "WHATSAPP_TOKEN": "wa-token", "WHATSAPP_APP_SECRET": WA_SECRET, "WHATSAPP_VERIFY_TOKEN": "v",
        "WHATSAPP_PHONE_NUMBER_ID": "123", "WHATSAPP_API_BASE": dead,
        "DISCORD_BOT_TOKEN": "d-token", "DISCORD_PUBLIC_KEY": DISCORD_KEY.verify_key.encode().hex(),
        "DISCORD_APPLICATION_ID": "999", "DISCORD_API_BASE": dead}, dotenv_path=root / "none.env")
    app = create_app(settings_)
    database.connect(reuse_if_open=True)
    apply_pending(database.obj, log=lambda _l: None)
    runner = app.test_cli_runner()
    for args in (("agent", "create", "Andy"), ("user", "add", "telegram:111222333", "--role", "owner"),
                 ("wire", "telegram", "111222333", "andy")):
        assert runner.invoke(args=["nanoclaw", *args]).exit_code == 0
    yield app
    database.close()


def fixture(platform: str, name: str) -> dict:
    return json.loads((FIXTURES / platform / f"{name}.json").read_text())


# --- strategies -------------------------------------------------------------------------------

scalars = st.none() | st.booleans() | st.integers(-2**63, 2**63) | st.floats(allow_nan=False, allow_infinity=False) \
    | st.text(max_size=20)
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=16)


def paths(value, prefix=()):
    """Every path to a part of a JSON value."""
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from paths(child, prefix + (key,))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from paths(child, prefix + (i,))


def replaced(value, path, new, remove=False):
    if not path:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    head = path[0]
    if len(path) == 1 and remove and isinstance(copy, dict):
        copy.pop(head, None)
        return copy
    copy[head] = replaced(copy[head], path[1:], new, remove)
    return copy


@st.composite
def mutated(draw, payloads: list[dict]):
    """A real payload with one part (any depth) replaced by any JSON value, or removed."""
    payload = draw(st.sampled_from(payloads))
    path = draw(st.sampled_from(list(paths(payload))))
    return replaced(payload, path, draw(json_values), remove=draw(st.booleans()))


def any_payload(platform: str, names: list[str]):
    return st.one_of(json_values, mutated([fixture(platform, n) for n in names]))


# --- signed posts -------------------------------------------------------------------------------

def post_telegram(client, payload):
    return client.post("/webhooks/telegram", data=json.dumps(payload),
                       headers={"X-Telegram-Bot-Api-Secret-Token": TG_SECRET, "Content-Type": "application/json"})


def slack_headers(body: bytes) -> dict:
    ts = str(int(time.time()))
    digest = hmac.new(SLACK_SECRET.encode(), f"v0:{ts}:".encode() + body, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest}"}


def post_slack_event(client, payload):
    body = json.dumps(payload).encode()
    return client.post("/webhooks/slack/events", data=body,
                       headers={**slack_headers(body), "Content-Type": "application/json"})


def post_slack_action(client, payload):
    body = urlencode({"payload": json.dumps(payload)}).encode()
    return client.post("/webhooks/slack/actions", data=body,
                       headers={**slack_headers(body), "Content-Type": "application/x-www-form-urlencoded"})


def post_whatsapp(client, payload):
    body = json.dumps(payload).encode()
    sig = hmac.new(WA_SECRET.encode(), body, hashlib.sha256).hexdigest()
    return client.post("/webhooks/whatsapp", data=body,
                       headers={"X-Hub-Signature-256": f"sha256={sig}", "Content-Type": "application/json"})


def post_discord(client, payload):
    body = json.dumps(payload).encode()
    ts = str(int(time.time()))
    return client.post("/webhooks/discord/interactions", data=body, headers={
        "X-Signature-Ed25519": DISCORD_KEY.sign(ts.encode() + body).signature.hex(),
        "X-Signature-Timestamp": ts, "Content-Type": "application/json"})


def post_gateway(client, app, payload):
    body = json.dumps({"payload": payload, "channel": None, "bot_id": "999", "bot_name": "Andy"}).encode()
    headers = handoff.signed_headers(handoff.key_for(app.config["NANOCLAW"]), body, time.time())
    return client.post("/webhooks/discord/gateway", data=body, headers=headers)


# --- the properties (each platform's webhook: tests/platforms/test_contract.py) --------------------

def with_part(payload: dict, path: tuple, value) -> dict:
    return replaced(payload, path, value)


# what the fuzzing of the landed service found (issue 15): these always run
SLACK_TS_NUMBER = with_part(fixture("slack", "dm_message"), ("event", "ts"), 1700000080.001)
CLICK = fixture("discord", "interaction_component_click")
DISCORD_WRONG_TYPES = [with_part(CLICK, (part,), "x") for part in ("member", "message", "data")] + \
    [with_part(CLICK, ("member", "user"), "x"), with_part(CLICK, ("data", "custom_id"), {"a": 1})]


def test_the_shapes_a_fuzzer_found_are_answered(app):
    client = app.test_client()
    assert post_slack_event(client, SLACK_TS_NUMBER).status_code < 500
    for payload in DISCORD_WRONG_TYPES:
        assert post_discord(client, payload).status_code < 500


@EXAMPLES
@given(payload=st.one_of(json_values, mutated([fixture("discord", n)["d"] for n in
                                               ("gateway_message_dm", "gateway_message_reply",
                                                "gateway_message_attachment", "gateway_message_guild_mention")])))
def test_the_discord_gateway_hand_off_never_answers_5xx(app, payload):
    assert post_gateway(app.test_client(), app, payload).status_code < 500


def test_the_service_keeps_answering_after_all_that(app):
    """Run last in this module: a well-formed message is still accepted and routed."""
    client = app.test_client()
    update = fixture("telegram", "private_message")
    update["update_id"] = 987654321
    assert post_telegram(client, update).status_code == 200
    assert AcceptedEvent.select().where(AcceptedEvent.event_id == "987654321").exists()
    assert client.get("/healthz").status_code == 200
