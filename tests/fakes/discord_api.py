"""A fake Discord REST API (v10) on 127.0.0.1: messages (create, edit, files), reactions, typing.

It checks what Discord checks for the calls we make (the bot token, content ≤ 2000, component
limits, custom_id ≤ 100, unknown messages) and answers in Discord's shape, 429 included.
It is the CDN too: `add_attachment` gives a message attachment object whose signed url
(`/attachments/<channel>/<id>/<name>?ex=…&is=…&hm=…`) is served without a token, as the CDN does.
"""
from __future__ import annotations

import itertools
import json
import re
import threading
from urllib.parse import quote

from .platform_server import FakePlatform, Recorded

TOKEN = "discord-test-bot-token"
BOT_ID = "1349958880232177764"
_MESSAGES = re.compile(r"^/channels/(\d+)/messages$")
_MESSAGE = re.compile(r"^/channels/(\d+)/messages/(\d+)$")
_REACTION = re.compile(r"^/channels/(\d+)/messages/(\d+)/reactions/(.+)/@me$")
_TYPING = re.compile(r"^/channels/(\d+)/typing$")
_START_THREAD = re.compile(r"^/channels/(\d+)/messages/(\d+)/threads$")
_CDN = re.compile(r"^/attachments/(\d+)/(\d+)/([^/]+)$")

BOT_USER = {"id": BOT_ID, "username": "andy", "discriminator": "6110", "global_name": None, "avatar": None,
            "bot": True, "verified": True, "mfa_enabled": False, "flags": 0, "public_flags": 0, "locale": "en-US"}
APPLICATION = {"id": BOT_ID, "name": "Andy", "icon": None, "description": "", "bot_public": False,
               "bot_require_code_grant": False, "verify_key": "0" * 64, "flags": 0, "summary": "", "team": None,
               "owner": {"id": "80351110224678912", "username": "nelly", "discriminator": "0", "avatar": None,
                         "global_name": "Nelly", "public_flags": 0}, "bot": BOT_USER}
RATE_LIMITED = {"message": "You are being rate limited.", "retry_after": 1.234, "global": False}


def discord_error(status: int, code: int, message: str, errors: dict | None = None):
    body = {"code": code, "message": message}
    if errors:
        body["errors"] = errors
    return status, body, {}


