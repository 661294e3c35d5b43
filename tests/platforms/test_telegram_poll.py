"""Telegram without a public URL (issue 16): the `telegram-poll` program long-polls getUpdates at a
fake Bot API and hands each update, signed, to the real web app on 127.0.0.1, which routes it like
a webhook. The offset moves only past what the web program accepted."""
from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time

import pytest
import requests
from werkzeug.serving import make_server

from nanoclaw.platforms.telegram import update_mode
from nanoclaw.platforms.telegram.adapter import POLL_PATH
from nanoclaw.platforms.telegram import listener as tp
from nanoclaw import service
from nanoclaw.models import AcceptedEvent
from tests.inbound.test_intake import ANNA, SETUP, session_texts
from tests.tg_flow import message, telegram_app, tg  # noqa: F401  (tg is a fixture)


# --- pure decisions --------------------------------------------------------------------------

def test_what_an_answer_means():
    ok = tp.read_answer(200, {"ok": True, "result": [{"update_id": 5}, {"nope": 1}]}, 0)
    assert ok.updates == [{"update_id": 5}] and ok.why is None
    conflict = tp.read_answer(409, {"ok": False, "error_code": 409, "description": "Conflict"}, 0)
    assert conflict.wait_s == tp.CONFLICT_WAIT_S and tp.FIX_CONFLICT in conflict.why
    slow = tp.read_answer(429, {"ok": False, "parameters": {"retry_after": 7}}, 0)
    assert slow.wait_s == 7
    assert tp.read_answer(None, None, 0).wait_s == 1 and tp.read_answer(502, None, 3).wait_s == 8
    assert tp.read_answer(None, None, 50).wait_s == tp.MAX_BACKOFF_S  # never more than a minute
    assert tp.read_answer(200, "not json", 0).why  # a garbled answer waits, never spins


def test_the_offset_moves_only_past_what_was_handed_over():
    assert tp.next_offset(None, []) is None
    assert tp.next_offset(10, []) == 10
    assert tp.next_offset(10, [10, 11]) == 12


def test_the_mode():
    assert update_mode({}) is None
    assert update_mode({"TELEGRAM_BOT_TOKEN": "1:a"}) == "poll"
    assert update_mode({"TELEGRAM_BOT_TOKEN": "1:a", "TELEGRAM_WEBHOOK_SECRET": "s"}) == "webhook"
    assert update_mode({"TELEGRAM_BOT_TOKEN": "1:a", "TELEGRAM_WEBHOOK_SECRET": "s", "TELEGRAM_MODE": "poll"}) == "poll"


# --- the poller against the fake Bot API and the real web app -------------------------------------

