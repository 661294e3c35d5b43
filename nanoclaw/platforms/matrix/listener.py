"""The `matrix-sync` program: Matrix without a public URL (the client-server /sync long poll).

Built on mautrix (its ClientAPI: login, /sync answered as the raw JSON the spec defines, which is
what gets handed over). Each event of a sync is handed over, signed, to the web program
(POST /webhooks/matrix/sync), which accepts it exactly as a webhook: parsing, dedup by event id,
routing, choices on cards, invites. The sync token (data/matrix/sync.json, owner-only) moves past a
sync only after every event in it was answered 2xx, i.e. durably accepted (or seen before): a crash
or a restart of either program syncs from the old token again and the dedup counts each event once.
An event is offered again while the web program is down or restarting; one a running web program
refused five times in a row is set aside (inbound/set_aside.py) and the sync goes on past it.
A room whose timeline was cut short (`limited`) is paged back to the old token first, so nothing in
between is lost.

The first start of an account hands over no history (only invites still open): the bot answers
what is said from then on. Every start syncs the full state once, so each room's members (a room
of two is a DM), names and encryption are known. In an encrypted room the bot cannot read messages;
it says so in the room (at most once a day per room) instead of ignoring them.
"""
from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from pathlib import Path

import requests
from mautrix.api import HTTPAPI, Method
from mautrix.client.api import ClientAPI
from mautrix.errors import MatrixConnectionError, MatrixRequestError
from mautrix.types import UserID

from . import account
from .adapter import SYNC_KEY_PURPOSE, SYNC_PATH
from ...channels import handoff
from ...config import install_secret
from ...inbound import set_aside

log = logging.getLogger(__name__)

SYNC_TIMEOUT_MS = 25000
MAX_BACKOFF_S = 60.0
TIMELINE_LIMIT = 100
SYNC_FILTER = json.dumps({"room": {"timeline": {"limit": TIMELINE_LIMIT}, "state": {"lazy_load_members": False},
                                   "ephemeral": {"not_types": ["*"]}, "account_data": {"not_types": ["*"]}},
                          "presence": {"not_types": ["*"]}, "account_data": {"not_types": ["*"]}})
TELL_AGAIN_S = 24 * 3600
ENCRYPTED_NOTICE = ("This room is end-to-end encrypted, and I cannot read encrypted messages. To talk to me, "
                    "create a room with encryption turned off (in Element: Create room, then turn off \"Enable "
                    "end-to-end encryption\") and invite me there.")


def backoff(failures: int) -> float:
    """1, 2, 4 … 60 s after consecutive failures."""
    return min(MAX_BACKOFF_S, 2.0 ** max(0, failures - 1))


class RoomState:
    """What the listener knows of a joined room from its state: members, their names, its name, and
    whether it is encrypted."""

    def __init__(self):
        self.members: dict[str, str | None] = {}   # joined user id -> display name
        self.name: str | None = None
        self.encrypted = False

    def apply(self, event: dict) -> None:
        kind, content = event.get("type"), event.get("content") or {}
        if not isinstance(content, dict):
            return
        if kind == "m.room.member" and isinstance(event.get("state_key"), str):
            if content.get("membership") == "join":
                name = content.get("displayname")
                self.members[event["state_key"]] = name if isinstance(name, str) else None
            else:
                self.members.pop(event["state_key"], None)
        elif kind == "m.room.name" and isinstance(content.get("name"), str):
            self.name = content["name"] or None
        elif kind == "m.room.encryption":
            self.encrypted = True


def own_invite(events: list, user_id: str) -> dict | None:
    """The invite event for the bot itself in a room's `invite_state` (pure). The rest of that list is
    stripped state the inviting server chose, unsigned: a stranger's server can put a member event
    "from the owner" there. The bot's own m.room.member event is the invite itself, whose sender the
    bot's homeserver checked against the inviting server's signature, so only its sender is the
    inviter."""
    return next((e for e in events if isinstance(e, dict) and e.get("type") == "m.room.member"
                 and e.get("state_key") == user_id and isinstance(e.get("sender"), str)
                 and (e.get("content") or {}).get("membership") == "invite"), None)


