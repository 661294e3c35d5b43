"""What a platform tells the host, in one shape: a message (InboundEvent), a button click (Action),
and the JSON an accepted event is kept as until it is routed (and replayed after an approval).

Every adapter parses into these; intake, the router and approvals read them. Nothing here does
I/O: it is the vocabulary the rest of the pipe shares.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone

AHEAD_S = 300              # a platform's time this far past its reference is a lie (or a wrong clock)
BEHIND_S = 7 * 86400       # and this far before it, too: a backlog older than a week keeps its reference
_LAST_S = 253402300799     # 9999-12-31T23:59:59Z, the last second datetime can show


def seconds(value) -> float | None:
    """A platform's number of seconds (int, float or its text) as a finite float; None for anything
    else (a bool, NaN, infinity, a word, a number past what a float holds)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        out = float(value)
    except (ValueError, OverflowError):
        return None
    return out if math.isfinite(out) else None


def trusted_time(claimed, reference=None, now: float | None = None) -> float:
    """When a message was said, as epoch seconds the host can keep (pure). Every time a platform sends is
    untrusted: a sender's client sets Signal's, any homeserver Matrix's. `claimed` more than AHEAD_S after
    `reference` or more than BEHIND_S before it is replaced by the reference; the reference is a time the
    platform's own server set (Signal's serverReceivedTimestamp, Matrix's now minus unsigned.age), else now,
    and itself no later than now + AHEAD_S."""
    now = time.time() if now is None else now
    ref = seconds(reference)
    if ref is None or not BEHIND_S < ref <= now + AHEAD_S:  # never before the first week of 1970 either
        ref = now
    at = seconds(claimed)
    if at is None or at > ref + AHEAD_S or at < ref - BEHIND_S:
        return ref
    return at


def iso_utc(epoch_seconds: float) -> str:
    """An epoch time as UTC ISO 8601 with milliseconds and Z (InboundEvent.timestamp); never raises
    (a time datetime cannot show is shown as the nearest one it can)."""
    at = seconds(epoch_seconds)
    dt = datetime.fromtimestamp(min(max(at if at is not None else time.time(), 0.0), _LAST_S), tz=timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def said_at(claimed, reference=None, now: float | None = None) -> str:
    """trusted_time as InboundEvent.timestamp."""
    return iso_utc(trusted_time(claimed, reference, now))


@dataclass(frozen=True)
class ReplyTo:
    message_id: str
    sender_name: str | None = None
    text: str | None = None


@dataclass(frozen=True)
class InboundEvent:
    channel: str
    event_id: str                    # the platform's id for dedup
    chat_id: str
    kind: str                        # dm | group | thread
    sender_id: str                   # platform user id (the user is f"{channel}:{sender_id}")
    sender_name: str
    text: str
    timestamp: str                   # UTC ISO
    thread_id: str | None = None
    message_id: str | None = None
    mentioned: bool = False          # platform-confirmed mention of this bot (a DM counts)
    sender_is_bot: bool = False
    from_self: bool = False          # our own bot's message: never routed back in
    reply_to: ReplyTo | None = None
    attachments: tuple[dict, ...] = ()
    chat_name: str | None = None     # the group's title, when the platform sends it (for approval cards)
    thread_root: str | None = None   # a top-level message that can start a thread: that thread's id
    album: str | None = None         # the platform's id for items sent together (Telegram's media_group_id)

    @property
    def user_id(self) -> str:
        return f"{self.channel}:{self.sender_id}"

    def content(self) -> dict:
        """The JSON stored in messages_in.content (what the runner formats)."""
        body = {"text": self.text, "sender": self.sender_name, "sender_id": self.user_id,
                "message_id": self.message_id}
        if self.reply_to:
            body["reply_to"] = {"id": self.reply_to.message_id, "sender": self.reply_to.sender_name,
                                "text": self.reply_to.text}
        if self.attachments:
            body["attachments"] = list(self.attachments)
        if self.album:
            body["album"] = self.album
        return body


@dataclass(frozen=True)
class Action:
    """A button click: `<prefix>-<id>:<value>` (fits Telegram's 64-byte callback_data)."""
    channel: str
    action_id: str
    user_id: str                      # "<channel>:<platform user id>" of whoever clicked
    chat_id: str | None = None
    message_id: str | None = None     # the card's platform message id (to edit it in place)
    event_id: str | None = None       # for dedup
    raw: dict | None = None           # what the platform needs to acknowledge it (e.g. callback id)
    origin: str = "chat"              # chat: a card's button; page: the logged-in operator's page
    user_name: str | None = None      # the clicker's display name, when the platform sends it

    @property
    def prefix(self) -> str:
        return self.action_id.split("-", 1)[0]


_EVENT_FIELDS = tuple(InboundEvent.__dataclass_fields__)


def event_to_json(event: InboundEvent) -> dict:
    """The event as JSON-ready data (by hand: dataclasses.asdict deep-copies, at a cost every
    webhook would pay)."""
    data = {name: getattr(event, name) for name in _EVENT_FIELDS}
    data["reply_to"] = asdict(event.reply_to) if event.reply_to else None
    data["attachments"] = [dict(a) for a in event.attachments]
    return data


def event_from_json(data: dict) -> InboundEvent:
    """The event back from event_to_json's data; fields a newer version added are left out."""
    data = dict(data)
    if data.get("reply_to"):
        data["reply_to"] = ReplyTo(**data["reply_to"])
    data["attachments"] = tuple(data.get("attachments") or ())
    return InboundEvent(**{k: v for k, v in data.items() if k in InboundEvent.__dataclass_fields__})
