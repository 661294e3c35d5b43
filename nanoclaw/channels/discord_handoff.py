"""Discord Gateway → web program: each message goes through the ordinary webhook pipeline.

The `discord-gateway` program is a separate process. Routing in it would leave the session
asleep until the web program's next sweep, so instead it posts each converted message to
`POST http://127.0.0.1:<port>/webhooks/discord/gateway`: the web program accepts it (the dedup
insert), routes it on its intake thread and wakes the session at once, like any webhook.

The request is signed with HMAC-SHA256 over `timestamp + "." + body`, keyed by a key derived
from the install's secret (the page's SECRET_KEY), so the cookie-signing key itself never
MACs anything else; a timestamp more than 5 minutes off is refused (replay).

If the web program does not answer, the Gateway retries briefly and then accepts the event
into the central DB itself: the web program's recovery pass routes it (within ~40 s), so
nothing is lost, only slower.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import logging
import threading
import time

import requests

from .base import InboundEvent, MalformedPayload, WebhookRefused
from .discord_gateway import message_to_event, payload_from_message

log = logging.getLogger("nanoclaw.channels.discord_handoff")

PATH = "/webhooks/discord/gateway"
SIGNATURE_HEADER = "X-NanoClaw-Gateway-Signature"
TIMESTAMP_HEADER = "X-NanoClaw-Gateway-Timestamp"
MAX_SKEW_S = 300
KEY_PURPOSE = b"discord-gateway"
TIMEOUT_S = 5.0
RETRY_DELAYS_S = (0.2, 1.0)       # between the attempts: three in all, ~1.2 s when nothing listens


# --- signing and verifying (pure) --------------------------------------------------------------

def install_secret(settings) -> str:
    """The page's SECRET_KEY: NANOCLAW_SECRET_KEY or data/secret_key (both programs share data/)."""
    from ..web.auth import local_secret_key
    return settings.secret_key or local_secret_key(settings.data_dir)


def handoff_key(secret: str) -> bytes:
    """A key of its own for this purpose, derived from the install's secret."""
    return hmac.new(secret.encode(), KEY_PURPOSE, hashlib.sha256).digest()


