"""Discord's interaction and MESSAGE_CREATE payloads, as the parsers may read them (pydantic).

Only what the parsers use is declared; snowflakes are read as strings whether they come as strings
or numbers. Real shapes are allowed: an interaction in a DM carries `user` instead of `member`, a
PING carries neither; a message may lack a member, a nick, mentions. A value of another type (a
string where `member` or `message` or `data` should be an object: the fuzzing's 500s) makes the
payload malformed: acknowledged, logged once, counted.
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, coerce_numbers_to_str=True)


class User(Model):
    id: str
    username: str | None = None
    global_name: str | None = None
    bot: bool = False


class Member(Model):
    user: User | None = None
    nick: str | None = None


class ComponentData(Model):
    custom_id: str | None = None
    component_type: int | None = None


class MessageRef(Model):
    id: str | None = None
    content: str | None = None


class ChannelRef(Model):
    id: str | None = None


class Interaction(Model):
    id: str | None = None
    type: int
    data: ComponentData | None = None
    member: Member | None = None
    user: User | None = None
    message: MessageRef | None = None
    channel_id: str | None = None
    channel: ChannelRef | None = None


class Mention(User):
    member: Member | None = None


class Attachment(Model):
    id: str | None = None
    filename: str | None = None
    content_type: str | None = None
    size: int | None = None
    url: str | None = None
    duration_secs: float | None = None  # a voice message's length (Discord sends one only for those)


class Sticker(Model):
    id: str | None = None
    name: str | None = None


class Reference(Model):
    message_id: str | None = None
    channel_id: str | None = None
    type: int = 0


class Quoted(Model):
    id: str | None = None
    author: User | None = None
    content: str | None = None


class Message(Model):
    id: str
    channel_id: str
    author: User
    content: str | None = None
    timestamp: str | None = None
    type: int = 0
    guild_id: str | None = None
    member: Member | None = None
    webhook_id: str | None = None
    mentions: list[Mention] = []
    attachments: list[Attachment] = []
    sticker_items: list[Sticker] = []
    message_reference: Reference | None = None
    referenced_message: Quoted | None = None


class Channel(Model):
    id: str | None = None
    type: int | None = None
    parent_id: str | None = None


def interaction_kind(data) -> str:
    if isinstance(data, dict):
        return f"interaction/{str(data.get('type'))[:10]}"
    return "not-an-object"
