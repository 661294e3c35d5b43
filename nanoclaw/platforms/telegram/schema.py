"""Telegram's Bot API update, as the parser may read it (validated at the edge, `channels/shapes.py`).

Only what the parser uses is declared; everything else is ignored. Shapes Telegram really sends
are allowed: a message without `from` (channel posts), an anonymous group admin (`from` is
GroupAnonymousBot and `sender_chat` is the group), a chat without `type`, an inaccessible message
(date 0) under a button click. A value of the wrong type (a string where an object belongs) makes
the whole update malformed: it is acknowledged, logged once and counted, never half-read.
"""
from __future__ import annotations

from ...channels.shapes import Shape, field


class User(Shape):
    id: int
    is_bot: bool = False
    first_name: str = ""
    last_name: str | None = None
    username: str | None = None


class Chat(Shape):
    id: int
    type: str | None = None
    title: str | None = None
    is_forum: bool | None = None
    first_name: str | None = None
    last_name: str | None = None
    username: str | None = None


class Entity(Shape):
    type: str
    offset: int = 0
    length: int = 0
    user: User | None = None


class File(Shape):
    file_id: str | None = None
    file_name: str | None = None
    mime_type: str | None = None
    file_size: int | None = None
    duration: int | None = None     # voice, audio, video, video_note: seconds
    is_animated: bool = False       # a sticker drawn by Lottie, not a picture
    is_video: bool = False          # a sticker that is a WebM video


class PhotoSize(File):
    width: int = 0
    height: int = 0


class Message(Shape):
    message_id: int
    date: int
    chat: Chat
    sender: User | None = field(default=None, name="from")
    sender_chat: Chat | None = None
    text: str | None = None
    caption: str | None = None
    entities: list[Entity] = []
    caption_entities: list[Entity] = []
    reply_to_message: Message | None = None
    message_thread_id: int | None = None
    is_topic_message: bool = False
    edit_date: int | None = None
    photo: list[PhotoSize] = []
    media_group_id: str | None = None  # the photos of one album arrive as one update each, with this
    document: File | None = None
    audio: File | None = None
    video: File | None = None
    voice: File | None = None
    video_note: File | None = None
    animation: File | None = None
    sticker: File | None = None


class CallbackQuery(Shape):
    id: str
    sender: User = field(name="from")
    message: Message | None = None
    data: str | None = None


class Update(Shape):
    update_id: int
    message: Message | None = None
    edited_message: Message | None = None
    channel_post: Message | None = None
    edited_channel_post: Message | None = None
    callback_query: CallbackQuery | None = None


KINDS = ("message", "edited_message", "channel_post", "edited_channel_post", "callback_query")


def kind_of(data) -> str:
    """The update's kind, for logs and counters, read from the raw dict (even a malformed one)."""
    if isinstance(data, dict):
        return next((k for k in KINDS if k in data), "other")
    return "not-an-object"
