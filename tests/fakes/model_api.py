"""A scripted fake of the Anthropic Messages API on 127.0.0.1, for the real SDK and its CLI.

It speaks what the bundled CLI sends and expects (see ENVIRONMENT.md): `POST /v1/messages?beta=true`
answered as an SSE stream (message_start, content blocks with text_delta / input_json_delta,
message_delta with stop_reason, message_stop), or as one JSON message when `stream` is false.

A test decides the answers with `script`:
  - None: echo ("echo: <last user text>");
  - a list of Reply (or str): one per model request, in order;
  - a callable(Request) -> Reply | str: decide from what the model was sent
    (e.g. the last user text or the tool results).
Every request is recorded (headers, parsed body, arrival time, time spent answering) so tests can
assert what reached the model, and benchmarks can subtract the fake's own time.

A prompt holding SENTINEL is answered SENTINEL_ANSWER whatever the script: a test that must show
nothing else happened after an action sends a sentinel message, waits for its answer, and then
asserts on what came before it (an absence has no event of its own to wait for).

Like the real API's edge, it compresses an answer (gzip; an SSE stream flushed event by event) when
the request's Accept-Encoding asks for gzip, as the bundled CLI's does. `compress` changes that:
"asked" (the default), None (never), or an encoding to use whatever was asked ("gzip", or "br",
which the fake cannot make: it sends undecodable bytes under that name, as a test of what a reader
does with an encoding it does not know).

    with FakeModel() as model:
        model.script = lambda req: Reply.call("mcp__nanoclaw__send_message", text="hi")
        ... point ANTHROPIC_BASE_URL at model.url ...
        req = model.wait_for(lambda r: r.tool_results())
"""
from __future__ import annotations

import gzip
import json
import os
import socket
import re
import zlib
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

MODEL_NAME = "claude-fake-1"
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}


@dataclass
class ToolCall:
    name: str
    input: dict[str, Any]
    id: str = field(default_factory=lambda: "toolu_" + uuid.uuid4().hex[:24])


@dataclass
class Reply:
    """One model answer: text and/or tool calls, or an HTTP error."""
    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    status: int = 200
    error_message: str = ""
    delay_s: float = 0.0  # think time before the first byte (a slow model)
    chunk_delay_s: float = 0.0  # pause between stream events; text then streams word by word
    model: str = ""  # the model the answer says it came from (default MODEL_NAME)
    input_tokens: int = 10  # the usage it reports (output: 5)
    stream_error: str = ""  # a streamed answer (200) whose first event is this error (overloaded_error)
    cut_after: int = 0  # a streamed answer that breaks off after this many events
    server_tool_use: dict | None = None  # {"web_search_requests": 3}: the provider ran its own tools

    @classmethod
    def say(cls, text: str, **kw) -> "Reply":
        return cls(text=text, **kw)

    @classmethod
    def call(cls, name: str, tool_input: dict | None = None, *, preamble: str = "", **kw_input) -> "Reply":
        """Call one tool: Reply.call("Bash", command="ls") or Reply.call(name, {...}); `preamble`
        is text the model says before the call."""
        return cls(text=preamble, tool_calls=[ToolCall(name, {**(tool_input or {}), **kw_input})])

    @classmethod
    def error(cls, status: int, message: str = "fake model failure") -> "Reply":
        return cls(status=status, error_message=message)

    @property
    def stop_reason(self) -> str:
        return "tool_use" if self.tool_calls else "end_turn"


@dataclass
class ToolResult:
    tool_use_id: str
    text: str
    is_error: bool


# Text the CLI itself adds as a user turn (a nudge after an empty answer, a retry request): not a prompt.
_CLI_NUDGES = ("[Your previous response had no visible output", "The previous response failed to produce",
               "Your tool call was malformed")


SENTINEL = "(sentinel: everything before me is handled)"
SENTINEL_ANSWER = "sentinel answered"


def _is_prompt_text(text: str) -> bool:
    t = text.lstrip()
    return bool(t) and not t.startswith("<system-reminder>") and not t.startswith(_CLI_NUDGES)


def _block_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_block_text(b.get("text", "") if isinstance(b, dict) and b.get("type") == "text" else "")
                         for b in content).strip("\n")
    return ""


