"""A fake Discord Gateway (websocket, JSON text frames) on 127.0.0.1 for discord.py.

It speaks the opening of the real protocol: HELLO, then IDENTIFY (recorded, so a test can
check the intents) answered with READY, heartbeats acknowledged. `dispatch(t, d)` then sends
any event, e.g. a MESSAGE_CREATE payload from the fixtures.
"""
from __future__ import annotations

import asyncio
import json
import threading

from aiohttp import WSMsgType, web

from .discord_api import BOT_USER


class FakeGateway:
    def __init__(self):
        self.identify: dict | None = None
        self.identified = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._ws: web.WebSocketResponse | None = None
        self._seq = 0
        self._thread = threading.Thread(target=self._loop.run_forever, name="fake-discord-gateway", daemon=True)

    def __enter__(self) -> "FakeGateway":
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(5)
        return self

    def __exit__(self, *_exc) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self._port}/"

    def dispatch(self, event: str, data: dict) -> None:
        asyncio.run_coroutine_threadsafe(self._send_dispatch(event, data), self._loop).result(5)

    async def _serve(self) -> None:
        app = web.Application()
        app.router.add_get("/", self._socket)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._port = site._server.sockets[0].getsockname()[1]

    async def _send_dispatch(self, event: str, data: dict) -> None:
        self._seq += 1
        await self._ws.send_str(json.dumps({"op": 0, "t": event, "s": self._seq, "d": data}))

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self._ws = ws
        await ws.send_str(json.dumps({"op": 10, "d": {"heartbeat_interval": 41250}}))
        async for msg in ws:
            if msg.type != WSMsgType.TEXT:
                continue
            frame = json.loads(msg.data)
            if frame.get("op") == 1:  # heartbeat
                await ws.send_str(json.dumps({"op": 11}))
            elif frame.get("op") == 2:  # identify
                self.identify = frame["d"]
                await self._send_dispatch("READY", {
                    "v": 10, "user": BOT_USER, "guilds": [], "session_id": "fake-session", "shard": [0, 1],
                    "resume_gateway_url": self.url, "application": {"id": BOT_USER["id"], "flags": 0},
                    "private_channels": [], "relationships": [], "presences": [], "user_settings": {},
                    "guild_join_requests": [], "geo_ordered_rtc_regions": []})
                self.identified.set()
        return ws


class ClientThread:
    """Runs a discord.py Client on its own event loop in a thread (as the gateway program would)."""

    def __init__(self, client, token: str):
        self.client, self.token = client, token
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="discord-client", daemon=True)

    def __enter__(self) -> "ClientThread":
        self._thread.start()
        self._connection = asyncio.run_coroutine_threadsafe(self.client.start(self.token), self.loop)
        return self

    def __exit__(self, *_exc) -> None:
        asyncio.run_coroutine_threadsafe(self.client.close(), self.loop).result(10)
        self._connection.result(10)
        asyncio.run_coroutine_threadsafe(self._cancel_leftovers(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    @staticmethod
    async def _cancel_leftovers() -> None:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
