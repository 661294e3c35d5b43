"""Slack without a public URL (issue 16): the `slack-socket` program connects with slack_sdk's
Socket Mode client to a fake Socket Mode server (opened through the fake Web API's
apps.connections.open) and hands each envelope, signed, to the real web app on 127.0.0.1, which
routes it like a webhook. An envelope is acknowledged only after the web program accepted it."""
from __future__ import annotations

import dataclasses
import json
import threading
import time
from pathlib import Path

import pytest
import requests

from fakes.slack_api import BOT_USER_ID, TOKEN, FakeSlack
from fakes.slack_socket import APP_TOKEN, FakeSocketMode
from nanoclaw.app import create_app
from nanoclaw.platforms.slack.adapter import SOCKET_PATH
from nanoclaw.db import database
from nanoclaw.platforms.slack import listener as ss
from nanoclaw import service
from nanoclaw.migrate import apply_pending
from nanoclaw.models import AcceptedEvent
from tests.inbound.test_intake import session_texts
from tests.platforms.test_telegram_poll import Web

FIXTURES = Path(__file__).parent.parent / "fixtures" / "slack"


def test_what_the_web_answer_means_for_the_ack():
    assert ss.ack_payload(200, None) == (True, None)
    assert ss.ack_payload(200, {"options": []}) == (True, {"options": []})
    assert ss.ack_payload(None, None) == (False, None)
    assert ss.ack_payload(503, {"error": "x"}) == (False, None)
    assert ss.ack_payload(401, None) == (False, None)


def dm(text: str, ts: str) -> dict:
    payload = json.loads((FIXTURES / "dm_message.json").read_text())
    payload["event"].update(text=text, ts=ts, event_ts=ts)
    payload["event_id"] = f"Ev{ts.replace('.', '')}"
    return payload


@pytest.fixture
def world(make_settings, db_url):
    with FakeSlack() as slack, FakeSocketMode() as socket:
        slack.socket_url = socket.url
        app = create_app(make_settings(DATABASE_URL=db_url, SLACK_BOT_TOKEN=TOKEN, SLACK_API_BASE=slack.api,
                                       SLACK_APP_TOKEN=APP_TOKEN, SLACK_BOT_USER_ID=BOT_USER_ID))
        database.connect(reuse_if_open=True)
        apply_pending(database.obj, log=lambda _l: None)
        app.extensions["nanoclaw.wake"].connect(lambda folder, session_id: None)
        runner = app.test_cli_runner()
        for args in (("agent", "create", "Andy"), ("user", "add", "slack:U0ALICE01", "--role", "owner"),
                     ("wire", "slack", "D0DMALICE", "andy")):
            assert runner.invoke(args=["nanoclaw", *args]).exit_code == 0
        service.start_intake(app)
        web = Web(app)
        bridge = ss.SocketBridge(dataclasses.replace(app.config["NANOCLAW"], port=web.port))
        threading.Thread(target=bridge.run, daemon=True).start()
        assert socket.connected.wait(10), "the bridge did not connect"
        try:
            yield web, socket, bridge
        finally:
            bridge.stop.set()
            web.stop()
            service.stop_intake(app)
            database.close()


def routed(web, texts, timeout=10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and session_texts(web.app) != texts:
        web.app.extensions["nanoclaw.intake"].wait_idle(0.5)
    return session_texts(web.app) == texts


def attempted(bridge, n: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while bridge.attempts < n and time.monotonic() < deadline:
        time.sleep(0.02)
    assert bridge.attempts >= n, "the bridge did not try the envelope"


def test_an_event_is_handed_over_routed_and_then_acknowledged(world):
    web, socket, bridge = world
    envelope = socket.send("events_api", dm("hello over Socket Mode", "1700000500.000100"))
    assert socket.wait_ack(envelope) == {"envelope_id": envelope}
    assert routed(web, ["hello over Socket Mode"])


def test_while_the_web_program_is_down_nothing_is_acknowledged_and_slack_sends_it_again(world):
    web, socket, bridge = world
    web.stop()
    envelope = socket.send("events_api", dm("sent while down", "1700000501.000100"))
    attempted(bridge, 1)
    assert envelope not in socket.acks and session_texts(web.app) == []
    web.start()
    assert socket.redeliver() == [envelope]  # Slack's retry of the unacknowledged envelope
    assert socket.wait_ack(envelope) is not None
    assert routed(web, ["sent while down"])
    again = socket.send("events_api", dm("sent while down", "1700000501.000100"))  # a later duplicate
    assert socket.wait_ack(again) is not None
    assert routed(web, ["sent while down"])
    assert AcceptedEvent.select().where(AcceptedEvent.channel == "slack").count() == 1


def test_a_select_menu_gets_its_options_in_the_ack(world):
    web, socket, bridge = world
    payload = json.loads((Path(__file__).parent.parent / "fixtures" / "slack" / "block_suggestion.json").read_text())
    envelope = socket.send("interactive", payload)
    assert socket.wait_ack(envelope) == {"envelope_id": envelope, "payload": {"options": []}}


def test_a_forged_hand_over_is_refused_and_nothing_stored(world):
    web, _socket, _bridge = world
    body = json.dumps({"type": "events_api", "payload": dm("forged", "1700000502.000100")}).encode()
    resp = requests.post(f"http://127.0.0.1:{web.port}{SOCKET_PATH}", data=body, timeout=5,
                         headers={"Content-Type": "application/json", "X-NanoClaw-Gateway-Signature": "0" * 64,
                                  "X-NanoClaw-Gateway-Timestamp": str(int(time.time()))})
    assert resp.status_code == 401
    assert AcceptedEvent.select().count() == 0


def test_the_program_says_what_token_it_needs(make_settings, sqlite_url):
    app = create_app(make_settings(DATABASE_URL=sqlite_url, SLACK_APP_TOKEN="xoxb-not-an-app-token"))
    result = app.test_cli_runner().invoke(args=["nanoclaw", "slack", "socket"])
    assert result.exit_code == 2 and "xapp-" in result.output and "Traceback" not in result.output