def sign(key: bytes, timestamp: str, body: bytes) -> str:
    return hmac.new(key, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


def signed_headers(key: bytes, body: bytes, now: float) -> dict[str, str]:
    timestamp = str(int(now))
    return {SIGNATURE_HEADER: sign(key, timestamp, body), TIMESTAMP_HEADER: timestamp,
            "Content-Type": "application/json"}


def verify(key: bytes, headers, body: bytes, now: float) -> None:
    """Raise WebhookRefused(401) unless the Gateway program signed this body, recently."""
    signature, timestamp = headers.get(SIGNATURE_HEADER), headers.get(TIMESTAMP_HEADER)
    if not signature or not timestamp:
        raise WebhookRefused(401, f"missing {SIGNATURE_HEADER} or {TIMESTAMP_HEADER}")
    if not (signature.isascii() and timestamp.isascii()) or \
            not hmac.compare_digest(sign(key, timestamp, body).encode(), signature.encode()):
        raise WebhookRefused(401, "bad Gateway hand-off signature")
    try:
        fresh = abs(now - int(timestamp)) <= MAX_SKEW_S
    except ValueError:
        fresh = False
    if not fresh:
        raise WebhookRefused(401, f"stale {TIMESTAMP_HEADER} (possible replay)")


def encode(payload: dict, channel: dict | None, bot_id: str, bot_name: str | None) -> bytes:
    """The request body: what message_to_event needs, nothing more."""
    return json.dumps({"payload": payload, "channel": channel, "bot_id": bot_id, "bot_name": bot_name},
                      separators=(",", ":")).encode()


def decode(body: bytes) -> InboundEvent | None:
    """A verified body → the event (None: a message nobody should see). MalformedPayload if bad."""
    try:
        data = json.loads(body)
    except ValueError:
        raise MalformedPayload("body is not JSON") from None
    if not isinstance(data, dict) or not isinstance(data.get("payload"), dict) or not data.get("bot_id"):
        raise MalformedPayload("expected {payload, channel, bot_id, bot_name}")
    channel, bot_name = data.get("channel"), data.get("bot_name")
    if channel is not None and not isinstance(channel, dict):
        raise MalformedPayload("channel must be an object or null")
    return message_to_event(data["payload"], bot_id=str(data["bot_id"]), channel=channel,
                            bot_name=bot_name if isinstance(bot_name, str) else None)


def attempts(web_was_down: bool, retry_delays: tuple) -> int:
    """Retry only while the web program was answering: once it is down, each message tries once
    and is kept here, so a burst during an outage is not held up by retries one after another."""
    return 1 if web_was_down else len(retry_delays) + 1


def attempt_outcome(status: int | None) -> str:
    """What one POST's answer means: 'done', 'retry' (no answer or 5xx), or 'refused' (4xx)."""
    if status is None or status >= 500:
        return "retry"
    if status >= 400:
        return "refused"
    return "done"


# --- the Gateway program's side (effects) ----------------------------------------------------

class Handoff:
    """Hands the Gateway's messages to the web program; keeps them itself when it cannot."""

    def __init__(self, settings, *, timeout: float = TIMEOUT_S, retry_delays=RETRY_DELAYS_S,
                 clock=time.time, sleep=time.sleep):
        self.settings = settings
        self.url = f"http://127.0.0.1:{settings.port}{PATH}"
        self.timeout, self.retry_delays, self.clock, self.sleep = timeout, tuple(retry_delays), clock, sleep
        self._local = threading.local()  # one HTTP session per worker thread (keep-alive)
        self.web_down = False             # the last message could not be handed over

    def _session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
            session.trust_env = False  # loopback only: never through an HTTP(S)_PROXY from the env
        return session

    def _post(self, body: bytes) -> tuple[int | None, str]:
        headers = signed_headers(handoff_key(install_secret(self.settings)), body, self.clock())
        try:
            resp = self._session().post(self.url, data=body, headers=headers, timeout=self.timeout)
        except requests.RequestException as exc:
            return None, type(exc).__name__
        return resp.status_code, resp.text[:200]

    def forward_message(self, message, bot_id: str, bot_name: str | None = None) -> str:
        """A discord.py Message → the web program (blocking: call it off the event loop)."""
        payload, channel = payload_from_message(message)
        return self.forward(payload, channel, bot_id, bot_name)

    def forward(self, payload: dict, channel: dict | None, bot_id: str, bot_name: str | None = None) -> str:
        """Hand one message over. Returns 'delivered', 'kept' (accepted here for the recovery
        pass), 'duplicate' (kept before), or 'ignored' (nothing anyone should see)."""
        event = message_to_event(payload, bot_id=bot_id, channel=channel, bot_name=bot_name)
        if event is None or event.from_self:
            return "ignored"
        body = encode(payload, channel, bot_id, bot_name)
        tries = attempts(self.web_down, self.retry_delays)
        for attempt in range(tries):
            status, detail = self._post(body)
            outcome = attempt_outcome(status)
            self.web_down = outcome == "retry"
            if outcome == "done":
                return "delivered"
            if outcome == "refused":
                log.error("the web program refused Discord message %s at %s (%s: %s); is NANOCLAW_SECRET_KEY "
                          "or data/secret_key the same for both programs? Keeping it for the recovery pass",
                          event.event_id, self.url, status, detail)
                break
            if attempt < tries - 1:
                self.sleep(self.retry_delays[attempt])
        else:
            log.warning("the web program did not take Discord message %s at %s (%s); accepted it into the "
                        "database here: the web program's recovery pass routes it within a minute",
                        event.event_id, self.url, status or detail)
        return "kept" if keep(event) else "duplicate"


def keep(event: InboundEvent) -> bool:
    """Accept the event into inbound_events from this process. False: it was accepted before."""
    from .. import intake
    from ..db import database

    opened = database.is_closed()  # each of the Gateway's worker threads holds its own connection
    if opened:
        database.connect()
    try:
        return intake.accept(event) is not None
    finally:
        if opened:
            database.close()
