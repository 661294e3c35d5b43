"""HTTP/1.1 on one agent group's socket: parse, route, answer, log one line.

The listener that accepted the connection tells us the agent group (the socket
path is the identity); nothing the caller sends can change it. Routes are
checked in order: the group's own credential routes (`local_routes`) first,
then the shared table (the model route). A proxy-style request with an absolute
URL (`GET http://host/...`, what `http_proxy` makes clients send) goes to
`forward`, which serves a host credential route or refuses: plain HTTP never
leaves. CONNECT goes to the egress handler (the group's allowlist).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Callable, Protocol
from urllib.parse import unquote, urlsplit

from .headers import error_body

MAX_BODY = 64 * 1024 * 1024  # the Messages API takes up to 32 MB; leave room, refuse the absurd
IDLE_TIMEOUT_S = 300  # a keep-alive connection with no request for this long is closed
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})


@dataclass
class Request:
    folder: str
    method: str
    path: str  # without the query
    query: str
    headers: list[tuple[str, str]]
    body: bytes
    authority: str | None = None  # host[:port] of an absolute-form URL (a plain-HTTP proxy request)


def has_dot_segment(path: str) -> bool:
    """'/v1/../x' would match the '/v1/' prefix yet mean something else upstream: refuse it."""
    return any(seg in (".", "..") for seg in unquote(path).replace("\\", "/").split("/"))


class Route(Protocol):
    def __call__(self, request: Request, reply: "Reply") -> int: ...


@dataclass(frozen=True)
class RouteTable:
    """Immutable, so a reload swaps the whole table at once."""
    routes: tuple[tuple[str, Route], ...]

    def find(self, path: str) -> Route | None:
        for prefix, route in self.routes:
            if path.startswith(prefix):
                return route
        return None


def refuse_connect(request: Request, reply: "Reply") -> int:
    """The egress seam: no allowlist yet, so every tunnel is refused, readably."""
    msg = (f"nanoclaw proxy: egress to {request.path} is not allowed for agent group "
           f"'{request.folder}' (no egress allowlist is configured)\n")
    reply.simple(403, msg.encode(), "text/plain; charset=utf-8", close=True)
    return 403


class Reply:
    """Writes one response on the handler's connection with correct HTTP/1.1 framing."""

    def __init__(self, handler: "DoorHandler"):
        self._h = handler
        self.chunked = False
        self.started = False

    def simple(self, status: int, body: bytes, content_type: str, *, close: bool = False,
               reason: str | None = None, headers: dict[str, str] | None = None) -> None:
        """reason: a custom reason phrase (the one part of a CONNECT refusal most clients print)."""
        h = self._h
        h.send_response(status, reason.replace("\r", " ").replace("\n", " ") if reason else None)
        h.send_header("Content-Type", content_type)
        h.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            h.send_header(name, value)
        if close:
            h.send_header("Connection", "close")
            h.close_connection = True
        h.end_headers()
        self.started = True
        if h.command != "HEAD":
            h.wfile.write(body)

    def error(self, status: int, message: str, kind: str = "api_error") -> int:
        self.simple(status, error_body(message, kind), "application/json")
        return status

    def start(self, status: int, headers: list[tuple[str, str]], *, has_body: bool) -> None:
        """Send the status line and headers; the body follows through write()/finish().

        With a Content-Length from upstream the bytes pass as they are; without
        one we re-frame as chunked (HTTP/1.1 callers) or end by closing.
        """
        h = self._h
        h.send_response(status)
        has_length = any(n.lower() == "content-length" for n, _ in headers)
        for name, value in headers:
            h.send_header(name, value)
        if has_body and not has_length:
            if h.request_version == "HTTP/1.1":
                self.chunked = True
                h.send_header("Transfer-Encoding", "chunked")
            else:
                h.send_header("Connection", "close")
                h.close_connection = True
        h.end_headers()
        self.started = True

    def write(self, data: bytes) -> None:
        if not data:
            return
        if self.chunked:
            self._h.wfile.write(b"%x\r\n%b\r\n" % (len(data), data))
        else:
            self._h.wfile.write(data)

    def finish(self) -> None:
        if self.chunked:
            self._h.wfile.write(b"0\r\n\r\n")

    def hijack(self, status: int, reason: str):
        """Answer a CONNECT and hand over the raw connection: (socket, buffered reader).

        Bytes the client sent right after its request may already sit in the reader's buffer,
        so read the first piece from the reader, the rest from the socket."""
        h = self._h
        h.send_response(status, reason)
        h.end_headers()
        h.wfile.flush()
        self.started = True
        h.close_connection = True  # after the tunnel, this connection is done
        return h.connection, h.rfile

    def abort(self) -> None:
        """The body broke off midway: drop the connection so the caller sees it incomplete."""
        self._h.close_connection = True