@dataclass
class Request:
    """One recorded HTTP request."""
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-cased names
    body: dict[str, Any] | None
    received_at: float  # time.time() when the whole request had arrived
    received_mono: float  # time.monotonic(), comparable across processes on this host
    handled_s: float | None = None  # time the fake spent answering (think time + writing)
    reply: Reply | None = None

    @property
    def is_model_call(self) -> bool:
        return self.method == "POST" and self.path == "/v1/messages"

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list((self.body or {}).get("messages") or [])

    def _user_messages(self) -> list[dict[str, Any]]:
        return [m for m in self.messages if m.get("role") == "user"]

    def blocks(self, kind: str) -> list[dict[str, Any]]:
        """Every `kind` block ("image", "document") of the user messages, in order."""
        return [b for m in self._user_messages() if isinstance(m.get("content"), list)
                for b in m["content"] if isinstance(b, dict) and b.get("type") == kind]

    def user_texts(self) -> list[str]:
        """The text blocks of every user message, in order (tool results excluded)."""
        out = []
        for m in self._user_messages():
            c = m.get("content")
            if isinstance(c, str):
                out.append(c)
            else:
                out += [b.get("text", "") for b in c or [] if isinstance(b, dict) and b.get("type") == "text"]
        return out

    def last_user_text(self) -> str:
        """What the user said last, without the CLI's <system-reminder> blocks."""
        users = self._user_messages()
        if not users:
            return ""
        c = users[-1].get("content")
        blocks = [c] if isinstance(c, str) else [b.get("text", "") for b in c or []
                                                 if isinstance(b, dict) and b.get("type") == "text"]
        return "\n".join(t for t in blocks if not t.lstrip().startswith("<system-reminder>")).strip()

    def tool_results(self, everywhere: bool = False) -> list[ToolResult]:
        """tool_result blocks of the last user message (or of the whole conversation)."""
        users = self._user_messages()
        scope = users if everywhere else users[-1:]
        out = []
        for m in scope:
            c = m.get("content")
            for b in c if isinstance(c, list) else []:
                if isinstance(b, dict) and b.get("type") == "tool_result":
                    out.append(ToolResult(b.get("tool_use_id", ""), _block_text(b.get("content")),
                                          bool(b.get("is_error"))))
        return out

    def _prompt_index(self) -> int:
        """Index (in messages) of the user message that started the current turn: the last one
        with real text (not only tool results or <system-reminder> blocks)."""
        msgs = self.messages
        for i in range(len(msgs) - 1, -1, -1):
            m = msgs[i]
            if m.get("role") != "user":
                continue
            c = m.get("content")
            texts = [c] if isinstance(c, str) else [b.get("text", "") for b in c or []
                                                    if isinstance(b, dict) and b.get("type") == "text"]
            if any(_is_prompt_text(t) for t in texts):
                return i
        return -1

    def current_prompt(self) -> str:
        """The text of the prompt this turn answers (stays the same across its tool calls)."""
        i = self._prompt_index()
        if i < 0:
            return ""
        c = self.messages[i].get("content")
        blocks = [c] if isinstance(c, str) else [b.get("text", "") for b in c or []
                                                 if isinstance(b, dict) and b.get("type") == "text"]
        return "\n".join(t for t in blocks if _is_prompt_text(t)).strip()

    def turn_tool_results(self) -> list[ToolResult]:
        """Tool results the model has received since the current prompt."""
        out = []
        for m in self.messages[self._prompt_index() + 1:]:
            c = m.get("content")
            if m.get("role") != "user" or not isinstance(c, list):
                continue
            out += [ToolResult(b.get("tool_use_id", ""), _block_text(b.get("content")), bool(b.get("is_error")))
                    for b in c if isinstance(b, dict) and b.get("type") == "tool_result"]
        return out

    def tool_names(self) -> list[str]:
        return [t.get("name", "") for t in (self.body or {}).get("tools") or []]

    def system_text(self) -> str:
        return _block_text((self.body or {}).get("system"))

    def all_text(self) -> str:
        """Everything the model was sent, as one string (for 'is X anywhere' assertions)."""
        return json.dumps(self.body or {})


Script = None | list | Callable[[Request], "Reply | str"]


def echo(req: Request) -> Reply:
    return Reply.say(f"echo: {req.last_user_text()}")


