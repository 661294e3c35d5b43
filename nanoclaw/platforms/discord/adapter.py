"""Discord: signed interactions in (button clicks), Gateway messages handed over, REST out.

Ordinary messages reach us only over the Gateway (discord_gateway.py), whose program posts
each one to `/webhooks/discord/gateway`, HMAC-signed (discord_handoff.py). The HTTP
endpoint `/webhooks/discord/interactions` receives PINGs and component clicks, each
signed with Ed25519 over `X-Signature-Timestamp + body`. Discord wants the answer to
a click inside the HTTP response within 3 s, so the card is updated in place by the
response itself (type 7 UPDATE_MESSAGE), never by a later REST call.

Outbound goes to `{DISCORD_API_BASE}` with `Authorization: Bot <token>`. A thread is a
channel of its own in Discord, so a Target's thread_id, when set, is where we post. In a threaded
channel the answer to a top-level message goes into a thread under it, whose id is the message's
(inbound/decide.thread_of): the first post finds no such channel (10003), starts the thread from the
message, and posts again; where no thread can be started, it posts in the channel.

Attachments of Gateway messages are fetched from their CDN url (signed, no token) by
fetch_attachment, only from Discord's CDN hosts or the configured API base's origin.
"""
from __future__ import annotations

import json
import logging
import mimetypes
import time
from pathlib import Path
from urllib.parse import quote

import requests
from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

from . import handoff
from . import schema as ds
from ...channels.base import (
    Card, DeliveryError, api_request, MalformedPayload, Parsed, WebhookRefused, read_as, register)
from ...channels.events import Action
from ...channels.download import AttachmentError, check_size, fetch, host_allowed
from ...channels.parts import PartialSends
from ...channels.text import split_text
from ...sessions.store import Target

log = logging.getLogger(__name__)

CHANNEL = "discord"
TEXT_LIMIT = 2000
CUSTOM_ID_LIMIT = 100
LABEL_LIMIT = 80
BUTTONS_PER_ROW = 5
ROWS_PER_MESSAGE = 5
MAX_SKEW_S = 300                      # older (or newer) signed timestamps are replays: refuse
DECISION_MARK = "\n\n→ "
USER_AGENT = "DiscordBot (https://github.com/qwibitai/nanoclaw, 0.1)"
NO_PINGS = {"parse": []}              # an agent's text never pings @everyone, roles or users

# interaction types and responses (Discord docs: Interactions > Receiving and Responding)
PING, APPLICATION_COMMAND, MESSAGE_COMPONENT = 1, 2, 3
PONG, CHANNEL_MESSAGE, DEFERRED_UPDATE_MESSAGE, UPDATE_MESSAGE = 1, 4, 6, 7
EPHEMERAL = 1 << 6
CDN_HOSTS = ("cdn.discordapp.com", "media.discordapp.net")


# --- inbound: verification and parsing (pure) --------------------------------------------------

def signature_valid(public_key_hex: str, timestamp: str, body: bytes, signature_hex: str) -> bool:
    try:
        VerifyKey(bytes.fromhex(public_key_hex)).verify(timestamp.encode() + body, bytes.fromhex(signature_hex))
        return True
    except (BadSignatureError, ValueError, TypeError):
        return False


def timestamp_fresh(timestamp: str, now: float) -> bool:
    try:
        return abs(now - int(timestamp)) <= MAX_SKEW_S
    except (TypeError, ValueError):
        return False


def verify(public_key_hex: str | None, headers, body: bytes, now: float) -> None:
    """Raise WebhookRefused(401) unless the request is signed by Discord and recent."""
    if not public_key_hex:
        raise WebhookRefused(401, "DISCORD_PUBLIC_KEY is not set; refusing unverifiable interactions")
    signature, timestamp = headers.get("X-Signature-Ed25519"), headers.get("X-Signature-Timestamp")
    if not signature or not timestamp:
        raise WebhookRefused(401, "missing X-Signature-Ed25519 or X-Signature-Timestamp")
    if not signature_valid(public_key_hex, timestamp, body, signature):
        raise WebhookRefused(401, "bad request signature")
    if not timestamp_fresh(timestamp, now):
        raise WebhookRefused(401, "stale X-Signature-Timestamp (possible replay)")


def _display_name(user: ds.User, member: ds.Member | None = None) -> str:
    return (member.nick if member else None) or user.global_name or user.username or user.id