def handovers(sync: dict, rooms: dict[str, RoomState], history: bool, user_id: str) -> list[dict]:
    """The hand-overs one /sync brings, in order, with the room facts each event needs; `rooms` is
    updated as the state goes by. history=False (the account's very first sync): invites only.
    user_id: the bot's own, whose invite event alone names the inviter."""
    out: list[dict] = []
    joined = (sync.get("rooms") or {}).get("join") or {}
    for room_id, room in joined.items():
        if not isinstance(room, dict):
            continue
        state = rooms.setdefault(room_id, RoomState())
        for event in ((room.get("state") or {}).get("events") or []):
            if isinstance(event, dict):
                state.apply(event)
        for event in ((room.get("timeline") or {}).get("events") or []):
            if not isinstance(event, dict):
                continue
            if "state_key" in event:
                state.apply(event)
                continue
            if history:
                out.append({"kind": "event", "room_id": room_id, "event": event, "members": len(state.members),
                            "room_name": state.name, "sender_name": state.members.get(event.get("sender"))})
    for room_id, room in ((sync.get("rooms") or {}).get("invite") or {}).items():
        events = ((room or {}).get("invite_state") or {}).get("events") or []
        invite = own_invite(events, user_id)
        if invite is not None:
            out.append({"kind": "invite", "room_id": room_id, "inviter": invite.get("sender"),
                        "is_direct": bool((invite.get("content") or {}).get("is_direct")),
                        "event": {"event_id": invite.get("event_id") or f"invite:{room_id}", **invite}})
    for room_id in ((sync.get("rooms") or {}).get("leave") or {}):
        rooms.pop(room_id, None)
    return out


