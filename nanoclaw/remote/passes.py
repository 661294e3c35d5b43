"""A sandbox's pass to the door: `<claims>.<mac>`, claims = base64url JSON {i, f, s, n, e}.

i: install, f: agent folder, s: session id, n: the sandbox's start nonce, e: expiry (unix seconds).
The MAC is HMAC-SHA256 under a key derived from the install's secret, so nobody without the host's
secret can make one, and a pass reaches only the session and agent it names. The nonce ties it to
one start of that session's sandbox: the host keeps the current nonce beside the session (record.py
of this package's caller), so a pass of a sandbox that was stopped or replaced is dead at once, and
the expiry bounds a copied pass even while its sandbox lives (the door hands out renewals).
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass

PASS_TTL_S = 3600
RENEW_BELOW_S = PASS_TTL_S / 2
MAX_PASS_LEN = 1024
_CONTEXT = b"nanoclaw door pass v1"


class BadPass(ValueError):
    """Why a pass is refused (said in the host's log, never to the caller)."""


@dataclass(frozen=True)
class Claims:
    install: str
    folder: str
    session: str
    nonce: str
    expires: int


def door_key(install_secret: str) -> bytes:
    """The MAC key: derived, so a pass never reveals anything about the install's secret itself."""
    return hmac.new(install_secret.encode(), _CONTEXT, hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def new_nonce() -> str:
    return secrets.token_hex(12)


def mint(key: bytes, claims: Claims) -> str:
    body = _b64(json.dumps({"i": claims.install, "f": claims.folder, "s": claims.session, "n": claims.nonce,
                            "e": int(claims.expires)}, separators=(",", ":"), sort_keys=True).encode())
    return f"{body}.{_b64(hmac.new(key, body.encode(), hashlib.sha256).digest())}"


def verify(key: bytes, token: str, *, install: str, now: float | None = None) -> Claims:
    """The claims of a genuine, unexpired pass of this install; BadPass otherwise."""
    if not isinstance(token, str) or not token or len(token) > MAX_PASS_LEN or token.count(".") != 1:
        raise BadPass("malformed")
    body, mac = token.split(".")
    try:
        given = _unb64(mac)
    except ValueError:
        raise BadPass("malformed") from None
    if not hmac.compare_digest(given, hmac.new(key, body.encode(), hashlib.sha256).digest()):
        raise BadPass("signature does not match")
    try:
        raw = json.loads(_unb64(body))
        claims = Claims(str(raw["i"]), str(raw["f"]), str(raw["s"]), str(raw["n"]), int(raw["e"]))
    except (ValueError, KeyError, TypeError):
        raise BadPass("malformed claims") from None
    if claims.install != install:
        raise BadPass("another install's pass")
    if claims.expires < (time.time() if now is None else now):
        raise BadPass("expired")
    return claims


def renewed(key: bytes, claims: Claims, now: float | None = None) -> str | None:
    """A fresh pass when this one has less than half its life left, else None."""
    now = time.time() if now is None else now
    if claims.expires - now > RENEW_BELOW_S:
        return None
    return mint(key, Claims(claims.install, claims.folder, claims.session, claims.nonce, int(now + PASS_TTL_S)))
