"""What the matrix-sync program hands over, and the Matrix events in it (`channels/shapes.py`).

The hand-over is our own envelope around one event exactly as /sync returned it:

    {"kind": "event", "room_id": "!abc:example.org", "members": 2, "event": {<a client event>}}
    {"kind": "invite", "room_id": "!abc:example.org", "inviter": "@alice:example.org",
     "is_direct": true, "event": {<the m.room.member invite>}}

Only what the parser uses is declared; unknown keys are ignored (Matrix adds fields freely). A value
of another type where a string belongs makes the hand-over malformed: answered, logged, counted.
"""
from __future__ import annotations

from typing import Any

from ...channels.shapes import Shape, field


class InReplyTo(Shape):
    event_id: str | None = None


class RelatesTo(Shape):
    rel_type: str | None = None
    event_id: str | None = None
    key: str | None = None                            # m.annotation: the reaction's emoji
    is_falling_back: bool = False                     # m.thread: a client without threads sees a reply
    in_reply_to: InReplyTo | None = field(default=None, name="m.in_reply_to")


class Mentions(Shape):
    user_ids: list[str] = []
    room: bool = False


class FileInfo(Shape):
    mimetype: str | None = None
    size: int | None = None
    duration: int | None = None                       # milliseconds
    w: int | None = None
    h: int | None = None


class Content(Shape):
    msgtype: str | None = None
    body: str | None = None
    format: str | None = None
    formatted_body: str | None = None
    filename: str | None = None                       # with a caption, body is the caption (Matrix 1.10)
    url: str | None = None                            # mxc://server/media-id
    info: FileInfo | None = None
    relates_to: RelatesTo | None = field(default=None, name="m.relates_to")
    mentions: Mentions | None = field(default=None, name="m.mentions")
    new_content: dict[str, Any] | None = field(default=None, name="m.new_content")
    voice: dict[str, Any] | None = field(default=None, name="org.matrix.msc3245.voice")
    membership: str | None = None
    is_direct: bool = False
    displayname: str | None = None


class Unsigned(Shape):
    age: int | None = None                             # ms since the event was sent, by our homeserver's clock


class Event(Shape):
    type: str
    event_id: str
    sender: str
    origin_server_ts: int = 0                          # set by the sender's homeserver: any server can lie
    unsigned: Unsigned = field(default_factory=Unsigned)
    content: Content = field(default_factory=Content)
    state_key: str | None = None


class Handover(Shape):
    kind: str                                          # event | invite
    room_id: str
    event: Event
    members: int = 0                                   # joined members of the room as the listener saw them
    room_name: str | None = None
    sender_name: str | None = None                     # the sender's display name in the room
    inviter: str | None = None
    is_direct: bool = False


def kind_of(data) -> str:
    """For logs and counters, read from the raw hand-over (even a malformed one)."""
    if not isinstance(data, dict):
        return "not-an-object"
    event = data.get("event") if isinstance(data.get("event"), dict) else {}
    return f"{data.get('kind', '?')}/{event.get('type', '?')}"
