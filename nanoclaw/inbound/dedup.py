"""One dedup path for everything a platform may send twice: a message or a click is recorded in
`inbound_events` under (channel, the platform's id) before anything acts on it, and a second
arrival finds the row and is acknowledged without acting.

A message keeps its JSON in the row until it is routed (the intake's recovery routes what a dead
process accepted); a click, decided on the request, keeps none and is marked routed at once.
"""
from __future__ import annotations

import peewee

from ..db import database, hot_write
from ..models import AcceptedEvent, utcnow


def _ts(value):
    return AcceptedEvent.received_at.db_value(value)


def record(channel: str, key: str, payload: str | None = None) -> int | None:
    """Record (channel, key) as seen; the new row's id, or None when it was seen before. One
    statement in its own transaction (both engines run in autocommit), prepared before the write
    queue so its holder keeps it short."""
    postgres = isinstance(database.obj, peewee.PostgresqlDatabase)
    p = database.param
    now = _ts(utcnow())
    sql = (f"INSERT INTO inbound_events (channel, event_id, received_at, payload, routed_at) "
           f"VALUES ({p}, {p}, {p}, {p}, {p})" + (" RETURNING id" if postgres else ""))
    params = (channel, key, now, payload, None if payload is not None else now)
    try:
        with hot_write():
            cursor = database.execute_sql(sql, params)
    except peewee.IntegrityError:
        return None
    return cursor.fetchone()[0] if postgres else cursor.lastrowid


def click_key(event_id: str) -> str:
    """A click's key: apart from the messages' ids of the same platform."""
    return f"action:{event_id}"
