"""Webhook intake: accept an event (dedup + keep it), acknowledge, then route it off the request.

The acknowledgement waits only for one insert into `inbound_events` (the dedup row, which now
carries the event as JSON until it is routed). Routing (chat, sender gate, wirings, session
write, wake) runs on this process's intake thread, which takes what the request threads queued
in batches. Nothing is lost to a crash between the two: a row with a payload and no routed_at is
routed by the recovery pass (at start-up and every few seconds, in the process holding the
scheduler lock). Routing twice is harmless: the session write is keyed by the platform's event
id and the approval rows are unique per chat and sender.

Without an intake thread (a plain create_app in a test, the dev server, a CLI), accepted events
are routed inline on the request thread: the same code, only not deferred.
"""
from __future__ import annotations

import json
import logging
import queue
import threading
import time
from contextlib import nullcontext
from datetime import timedelta


from . import dedup, lookups, router
from ..channels.base import get_adapter
from ..channels.events import InboundEvent, event_from_json, event_to_json
from ..db import database, deferring, flush_deferred, hot_write
from ..models import AcceptedEvent
from ..models import utcnow
from ..sessions import store

log = logging.getLogger("nanoclaw.intake")

BATCH = 200               # events routed per round of the intake thread
RECOVER_AFTER_S = 30.0    # an unrouted row this old belongs to a process that died (or is far behind)
GIVE_UP_S = 3600.0        # an event that failed to route for an hour is logged in full and set aside


def _ts(value):
    return AcceptedEvent.received_at.db_value(value)


def accept(event: InboundEvent) -> int | None:
    """Record the event for dedup and keep it until routed. The id of its row; None if the
    platform sent it before (acknowledge and ignore)."""
    return dedup.record(event.channel, event.event_id, json.dumps(event_to_json(event)))


def _load(ids: list[int]) -> list[tuple[int, InboundEvent]]:
    """The accepted, not yet routed events among ids, oldest first."""
    p = database.param
    rows = database.execute_sql(
        f"SELECT id, payload FROM inbound_events WHERE id IN ({', '.join([p] * len(ids))})"
        " AND routed_at IS NULL AND payload IS NOT NULL ORDER BY id", tuple(ids)).fetchall()
    events = []
    for row_id, payload in rows:
        try:
            events.append((row_id, event_from_json(json.loads(payload))))
        except (ValueError, TypeError) as exc:  # a payload we cannot read: mark it, never loop on it
            log.error("accepted event %s is unreadable and is skipped: %s", row_id, exc)
            events.append((row_id, None))
    return events


def enrich(event: InboundEvent, settings) -> InboundEvent:
    """What the platform is asked before routing and never while the request waits (a Slack
    user's name): the adapter's optional enrich(event). A failure routes the event as it came."""
    try:
        fill = getattr(get_adapter(event.channel, settings), "enrich", None)
        return fill(event) if fill is not None else event
    except Exception as exc:
        log.warning("could not complete %s event %s before routing: %s", event.channel, event.event_id, exc)
        return event


def _mark_routed(ids: list[int]) -> None:
    """One commit: the events marked routed, with the writes their routing deferred (the history index)."""
    p = database.param
    with hot_write(), database.atomic():
        flush_deferred()
        database.execute_sql(f"UPDATE inbound_events SET routed_at = {p}, payload = NULL WHERE id IN "
                             f"({', '.join([p] * len(ids))})", (_ts(utcnow()), *ids))


def _collector(woken: dict):
    """A wake(session) that only notes the session: the real wakes run after the commit."""
    return lambda session: woken.setdefault(session.id, session)


def segments(events: list[tuple[int, InboundEvent | None]]) -> list[tuple[bool, list]]:
    """Split a round, in order, into (batched, events) runs. An event with attachments is a run
    of its own, routed outside any batch: its files are downloaded while routing, and no other
    session's write may wait on a download (nor the delivery thread on that session's file)."""
    runs: list[tuple[bool, list]] = []
    for item in events:
        alone = item[1] is not None and bool(item[1].attachments)
        if alone or not runs or not runs[-1][0]:
            runs.append((not alone, [item]))
        else:
            runs[-1][1].append(item)
    return runs


