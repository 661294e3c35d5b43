"""A recording HTTP server on 127.0.0.1 that platform fakes build on.

A subclass implements `answer(req) -> (status, json body or None, headers)`; a `bytes` body is
sent as it is (a file download; give its content-type in headers). Every request
is recorded with its parsed JSON, form fields and uploaded files, so tests can assert what a
platform would have received. `fail_next(...)` scripts errors (a 429 with the platform's own
body and headers) for the next matching requests, before `answer` is consulted.
"""
from __future__ import annotations

import io
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, unquote, urlsplit

from werkzeug.formparser import parse_form_data


@dataclass
class Recorded:
    method: str
    path: str                       # percent-decoded
    raw_path: str                   # as sent (to check URL encoding)
    query: dict[str, list[str]]
    headers: dict[str, str]         # lower-cased names
    body: bytes
    json: Any = None
    form: dict[str, str] = field(default_factory=dict)
    files: dict[str, tuple[str, bytes, str]] = field(default_factory=dict)  # name -> (filename, data, type)
    status: int | None = None       # what the fake answered


@dataclass
class _Failure:
    status: int
    body: Any
    headers: dict[str, str]
    times: int
    match: Callable[[Recorded], bool]


class FakePlatform:
    name = "platform"

    def __init__(self):
        self.requests: list[Recorded] = []
        self._failures: list[_Failure] = []
        self._cond = threading.Condition()
        self._server: ThreadingHTTPServer | None = None

    # to implement ------------------------------------------------------------------------------
    def answer(self, req: Recorded) -> tuple[int, Any, dict[str, str]]:
        raise NotImplementedError

    # lifecycle ---------------------------------------------------------------------------------
    def start(self):
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name=f"fake-{self.name}",
                         daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *_exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server, "not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    # scripting and inspection -------------------------------------------------------------------
    def fail_next(self, status: int, body: Any, headers: dict[str, str] | None = None, times: int = 1,
                  match: Callable[[Recorded], bool] = lambda r: True) -> None:
        with self._cond:
            self._failures.append(_Failure(status, body, headers or {}, times, match))

    def accepted(self, predicate: Callable[[Recorded], bool] = lambda r: True) -> list[Recorded]:
        """Requests the fake answered with success (what actually reached the 'platform')."""
        with self._cond:
            return [r for r in self.requests if r.status is not None and r.status < 300 and predicate(r)]

    def wait_for(self, predicate: Callable[[Recorded], bool], timeout: float = 5.0) -> Recorded:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for r in self.requests:
                    if r.status is not None and predicate(r):
                        return r
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no matching request at the fake {self.name} in {timeout}s")
                self._cond.wait(left)

    def _respond(self, req: Recorded) -> tuple[int, Any, dict[str, str]]:
        with self._cond:
            for failure in self._failures:
                if failure.times > 0 and failure.match(req):
                    failure.times -= 1
                    return failure.status, failure.body, failure.headers
        return self.answer(req)

    def _record(self, req: Recorded) -> None:
        with self._cond:
            self.requests.append(req)
            self._cond.notify_all()


def _parse(method: str, target: str, headers, raw: bytes) -> Recorded:
    parts = urlsplit(target)
    req = Recorded(method, unquote(parts.path), parts.path, parse_qs(parts.query),
                   {k.lower(): v for k, v in headers.items()}, raw)
    ctype = req.headers.get("content-type", "")
    if ctype.startswith("application/json"):
        try:
            req.json = json.loads(raw)
        except ValueError:
            req.json = None
    elif ctype.startswith(("multipart/form-data", "application/x-www-form-urlencoded")):
        environ = {"REQUEST_METHOD": method, "CONTENT_TYPE": ctype, "CONTENT_LENGTH": str(len(raw)),
                   "wsgi.input": io.BytesIO(raw)}
        _stream, form, files = parse_form_data(environ)
        req.form = {k: form[k] for k in form}
        req.files = {k: (f.filename, f.read(), f.mimetype) for k, f in files.items()}
    return req


class _Handler(BaseHTTPRequestHandler):
    fake: FakePlatform
    protocol_version = "HTTP/1.1"

    def log_message(self, *_args) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        # headers and body are separate writes: without this, Nagle and a delayed ACK add ~40 ms
        # to an answer on a kept-alive connection, which no real platform API does
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _handle(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        req = _parse(self.command, self.path, self.headers, raw)
        status, body, headers = self.fake._respond(req)
        req.status = status
        self.fake._record(req)  # before answering: the caller may look the moment it has the answer
        raw = isinstance(body, (bytes, bytearray))
        data = b"" if body is None else bytes(body) if raw else json.dumps(body).encode()
        self.send_response(status)
        if body is not None and not raw:
            self.send_header("content-type", "application/json")
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle
