"""A fake OpenAI-compatible chat-completions server on 127.0.0.1 (what vLLM, llama.cpp's server and
Ollama's /v1 answer), for the model gateways that translate to it (LiteLLM's hosted_vllm provider).

`POST /v1/chat/completions`, streamed (`data: {chunk}` lines, `data: [DONE]`) or not, with tool calls
in OpenAI's shape. A test decides each answer with `script(body) -> Answer`; every request is kept.
"""
from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Answer:
    text: str = ""
    tool: tuple[str, dict] | None = None  # (function name, arguments)


@dataclass
class FakeOpenAI:
    script: object = None
    requests: list = field(default_factory=list)

    def __enter__(self) -> "FakeOpenAI":
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_a):
                pass

            def do_GET(self):
                body = json.dumps({"object": "list", "data": [{"id": "fake-chat", "object": "model"}]}).encode()
                self._send(200, body, "application/json")

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                body = json.loads(raw or b"{}")
                fake.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                if not self.path.endswith("/chat/completions"):
                    return self._send(404, b'{"error": {"message": "no such route"}}', "application/json")
                answer = (fake.script or (lambda b: Answer("ok")))(body)
                if body.get("stream"):
                    return self._stream(body, answer)
                message = {"role": "assistant", "content": answer.text or None}
                if answer.tool:
                    message["tool_calls"] = [{"id": "call_" + uuid.uuid4().hex[:12], "type": "function",
                                              "function": {"name": answer.tool[0],
                                                           "arguments": json.dumps(answer.tool[1])}}]
                out = {"id": "chatcmpl-" + uuid.uuid4().hex[:12], "object": "chat.completion",
                       "created": int(time.time()), "model": body.get("model"),
                       "choices": [{"index": 0, "message": message,
                                    "finish_reason": "tool_calls" if answer.tool else "stop"}],
                       "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}}
                self._send(200, json.dumps(out).encode(), "application/json")

            def _stream(self, body, answer: Answer):
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                base = {"id": "chatcmpl-" + uuid.uuid4().hex[:12], "object": "chat.completion.chunk",
                        "created": int(time.time()), "model": body.get("model")}
                chunks = [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]
                if answer.text:
                    chunks.append({"index": 0, "delta": {"content": answer.text}, "finish_reason": None})
                if answer.tool:
                    chunks.append({"index": 0, "delta": {"tool_calls": [{
                        "index": 0, "id": "call_" + uuid.uuid4().hex[:12], "type": "function",
                        "function": {"name": answer.tool[0], "arguments": json.dumps(answer.tool[1])}}]},
                        "finish_reason": None})
                chunks.append({"index": 0, "delta": {}, "finish_reason": "tool_calls" if answer.tool else "stop"})
                for choice in chunks:
                    self._chunk(b"data: " + json.dumps({**base, "choices": [choice]}).encode() + b"\n\n")
                usage = {**base, "choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 5,
                                                          "total_tokens": 17}}
                self._chunk(b"data: " + json.dumps(usage).encode() + b"\n\n")
                self._chunk(b"data: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")

            def _chunk(self, data: bytes):
                self.wfile.write(b"%x\r\n%b\r\n" % (len(data), data))
                self.wfile.flush()

            def _send(self, status, body, ctype):
                self.send_response(status)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        return self

    def __exit__(self, *_exc):
        self._server.shutdown()
        self._server.server_close()
