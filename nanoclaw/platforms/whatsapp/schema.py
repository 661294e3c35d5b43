"""The WhatsApp Cloud API webhook body, as the parser may read it (validated at the edge, pydantic).

Only what the parser uses is declared. Real shapes are allowed: status-only callbacks (sent,
delivered, read, failed) with no messages, reactions (and their removal, an empty emoji), message
types we do not route (they are acknowledged). A value of another type makes the body malformed:
acknowledged, logged once, counted.
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, coerce_numbers_to_str=True)


class Text(Model):
    body: str = ""


class Media(Model):
    id: str | None = None
    mime_type: str | None = None
    filename: str | None = None
    caption: str | None = None
    voice: bool = False        # audio recorded in the chat (a voice note), not a file
    animated: bool = False     # a sticker that moves


class Location(Model):
    latitude: float | None = None
    longitude: float | None = None
    name: str | None = None
    address: str | None = None


class Button(Model):
    text: str = ""


class Choice(Model):
    id: str | None = None
    title: str | None = None


class Interactive(Model):
    type: str | None = None
    button_reply: Choice | None = None
    list_reply: Choice | None = None


class Context(Model):
    id: str | None = None


class Message(Model):
    id: str
    sender: str
    timestamp: str | None = None
    type: str | None = None
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

    @classmethod
    def read(cls, data) -> "Message":
        """WhatsApp names the sender `from`, a Python keyword: renamed before validation."""
        if isinstance(data, dict) and "from" in data:
            data = {**data, "sender": data["from"]}
        return cls.model_validate(data)


class Profile(Model):
    name: str | None = None


class Contact(Model):
    wa_id: str | None = None
    profile: Profile | None = None


class Status(Model):
    id: str | None = None
    status: str | None = None
    errors: list[dict] = []


class Value(Model):
    contacts: list[Contact] = []
    messages: list[dict] = []       # each validated by Message.read, so one bad message names itself
    statuses: list[Status] = []


class Change(Model):
    field: str | None = None
    value: Value


class Entry(Model):
    id: str | None = None
    changes: list[Change]


class Body(Model):
    object: str | None = None
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
