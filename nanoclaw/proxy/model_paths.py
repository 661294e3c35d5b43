"""Which model API requests the door forwards, decided on the path as the provider would read it.

A sandbox is hostile, so the path it sends is read once, percent-decoded, and anything that another
reader could take for a different path is refused: doubled slashes, dot segments, backslashes,
control characters, an escape left after decoding (`%256d` → `%6d`). What is left must be one of
the endpoints the bundled CLI needs; everything else, the billed batch API included, stays here.
The provider is sent this canonical path, never the caller's spelling, so what the door counted is
what the provider serves. Pure: no I/O, so Hypothesis can try any path.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote

# (method, canonical path) → what it is; only `messages` is billed per token
MESSAGES = "messages"
COUNT_TOKENS = "count_tokens"
MODELS = "models"
_EXACT = {("POST", "/v1/messages"): MESSAGES, ("POST", "/v1/messages/count_tokens"): COUNT_TOKENS,
          ("GET", "/v1/models"): MODELS}
_MODEL_ID = re.compile(r"/v1/models/[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")
ALLOWED = "POST /v1/messages, POST /v1/messages/count_tokens, GET /v1/models[/<id>]"


@dataclass(frozen=True)
class Endpoint:
    kind: str          # MESSAGES | COUNT_TOKENS | MODELS
    path: str          # what the provider is sent

    @property
    def billed(self) -> bool:
        return self.kind == MESSAGES


@dataclass(frozen=True)
class Refused:
    status: int
    message: str


def canonical(path: str) -> str | None:
    """The path percent-decoded once, or None when it could be read as another path."""
    if not path.startswith("/") or "\\" in path:
        return None
    try:
        decoded = unquote(path, errors="strict")
    except UnicodeDecodeError:
        return None
    if "%" in decoded or "\\" in decoded or "//" in decoded or any(ord(c) < 0x20 or ord(c) == 0x7f for c in decoded):
        return None
    if any(seg in (".", "..") for seg in decoded.split("/")):
        return None
    return decoded


def endpoint(method: str, path: str) -> Endpoint | Refused:
    """The model endpoint a request names, or why the door does not forward it."""
    plain = canonical(path)
    if plain is None:
        return Refused(400, "nanoclaw proxy: the path is not in plain form (escapes, '//', '.' or '..' segments are "
                            "refused)")
    trimmed = plain.rstrip("/") or "/"
    kind = _EXACT.get((method, trimmed))
    if kind is None and method == "GET" and _MODEL_ID.fullmatch(trimmed):
        kind = MODELS
    if kind is not None:
        return Endpoint(kind, trimmed)
    if any(p == trimmed for _, p in _EXACT) or _MODEL_ID.fullmatch(trimmed):
        return Refused(405, f"nanoclaw proxy: {method} is not allowed on {trimmed}; allowed: {ALLOWED}")
    return Refused(404, f"nanoclaw proxy: {trimmed} is not a model endpoint this door forwards; allowed: {ALLOWED}")
