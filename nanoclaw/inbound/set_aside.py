"""Events a listener program set aside: one a running web program refused REFUSALS_TO_SET_ASIDE times in a
row (channels/handoff.Offering), so the listener's stream moves on instead of offering it for ever.

The listener writes the row itself (the web program is the one refusing); the payload is kept as it came
for NANOCLAW_KEEP_HISTORY_DAYS, with the reason, so nothing is lost without a trace: the owner sees the
open ones on the page's "Waiting on you" and in `doctor`, and dismisses them there.
"""
from __future__ import annotations

import json
import logging
from datetime import datetime

import peewee as pw

from ..db import connected
from ..models import Base, utcnow

log = logging.getLogger("nanoclaw.set_aside")


class SetAsideEvent(Base):
    channel = pw.CharField()
    event_key = pw.CharField()
    reason = pw.TextField()
    payload = pw.TextField()
    set_aside_at = pw.DateTimeField(default=utcnow)
    dismissed_at = pw.DateTimeField(null=True)

    class Meta:
        table_name = "set_aside_events"


def keep(channel: str, event_key: str, reason: str, payload) -> bool:
    """Keep one event that will not be offered again; False when it could not be written (the listener
    then goes on offering it: nothing is dropped unrecorded)."""
    try:
        with connected():
            SetAsideEvent.create(channel=channel, event_key=str(event_key)[:255], reason=reason,
                                 payload=json.dumps(payload, separators=(",", ":")))
    except pw.PeeweeException as exc:
        log.error("could not keep the %s event %s aside (%s); offering it again", channel, event_key, exc)
        return False
    log.error("set aside the %s event %s: the web program refused it %s; it is kept for the owner (the page's "
              "\"Waiting on you\", doctor) and the stream goes on", channel, event_key, reason)
    return True


def open_ones(limit: int = 50) -> list[SetAsideEvent]:
    return list(SetAsideEvent.select().where(SetAsideEvent.dismissed_at.is_null())
                .order_by(SetAsideEvent.id.desc()).limit(limit))


def dismiss(row_id: int) -> bool:
    return SetAsideEvent.update(dismissed_at=utcnow()).where(
        SetAsideEvent.id == row_id, SetAsideEvent.dismissed_at.is_null()).execute() == 1


def prune(cutoff: datetime) -> int:
    return SetAsideEvent.delete().where(SetAsideEvent.set_aside_at < cutoff).execute()
