"""Usage read from a model response as it passes through the proxy, never holding it back.

A streamed response (SSE) reports it in `message_start` (the model, input tokens, cache writes and
reads, the first output tokens) and in `message_delta` (the output tokens so far, and in newer
answers the input side again): the last value of each counts. A JSON response carries it in its
`usage`. An error mid-stream leaves what was reported before it. The meter is fed each piece the
proxy relays, as the caller gets it: a compressed answer (gzip, deflate) is decoded for the meter
alone, on the side. An encoding it cannot read leaves the usage unreported, and the proxy then
charges the estimate (estimate.py), never $0. The meter is read once the response ends.
"""
from __future__ import annotations

import json
import zlib

from .prices import Tokens

MAX_JSON_BODY = 8 << 20   # a plain JSON answer is parsed at the end; larger ones are not counted
MAX_EVENT = 1 << 20       # an SSE event longer than this is not one the Messages API sends: skipped
DECODE_PIECE = 256 << 10  # decoded at most this much at a time (a small compressed piece can be large)
_FIELDS = {"input_tokens": "input", "output_tokens": "output", "cache_creation_input_tokens": "cache_write",
           "cache_read_input_tokens": "cache_read"}
_USES = {"web_search_requests": "web_search", "web_fetch_requests": "web_fetch"}  # usage.server_tool_use


def decoder(content_encoding: str):
    """A streaming decoder for the answer's Content-Encoding, None for identity, or False when the
    meter cannot read it."""
    codings = [c.strip().lower() for c in (content_encoding or "").split(",") if c.strip()]
    codings = [c for c in codings if c != "identity"]
    if not codings:
        return None
    if len(codings) == 1 and codings[0] in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if len(codings) == 1 and codings[0] == "deflate":
        return _Deflate()
    return False


class _Deflate:
    """HTTP's `deflate` is zlib-wrapped, but some servers send it raw: the first bytes tell."""

    def __init__(self):
        self._d = None
        self._head = b""  # the first bytes, until there are two to tell by
        self.unconsumed_tail = b""

    def decompress(self, data: bytes, max_length: int = 0) -> bytes:
        if self._d is None:
            data, self._head = self._head + data, b""
            if len(data) < 2:
                self._head = data
                return b""
            wrapped = (data[0] & 0x0F) == 8 and ((data[0] << 8) | data[1]) % 31 == 0
            self._d = zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)
        out = self._d.decompress(data, max_length)
        self.unconsumed_tail = self._d.unconsumed_tail
        return out


class Meter:
    def __init__(self, content_type: str = "", content_encoding: str = ""):
        self.sse = "text/event-stream" in (content_type or "")
        self._decoder = decoder(content_encoding)
        self.unreadable = self._decoder is False  # an encoding the meter does not know: nothing counted
        self._buffer = b""
        self._body = bytearray()
        self.model: str | None = None
        self._counts: dict[str, int] = {}
        self.error: str | None = None
        self.first: str | None = None  # the type of the stream's first event, once it is known

    def feed(self, piece: bytes) -> None:
        """One piece of the body as it went to the caller (still encoded)."""
        if self.unreadable:
            return
        if self._decoder is None:
            self._take_piece(piece)
            return
        try:
            data = piece
            while data:
                out = self._decoder.decompress(data, DECODE_PIECE)
                self._take_piece(out)
                data = self._decoder.unconsumed_tail
        except zlib.error:
            self.unreadable = True  # the rest cannot be read either: what was reported so far stays

    def _take_piece(self, piece: bytes) -> None:
        if not piece:
            return
        if not self.sse:
            if len(self._body) + len(piece) <= MAX_JSON_BODY:
                self._body += piece
            return
        self._buffer += piece
        while True:
            cut = min((i for i in (self._buffer.find(b"\n\n"), self._buffer.find(b"\r\n\r\n")) if i >= 0),
                      default=-1)
            if cut < 0:
                if len(self._buffer) > MAX_EVENT:
                    self._buffer = b""  # no event is this long: drop it rather than hold the bytes
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
        if self.first is None:
            self.first = str(kind)
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
            tools = usage.get("server_tool_use")
            for field, part in _USES.items():
                value = tools.get(field) if isinstance(tools, dict) else None
                if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                    self._counts[part] = value
    @property
    def reported(self) -> bool:
        """Whether the answer said what it used (read after result())."""
        return bool(self._counts)

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
        return self.model, Tokens(**{part: self._counts.get(part, 0) for part in (*_FIELDS.values(), *_USES.values())})
