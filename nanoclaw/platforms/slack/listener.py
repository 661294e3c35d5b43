"""The `slack-socket` program: Slack without a public URL (Socket Mode).

slack_sdk's Socket Mode client opens the connection (`apps.connections.open` with the app-level
token, SLACK_APP_TOKEN) and reconnects on its own. Each envelope's payload (Events API events and
interactivity) is handed over, signed, to the web program (POST /webhooks/slack/socket), which
parses, deduplicates and routes it exactly as a webhook. The envelope is acknowledged only after
the web program answered 2xx, i.e. after the event was durably accepted: an envelope left
unacknowledged (the web program down, this program killed) is delivered again by Slack, and the
dedup counts it once. What the web program answers (a select menu's options) goes back in the ack.
"""
from __future__ import annotations

import json
import logging
import threading

import requests
from slack_sdk.socket_mode.builtin import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web import WebClient

from ...channels import handoff
from .adapter import SOCKET_KEY_PURPOSE, SOCKET_PATH
from ...config import install_secret

log = logging.getLogger(__name__)

HANDED_KINDS = ("events_api", "interactive")


def ack_payload(status: int | None, body) -> tuple[bool, dict | None]:
    """(acknowledge?, payload to send with the ack) for the web program's answer (pure)."""
    if handoff.attempt_outcome(status) != "done":
        return False, None
    return True, body if isinstance(body, dict) and body else None


class SocketBridge:
    def __init__(self, settings, *, web_url: str | None = None):
        self.settings = settings
        platform = settings.platform
        self.app_token = platform["SLACK_APP_TOKEN"]
        self.api_base = platform.get("SLACK_API_BASE", "https://slack.com/api").rstrip("/") + "/"
        self.web_url = (web_url or f"http://127.0.0.1:{settings.port}") + SOCKET_PATH
        self.key = handoff.purpose_key(install_secret(settings), SOCKET_KEY_PURPOSE)
        self.http = requests.Session()
        self.client: SocketModeClient | None = None
        self.stop = threading.Event()
        self.attempts = 0            # envelopes handed over (or tried), for tests and the log

    def hand_over(self, kind: str, payload: dict) -> tuple[int | None, object]:
        body = json.dumps({"type": kind, "payload": payload}, separators=(",", ":")).encode()
        resp = handoff.post(self.http, self.web_url, self.key, body, f"a Slack {kind} envelope",
                            "Slack will send it again")
        if resp is None:
            return None, None
        try:
            answer = resp.json() if resp.content else None
        except ValueError:
            answer = None
        return resp.status_code, answer

    def on_request(self, client: SocketModeClient, req: SocketModeRequest) -> None:
        if req.type not in HANDED_KINDS or not isinstance(req.payload, dict):
            client.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))
            return  # slash commands and the like: not used, acknowledged so Slack stops asking
        status, answer = self.hand_over(req.type, req.payload)
        acknowledge, payload = ack_payload(status, answer)
        if acknowledge:
            client.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id, payload=payload))
        self.attempts += 1

    def run(self) -> None:
        self.client = SocketModeClient(app_token=self.app_token, web_client=WebClient(base_url=self.api_base),
                                       logger=logging.getLogger(f"{__name__}.sdk"),
                                       auto_reconnect_enabled=True)
        self.client.socket_mode_request_listeners.append(self.on_request)
        delay = 1.0
        while not self.stop.is_set():
            try:
                self.client.connect()
                break
            except Exception as exc:  # Slack unreachable or the token refused: try again, never spin
                log.warning("cannot open the Slack Socket Mode connection (%s); trying again in %.0f s",
                            str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__, delay)
                self.stop.wait(delay)
                delay = min(60.0, delay * 2)
        log.info("Slack Socket Mode connected; envelopes go to %s", self.web_url)
        self.stop.wait()
        self.client.close()