class BadRequest(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class DoorHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "nanoclaw-proxy"
    sys_version = ""
    timeout = IDLE_TIMEOUT_S

    # The listening server provides: folder (str), door (Door).

    def log_message(self, format, *args):  # noqa: A002 - the stdlib's name
        pass  # one line per request is written by Door.log_request; nothing else, never headers

    def _read_body(self) -> bytes:
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            return self._read_chunked()
        raw = self.headers.get("Content-Length")
        if raw is None:
            return b""
        try:
            length = int(raw)
        except ValueError:
            raise BadRequest(400, "bad Content-Length") from None
        if length < 0:
            raise BadRequest(400, "bad Content-Length")
        if length > MAX_BODY:
            raise BadRequest(413, f"request body over {MAX_BODY} bytes")
        return self.rfile.read(length)

    def _read_chunked(self) -> bytes:
        parts, total = [], 0
        while True:
            line = self.rfile.readline(1024)
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise BadRequest(400, "bad chunk size") from None
            if size == 0:
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass  # trailers: ignored
                return b"".join(parts)
            total += size
            if total > MAX_BODY:
                raise BadRequest(413, f"request body over {MAX_BODY} bytes")
            parts.append(self.rfile.read(size))
            self.rfile.readline(1024)

    def _serve(self) -> None:
        door: Door = self.server.door
        folder: str = self.server.folder
        started = time.monotonic()
        reply = Reply(self)
        split = urlsplit(self.path)
        path, query = split.path or "/", split.query
        status = 0
        try:
            try:
                body = self._read_body()
            except BadRequest as exc:
                self.close_connection = True  # the rest of the stream cannot be trusted
                status = reply.error(exc.status, str(exc), "invalid_request_error")
                return
            authority = split.netloc if split.scheme in ("http", "https") else None
            if authority is not None and (split.hostname or "") in LOOPBACK_NAMES:
                authority = None  # the sandbox's own bridge (a client that proxied a call to it): local routes
            request = Request(folder, self.command, path, query, list(self.headers.items()), body, authority)
            if authority is not None:
                route = door.forward(request)
                if route is None:
                    status = reply.error(403, f"nanoclaw proxy: plain HTTP to {authority} is refused; only HTTPS "
                                              "(CONNECT) to allowlisted hosts or a credential route goes out",
                                         "permission_error")
                    return
            else:
                route = door.local_routes(request) or door.routes.find(path)
            if has_dot_segment(path):
                status = reply.error(400, "nanoclaw proxy: '.' and '..' path segments are refused",
                                     "invalid_request_error")
            elif route is None:
                status = reply.error(404, f"nanoclaw proxy: no route for {path}", "not_found_error")
            else:
                status = route(request, reply)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            status = status or 499  # the caller went away
        except Exception as exc:  # a bug in a route: answer if we still can, never hang the caller
            door.log.error("proxy: %s %s %s failed: %s", folder, self.command, path, type(exc).__name__)
            self.close_connection = True
            if not reply.started:
                status = reply.error(500, "nanoclaw proxy: internal error")
        finally:
            door.log_request(folder, self.command, path, status, started)

    def _connect(self) -> None:
        door: Door = self.server.door
        started = time.monotonic()
        request = Request(self.server.folder, "CONNECT", self.path, "", list(self.headers.items()), b"")
        status = 0
        try:
            status = door.egress(request, Reply(self))
        finally:
            door.log_request(self.server.folder, "CONNECT", self.path, status, started)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _serve
    do_CONNECT = _connect


class Door:
    """What every socket shares: the route table, the egress handler, the request log."""

    def __init__(self, routes: RouteTable, *, egress: Callable[[Request, Reply], int] = refuse_connect,
                 local_routes: Callable[[Request], Route | None] = lambda request: None,
                 forward: Callable[[Request], Route | None] = lambda request: None,
                 logger: logging.Logger | None = None):
        self.routes = routes
        self.egress = egress
        self.local_routes = local_routes  # the agent group's credential routes by path
        self.forward = forward  # absolute-form requests: a credential route by host, or None
        self.log = logger or logging.getLogger("nanoclaw.proxy")

    def log_request(self, folder: str, method: str, path: str, status: int, started: float) -> None:
        ms = (time.monotonic() - started) * 1000
        self.log.info("%s %s %s -> %s in %.1f ms", folder, method, path, status, ms,
                      extra={"proxy_folder": folder, "proxy_method": method, "proxy_path": path,
                             "proxy_status": status, "proxy_ms": ms})
