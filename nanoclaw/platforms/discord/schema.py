"""Discord's interaction and MESSAGE_CREATE payloads, as the parsers may read them (`channels/shapes.py`).

Only what the parsers use is declared; snowflakes are read as strings whether they come as strings
or numbers. Real shapes are allowed: an interaction in a DM carries `user` instead of `member`, a
PING carries neither; a message may lack a member, a nick, mentions. A value of another type (a
string where `member` or `message` or `data` should be an object: the fuzzing's 500s) makes the
payload malformed: acknowledged, logged once, counted.
"""
from __future__ import annotations

from ...channels.shapes import Shape, Str


class User(Shape):
    id: Str
    username: Str | None = None
    global_name: Str | None = None
    bot: bool = False


class Member(Shape):
    user: User | None = None
    nick: Str | None = None


class ComponentData(Shape):
    custom_id: Str | None = None
    component_type: int | None = None


class MessageRef(Shape):
    id: Str | None = None
    content: Str | None = None


class ChannelRef(Shape):
    id: Str | None = None


class Interaction(Shape):
    id: Str | None = None
    type: int
    data: ComponentData | None = None
    member: Member | None = None
    user: User | None = None
    message: MessageRef | None = None
    channel_id: Str | None = None
    channel: ChannelRef | None = None


class Mention(User):
    member: Member | None = None


class Attachment(Shape):
    id: Str | None = None
    filename: Str | None = None
    content_type: Str | None = None
    size: int | None = None
    url: Str | None = None
    duration_secs: float | None = None  # a voice message's length (Discord sends one only for those)


class Sticker(Shape):
    id: Str | None = None
    name: Str | None = None


class Reference(Shape):
    message_id: Str | None = None
    channel_id: Str | None = None
    type: int = 0


class Quoted(Shape):
    id: Str | None = None
    author: User | None = None
    content: Str | None = None


class Message(Shape):
    id: Str
    channel_id: Str
    author: User
    content: Str | None = None
    timestamp: Str | None = None
    type: int = 0
    guild_id: Str | None = None
    member: Member | None = None
    webhook_id: Str | None = None
    mentions: list[Mention] = []
    attachments: list[Attachment] = []
    sticker_items: list[Sticker] = []
    message_reference: Reference | None = None
    referenced_message: Quoted | None = None


class Channel(Shape):
    id: Str | None = None
    type: int | None = None
    parent_id: Str | None = None


def interaction_kind(data) -> str:
    if isinstance(data, dict):
        return f"interaction/{str(data.get('type'))[:10]}"
    return "not-an-object"
