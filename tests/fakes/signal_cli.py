"""A fake of signal-cli's JSON-RPC daemon over HTTP (`signal-cli -a +NUMBER daemon --http HOST:PORT
--receive-mode on-connection`), written from signal-cli-jsonrpc(5), signal-cli(1) and its JSON
classes (JsonMessageEnvelope, JsonDataMessage, JsonSyncMessage, JsonSendMessageResult …):

- POST /api/v1/rpc: version, getUserStatus, send (recipient | groupId | noteToSelf, message,
  attachments as data: URIs, quoteTimestamp/quoteAuthor, editTimestamp, voiceNote), sendReaction,
  remoteDelete, sendTyping, getAttachment (base64), listGroups; errors as signal-cli gives them
  (-1 user error, -5 rate limit, -32601 no such method). A send that reached no recipient is not a
  result but JSON-RPC error -1 "Failed to send message" with the per-recipient results in
  `error.data.response` (SendMessageResultUtils, SignalJsonRpcCommandHandler; since 0.12.3), each a
  JsonSendMessageResult: `type` SUCCESS, NETWORK_FAILURE, UNREGISTERED_FAILURE, IDENTITY_FAILURE,
  RATE_LIMIT_FAILURE (with `retryAfterSeconds`) or PROOF_REQUIRED_FAILURE (with `token` and
  `retryAfterSeconds`). `unreachable` and `rate_limited` make a recipient fail those ways;
- GET /api/v1/events: server-sent events (`event:receive`, `data:{"envelope": …, "account": …}`),
  a `:` keep-alive every 15 s, the body chunked as Java's HttpServer sends it;
- GET /api/v1/check: 200.

On-connection receive mode: what people send while no client reads the events waits (with
Signal's servers), and goes out when one connects; one event at a time, in order. Events are written
as signal-cli 0.14.6 writes them (HttpServerHandler.subscribeReceiveHandlers, ReceiveHelper): each
envelope is taken off Signal's servers (stored, acknowledged, handled, deleted from signal-cli's
cache) and written to the stream; nothing checks whether the reader is alive. A write into a reader
that died succeeds at the socket (TCP tells the writer only later) and is lost; the next write fails,
the handler catches the IOException, unsubscribes, and that event is lost too (`lost`). Every RPC
call is recorded, so a test can assert what Signal would have been asked to do.

For the listener that owns signal-cli (`signal-cli jsonRpc` over its stdin and stdout), the fake
`signal-cli` program (tests/fakes/signal_cli_program.py) receives from this object as from Signal's
servers: `/signal-server/peek` and `/signal-server/ack`.
"""
from __future__ import annotations

import base64
import itertools
import json
import threading
import time
import uuid as uuids
from collections import deque

from tests.fakes.platform_server import FakePlatform, _Handler

VERSION = "0.14.6"
KEEPALIVE_S = 15.0


def person_uuid(n: int) -> str:
    return str(uuids.UUID(int=0xA11CE000_0000_4000_8000_000000000000 + n))


class _SignalHandler(_Handler):
    def do_GET(self) -> None:
        if self.path.split("?")[0] != "/api/v1/events":
            return self._handle()
        fake: FakeSignalCli = self.fake
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        fake._connected(+1)
        try:
            last = time.monotonic()
            while not fake.closed.is_set():
                event = fake._next(timeout=0.05)
                if event is not None:
                    try:
                        self._chunk(b"event:receive\ndata:" + json.dumps(event, separators=(",", ":")).encode()
                                    + b"\n\n")
                    except OSError:
                        fake._lost(event)  # the handler caught the IOException and unsubscribed: gone
                        return
                    fake._sent_event(event)  # written: into a live reader, or into a dead one's socket
                    last = time.monotonic()
                elif time.monotonic() - last >= fake.keepalive_s:
                    self._chunk(b":\n")
                    last = time.monotonic()
        except OSError:
            return
        finally:
            fake._connected(-1)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


