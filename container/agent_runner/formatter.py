"""Prompt and reply formatting: the v1 timezone + formatting rules, ported.

Stdlib only: this runs inside the sandbox and the host imports it too.

Inbound messages become one XML-ish block the agent reads:

    <context timezone="America/New_York" />
    <messages>
    <message sender="Alice" time="Jan 1, 2024, 1:30 PM" reply_to="42">
      <quoted_message from="Bob">Are you coming?</quoted_message>Yes!</message>
    </messages>

Outbound text loses its `<internal>...</internal>` blocks before a user sees it.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone as _utc_tz
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

# Fixed English names: the output must not depend on the process locale (%b would).
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_INTERNAL_RE = re.compile(r"<internal>.*?</internal>", re.DOTALL)
_XML_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"})


@dataclass(frozen=True)
class Message:
    sender_name: str
    content: str
    timestamp: str  # UTC ISO 8601, e.g. "2024-01-01T18:30:00.000Z"
    reply_to_message_id: str | None = None
    reply_to_message_content: str | None = None
    reply_to_sender_name: str | None = None


def escape_xml(s: str) -> str:
    """The v1 escape: & < > " only (attributes are always double-quoted)."""
    return s.translate(_XML_ESCAPES)


def is_valid_timezone(tz: str | None) -> bool:
    """True for an IANA name the zone database knows ('UTC', 'Asia/Tokyo')."""
    if not tz or not isinstance(tz, str):
        return False
    # ZoneInfo treats the key as a file path; keep it to plain names.
    if tz.startswith(("/", ":")) or ".." in tz or "\\" in tz or "\0" in tz:
        return False
    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return False
    return True


def resolve_timezone(tz: str | None) -> str:
    """`tz` if valid, else 'UTC' (v1: a bad zone must never break formatting)."""
    return tz if is_valid_timezone(tz) else "UTC"  # type: ignore[return-value]


def _parse_utc(utc_iso: str) -> datetime:
    dt = datetime.fromisoformat(utc_iso.strip())
    # Stored timestamps are UTC by contract; a missing offset means UTC, not local time.
    return dt.replace(tzinfo=_utc_tz.utc) if dt.tzinfo is None else dt


def format_local_time(utc_iso: str, tz: str | None) -> str:
    """'Jan 1, 2024, 1:30 PM' in `tz` (UTC if `tz` is invalid).

    Matches JS toLocaleString('en-US', {year:'numeric', month:'short', day:'numeric',
    hour:'numeric', minute:'2-digit', hour12:true}) except that a plain space stands
    before AM/PM where newer ICU emits U+202F. Raises ValueError for a bad timestamp.
    """
    local = _parse_utc(utc_iso).astimezone(ZoneInfo(resolve_timezone(tz)))
    hour12 = local.hour % 12 or 12
    meridiem = "AM" if local.hour < 12 else "PM"
    return f"{_MONTHS[local.month - 1]} {local.day}, {local.year}, {hour12}:{local.minute:02d} {meridiem}"


def _field(message: object, name: str) -> str | None:
    value = message.get(name) if isinstance(message, Mapping) else getattr(message, name, None)
    return None if value is None else str(value)


def _format_one(message: object, tz: str) -> str:
    timestamp = _field(message, "timestamp") or ""
    try:
        display_time = format_local_time(timestamp, tz)
    except ValueError:
        display_time = timestamp  # show what we have rather than drop the message
    reply_id = _field(message, "reply_to_message_id")
    reply_content = _field(message, "reply_to_message_content")
    reply_sender = _field(message, "reply_to_sender_name")
    reply_attr = f' reply_to="{escape_xml(reply_id)}"' if reply_id else ""
    quoted = (
        f'\n  <quoted_message from="{escape_xml(reply_sender)}">{escape_xml(reply_content)}</quoted_message>'
        if reply_content and reply_sender else ""
    )
    return (
        f'<message sender="{escape_xml(_field(message, "sender_name") or "")}" '
        f'time="{escape_xml(display_time)}"{reply_attr}>{quoted}{escape_xml(_field(message, "content") or "")}</message>'
    )


def format_messages(messages: Iterable[Message | Mapping[str, object]], tz: str | None) -> str:
    """The prompt block for a batch of messages, headed by the user's timezone.

    The header names the zone the times are actually shown in (the resolved one),
    so an invalid setting cannot make the header and the times disagree.
    """
    zone = resolve_timezone(tz)
    lines = [_format_one(m, zone) for m in messages]
    header = f'<context timezone="{escape_xml(zone)}" />\n'
    return header + "<messages>\n" + "\n".join(lines) + "\n</messages>"


def strip_internal_tags(text: str) -> str:
    """Drop every <internal>...</internal> block (may span lines), then trim."""
    return _INTERNAL_RE.sub("", text).strip()


def format_outbound(text: str) -> str:
    """What the user may see of the agent's text ('' means: send nothing)."""
    return strip_internal_tags(text or "")


__all__ = [
    "Message", "escape_xml", "format_local_time", "is_valid_timezone", "resolve_timezone",
    "format_messages", "strip_internal_tags", "format_outbound",
]