class FakeDiscord(FakePlatform):
    name = "discord"

    def __init__(self):
        super().__init__()
        self._ids = itertools.count(1350100000000000000)
        self._lock = threading.Lock()
        self.messages: dict[str, dict] = {}        # id -> message object as stored
        self.deleted: list[str] = []               # ids of the messages deleted
        self.removed: list[dict] = []              # those messages, as they were
        self.reactions: list[tuple[str, str, str]] = []  # (channel, message, emoji)
        self.typing: list[str] = []
        self.cdn: dict[str, tuple[str, bytes]] = {}  # attachment id -> (content type, bytes)
        self.roots: dict[str, str] = {}     # a person's message in a guild channel -> its channel
        self.threads: dict[str, dict] = {}  # thread id -> the thread channel object

    def said(self, channel_id: str, message_id: str) -> None:
        """A person's message in a guild channel (it came over the Gateway): a thread can be
        started from it, and until then no channel has its id."""
        self.roots[message_id] = channel_id

    def add_attachment(self, channel_id: str, filename: str, data: bytes, content_type: str,
                       attachment_id: str | None = None) -> dict:
        """A file a user attached: the attachment object of a MESSAGE_CREATE, served by the fake CDN."""
        attachment_id = attachment_id or str(next(self._ids))
        self.cdn[attachment_id] = (content_type, data)
        path = f"/attachments/{channel_id}/{attachment_id}/{quote(filename)}"
        signed = "?ex=67d5a1b2&is=67d45032&hm=3f9c0d7e5b1a&"
        return {"id": attachment_id, "filename": filename, "size": len(data), "url": f"{self.url}{path}{signed}",
                "proxy_url": f"{self.url}{path}{signed}", "content_type": content_type, "content_scan_version": 0}

    def _serve_cdn(self, req: Recorded):
        """cdn.discordapp.com: no token needed; an unsigned URL is refused as the CDN refuses it."""
        m = _CDN.match(req.path)
        if m is None or m.group(2) not in self.cdn:
            return 404, b"Not Found", {"content-type": "text/plain"}
        if not all(req.query.get(k) for k in ("ex", "is", "hm")):
            return 404, b"This content is no longer available.", {"content-type": "text/plain"}
        content_type, data = self.cdn[m.group(2)]
        return 200, data, {"content-type": content_type}

    def posted(self, channel_id: str | None = None) -> list[dict]:
        """Messages as they now stand (edits applied), in the order they were created."""
        return [m for m in self.messages.values() if channel_id is None or m["channel_id"] == channel_id]

    def answer(self, req: Recorded):
        if req.method == "GET" and req.path.startswith("/attachments/"):
            return self._serve_cdn(req)
        if req.headers.get("authorization") != f"Bot {TOKEN}":
            return discord_error(401, 0, "401: Unauthorized")
        if not req.headers.get("user-agent", "").startswith("DiscordBot ("):
            return discord_error(400, 0, "a DiscordBot user agent is required")
        if req.method == "GET" and req.path == "/users/@me":  # discord.py's login
            return 200, BOT_USER, {}
        if req.method == "GET" and req.path == "/oauth2/applications/@me":
            return 200, APPLICATION, {}
        if req.method == "POST" and (m := _MESSAGES.match(req.path)):
            if m.group(1) in self.roots and m.group(1) not in self.threads:
                return discord_error(404, 10003, "Unknown Channel")
            return self._create(m.group(1), req)
        if req.method == "POST" and (m := _START_THREAD.match(req.path)):
            return self._start_thread(m.group(1), m.group(2), req.json or {})
        if req.method == "PATCH" and (m := _MESSAGE.match(req.path)):
            return self._edit(m.group(1), m.group(2), req.json or {})
        if req.method == "DELETE" and (m := _MESSAGE.match(req.path)):
            gone = self.messages.pop(m.group(2), None)
            if gone is None:
                return discord_error(404, 10008, "Unknown Message")
            self.deleted.append(m.group(2))
            self.removed.append(gone)
            return 204, None, {}
        if req.method == "PUT" and (m := _REACTION.match(req.path)):
            if m.group(2) not in self.messages:
                return discord_error(404, 10008, "Unknown Message")
            self.reactions.append((m.group(1), m.group(2), m.group(3)))
            return 204, None, {}
        if req.method == "POST" and (m := _TYPING.match(req.path)):
            if m.group(1) in self.roots and m.group(1) not in self.threads:
                return discord_error(404, 10003, "Unknown Channel")
            self.typing.append(m.group(1))
            return 204, None, {}
        return discord_error(404, 0, "404: Not Found")

    def _create(self, channel_id: str, req: Recorded):
        if req.files:
            body = json.loads(req.form.get("payload_json", "{}"))
            files = [{"id": str(next(self._ids)), "filename": name, "size": len(data), "content_type": ctype}
                     for name, data, ctype in req.files.values()]
        else:
            body, files = req.json or {}, []
        problem = _invalid(body)
        if problem:
            return discord_error(400, 50035, "Invalid Form Body", {"_errors": [{"message": problem}]})
        if not body.get("content") and not files and not body.get("components"):
            return discord_error(400, 50006, "Cannot send an empty message")
        with self._lock:
            message_id = str(next(self._ids))
            message = {"id": message_id, "channel_id": channel_id, "type": 0, "content": body.get("content", ""),
                       "components": body.get("components", []), "attachments": files,
                       "author": {"id": BOT_ID, "username": "andy", "bot": True},
                       "allowed_mentions": body.get("allowed_mentions")}
            self.messages[message_id] = message
        return 200, message, {}

    def _start_thread(self, channel_id: str, message_id: str, body: dict):
        """POST /channels/{channel.id}/messages/{message.id}/threads: the thread gets the message's id."""
        if message_id in self.threads:
            return discord_error(400, 160004, "A thread has already been created for this message")
        if self.roots.get(message_id) != channel_id and self.messages.get(message_id, {}).get("channel_id") != channel_id:
            return discord_error(404, 10008, "Unknown Message")
        name = body.get("name")
        if not isinstance(name, str) or not 1 <= len(name) <= 100:
            return discord_error(400, 50035, "Invalid Form Body", {"name": {"_errors": [{"message": "1-100"}]}})
        thread = {"id": message_id, "type": 11, "parent_id": channel_id, "name": name, "guild_id": "1349960187106246706",
                  "owner_id": BOT_ID, "message_count": 0, "member_count": 1,
                  "thread_metadata": {"archived": False, "auto_archive_duration": 1440, "locked": False}}
        self.threads[message_id] = thread
        return 201, thread, {}

    def _edit(self, channel_id: str, message_id: str, body: dict):
        message = self.messages.get(message_id)
        if message is None or message["channel_id"] != channel_id:
            return discord_error(404, 10008, "Unknown Message")
        problem = _invalid(body)
        if problem:
            return discord_error(400, 50035, "Invalid Form Body", {"_errors": [{"message": problem}]})
        message.update({k: body[k] for k in ("content", "components") if k in body})
        return 200, message, {}


def _invalid(body: dict) -> str | None:
    if len(body.get("content") or "") > 2000:
        return "content: Must be 2000 or fewer in length."
    rows = body.get("components") or []
    if len(rows) > 5:
        return "components: Must be 5 or fewer in length."
    seen = set()
    for row in rows:
        buttons = row.get("components") or []
        if row.get("type") != 1 or not 1 <= len(buttons) <= 5:
            return "components: an action row holds 1 to 5 components"
        for b in buttons:
            if b.get("type") != 2 or not 0 < len(b.get("custom_id", "")) <= 100 or len(b.get("label", "")) > 80:
                return "components: invalid button"
            if b["custom_id"] in seen:
                return "components: Component custom id cannot be duplicated"
            seen.add(b["custom_id"])
    return None