class FakeModel:
    """The fake server. start()/stop() or use as a context manager."""

    def __init__(self, script: Script = None):
        self.script: Script = script
        self.valid_keys: set[str] | None = None  # when set, count_tokens refuses any other key (401)
        self.compress: str | None = "asked"  # see the module's doc
        self.requests: list[Request] = []
        self._cond = threading.Condition()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # lifecycle ---------------------------------------------------------------------------------
    def start(self) -> "FakeModel":
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-model", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "FakeModel":
        return self.start()

    def __exit__(self, *_exc) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server, "not started"
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # inspection --------------------------------------------------------------------------------
    def model_calls(self) -> list[Request]:
        with self._cond:
            return [r for r in self.requests if r.is_model_call]

    def wait_for(self, predicate: Callable[[Request], Any] = lambda r: True, timeout: float = 30.0,
                 after: int = 0) -> Request:
        """The first model call (index >= after) that satisfies predicate; waits for it."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                calls = [r for r in self.requests if r.is_model_call]
                for r in calls[after:]:
                    if predicate(r):
                        return r
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no matching model call in {timeout}s; got {len(calls)} call(s): "
                                       + "; ".join(repr(c.last_user_text()[:120]) for c in calls[-5:]))
                self._cond.wait(left)

    # answering ---------------------------------------------------------------------------------
    def _record(self, req: Request) -> None:
        with self._cond:
            self.requests.append(req)
            self._cond.notify_all()

    def _decide(self, req: Request) -> Reply:
        if SENTINEL in req.current_prompt():
            return Reply.say(SENTINEL_ANSWER)
        with self._cond:
            script = self.script
            if isinstance(script, list):
                reply = script.pop(0) if script else Reply.say("[fake model: script exhausted]")
            else:
                reply = None
        if reply is None:
            reply = (script or echo)(req)
        return Reply.say(reply) if isinstance(reply, str) else reply


class _Handler(BaseHTTPRequestHandler):
    fake: FakeModel
    protocol_version = "HTTP/1.1"  # keep-alive, as the real API

    def log_message(self, *_args) -> None:  # quiet
        pass

    def setup(self) -> None:
        super().setup()
        # headers and SSE chunks are small separate writes: without this, Nagle adds ~40 ms a turn
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def handle(self) -> None:
        try:
            super().handle()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (an interrupted turn): nothing to answer

    def _read(self) -> Request:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        parts = urlsplit(self.path)
        return Request(self.command, parts.path, parse_qs(parts.query),
                       {k.lower(): v for k, v in self.headers.items()}, body, time.time(), time.monotonic())

    def _encoding(self) -> str | None:
        """The Content-Encoding of this answer (see FakeModel.compress)."""
        mode = self.fake.compress
        if mode == "asked":
            asked = [c.split(";")[0].strip().lower() for c in (self.headers.get("accept-encoding") or "").split(",")]
            return "gzip" if "gzip" in asked else None
        return mode

    def _json(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        encoding = self._encoding()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        if encoding:
            data = gzip.compress(data) if encoding == "gzip" else os.urandom(len(data))
            self.send_header("content-encoding", encoding)
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", "req_fake_" + uuid.uuid4().hex[:12])
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        req = self._read()
        self.fake._record(req)
        self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": "fake: no such route"}})

    def do_POST(self) -> None:
        start = time.monotonic()
        req = self._read()
        if req.path == "/v1/messages/count_tokens":
            self.fake._record(req)
            given = req.headers.get("x-api-key") or req.headers.get("authorization", "").removeprefix("Bearer ")
            if self.fake.valid_keys is not None and given not in self.fake.valid_keys:
                self._json(401, {"type": "error", "error": {"type": "authentication_error",
                                                            "message": "invalid x-api-key"}})
                return
            self._json(200, {"input_tokens": 100})
            return
        if req.path == "/v1/messages/batches":  # the billed batch API: accepted, as the real one does
            self.fake._record(req)
            self._json(200, {"id": "msgbatch_fake_" + uuid.uuid4().hex[:12], "type": "message_batch",
                             "processing_status": "in_progress"})
            return
        if req.path != "/v1/messages":
            self.fake._record(req)
            self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": "fake: no such route"}})
            return
        self.fake._record(req)
        reply = self.fake._decide(req)
        req.reply = reply
        if reply.delay_s:
            time.sleep(reply.delay_s)
        try:
            if reply.status != 200:
                self._json(reply.status, {"type": "error", "error": {
                    "type": _ERROR_TYPES.get(reply.status, "api_error"), "message": reply.error_message}})
            elif (req.body or {}).get("stream"):
                self._stream(reply)
            else:
                self._json(200, _message_json(reply))
        finally:
            req.handled_s = time.monotonic() - start

    def _stream(self, reply: Reply) -> None:
        encoding = self._encoding()
        packer = zlib.compressobj(wbits=16 + zlib.MAX_WBITS) if encoding == "gzip" else None
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        if encoding:
            self.send_header("content-encoding", encoding)
        self.send_header("request-id", "req_fake_" + uuid.uuid4().hex[:12])
        self.end_headers()
        events = list(_sse_events(reply))
        if reply.stream_error:  # as the API sends an overload it meets after the headers went out
            events = [("error", {"type": "error", "error": {"type": reply.stream_error, "message": "Overloaded"}})]
        for n, (name, data) in enumerate(events):
            if reply.cut_after and n >= reply.cut_after:
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)  # mid-stream: no terminating chunk
                return
            chunk = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
            if packer is not None:  # each event complete on the wire, as a streaming gzip edge sends it
                chunk = packer.compress(chunk) + packer.flush(zlib.Z_SYNC_FLUSH)
            elif encoding:
                chunk = os.urandom(len(chunk))
            self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            if reply.chunk_delay_s:
                self.wfile.flush()
                time.sleep(reply.chunk_delay_s)
        if packer is not None:
            tail = packer.flush()
            self.wfile.write(f"{len(tail):x}\r\n".encode() + tail + b"\r\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def _usage(output_tokens: int = 1, input_tokens: int = 10) -> dict:
    return {"input_tokens": input_tokens, "output_tokens": output_tokens,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}


def _content(reply: Reply) -> list[dict]:
    blocks: list[dict] = [{"type": "text", "text": reply.text}] if reply.text else []
    blocks += [{"type": "tool_use", "id": t.id, "name": t.name, "input": t.input} for t in reply.tool_calls]
    return blocks


def _message_json(reply: Reply) -> dict:
    return {"id": "msg_fake_" + uuid.uuid4().hex[:16], "type": "message", "role": "assistant",
            "model": reply.model or MODEL_NAME, "content": _content(reply), "stop_reason": reply.stop_reason,
            "stop_sequence": None, "usage": {**_usage(5, reply.input_tokens),
                                             **({"server_tool_use": reply.server_tool_use} if reply.server_tool_use else {})}}


def _sse_events(reply: Reply):
    msg = _message_json(reply)
    yield "message_start", {"type": "message_start", "message": {
        **msg, "content": [], "stop_reason": None, "usage": _usage(1, reply.input_tokens)}}
    for i, block in enumerate(msg["content"]):
        if block["type"] == "text":
            yield "content_block_start", {"type": "content_block_start", "index": i,
                                          "content_block": {"type": "text", "text": ""}}
            pieces = re.findall(r"\S+\s*|\s+", block["text"]) if reply.chunk_delay_s else [block["text"]]
            for piece in pieces:
                yield "content_block_delta", {"type": "content_block_delta", "index": i,
                                              "delta": {"type": "text_delta", "text": piece}}
        else:
            yield "content_block_start", {"type": "content_block_start", "index": i, "content_block": {
                "type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}}
            yield "content_block_delta", {"type": "content_block_delta", "index": i, "delta": {
                "type": "input_json_delta", "partial_json": json.dumps(block["input"])}}
        yield "content_block_stop", {"type": "content_block_stop", "index": i}
    yield "message_delta", {"type": "message_delta", "delta": {"stop_reason": reply.stop_reason,
                                                               "stop_sequence": None}, "usage": {
        "output_tokens": 5, **({"server_tool_use": reply.server_tool_use} if reply.server_tool_use else {})}}
    yield "message_stop", {"type": "message_stop"}


@pytest.fixture
def fake_model():
    """A running FakeModel (echo by default); set `.script` in the test."""
    with FakeModel() as model:
        yield model