class Web:
    """The web app served on 127.0.0.1 (it can be stopped and started on the same port)."""

    def __init__(self, app):
        self.app = app
        self.server = make_server("127.0.0.1", 0, app, threaded=True)
        self.port = self.server.server_port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def start(self):
        self.server = make_server("127.0.0.1", self.port, self.app, threaded=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def web(make_settings, db_url, tg):  # noqa: F811
    with telegram_app(make_settings, db_url, tg, *SETUP, TELEGRAM_MODE="poll") as app:
        service.start_intake(app)
        served = Web(app)
        try:
            yield served
        finally:
            served.stop()
            service.stop_intake(app)


def poller(web: Web) -> tp.Poller:
    settings = dataclasses.replace(web.app.config["NANOCLAW"], port=web.port)
    return tp.Poller(settings, poll_timeout=1)


def routed(web: Web, texts: list[str], timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if session_texts(web.app) == texts:
            return True
        web.app.extensions["nanoclaw.intake"].wait_idle(0.5)
    return session_texts(web.app) == texts


def test_an_update_is_fetched_handed_over_routed_and_confirmed(web, tg):  # noqa: F811
    tg.push_update(message(4242, ANNA, "hello by polling"))
    p = poller(web)
    assert p.run_once() == 0.0
    assert routed(web, ["hello by polling"])
    assert len(tg.pending) == 1  # handed over; confirmed by the next call's offset
    p.run_once()
    assert tg.pending == []
    polls = [r.form for r in tg.requests if r.path.endswith("/getUpdates")]
    assert polls and all(f.get("timeout") == "1" for f in polls)  # long polls
    assert json.loads(polls[0]["allowed_updates"]) == ["message", "edited_message", "callback_query"]


def test_while_the_web_program_is_down_nothing_is_confirmed_and_nothing_is_lost(web, tg):  # noqa: F811
    p = poller(web)
    web.stop()
    update = message(4242, ANNA, "sent while the web program was down")
    tg.push_update(update)
    assert p.run_once() > 0  # waits, does not spin
    assert p.offset is None and tg.pending == [update]
    web.start()
    assert p.run_once() == 0.0
    assert routed(web, ["sent while the web program was down"])
    again = poller(web)  # the poller restarts before confirming: Telegram gives it the update again
    assert again.run_once() == 0.0
    p.run_once()
    assert routed(web, ["sent while the web program was down"])  # counted once
    assert AcceptedEvent.select().where(AcceptedEvent.event_id == str(update["update_id"])).count() == 1


def test_an_update_the_web_program_keeps_refusing_is_set_aside_and_the_next_is_routed(web, tg):  # noqa: F811
    """Issue 60: an update a running web program refuses (over its 1 MiB limit: 413) holds the updates
    after it for five polls at most; then it is kept aside with the reason, confirmed, and the next routed."""
    from nanoclaw.inbound.set_aside import SetAsideEvent
    p = poller(web)
    big = message(4242, ANNA, "x" * (1024 * 1024 + 10))
    tg.push_update(big)
    after = message(4242, ANNA, "after the big one")
    tg.push_update(after)
    for _ in range(4):
        assert p.run_once() > 0 and p.offset is None  # refused: nothing confirmed yet, waits
    assert p.run_once() == 0.0
    assert routed(web, ["after the big one"]) and p.offset == after["update_id"] + 1  # both confirmed
    kept = list(SetAsideEvent.select())
    assert [(k.channel, k.event_key, k.reason) for k in kept] == [
        ("telegram", str(big["update_id"]), "5 times in a row (last: HTTP 413: {\"error\":\"payload too large\"}\n)")]


def test_a_registered_webhook_is_named_with_the_fix(web, tg, caplog):  # noqa: F811
    tg.webhook = {"url": "https://example.org/webhooks/telegram"}
    p = poller(web)
    with caplog.at_level(logging.WARNING, logger="nanoclaw.platforms.telegram.listener"):
        assert p.run_once() == tp.CONFLICT_WAIT_S
    assert "flask --app app nanoclaw telegram delete-webhook" in caplog.text
    result = web.app.test_cli_runner().invoke(args=["nanoclaw", "telegram", "delete-webhook"])
    assert result.exit_code == 0, result.output
    tg.push_update(message(4242, ANNA, "after the fix"))
    assert p.run_once() == 0.0
    assert routed(web, ["after the fix"])


def test_a_429_waits_as_long_as_telegram_says(web, tg):  # noqa: F811
    tg.rate_limit("getUpdates", retry_after=4)
    assert poller(web).run_once() == 4


def test_a_forged_hand_over_is_refused_and_nothing_stored(web):
    body = json.dumps(message(4242, ANNA, "forged")).encode()
    resp = requests.post(f"http://127.0.0.1:{web.port}{POLL_PATH}", data=body, timeout=5,
                         headers={"Content-Type": "application/json", "X-NanoClaw-Gateway-Signature": "0" * 64,
                                  "X-NanoClaw-Gateway-Timestamp": str(int(time.time()))})
    assert resp.status_code == 401
    assert AcceptedEvent.select().count() == 0


def test_the_program_refuses_to_start_in_webhook_mode(make_settings, sqlite_url, tg):  # noqa: F811
    with telegram_app(make_settings, sqlite_url, tg) as app:  # a webhook secret is set: auto means webhook
        result = app.test_cli_runner().invoke(args=["nanoclaw", "telegram", "poll"])
    assert result.exit_code == 2 and "TELEGRAM_MODE=poll" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_mode_is_not_taken_for_a_secret(make_settings):
    """'webhook' in TELEGRAM_MODE must not stop a sandbox whose variables happen to hold the word."""
    from nanoclaw.runtime.base import assert_no_secrets, known_secrets
    settings = make_settings(TELEGRAM_BOT_TOKEN="7000001:AAH-token-value", TELEGRAM_MODE="webhook")
    assert "webhook" not in known_secrets(settings) and "7000001:AAH-token-value" in known_secrets(settings)
    assert_no_secrets({"NANOCLAW_NOTE": "reply to the webhook question"}, known_secrets(settings))
