"""Usage read from a model response as it passes through the proxy, never holding it back.

A streamed response (SSE) reports it in `message_start` (the model, input tokens, cache writes and
reads, the first output tokens) and in `message_delta` (the output tokens so far, and in newer
answers the input side again): the last value of each counts. A JSON response carries it in its
`usage`. An error mid-stream leaves what was reported before it; what the model never reported
is not guessed. The meter is fed each piece the proxy relays and is read once the response ends.
"""
from __future__ import annotations

import json

from .prices import Tokens

MAX_JSON_BODY = 8 << 20   # a plain JSON answer is parsed at the end; larger ones are not counted
_FIELDS = {"input_tokens": "input", "output_tokens": "output", "cache_creation_input_tokens": "cache_write",
           "cache_read_input_tokens": "cache_read"}


class Meter:
    def __init__(self, content_type: str = ""):
        self.sse = "text/event-stream" in (content_type or "")
        self._buffer = b""
        self._body = bytearray()
        self.model: str | None = None
        self._counts: dict[str, int] = {}
        self.error: str | None = None

    def feed(self, piece: bytes) -> None:
        if not self.sse:
            if len(self._body) + len(piece) <= MAX_JSON_BODY:
                self._body += piece
            return
        self._buffer += piece
        while True:
            cut = min((i for i in (self._buffer.find(b"\n\n"), self._buffer.find(b"\r\n\r\n")) if i >= 0),
                      default=-1)
            if cut < 0:
                return
            event, self._buffer = self._buffer[:cut], self._buffer[cut:].lstrip(b"\r\n")
            self._event(event)

    def _event(self, raw: bytes) -> None:
        data = b"\n".join(line[5:].lstrip() for line in raw.splitlines() if line.startswith(b"data:"))
        try:
            event = json.loads(data) if data else None
        except ValueError:
            return
        if not isinstance(event, dict):
            return
        kind = event.get("type")
        if kind == "message_start" and isinstance(event.get("message"), dict):
            self.model = str(event["message"].get("model") or "") or self.model
            self._take(event["message"].get("usage"))
        elif kind == "message_delta":
            self._take(event.get("usage"))
        elif kind == "error":
            self.error = str((event.get("error") or {}).get("type") or "error")

    def _take(self, usage) -> None:
        if isinstance(usage, dict):
            for field, part in _FIELDS.items():
                value = usage.get(field)
                if isinstance(value, int) and value >= 0:
                    self._counts[part] = value  # the latest report of each counts

    def result(self) -> tuple[str | None, Tokens]:
        """(model, tokens) of the whole response; call once it has ended."""
        if not self.sse and self._body:
            try:
                body = json.loads(bytes(self._body))
            except ValueError:
                body = None
            if isinstance(body, dict):
                self.model = str(body.get("model") or "") or None
                self._take(body.get("usage"))
        return self.model, Tokens(**{part: self._counts.get(part, 0) for part in _FIELDS.values()})
