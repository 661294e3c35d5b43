"""Slack's Events API envelope and interactivity payloads, as the parser may read them (`channels/shapes.py`).

Only what the parser uses is declared. Numbers are read as strings where Slack sends either (a
`ts` of 1700000000.1234 or "1700000000.1234"). Real shapes are allowed: `message_changed` carries
the edited message nested under `message`, bot posts may come without a subtype, a select menu asks
for its options with `block_suggestion`. A value of another type (an object where text belongs)
makes the payload malformed: acknowledged, logged once, counted.
"""
from __future__ import annotations

from ...channels.shapes import Shape, Str


class File(Shape):
    id: Str | None = None
    name: Str | None = None
    mimetype: Str | None = None
    size: int | None = None
    url_private_download: Str | None = None
    url_private: Str | None = None
    subtype: Str | None = None       # slack_audio: a clip recorded in Slack (a voice note)
    duration_ms: int | None = None   # of an audio or video clip


class Profile(Shape):
    display_name: Str | None = None
    real_name: Str | None = None
    name: Str | None = None


class Event(Shape):
    type: Str
    subtype: Str | None = None
    channel: Str | None = None
    channel_type: Str | None = None
    ts: Str | None = None
    thread_ts: Str | None = None
    text: Str | None = None
    user: Str | None = None
    bot_id: Str | None = None
    username: Str | None = None
    user_profile: Profile | None = None
    files: list[File] = []
    hidden: bool = False
    message: Event | None = None   # message_changed: the message as it is now


class Envelope(Shape):
    type: Str
    event: Event | None = None
    challenge: Str | None = None
    event_id: Str | None = None


class ActionItem(Shape):
    action_id: Str | None = None
    value: Str | None = None


class Clicker(Shape):
    id: Str
    name: Str | None = None
    username: Str | None = None


class Container(Shape):
    channel_id: Str | None = None
    message_ts: Str | None = None


class Channel(Shape):
    id: Str | None = None


class Interaction(Shape):
    type: Str
    user: Clicker | None = None
    actions: list[ActionItem] = []
    container: Container | None = None
    channel: Channel | None = None
    response_url: Str | None = None
    trigger_id: Str | None = None


def kind_of(data) -> str:
    """'event_callback/message', 'url_verification', 'block_actions'…: for logs and counters."""
    if not isinstance(data, dict):
        return "not-an-object"
    kind = str(data.get("type") or "other")[:40]
    event = data.get("event")
    if isinstance(event, dict) and event.get("type"):
        return f"{kind}/{str(event['type'])[:40]}"
    return kind