def parse_interaction(payload) -> Parsed:
    """An interaction (JSON data) → a PONG, a polite answer to a command, or a component click.
    MalformedPayload when it does not fit the schema (discord_schema.py)."""
    interaction = read_as(ds.Interaction, payload, "a Discord interaction", ds.interaction_kind(payload))
    if interaction.type == PING:
        return Parsed(response=({"type": PONG}, 200))
    if interaction.type == APPLICATION_COMMAND:
        return Parsed(response=({"type": CHANNEL_MESSAGE, "data": {
            "content": "I have no commands: just write to me.", "flags": EPHEMERAL}}, 200))
    if interaction.type != MESSAGE_COMPONENT:
        raise MalformedPayload(f"unsupported interaction type {interaction.type!r}",
                               kind=ds.interaction_kind(payload))
    member = interaction.member
    user = (member.user if member else None) or interaction.user
    data = interaction.data
    if data is None or not data.custom_id or user is None or not interaction.id:
        raise MalformedPayload("a component interaction without custom_id, user or id", kind="interaction/3")
    message = interaction.message or ds.MessageRef()
    clicker = _display_name(user, member)
    action = Action(channel=CHANNEL, action_id=data.custom_id, user_id=f"{CHANNEL}:{user.id}",
                    chat_id=interaction.channel_id or (interaction.channel.id if interaction.channel else None),
                    message_id=message.id, event_id=interaction.id, user_name=clicker,
                    raw={"content": message.content or "", "clicker": clicker})
    # until the click is handled, the answer is a plain acknowledgement that changes nothing
    return Parsed(actions=[action], response=({"type": DEFERRED_UPDATE_MESSAGE}, 200))


def decided_card(content: str, decision: str, clicker: str) -> dict:
    """The card's text with the decision under it (replacing an earlier one), buttons removed."""
    base = content.split(DECISION_MARK, 1)[0]
    tail = f"{DECISION_MARK}{decision} — {clicker}"
    if len(base) + len(tail) > TEXT_LIMIT:
        base = base[:TEXT_LIMIT - len(tail) - 1].rstrip() + "…"
    return {"type": UPDATE_MESSAGE, "data": {"content": base + tail, "components": [],
                                             "allowed_mentions": NO_PINGS}}


# --- outbound: request bodies (pure) ---------------------------------------------------------

def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


def card_messages(card: Card) -> list[dict]:
    """Message bodies for a card: overflow text first, then the buttons (≤ 25 per message)."""
    for _, action_id in card.buttons:
        if not 0 < len(action_id) <= CUSTOM_ID_LIMIT:
            raise DeliveryError(f"action id {action_id[:20]!r} does not fit Discord's custom_id", permanent=True)
    text = "\n".join(p for p in (f"**{card.title}**" if card.title else "", card.body) if p)
    chunks = split_text(text, TEXT_LIMIT) or ["…"]
    messages = [{"content": c, "allowed_mentions": NO_PINGS} for c in chunks]
    per_message = BUTTONS_PER_ROW * ROWS_PER_MESSAGE
    groups = [card.buttons[i:i + per_message] for i in range(0, len(card.buttons), per_message)]
    for n, group in enumerate(groups):
        rows = [{"type": 1, "components": [
            {"type": 2, "style": 1, "label": _clip(label.strip() or "?", LABEL_LIMIT), "custom_id": action_id}
            for label, action_id in group[i:i + BUTTONS_PER_ROW]]} for i in range(0, len(group), BUTTONS_PER_ROW)]
        if n == 0:
            messages[-1]["components"] = rows
        else:
            messages.append({"content": f"(more options {n + 1}/{len(groups)})", "components": rows,
                             "allowed_mentions": NO_PINGS})
    return messages


def emoji_path(emoji: str) -> str:
    """The URL segment for a reaction: unicode emoji as is, custom `<:name:id>` as `name:id`."""
    emoji = emoji.strip()
    if emoji.startswith("<") and emoji.endswith(">"):
        emoji = emoji[1:-1].removeprefix("a:").lstrip(":")
    return quote(emoji, safe="")


def _float(value) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def error_for(status: int, payload, headers) -> DeliveryError:
    """Discord's answer → DeliveryError: 429 carries retry_after, other 4xx are permanent."""
    body = payload if isinstance(payload, dict) else {}
    text = f"Discord API error {status}" + (f" (code {body['code']})" if body.get("code") else "") + \
        f": {body.get('message') or 'no message'}"
    if status == 429:
        wait = _float(body.get("retry_after")) or _float(headers.get("Retry-After")) or \
            _float(headers.get("X-RateLimit-Reset-After")) or 1.0
        return DeliveryError(text, retry_after=wait)
    if 400 <= status < 500 and status != 408:
        error = DeliveryError(text, permanent=True)
    else:
        error = DeliveryError(text)
    error.code = body.get("code")
    return error


