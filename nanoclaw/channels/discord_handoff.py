"""Discord Gateway → web program: the signed hand-off of one message (the protocol, both sides).

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

from ..config import install_secret
from .base import InboundEvent, MalformedPayload, WebhookRefused
from .discord_messages import message_to_event

PATH = "/webhooks/discord/gateway"
SIGNATURE_HEADER = "X-NanoClaw-Gateway-Signature"
TIMESTAMP_HEADER = "X-NanoClaw-Gateway-Timestamp"
MAX_SKEW_S = 300
KEY_PURPOSE = b"discord-gateway"
TIMEOUT_S = 5.0
RETRY_DELAYS_S = (0.2, 1.0)       # between the attempts: three in all, ~1.2 s when nothing listens


# --- signing and verifying (pure) --------------------------------------------------------------

def handoff_key(secret: str) -> bytes:
    """A key of its own for this purpose, derived from the install's secret."""
    return hmac.new(secret.encode(), KEY_PURPOSE, hashlib.sha256).digest()


def key_for(settings) -> bytes:
    """The hand-off key of this install (both programs read the same data/secret_key)."""
    return handoff_key(install_secret(settings))


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
        raise MalformedPayload("body is not JSON", kind="not-json") from None
    if not isinstance(data, dict) or not isinstance(data.get("payload"), dict) or not data.get("bot_id"):
        raise MalformedPayload("expected {payload, channel, bot_id, bot_name}", kind="gateway")
    channel, bot_name = data.get("channel"), data.get("bot_name")
    if channel is not None and not isinstance(channel, dict):
        raise MalformedPayload("channel must be an object or null", kind="gateway")
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
