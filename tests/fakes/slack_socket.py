"""A fake Slack Socket Mode endpoint (websocket, JSON text frames) on 127.0.0.1.

`apps.connections.open` at the fake Web API (fakes/slack_api.py) answers with this server's
ws:// URL when it is given the app-level token. On connect the server says `hello`; `send(type,
payload)` delivers an envelope ("events_api" or "interactive") and returns its envelope_id; the
app acknowledges with `{"envelope_id": …, "payload"?: …}`, recorded in `acks`. `redeliver()` sends
every envelope not acknowledged yet again, with retry_attempt + 1, as Slack does.
"""
from __future__ import annotations

import asyncio
import itertools
import json
import threading

from aiohttp import WSMsgType, web

APP_TOKEN = "xapp-1-A0APPANDY-1111-fakeAppLevelToken0123456789"


class FakeSocketMode:
    def __init__(self):
        self.acks: dict[str, dict] = {}
        self.sent: dict[str, dict] = {}
        self.connections = 0
        self.connected = threading.Event()
        self._ids = itertools.count(1)
        self._cond = threading.Condition()
        self._loop = asyncio.new_event_loop()
        self._sockets: list[web.WebSocketResponse] = []
        self._thread = threading.Thread(target=self._loop.run_forever, name="fake-slack-socket", daemon=True)

    def __enter__(self) -> "FakeSocketMode":
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(5)
        return self

    def __exit__(self, *_exc) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self._port}/link/?ticket=fake-ticket&app_id=A0APPANDY"

    def send(self, kind: str, payload: dict) -> str:
        envelope_id = f"env-{next(self._ids):04d}"
        envelope = {"envelope_id": envelope_id, "payload": payload, "type": kind,
                    "accepts_response_payload": kind == "interactive", "retry_attempt": 0, "retry_reason": ""}
        with self._cond:
            self.sent[envelope_id] = envelope
        asyncio.run_coroutine_threadsafe(self._send(envelope), self._loop).result(5)
        return envelope_id

    def redeliver(self) -> list[str]:
        with self._cond:
            waiting = [dict(e, retry_attempt=e["retry_attempt"] + 1, retry_reason="timeout")
                       for i, e in self.sent.items() if i not in self.acks]
            for envelope in waiting:
                self.sent[envelope["envelope_id"]] = envelope
        for envelope in waiting:
            asyncio.run_coroutine_threadsafe(self._send(envelope), self._loop).result(5)
        return [e["envelope_id"] for e in waiting]

    def wait_ack(self, envelope_id: str, timeout: float = 10) -> dict | None:
        with self._cond:
            self._cond.wait_for(lambda: envelope_id in self.acks, timeout)
            return self.acks.get(envelope_id)

    async def _serve(self) -> None:
        app = web.Application()
        app.router.add_get("/link/", self._socket)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._port = site._server.sockets[0].getsockname()[1]

    async def _send(self, envelope: dict) -> None:
        for ws in list(self._sockets):
            if ws.closed:
                continue
            try:
                await ws.send_str(json.dumps(envelope))
                return
            except (ConnectionError, RuntimeError):  # the app went away mid-write (it was killed)
                continue
        raise RuntimeError("no Socket Mode connection to deliver to")

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        self._sockets.insert(0, ws)
        self.connections += 1
        await ws.send_str(json.dumps({"type": "hello", "num_connections": len(self._sockets),
                                      "debug_info": {"host": "fake", "approximate_connection_time": 18060},
                                      "connection_info": {"app_id": "A0APPANDY"}}))
        self.connected.set()
        async for msg in ws:
            if msg.type != WSMsgType.TEXT:
                continue
            try:
                frame = json.loads(msg.data)
            except ValueError:
                continue
            if isinstance(frame, dict) and frame.get("envelope_id"):
                with self._cond:
                    self.acks[frame["envelope_id"]] = frame
                    self._cond.notify_all()
        if ws in self._sockets:
            self._sockets.remove(ws)
        return ws