class SyncListener:
    def __init__(self, settings, *, web_url: str | None = None, timeout_ms: int = SYNC_TIMEOUT_MS):
        self.settings = settings
        platform = settings.platform
        self.base = platform["MATRIX_HOMESERVER"].rstrip("/")
        self.user_id = platform["MATRIX_USER_ID"]
        self.web_url = (web_url or f"http://127.0.0.1:{settings.port}") + SYNC_PATH
        self.key = handoff.purpose_key(install_secret(settings), SYNC_KEY_PURPOSE)
        self.timeout_ms = timeout_ms
        self.state_file: Path = account.state_dir(settings) / "sync.json"
        self.rooms: dict[str, RoomState] = {}
        self.told: dict[str, float] = dict(account.read_json(account.state_dir(settings) / "encrypted.json"))
        self.failures = 0
        self.stopped = asyncio.Event()
        self.halted = threading.Event()   # the stop, as the hand-over thread sees it
        self.set_aside = 0
        self.http = requests.Session()
        self.client: ClientAPI | None = None

    # --- the account ---

    async def connect(self) -> ClientAPI:
        token = account.access_token(self.settings)
        client = ClientAPI(UserID(self.user_id), api=HTTPAPI(self.base, token or "", default_retry_count=0))
        if not token:
            password = self.settings.platform.get("MATRIX_PASSWORD")
            if not password:
                raise SystemExit("set MATRIX_ACCESS_TOKEN or MATRIX_PASSWORD in .env")
            try:
                login = await client.login(identifier=UserID(self.user_id), password=password, device_name="NanoClaw")
            except BaseException:
                await client.api.session.close()
                raise
            account.keep(self.settings, login.access_token, login.device_id, self.user_id)
            log.info("logged in to %s as %s (device %s); the token is kept in %s", self.base, self.user_id,
                     login.device_id, account.state_dir(self.settings) / "account.json")
        self.client = client
        return client

    # --- the token ---

    def since(self) -> str | None:
        found = account.read_json(self.state_file)
        token = found.get("next_batch")
        return token if isinstance(token, str) and found.get("user_id") == self.user_id else None

    def advance(self, next_batch: str) -> None:
        account.write_private(self.state_file, {"next_batch": next_batch, "user_id": self.user_id})

    # --- hand-over ---

    def hand_over(self, item: dict) -> tuple[int | None, str]:
        """One try: the web program's status (2xx: stored, or seen before) and the start of its answer."""
        body = json.dumps(item, separators=(",", ":")).encode()
        resp = handoff.post(self.http, self.web_url, self.key, body, f"Matrix event {item['event'].get('event_id')}",
                            "offering it again")
        return handoff.answer_detail(resp)

    def offer(self, item: dict) -> str:
        """Hand one item over until it is taken, set aside (a running web program refused it five times in
        a row) or the program stops: 'done', 'set aside' or 'stopped'."""
        outcome = handoff.offer(lambda: self.hand_over(item),
                                lambda why: set_aside.keep("matrix", str(item["event"].get("event_id")), why, item),
                                self.halted.wait, self.halted.is_set, backoff)
        self.set_aside += outcome == "set aside"
        return outcome

    async def backfill(self, sync: dict, since: str) -> None:
        """Rooms whose timeline the sync cut short: the events between the old token and it, first."""
        for room_id, room in (((sync.get("rooms") or {}).get("join")) or {}).items():
            timeline = (room or {}).get("timeline") or {}
            if not timeline.get("limited") or not timeline.get("prev_batch"):
                continue
            older, token = [], timeline["prev_batch"]
            while token:
                page = await self.client.api.request(
                    Method.GET, f"/_matrix/client/v3/rooms/{room_id}/messages",
                    query_params={"from": token, "to": since, "dir": "b", "limit": str(TIMELINE_LIMIT)})
                chunk = page.get("chunk") or []
                older.extend(chunk)
                token = page.get("end") if chunk else None
            log.info("room %s: %d older event(s) fetched that the sync left out", room_id, len(older))
            timeline["events"] = list(reversed(older)) + list(timeline.get("events") or [])

    async def tell_encrypted(self, room_id: str) -> None:
        now = time.time()
        if now - self.told.get(room_id, 0) < TELL_AGAIN_S:
            return
        try:
            await self.client.send_notice(room_id, ENCRYPTED_NOTICE)
        except (MatrixRequestError, MatrixConnectionError) as exc:
            log.warning("could not tell %s that encrypted messages cannot be read: %s", room_id, exc)
            return
        self.told[room_id] = now
        account.write_private(account.state_dir(self.settings) / "encrypted.json", self.told)
        log.warning("room %s is encrypted: told it that its messages cannot be read", room_id)

    async def run_once(self, first: bool) -> float:
        """One /sync and the hand-over of what it brought; how long to wait before the next."""
        since = self.since()
        try:
            sync = await self.client.sync(since=since, timeout=0 if since is None else self.timeout_ms,
                                          filter_id=SYNC_FILTER, full_state=first)
            if since is not None:
                await self.backfill(sync, since)
        except (MatrixRequestError, MatrixConnectionError, asyncio.TimeoutError, OSError) as exc:
            self.failures += 1
            wait = backoff(self.failures)
            log.warning("sync failed (%s: %s); trying again in %.0f s", type(exc).__name__, str(exc)[:200], wait)
            return wait
        items = handovers(sync, self.rooms, history=since is not None, user_id=self.user_id)
        for item in items:
            if await asyncio.to_thread(self.offer, item) == "stopped":
                return 0.0  # the token stays: the same events come again
        for item in items:
            if item["kind"] == "event" and item["event"].get("type") == "m.room.encrypted":
                await self.tell_encrypted(item["room_id"])
        for room_id, state in self.rooms.items():
            if state.encrypted and room_id not in self.told:
                await self.tell_encrypted(room_id)
        if isinstance(sync.get("next_batch"), str):
            self.advance(sync["next_batch"])
        self.failures = 0
        return 0.0

    async def run(self) -> None:
        await self.connect()
        log.info("syncing %s as %s; events go to %s", self.base, self.user_id, self.web_url)
        first = True
        try:
            while not self.stopped.is_set():
                # a stop ends the long poll at once (supervisord gives a program 10 s): what was
                # handed over before it comes again from the same token, and the dedup counts it once
                once, stop = asyncio.ensure_future(self.run_once(first)), asyncio.ensure_future(self.stopped.wait())
                await asyncio.wait({once, stop}, return_when=asyncio.FIRST_COMPLETED)
                stop.cancel()
                if not once.done():
                    self.halted.set()
                    once.cancel()
                    await asyncio.gather(once, return_exceptions=True)
                    break
                wait = once.result()
                first = first and wait > 0  # full state until one sync went through
                if wait:
                    try:
                        await asyncio.wait_for(self.stopped.wait(), wait)
                    except asyncio.TimeoutError:
                        pass
        finally:
            await self.client.api.session.close()
