"""Slack's Events API envelope and interactivity payloads, as the parser may read them (pydantic).

Only what the parser uses is declared. Numbers are read as strings where Slack sends either (a
`ts` of 1700000000.1234 or "1700000000.1234"). Real shapes are allowed: `message_changed` carries
the edited message nested under `message`, bot posts may come without a subtype, a select menu asks
for its options with `block_suggestion`. A value of another type (an object where text belongs)
makes the payload malformed: acknowledged, logged once, counted.
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, coerce_numbers_to_str=True)


class File(Model):
    id: str | None = None
    name: str | None = None
    mimetype: str | None = None
    size: int | None = None
    url_private_download: str | None = None
    url_private: str | None = None
    subtype: str | None = None       # slack_audio: a clip recorded in Slack (a voice note)
    duration_ms: int | None = None   # of an audio or video clip


class Profile(Model):
    display_name: str | None = None
    real_name: str | None = None
    name: str | None = None


class Event(Model):
    type: str
    subtype: str | None = None
    channel: str | None = None
    channel_type: str | None = None
    ts: str | None = None
    thread_ts: str | None = None
    text: str | None = None
    user: str | None = None
    bot_id: str | None = None
    username: str | None = None
    user_profile: Profile | None = None
    files: list[File] = []
    hidden: bool = False
    message: Event | None = None   # message_changed: the message as it is now


class Envelope(Model):
    type: str
    event: Event | None = None
    challenge: str | None = None
    event_id: str | None = None


class ActionItem(Model):
    action_id: str | None = None
    value: str | None = None


class Clicker(Model):
    id: str
    name: str | None = None
    username: str | None = None


class Container(Model):
    channel_id: str | None = None
    message_ts: str | None = None


class Channel(Model):
    id: str | None = None


class Interaction(Model):
    type: str
    user: Clicker | None = None
    actions: list[ActionItem] = []
    container: Container | None = None
    channel: Channel | None = None
    response_url: str | None = None
    trigger_id: str | None = None


def kind_of(data) -> str:
    """'event_callback/message', 'url_verification', 'block_actions'…: for logs and counters."""
    if not isinstance(data, dict):
        return "not-an-object"
    kind = str(data.get("type") or "other")[:40]
    event = data.get("event")
    if isinstance(event, dict) and event.get("type"):
        return f"{kind}/{str(event['type'])[:40]}"
    return kind