class FakeSignalCli(FakePlatform):
    name = "signal-cli"

    def __init__(self, account: str = "+4915100000001", version: str = VERSION):
        super().__init__()
        self.account, self.version = account, version
        self.account_uuid = person_uuid(0)
        self.directory: dict[str, str] = {account: self.account_uuid}  # number -> ACI uuid
        self.known: set[str] = {self.account_uuid}                     # everyone on Signal, numbers hidden or not
        self.attachments: dict[str, bytes] = {}
        self.unreachable: set[str] = set()         # uuids whose sends fail with NETWORK_FAILURE (Signal away)
        self.rate_limited: dict[str, int] = {}     # uuid -> retryAfterSeconds of a RATE_LIMIT_FAILURE
        self.waiting: deque[dict] = deque()      # events not yet read by a client
        self.delivered: list[dict] = []          # events written to a client, in order
        self.lost: list[dict] = []               # events whose write failed (signal-cli drops them)
        self.clients = 0
        self.keepalive_s = KEEPALIVE_S
        self.closed = threading.Event()
        self._stamps = itertools.count(int(time.time() * 1000))
        self._events_cond = threading.Condition()

    def start(self):
        handler = type("Handler", (_SignalHandler,), {"fake": self})
        from http.server import ThreadingHTTPServer
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-signal-cli",
                         daemon=True).start()
        return self

    def stop(self) -> None:
        self.closed.set()
        super().stop()

    # --- people and what they send -----------------------------------------------------------

    def person(self, number: str | None, n: int) -> str:
        """A Signal user (their uuid); a number of None is one who hides it."""
        uuid = person_uuid(n)
        self.known.add(uuid)
        if number:
            self.directory[number] = uuid
        return uuid

    def stamp(self) -> int:
        return next(self._stamps)

    def attachment(self, data: bytes, content_type: str, filename: str | None = None, **more) -> dict:
        """A file someone sent, kept by the daemon: its JsonAttachment."""
        ident = base64.urlsafe_b64encode(uuids.uuid4().bytes).decode().rstrip("=")
        self.attachments[ident] = data
        entry = {"contentType": content_type, "filename": filename, "id": ident, "size": len(data), "width": None,
                 "height": None, "caption": None, "uploadTimestamp": int(time.time() * 1000), **more}
        return entry

    def envelope(self, sender: str, *, number: str | None = None, name: str | None = None, **body) -> dict:
        """A `receive` event's payload as the daemon writes it. `timestamp` is the sender's (their client sets
        it, inside the encrypted content); the server's two are Signal's own clock."""
        stamp = body.pop("timestamp", None) or self.stamp()
        server = int(time.time() * 1000)
        envelope = {"source": number or sender, "sourceNumber": number, "sourceUuid": sender, "sourceName": name,
                    "sourceDevice": 1, "timestamp": stamp, "serverReceivedTimestamp": server - 50,
                    "serverDeliveredTimestamp": server, **body}
        return {"envelope": envelope, "account": self.account}

    def message(self, sender: str, text: str | None, *, number: str | None = None, name: str | None = None,
                group: str | None = None, group_name: str | None = None, attachments: list[dict] = (),
                mentions: list[dict] = (), quote: dict | None = None, timestamp: int | None = None) -> dict:
        """What a person's phone sends, queued for the events stream; returns the event."""
        stamp = timestamp or self.stamp()
        data = {"timestamp": stamp, "message": text, "expiresInSeconds": 0, "viewOnce": False}
        if mentions:
            data["mentions"] = list(mentions)
        if attachments:
            data["attachments"] = list(attachments)
        if quote:
            data["quote"] = quote
        if group:
            data["groupInfo"] = {"groupId": group, "groupName": group_name, "revision": 3, "type": "DELIVER"}
        return self.push(self.envelope(sender, number=number, name=name, timestamp=stamp, dataMessage=data))

    def push(self, event: dict) -> dict:
        with self._events_cond:
            self.waiting.append(event)
            self._events_cond.notify_all()
        return event

    def _next(self, timeout: float) -> dict | None:
        with self._events_cond:
            if not self.waiting:
                self._events_cond.wait(timeout)
            return self.waiting.popleft() if self.waiting else None

    def _lost(self, event: dict) -> None:
        with self._events_cond:
            self.lost.append(event)
            self._events_cond.notify_all()

    def _sent_event(self, event: dict) -> None:
        with self._events_cond:
            self.delivered.append(event)
            self._events_cond.notify_all()

    def _connected(self, delta: int) -> None:
        with self._events_cond:
            self.clients += delta
            self._events_cond.notify_all()

    def wait_connected(self, timeout: float = 30.0) -> None:
        with self._events_cond:
            assert self._events_cond.wait_for(lambda: self.clients > 0, timeout), "nobody read the events"

    # --- the JSON-RPC API --------------------------------------------------------------------

    def calls(self, method: str) -> list[dict]:
        return [r.json.get("params") or {} for r in self.accepted(lambda r: r.path == "/api/v1/rpc")
                if isinstance(r.json, dict) and r.json.get("method") == method]

    def answer(self, req):
        if req.path == "/api/v1/check":
            return 200, None, {}
        if req.path == "/signal-server/peek":  # the stdio fake's receive: what Signal's servers hold next
            with self._events_cond:
                if not self.waiting:
                    self._events_cond.wait(1.0)
                return 200, {"event": self.waiting[0] if self.waiting else None}, {}
        if req.path == "/signal-server/ack":  # ...taken off the server once the client stored it
            with self._events_cond:
                if self.waiting and self.waiting[0] == (req.json or {}).get("event"):
                    self.waiting.popleft()
            return 200, {}, {}
        if req.path != "/api/v1/rpc" or req.method != "POST":
            return 404, None, {}
        if not req.headers.get("content-type", "").startswith("application/json"):
            return 415, None, {}
        body = req.json if isinstance(req.json, dict) else {}
        method, params, ident = body.get("method"), body.get("params") or {}, body.get("id")
        try:
            result = self._call(method, params)
        except RpcError as exc:
            return 200, {"jsonrpc": "2.0", "error": {"code": exc.code, "message": exc.message, "data": exc.data},
                         "id": ident}, {}
        return 200, {"jsonrpc": "2.0", "result": result, "id": ident}, {}

    def _call(self, method, params: dict):
        if method == "version":
            return {"version": self.version}
        if method == "getUserStatus":
            numbers = params.get("recipient") or []
            numbers = [numbers] if isinstance(numbers, str) else numbers
            return [{"recipient": n, "number": n, "uuid": self.directory.get(n), "isRegistered": n in self.directory}
                    for n in numbers]
        if method in ("send", "sendReaction", "remoteDelete"):
            return self._send(method, params)
        if method == "sendTyping":
            self._addressed(params)
            return {}
        if method == "getAttachment":
            data = self.attachments.get(str(params.get("id")))
            if data is None:
                raise RpcError(-1, "Attachment file not found")
            return {"data": base64.b64encode(data).decode()}
        if method == "listGroups":
            return []
        raise RpcError(-32601, "Method not implemented")

    def _addressed(self, params: dict) -> list[str]:
        if params.get("noteToSelf"):
            return [self.account_uuid]
        if params.get("groupId"):
            return []
        found = params.get("recipient")
        found = [found] if isinstance(found, str) else found
        if not found:
            raise RpcError(-1, "No recipients given")
        return list(found)

    def _send(self, method: str, params: dict) -> dict:
        recipients = self._addressed(params)
        for uri in params.get("attachments") or ([params["attachment"]] if params.get("attachment") else []):
            if not str(uri).startswith("data:"):
                raise RpcError(-1, "Attachment file not found: " + str(uri)[:60])  # a path on the daemon's side
        results = [self._result(r) for r in recipients]
        if params.get("groupId"):
            results = [{"recipientAddress": {"uuid": person_uuid(99), "number": None}, "groupId": params["groupId"],
                        "type": "SUCCESS"}]
        answer = {"timestamp": self.stamp(), "results": results}
        if results and not any(r["type"] == "SUCCESS" for r in results):
            raise RpcError(-1, "Failed to send message", data={"response": answer})
        return answer

    def _result(self, uuid: str) -> dict:
        """One JsonSendMessageResult."""
        address = {"uuid": uuid, "number": next((n for n, u in self.directory.items() if u == uuid), None)}
        if uuid not in self.known:
            return {"recipientAddress": address, "type": "UNREGISTERED_FAILURE"}
        if uuid in self.unreachable:
            return {"recipientAddress": address, "type": "NETWORK_FAILURE"}
        if uuid in self.rate_limited:
            return {"recipientAddress": address, "type": "RATE_LIMIT_FAILURE",
                    "retryAfterSeconds": self.rate_limited[uuid]}
        return {"recipientAddress": address, "type": "SUCCESS"}


class RpcError(Exception):
    def __init__(self, code: int, message: str, data: dict | None = None):
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


def data_uri(uri: str) -> tuple[str, str | None, bytes]:
    """(mime type, file name, bytes) of a `data:<mime>;filename=<name>;base64,<data>` attachment."""
    head, _, payload = uri.partition(",")
    parts = head[len("data:"):].split(";")
    name = next((p.split("=", 1)[1] for p in parts if p.startswith("filename=")), None)
    return parts[0], name, base64.b64decode(payload)
