"""Discord Gateway → web program: the signed hand-off of one message (the protocol, both sides).

The `discord-gateway` program is a separate process. Routing in it would leave the session
asleep until the web program's next sweep, so instead it posts each converted message to
`POST http://127.0.0.1:<port>/webhooks/discord/gateway`: the web program accepts it (the dedup
insert), routes it on its intake thread and wakes the session at once, like any webhook.

The request is signed as every hand-off is (channels/handoff.py), with a key of its own purpose.

If the web program does not answer, the Gateway retries briefly and then accepts the event
into the central DB itself: the web program's recovery pass routes it (within ~40 s), so
nothing is lost, only slower.
"""
from __future__ import annotations

import json

from ...config import install_secret
from ...channels.base import MalformedPayload
from ...channels.events import InboundEvent
from .messages import message_to_event
from ...channels.handoff import (MAX_SKEW_S, SIGNATURE_HEADER, TIMESTAMP_HEADER, attempt_outcome, attempts, purpose_key, sign,
                      signed_headers, verify)

__all__ = ["PATH", "KEY_PURPOSE", "TIMEOUT_S", "RETRY_DELAYS_S", "MAX_SKEW_S", "SIGNATURE_HEADER", "TIMESTAMP_HEADER",
           "attempt_outcome", "attempts", "sign", "signed_headers", "verify", "handoff_key", "key_for", "encode",
           "decode", "install_secret"]

PATH = "/webhooks/discord/gateway"
KEY_PURPOSE = b"discord-gateway"
TIMEOUT_S = 5.0
RETRY_DELAYS_S = (0.2, 1.0)       # between the attempts: three in all, ~1.2 s when nothing listens


def handoff_key(secret: str) -> bytes:
    """A key of its own for this purpose, derived from the install's secret."""
    return purpose_key(secret, KEY_PURPOSE)


def key_for(settings) -> bytes:
    """The hand-off key of this install (both programs read the same data/secret_key)."""
    return handoff_key(install_secret(settings))


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