def route_accepted(ids: list[int], settings, wake) -> int:
    """Route these accepted events (those not routed yet), in order, and mark them routed.

    A round's session writes share one transaction per session (store.batched), and the wakes
    run after it commits, so a woken agent finds its messages. An event whose routing fails
    stays unrouted: the recovery pass tries it again (and gives up after an hour, logging the
    whole event), so one bad event never blocks the others."""
    routed = 0
    with deferring():
        for start in range(0, len(ids), BATCH):
            routed += _route_batch(ids[start:start + BATCH], settings, wake)
    return routed


def _route_batch(batch: list[int], settings, wake) -> int:
    routed = 0
    # platform look-ups first: no session's batch transaction waits on the network
    loaded = [(row_id, event and enrich(event, settings)) for row_id, event in _load(batch)]
    for batched, events in segments(loaded):
        done, woken = [], {}
        collect = _collector(woken)
        with store.batched() if batched else nullcontext(), lookups.routing_round():
            for row_id, event in events:
                if event is not None:
                    try:
                        result = router.route(event, settings, wake=collect, accepted=True)
                        routed += 1
                    except Exception:
                        lookups.forget()
                        log.exception("routing %s event %s failed; it will be retried", event.channel,
                                      event.event_id)
                        continue
                    if not result.written:
                        lookups.forget()  # a gate or a drop may have changed chats, wirings or roles
                done.append(row_id)
        if done:
            _mark_routed(done)
        for session in woken.values():
            wake(session)
    return routed


def unrouted(older_than_s: float) -> list[int]:
    """Accepted events still waiting to be routed after older_than_s seconds."""
    p = database.param
    cutoff = _ts(utcnow() - timedelta(seconds=older_than_s))
    rows = database.execute_sql(f"SELECT id FROM inbound_events WHERE routed_at IS NULL AND payload IS NOT NULL"
                                f" AND received_at <= {p} ORDER BY id", (cutoff,)).fetchall()
    return [r[0] for r in rows]


def _give_up(ids: list[int]) -> None:
    p = database.param
    for row_id, payload in database.execute_sql(
            f"SELECT id, payload FROM inbound_events WHERE id IN ({', '.join([p] * len(ids))})", tuple(ids)):
        log.error("giving up on accepted event %s after %.0f minutes of failed routing: %s", row_id,
                  GIVE_UP_S / 60, payload)
    _mark_routed(ids)


def recover(settings, wake, older_than_s: float = RECOVER_AFTER_S) -> int:
    """Route what a dead process accepted and never routed (or what failed to route)."""
    with database.connection_context():
        ids = unrouted(older_than_s)
        if not ids:
            return 0
        stale = set(unrouted(GIVE_UP_S))
        if stale:
            _give_up(sorted(stale))
        ids = [i for i in ids if i not in stale]
        log.warning("routing %d accepted event(s) left unrouted (a process stopped before routing them, "
                    "or routing failed)", len(ids))
        return route_accepted(ids, settings, wake)


class IntakeThread:
    """One per web process: routes what this process's request threads accepted."""

    def __init__(self, settings, wake):
        self.settings = settings
        self.wake = wake  # connected once the background jobs run in this process
        self._queue: queue.Queue[int | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="nanoclaw-intake", daemon=True)
        self._pending = 0
        self._cond = threading.Condition()

    def start(self) -> IntakeThread:
        self._thread.start()
        return self

    def submit(self, ids: list[int]) -> None:
        with self._cond:
            self._pending += len(ids)
        for row_id in ids:
            self._queue.put(row_id)

    def _take(self) -> list[int] | None:
        first = self._queue.get()
        if first is None:
            return None
        ids = [first]
        while len(ids) < BATCH:
            try:
                nxt = self._queue.get_nowait()
            except queue.Empty:
                break
            if nxt is None:
                self._queue.put(None)  # stop after this round
                break
            ids.append(nxt)
        return ids

    def _run(self) -> None:
        while True:
            ids = self._take()
            if ids is None:
                return
            try:
                with database.connection_context():
                    route_accepted(ids, self.settings, self.wake)
            except Exception:  # the database is away: the rows stay and the recovery pass retries them
                log.exception("routing %d accepted event(s) failed; they will be retried", len(ids))
                time.sleep(1)
            finally:
                with self._cond:
                    self._pending -= len(ids)
                    self._cond.notify_all()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """True once everything submitted so far was routed (tests and shutdown)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._pending == 0, timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """Route what is queued (bounded), then end; leftovers go to the next recovery pass."""
        self._queue.put(None)
        self._thread.join(timeout)
