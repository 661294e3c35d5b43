"""Discord messages as events: a MESSAGE_CREATE payload (Gateway) → InboundEvent (pure).

`message_to_event` is the decision: a MESSAGE_CREATE payload (shape of Discord's docs, the `d`
of the dispatch or the whole dispatch) → an InboundEvent, or None for messages nobody should see
(joins, pins, empty). `payload_from_message` turns a discord.py Message back into that payload.
The `discord-gateway` program (nanoclaw/platforms/discord/listener.py) uses both. Attachments are
passed on as metadata (filename, type, size, CDN url); the router has
DiscordAdapter.fetch_attachment download them into the session's inbox/.
"""
from __future__ import annotations

import re
from datetime import datetime, timezone


from . import schema as ds
from ...channels import shapes
from ...channels.base import MalformedPayload
from ...channels.events import InboundEvent, ReplyTo, said_at

CHANNEL = "discord"
ROUTED_TYPES = {0, 19}                 # DEFAULT and REPLY; joins, pins, boosts… are not conversation
THREAD_TYPES = {10, 11, 12}            # announcement, public and private threads
FORWARD = 1                            # message_reference.type of a forward (not a reply)
_USER_MENTION = re.compile(r"<@!?(\d+)>")


def _utc_iso(value: str | None) -> str:
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None
    except (ValueError, TypeError):
        dt = None
    if dt is not None and dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    try:
        claimed = dt.timestamp() if dt is not None else None
    except (OverflowError, ValueError):
        claimed = None
    return said_at(claimed)


def _name(user: ds.User | None, member: ds.Member | None = None) -> str:
    if user is None:
        return "?"
    return (member.nick if member else None) or user.global_name or user.username or user.id


def readable_text(content: str, mentions: list[ds.Mention], bot_id: str, bot_name: str | None) -> str:
    """`<@123>` tokens → `@name`, so the agent reads who was addressed (and a pattern can match us)."""
    names = {u.id: _name(u, u.member) for u in mentions}
    if bot_name:
        names[bot_id] = bot_name

    def swap(m: re.Match) -> str:
        return f"@{names[m.group(1)]}" if m.group(1) in names else m.group(0)
    return _USER_MENTION.sub(swap, content or "")


def message_to_event(payload: dict, *, bot_id: str, channel: dict | None = None,
                     bot_name: str | None = None) -> InboundEvent | None:
    """A MESSAGE_CREATE payload → InboundEvent. `channel` (id, type, parent_id), when known, tells
    whether the message is in a thread: then the chat is the parent channel and the thread its own.
    MalformedPayload when it does not fit the schema (discord_schema.py)."""
    if isinstance(payload, dict) and "op" in payload and "d" in payload:  # the whole Gateway dispatch
        if payload.get("t") != "MESSAGE_CREATE":
            return None
        payload = payload["d"]
    try:
        msg = shapes.read(ds.Message, payload)
        where = shapes.read(ds.Channel, channel) if channel is not None else None
    except shapes.ShapeError as exc:
        raise MalformedPayload(f"not a Discord message we can read ({shapes.first_problem(exc)})",
                               kind="message_create") from None
    if msg.type not in ROUTED_TYPES:
        return None
    bot_id = str(bot_id)
    text = readable_text(msg.content or "", msg.mentions, bot_id, bot_name)
    stickers = [s.name or "sticker" for s in msg.sticker_items]
    if stickers and not text:
        text = " ".join(f"[sticker {s}]" for s in stickers)
    attachments = tuple(attachment_of(a) for a in msg.attachments)
    if not text and not attachments:
        return None  # nothing to read (or the message-content intent is off)

    reply_to, replied_to_us = None, False
    reference = msg.message_reference
    if reference is not None and reference.message_id and reference.type != FORWARD:
        quoted = msg.referenced_message
        quoted_author = quoted.author if quoted else None
        reply_to = ReplyTo(reference.message_id, _name(quoted_author) if quoted_author else None,
                           quoted.content if quoted else None)
        replied_to_us = quoted_author is not None and quoted_author.id == bot_id

    if not msg.guild_id:
        kind, chat_id, thread_id = "dm", msg.channel_id, None
    elif where is not None and where.type in THREAD_TYPES and where.parent_id:
        kind, chat_id, thread_id = "thread", where.parent_id, msg.channel_id
    else:  # a guild channel is threaded: a top-level message can start a thread (with its own id)
        kind, chat_id, thread_id = "thread", msg.channel_id, None

    return InboundEvent(
        channel=CHANNEL, event_id=msg.id, chat_id=chat_id, kind=kind, sender_id=msg.author.id,
        sender_name=_name(msg.author, msg.member), text=text, timestamp=_utc_iso(msg.timestamp),
        thread_id=thread_id, message_id=msg.id, thread_root=msg.id if kind == "thread" and not thread_id else None,
        mentioned=kind == "dm" or replied_to_us or any(u.id == bot_id for u in msg.mentions),
        sender_is_bot=msg.author.bot or bool(msg.webhook_id),
        from_self=msg.author.id == bot_id, reply_to=reply_to, attachments=attachments)


# --- discord.py's Message back to the payload ---------------------------------------------------

def _user(user) -> dict:
    return {"id": str(user.id), "username": user.name, "global_name": getattr(user, "global_name", None),
            "bot": bool(getattr(user, "bot", False))}


def attachment_of(a: ds.Attachment) -> dict:
    """The attachment's facts; a voice message (it alone has duration_secs) is a voice note."""
    facts = {k: v for k, v in shapes.as_dict(a).items() if v is not None}
    if a.duration_secs is not None:
        facts["duration"] = facts.pop("duration_secs")
        facts["kind"] = "voice"
    return facts


def payload_from_message(message) -> tuple[dict, dict | None]:
    """A discord.py Message → (the docs-shaped payload, channel info when it is a thread)."""
    guild_id = message.guild.id if message.guild else getattr(message.channel, "guild_id", None)
    payload = {"id": str(message.id), "channel_id": str(message.channel.id), "author": _user(message.author),
               "content": message.content, "timestamp": message.created_at.isoformat(), "type": message.type.value,
               "mentions": [_user(u) for u in message.mentions],
               "attachments": [{"id": str(a.id), "filename": a.filename, "content_type": a.content_type,
                                "size": a.size, "url": a.url, "duration_secs": a.duration}
                               for a in message.attachments],
               "sticker_items": [{"id": str(s.id), "name": s.name} for s in message.stickers]}
    if guild_id:
        payload["guild_id"] = str(guild_id)
    if getattr(message.author, "nick", None):
        payload["member"] = {"nick": message.author.nick}
    if message.webhook_id:
        payload["webhook_id"] = str(message.webhook_id)
    ref = message.reference
    if ref is not None and ref.message_id:
        payload["message_reference"] = {"message_id": str(ref.message_id), "channel_id": str(ref.channel_id),
                                        "type": ref.type.value}
        resolved = ref.resolved
        if resolved is not None and hasattr(resolved, "author"):
            payload["referenced_message"] = {"id": str(resolved.id), "author": _user(resolved.author),
                                             "content": resolved.content}
    channel = None
    parent_id = getattr(message.channel, "parent_id", None)
    ctype = getattr(getattr(message.channel, "type", None), "value", None)
    if parent_id and ctype in THREAD_TYPES:
        channel = {"id": str(message.channel.id), "type": ctype, "parent_id": str(parent_id)}
    return payload, channel
