"""Is this delivery signed by the hook's secret? Pure functions over the raw body and its headers;
every comparison constant-time. Each answers None when the delivery is good, else the reason (for the
log; the sender only hears 401).

- GitHub: `X-Hub-Signature-256: sha256=<hex of HMAC-SHA256(secret, body)>`.
- Standard Webhooks: `webhook-id`, `webhook-timestamp` (Unix seconds, within 5 minutes of now), and
  `webhook-signature: v1,<base64 of HMAC-SHA256(key, "id.timestamp.body")>` (several, space-separated,
  when a key is being rotated); the key is the secret's base64 after `whsec_`.
- Bearer: `Authorization: Bearer <secret>`.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

STANDARD_WINDOW_S = 300
SCHEMES = ("github", "standard", "bearer")


def github(secret: str, body: bytes, header: str | None) -> str | None:
    if not header or not header.startswith("sha256="):
        return "no X-Hub-Signature-256 header"
    want = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return None if hmac.compare_digest(want.encode(), header[7:].strip().lower().encode()) else "the signature differs"


def standard_key(secret: str) -> bytes:
    raw = secret.removeprefix("whsec_")
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        return secret.encode()  # a secret that is not base64 is used as it is


def standard(secret: str, body: bytes, msg_id: str | None, timestamp: str | None, header: str | None,
             now: float) -> str | None:
    if not (msg_id and timestamp and header):
        return "a webhook-id, webhook-timestamp or webhook-signature header is missing"
    try:
        sent = int(timestamp)
    except ValueError:
        return "webhook-timestamp is not a number"
    if abs(now - sent) > STANDARD_WINDOW_S:
        return f"webhook-timestamp is {int(now - sent)} s away from now (at most {STANDARD_WINDOW_S})"
    mac = hmac.new(standard_key(secret), f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    want = base64.b64encode(mac)
    for part in header.split():
        version, _, value = part.partition(",")
        if version == "v1" and hmac.compare_digest(want, value.encode()):
            return None
    return "no v1 signature matches"


def bearer(secret: str, header: str | None) -> str | None:
    if not header or not header.lower().startswith("bearer "):
        return "no Authorization: Bearer header"
    return None if hmac.compare_digest(secret.encode(), header[7:].strip().encode()) else "the token differs"


def check(scheme: str, secret: str, body: bytes, headers, now: float) -> str | None:
    """`headers`: a case-insensitive mapping (Flask's request.headers)."""
    if scheme == "github":
        return github(secret, body, headers.get("X-Hub-Signature-256"))
    if scheme == "standard":
        return standard(secret, body, headers.get("webhook-id"), headers.get("webhook-timestamp"),
                        headers.get("webhook-signature"), now)
    return bearer(secret, headers.get("Authorization"))


def delivery_id(scheme: str, headers) -> str | None:
    """What a redelivery repeats: GitHub's X-GitHub-Delivery, Standard Webhooks' webhook-id."""
    if scheme == "github":
        return headers.get("X-GitHub-Delivery")
    if scheme == "standard":
        return headers.get("webhook-id")
    return headers.get("Idempotency-Key") or headers.get("X-Request-Id")