UNKNOWN_CHANNEL = 10003
THREAD_EXISTS = 160004  # "A thread has already been created for this message"


def thread_name(text: str | None, fallback: str) -> str:
    """A thread's name (1–100 characters): the first line of what starts it."""
    line = next((ln.strip() for ln in (text or "").splitlines() if ln.strip()), "")
    return (line[:97] + "…" if len(line) > 100 else line) or fallback


# --- the adapter (effects) ---------------------------------------------------------------------

@register(CHANNEL)
class DiscordAdapter:
    max_file_bytes = 25 * 1024 * 1024  # a bot's upload limit in a server without boosts
    timeout = (5, 30)

    def __init__(self, settings, clock=time.time):
        self.settings = settings
        self.clock = clock
        self._parts = PartialSends()  # a long reply cut short by an error resumes where it stopped
        self._handoff_key: bytes | None = None

    # inbound

    def handle_webhook(self, kind: str, method: str, headers, query, body: bytes) -> Parsed:
        if kind == "gateway" and method == "POST":
            return self._gateway_message(headers, body)
        if kind != "interactions" or method != "POST":
            raise WebhookRefused(404, "Discord posts to /webhooks/discord/interactions only")
        verify(self.settings.platform.get("DISCORD_PUBLIC_KEY"), headers, body, self.clock())
        try:
            payload = json.loads(body)
        except ValueError:
            raise MalformedPayload("body is not JSON", kind="not-json") from None
        return parse_interaction(payload)

    def _gateway_message(self, headers, body: bytes) -> Parsed:
        """A message our own Gateway program handed over (discord_handoff.py), HMAC-signed."""
        if self._handoff_key is None:  # the page's SECRET_KEY is fixed for the web program's life
            self._handoff_key = handoff.key_for(self.settings)
        handoff.verify(self._handoff_key, headers, body, self.clock())
        try:
            event = handoff.decode(body)
        except MalformedPayload as exc:
            raise MalformedPayload(str(exc), kind=f"gateway/{exc.kind}") from None
        return Parsed(events=[event] if event is not None else [])

    def malformed_answer(self, exc: MalformedPayload):
        """Discord wants an interaction response even to what we cannot read: one that changes nothing.
        Our own Gateway program is told 400 instead: it then keeps the message for the recovery pass."""
        if exc.kind.startswith("gateway"):
            return {"error": f"malformed hand-off: {exc}"}, 400
        return {"type": DEFERRED_UPDATE_MESSAGE}, 200

    def acknowledge_action(self, action: Action, text: str | None):
        """The HTTP response to the click: the card updated in place with the decision."""
        if not text:
            return {"type": DEFERRED_UPDATE_MESSAGE}, 200
        raw = action.raw or {}
        return decided_card(raw.get("content", ""), text, raw.get("clicker", action.user_id)), 200

    def fetch_attachment(self, attachment: dict) -> tuple[str, bytes]:
        """(file name, bytes) of a message attachment, from its signed CDN url (no token sent)."""
        cap = self.settings.attachment_max_bytes
        check_size(attachment.get("size"), cap)
        url = attachment.get("url")
        base = self.settings.platform.get("DISCORD_API_BASE", "https://discord.com/api/v10")
        if not host_allowed(url, CDN_HOSTS, [base]):
            log.warning("refused to fetch a Discord attachment from %r: not Discord's CDN", str(url or "")[:80])
            raise AttachmentError("the file's address is not on Discord's CDN")
        data, _ = fetch(url, max_bytes=cap, headers={"User-Agent": USER_AGENT}, what="Discord's CDN")
        return attachment.get("filename") or url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1], data

    # outbound

    def _call(self, method: str, path: str, **kwargs) -> dict:
        token = self.settings.platform.get("DISCORD_BOT_TOKEN")
        if not token:
            raise DeliveryError("DISCORD_BOT_TOKEN is not set", permanent=True)
        base = self.settings.platform.get("DISCORD_API_BASE", "https://discord.com/api/v10")
        headers = {"Authorization": f"Bot {token}", "User-Agent": USER_AGENT}
        resp, payload = api_request(requests, method, f"{base}{path}", "Discord API unreachable", headers=headers,
                                    timeout=kwargs.pop("timeout", self.timeout), **kwargs)
        if resp.status_code >= 400:
            raise error_for(resp.status_code, payload, resp.headers)
        return payload if isinstance(payload, dict) else {}

    @staticmethod
    def _channel(target: Target) -> str:
        return target.thread_id or target.platform_id

    def _post(self, target: Target, body: dict) -> str | None:
        return self._in_thread(target, lambda channel: self._call(
            "POST", f"/channels/{channel}/messages", json=body).get("id"), body.get("content"))

    def _in_thread(self, target: Target, send, name_hint: str | None):
        """send(channel id) into the target's thread, starting it from its message when it does not
        exist yet; into the channel itself when no thread can be started there."""
        try:
            return send(self._channel(target))
        except DeliveryError as exc:
            if not target.thread_id or getattr(exc, "code", None) != UNKNOWN_CHANNEL:
                raise
        try:
            self._call("POST", f"/channels/{target.platform_id}/messages/{target.thread_id}/threads",
                       json={"name": thread_name(name_hint, self.settings.assistant_name)})
        except DeliveryError as exc:
            if getattr(exc, "code", None) != THREAD_EXISTS:
                log.warning("could not start a thread under message %s in %s (%s): answering in the channel",
                            target.thread_id, target.platform_id, exc)
                return send(target.platform_id)
        return send(target.thread_id)

    def send_text(self, target: Target, text: str) -> str | None:
        return self._parts.send((target, text), split_text(text, TEXT_LIMIT),
                                lambda chunk: self._post(target, {"content": chunk, "allowed_mentions": NO_PINGS}))

    def edit_text(self, target: Target, platform_message_id: str, text: str) -> None:
        chunks = split_text(text, TEXT_LIMIT) or ["…"]
        self._call("PATCH", f"/channels/{self._channel(target)}/messages/{platform_message_id}",
                   json={"content": chunks[0], "allowed_mentions": NO_PINGS})
        # an edit that grew past the limit continues in new messages
        self._parts.send((target, "edit", platform_message_id, text), chunks[1:],
                         lambda chunk: self._post(target, {"content": chunk, "allowed_mentions": NO_PINGS}))

    live_status = True  # a long turn's status message can be edited and deleted (outbound/progress.py)
    stream_limit = 2000  # a message's length: a longer live answer stops streaming

    def delete_message(self, target: Target, platform_message_id: str) -> None:
        self._call("DELETE", f"/channels/{self._channel(target)}/messages/{platform_message_id}")

    def react(self, target: Target, platform_message_id: str, emoji: str) -> None:
        # the message a thread was started from stays in the channel
        channel = target.platform_id if platform_message_id == target.thread_id else self._channel(target)
        self._call("PUT", f"/channels/{channel}/messages/{platform_message_id}/reactions/{emoji_path(emoji)}/@me")

    def send_card(self, target: Target, card: Card) -> str | None:
        """Returns the id of the message that carries the (first) buttons."""
        with_buttons: list[str | None] = []

        def send_one(body: dict) -> str | None:
            message_id = self._post(target, body)
            if "components" in body:
                with_buttons.append(message_id)
            return message_id
        first = self._parts.send((target, card), card_messages(card), send_one)
        return with_buttons[0] if with_buttons else first

    def send_file(self, target: Target, path: Path, caption: str | None) -> str | None:
        long_caption = bool(caption) and len(caption) > TEXT_LIMIT
        payload = {"attachments": [{"id": 0, "filename": path.name}], "allowed_mentions": NO_PINGS}
        if caption and not long_caption:
            payload["content"] = caption
        mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"

        def upload(channel: str) -> dict:
            with path.open("rb") as fh:
                return self._call("POST", f"/channels/{channel}/messages", data={"payload_json": json.dumps(payload)},
                                  files={"files[0]": (path.name, fh, mime)}, timeout=(5, 300))
        message = self._in_thread(target, upload, caption or path.name)
        if long_caption:
            self.send_text(target, caption)
        return message.get("id")

    def typing(self, target: Target, message_id: str | None = None) -> None:
        """Shows "typing…" for about 10 s or until we post (in the channel while the thread the
        answer starts does not exist yet)."""
        try:
            self._call("POST", f"/channels/{self._channel(target)}/typing")
        except DeliveryError as exc:
            if not target.thread_id or getattr(exc, "code", None) != UNKNOWN_CHANNEL:
                raise
            self._call("POST", f"/channels/{target.platform_id}/typing")
