"""The `discord-gateway` program: Discord messages arrive only over the Gateway websocket.

discord.py with the message-content intent; on_message turns the library's Message into the docs'
payload (channels/discord_messages.py) and hands it to the web program over loopback
(channels/discord_handoff.py: HMAC-signed POST /webhooks/discord/gateway), which accepts it like any
webhook, routes it and wakes the session at once. Our own bot's echoes are never handed over, and
the webhook path drops any that slip through (from_self).

If the web program does not answer, the hand-off retries briefly and then accepts the event into
the central DB itself (intake.accept): the web program's recovery pass routes it (within ~40 s),
so nothing is lost, only slower.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import requests

from ...channels.events import InboundEvent
from .handoff import (PATH, RETRY_DELAYS_S, TIMEOUT_S, attempt_outcome, attempts, encode,
                                        key_for, signed_headers)
from .messages import message_to_event, payload_from_message
from ...db import bind, database
from ...inbound import intake

log = logging.getLogger(__name__)


class Handoff:
    """Hands the Gateway's messages to the web program; keeps them itself when it cannot."""

    def __init__(self, settings, *, timeout: float = TIMEOUT_S, retry_delays=RETRY_DELAYS_S,
                 clock=time.time, sleep=time.sleep):
        self.settings = settings
        self.url = f"http://127.0.0.1:{settings.port}{PATH}"
        self.timeout, self.retry_delays, self.clock, self.sleep = timeout, tuple(retry_delays), clock, sleep
        self._local = threading.local()  # one HTTP session per worker thread (keep-alive)
        self.web_down = False             # the last message could not be handed over

    def _session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
            session.trust_env = False  # loopback only: never through an HTTP(S)_PROXY from the env
        return session

    def _post(self, body: bytes) -> tuple[int | None, str]:
        headers = signed_headers(key_for(self.settings), body, self.clock())
        try:
            resp = self._session().post(self.url, data=body, headers=headers, timeout=self.timeout)
        except requests.RequestException as exc:
            return None, type(exc).__name__
        return resp.status_code, resp.text[:200]

    def forward_message(self, message, bot_id: str, bot_name: str | None = None) -> str:
        """A discord.py Message → the web program (blocking: call it off the event loop)."""
        payload, channel = payload_from_message(message)
        return self.forward(payload, channel, bot_id, bot_name)

    def forward(self, payload: dict, channel: dict | None, bot_id: str, bot_name: str | None = None) -> str:
        """Hand one message over. Returns 'delivered', 'kept' (accepted here for the recovery
        pass), 'duplicate' (kept before), or 'ignored' (nothing anyone should see)."""
        event = message_to_event(payload, bot_id=bot_id, channel=channel, bot_name=bot_name)
        if event is None or event.from_self:
            return "ignored"
        body = encode(payload, channel, bot_id, bot_name)
        tries = attempts(self.web_down, self.retry_delays)
        for attempt in range(tries):
            status, detail = self._post(body)
            outcome = attempt_outcome(status)
            self.web_down = outcome == "retry"
            if outcome == "done":
                return "delivered"
            if outcome == "refused":
                log.error("the web program refused Discord message %s at %s (%s: %s); is NANOCLAW_SECRET_KEY "
                          "or data/secret_key the same for both programs? Keeping it for the recovery pass",
                          event.event_id, self.url, status, detail)
                break
            if attempt < tries - 1:
                self.sleep(self.retry_delays[attempt])
        else:
            log.warning("the web program did not take Discord message %s at %s (%s); accepted it into the "
                        "database here: the web program's recovery pass routes it within a minute",
                        event.event_id, self.url, status or detail)
        return "kept" if keep(event) else "duplicate"


def keep(event: InboundEvent) -> bool:
    """Accept the event into inbound_events from this process. False: it was accepted before."""

    opened = database.is_closed()  # each of the Gateway's worker threads holds its own connection
    if opened:
        database.connect()
    try:
        return intake.accept(event) is not None
    finally:
        if opened:
            database.close()


def build_client(settings, handoff=None):
    """A discord.py Client with the message-content intent whose on_message hands each message
    to the web program (Handoff), which routes it and wakes the session at once."""
    with warnings.catch_warnings():  # discord.py imports audioop for voice, which we never use
        warnings.simplefilter("ignore", DeprecationWarning)
        import discord  # heavy (aiohttp, voice): only the Gateway program loads it

    handoff = handoff or Handoff(settings)
    if database.obj is None:  # for keeping a message the web program did not take
        bind(settings.database_url)
    discord.http.Route.BASE = settings.platform.get("DISCORD_API_BASE", discord.http.Route.BASE)
    intents = discord.Intents.default()
    intents.message_content = True  # privileged: enable it for the bot in the developer portal too
    client = discord.Client(intents=intents)

    # one worker, so messages reach the web program in the order Discord sent them
    worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="discord-handoff")

    @client.event
    async def on_ready():
        log.info("Discord Gateway connected as %s (%s); handing messages to %s", client.user, client.user.id,
                 handoff.url)

    @client.event
    async def on_message(message):
        if client.user is None or message.author.id == client.user.id:
            return  # our own echo: never routed back in
        try:
            await asyncio.get_running_loop().run_in_executor(
                worker, handoff.forward_message, message, str(client.user.id), client.user.name)
        except Exception:  # one bad message must not take the Gateway down
            log.exception("could not hand over Discord message %s", message.id)

    return client


def run_gateway(settings) -> None:
    """The `discord-gateway` program: connect, hand over every message, reconnect as discord.py does."""
    token = settings.platform.get("DISCORD_BOT_TOKEN")
    if not token:
        raise RuntimeError("DISCORD_BOT_TOKEN is not set; the Discord Gateway needs the bot token")
    build_client(settings).run(token, log_handler=None)
