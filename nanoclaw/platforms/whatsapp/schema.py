"""The WhatsApp Cloud API webhook body, as the parser may read it (validated at the edge, `channels/shapes.py`).

Only what the parser uses is declared. Real shapes are allowed: status-only callbacks (sent,
delivered, read, failed) with no messages, reactions (and their removal, an empty emoji), message
types we do not route (they are acknowledged). A value of another type makes the body malformed:
acknowledged, logged once, counted.
"""
from __future__ import annotations

from ...channels.shapes import Shape, Str, field


class Text(Shape):
    body: Str = ""


class Media(Shape):
    id: Str | None = None
    mime_type: Str | None = None
    filename: Str | None = None
    caption: Str | None = None
    voice: bool = False        # audio recorded in the chat (a voice note), not a file
    animated: bool = False     # a sticker that moves


class Location(Shape):
    latitude: float | None = None
    longitude: float | None = None
    name: Str | None = None
    address: Str | None = None


class Button(Shape):
    text: Str = ""


class Choice(Shape):
    id: Str | None = None
    title: Str | None = None


class Interactive(Shape):
    type: Str | None = None
    button_reply: Choice | None = None
    list_reply: Choice | None = None


class Context(Shape):
    id: Str | None = None


class Message(Shape):
    id: Str
    sender: Str = field(name="from")  # a Python keyword
    timestamp: Str | None = None
    type: Str | None = None
    text: Text | None = None
    button: Button | None = None
    interactive: Interactive | None = None
    image: Media | None = None
    document: Media | None = None
    audio: Media | None = None
    video: Media | None = None
    sticker: Media | None = None
    location: Location | None = None
    context: Context | None = None



class Profile(Shape):
    name: Str | None = None


class Contact(Shape):
    wa_id: Str | None = None
    profile: Profile | None = None


class Status(Shape):
    id: Str | None = None
    status: Str | None = None
    errors: list[dict] = []


class Value(Shape):
    contacts: list[Contact] = []
    messages: list[dict] = []       # each read as a Message on its own, so one bad message names itself
    statuses: list[Status] = []


class Change(Shape):
    field: Str | None = None
    value: Value


class Entry(Shape):
    id: Str | None = None
    changes: list[Change]


class Body(Shape):
    object: Str | None = None
    entry: list[Entry]


def kind_of(data) -> str:
    """'messages/text', 'statuses', …: for logs and counters."""
    try:
        value = data["entry"][0]["changes"][0]["value"]
        if value.get("messages"):
            return f"messages/{str(value['messages'][0].get('type') or 'other')[:30]}"
        return "statuses" if value.get("statuses") else "other"
    except (KeyError, IndexError, TypeError, AttributeError):
        return "not-an-entry" if isinstance(data, dict) else "not-an-object"
