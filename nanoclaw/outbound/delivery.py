"""Outbound rows → channel adapters, with claims, retries and failure notices.

The agent writes messages_out (its file); the host records every outcome in
`delivered` (the host's inbound.db). A row is claimed by inserting its
`delivered` row first, so two host processes never send the same row.
"""
from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from . import typing_indicator, voice
from .progress import progress_for
from .. import metrics
from ..channels.base import DeliveryError, file_limit, get_adapter
from .outbox import outbox_copy
from .own_messages import answered_message, own_message
from ..sessions import session_schema as schema
from ..sessions import turns
from ..sessions.store import (Target, attach_outbound, file_identity, targets_of, inbound_db, outbound_db)

log = logging.getLogger("nanoclaw.delivery")

MAX_TRIES = 3               # an error we cannot classify (a bug, an unexpected exception)
BASE_BACKOFF_S = 1.0
MAX_BACKOFF_S = 300.0
# A platform that is down, overloaded or rate limiting (5xx, network, 429) is waited out this
# long before the row fails: a short outage must not cost the user a reply. It stays inside the
# active-session window (active.WINDOW_S), which is what keeps the delivery loop looking.
TRANSIENT_HORIZON_S = 45 * 60

# System ops: a capability registers a handler for its own op names (e.g. scheduling's
# `schedule_task`). handler(session_path, row, settings) applies the row on the host; nothing is
# sent to a chat, so the row's target is not checked. Handlers must be idempotent: a row whose
# application a crash interrupted is applied again at the next start.
_OPS: dict = {}
# Sessions whose delivery depends on the clock, not only on the runner's commits: a retry comes
# due, or a turn is under way (the typing indicator is shown again every few seconds). Only these
# are delivered on every full pass; the others when their outbound files change.
clock_driven: set[Path] = set()


def register_op(name: str, handler) -> None:
    _OPS[name] = handler


# After one of the agent's chat rows was delivered: fn(session_path, row, platform_id) (the history index).
_SENT: list = []


def on_sent(fn) -> None:
    key = (fn.__module__, fn.__qualname__)
    _SENT[:] = [f for f in _SENT if (f.__module__, f.__qualname__) != key] + [fn]


def is_system_op(name: str | None) -> bool:
    return name in _OPS


def backoff(tries: int, retry_after: float | None) -> float:
    """Seconds before the next try: the platform's own wait if it gave one, else 1 s, 2 s, 4 s…
    up to 5 min."""
    return max(retry_after or 0.0, min(MAX_BACKOFF_S, BASE_BACKOFF_S * 2 ** max(tries - 1, 0)))


def gives_up(tries: int, exc: Exception) -> bool:
    """After `tries` failed tries ending in `exc`, is the row failed for good? A permanent refusal
    at once; a platform's transient trouble (a non-permanent DeliveryError) once the backoffs so
    far add up to TRANSIENT_HORIZON_S; anything else after MAX_TRIES."""
    if isinstance(exc, DeliveryError):
        if exc.permanent:
            return True
        return sum(backoff(n, None) for n in range(1, tries + 1)) >= TRANSIENT_HORIZON_S
    return tries >= MAX_TRIES


def _iso(dt: datetime) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


@dataclass(frozen=True)
class Outgoing:
    id: str
    seq: int
    in_reply_to: str | None
    target: Target
    op: dict


def open_session(path: Path) -> sqlite3.Connection | None:
    """inbound.db (ours, writable) with the agent's outbound.db attached read-only."""
    if not outbound_db(path).exists() or not inbound_db(path).exists():
        return None
    conn = schema.connect(inbound_db(path))
    if not attach_outbound(conn, path):
        conn.close()  # the agent has created the file but not its tables yet (or it is not a plain file)
        return None
    return conn


def _identity(path: Path) -> tuple | None:
    """Both session databases' identities, or None while either is missing or the agent's is not a
    plain file (a link there is never followed)."""
    inbound = file_identity(inbound_db(path))
    outbound = file_identity(outbound_db(path), follow_links=False)
    return inbound + outbound if inbound and outbound else None


class KeptSessions:
    """The delivery workers' connections (inbound.db with the agent's outbound.db attached), kept
    from one pass to the next: opening and attaching took ~0.4 ms of every reply. One is used again
    only while both files are the very ones it opened, so a session folder made anew or an
    outbound.db the agent replaced gets a fresh connection. A session is delivered by one worker at
    a time (watcher.SessionPool); while it is, its connection is leased and nothing else closes it."""

    def __init__(self, limit: int = 64):
        self.limit = limit
        self._open: dict[Path, tuple[sqlite3.Connection, tuple]] = {}
        self._leased: set[Path] = set()
        self._lock = threading.Lock()

    def get(self, path: Path) -> sqlite3.Connection | None:
        identity = _identity(path)
        with self._lock:
            kept = self._open.pop(path, None)
        if kept is not None:
            conn, opened = kept
            if identity is not None and identity == opened and not conn.in_transaction:
                with self._lock:
                    self._open[path] = kept  # most recently used last
                return conn
            conn.close()
        if identity is None:
            return None
        conn = open_session(path)
        if conn is None:
            return None
        if _identity(path) != identity:  # replaced while we opened it: use it once, keep nothing
            return conn
        with self._lock:
            self._open[path] = (conn, identity)
            evicted = [self._open.pop(p)[0] for p in list(self._open)[:max(0, len(self._open) - self.limit)]
                       if p not in self._leased and p != path]
        for old in evicted:
            old.close()
        return conn

    @contextmanager
    def lease(self, path: Path) -> Iterator[sqlite3.Connection | None]:
        """The session's connection for one pass; dropped when the pass fails (whatever state it was
        left in, the next pass starts afresh)."""
        with self._lock:
            self._leased.add(path)
        try:
            conn = self.get(path)
            try:
                yield conn
            except BaseException:
                if conn is not None:
                    self.drop(path)
                raise
            finally:
                if conn is not None and not self.keeps(conn):
                    conn.close()  # a connection used once
        finally:
            with self._lock:
                self._leased.discard(path)

    def keeps(self, conn: sqlite3.Connection) -> bool:
        with self._lock:
            return any(kept is conn for kept, _ in self._open.values())

    def drop(self, path: Path) -> None:
        with self._lock:
            kept = self._open.pop(path, None)
        if kept is not None:
            kept[0].close()

    def retain(self, paths) -> None:
        """Close the connections of sessions no longer live (not one a worker is using)."""
        with self._lock:
            gone = set(self._open) - set(paths) - self._leased
        for path in gone:
            self.drop(path)

    def close(self) -> None:
        self.retain(())


def sync_acks(conn: sqlite3.Connection) -> None:
    """Copy the agent's finished claims into messages_in.status (the host's record), and time each
    triggering message the agent completed (nanoclaw_answer_seconds, by the host's clock)."""
    done = conn.execute("SELECT m.channel_type, m.timestamp, m.process_after FROM messages_in m JOIN ob.processing_ack a "
                        "ON a.message_id = m.id WHERE m.status = 'pending' AND m.trigger = 1 AND a.status = 'completed' "
                        "AND m.kind IN ('chat', 'task')").fetchall()
    now = datetime.now(timezone.utc)
    for channel, said, due in done:
        started = _parse_iso(max(said or "", due or ""))
        if started is not None:
            metrics.ANSWER_SECONDS.labels(channel or "task").observe(max(0.0, (now - started).total_seconds()))
    # per pending row, one lookup of its ack (not a list of every ack the session ever had)
    conn.execute("UPDATE messages_in SET status = (SELECT a.status FROM ob.processing_ack a "
                 "WHERE a.message_id = messages_in.id) WHERE status = 'pending' AND EXISTS "
                 "(SELECT 1 FROM ob.processing_ack a WHERE a.message_id = messages_in.id "
                 "AND a.status IN ('completed', 'failed'))")


def _parse_iso(value: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


_COLUMNS = "o.id, o.seq, o.in_reply_to, o.channel_type, o.platform_id, o.thread_id, o.content"
# The newest row the host has an outcome for: found walking down the seq index from the top, so it
# costs the few rows above it, not the session's history.
_NEWEST_SETTLED = ("SELECT m.seq FROM ob.messages_out m WHERE EXISTS (SELECT 1 FROM delivered d "
                   "WHERE d.message_out_id = m.id) ORDER BY m.seq DESC LIMIT 1")
_DUE = (f"SELECT {_COLUMNS} FROM ob.messages_out o "
        f"WHERE o.seq > COALESCE(({_NEWEST_SETTLED}), -9223372036854775808) "
        "AND NOT EXISTS (SELECT 1 FROM delivered d WHERE d.message_out_id = o.id) "
        f"UNION ALL SELECT {_COLUMNS} FROM delivered d JOIN ob.messages_out o ON o.id = d.message_out_id "
        "WHERE d.status = 'retry' AND d.next_try_at <= ? ORDER BY 2")


def due_rows(conn: sqlite3.Connection, now: str) -> list[Outgoing]:
    """New rows, and retries come due, in seq order. New means above the newest row with an
    outcome: a pass claims in seq order, so no row below that one is new. (A row the agent slips in
    below it later is its own loss, never sent; before, every pass scanned the whole history.)"""
    rows = conn.execute(_DUE, (now,)).fetchall()
    out = []
    for r in rows:
        try:
            op = json.loads(r["content"])
        except ValueError:
            op = {"op": "invalid"}
        out.append(Outgoing(r["id"], r["seq"], r["in_reply_to"],
                            Target(r["channel_type"] or "", r["platform_id"] or "", r["thread_id"]), op))
    return out


def claim(conn: sqlite3.Connection, row: Outgoing) -> bool:
    """Take the row for this process; the host's own record of what it is and where it goes is
    written with the claim (the agent may rewrite its file later, the record stays)."""
    cur = conn.execute(
        "INSERT INTO delivered (message_out_id, status, tries, seq, op, channel_type, platform_id) "
        "VALUES (?, 'sending', 0, ?, ?, ?, ?) "
        "ON CONFLICT (message_out_id) DO UPDATE SET status = 'sending' WHERE delivered.status = 'retry'",
        (row.id, row.seq, str(row.op.get("op"))[:40], row.target.channel_type, row.target.platform_id))
    return cur.rowcount == 1


STOPPED = "its turn was stopped (/stop)"


def drop_stopped(conn: sqlite3.Connection, row: Outgoing) -> None:
    """The row's outcome: never sent, its turn stopped (a retry due is dropped as well)."""
    conn.execute("INSERT INTO delivered (message_out_id, status, tries, last_error, seq, op, channel_type, platform_id) "
                 "VALUES (?, 'dropped', 0, ?, ?, ?, ?, ?) ON CONFLICT (message_out_id) DO UPDATE SET "
                 "status = 'dropped', last_error = excluded.last_error WHERE delivered.status = 'retry'",
                 (row.id, STOPPED, row.seq, str(row.op.get("op"))[:40], row.target.channel_type, row.target.platform_id))


def perform(adapter, conn, session_path: Path, row: Outgoing, settings=None) -> str | None:
    """Hand one row to its adapter; returns the platform message id, if any."""
    op, kind = row.op, row.op.get("op")
    if kind == "text":
        if settings is not None and settings.tts_url and voice.wanted(
                op, voice.chat_mode(conn), voice.answers_a_voice_note(conn, row.in_reply_to)):
            # the audio waits in neither of the session's parts: no sandbox sees it
            return voice.send(adapter, row.target, op["text"], settings, session_path, row.id, row.in_reply_to)
        return adapter.send_text(row.target, op["text"])
    if kind == "reaction" and "on_message_in" in op:
        target, pid = answered_message(conn, op["on_message_in"])
        if target != row.target:
            raise DeliveryError("a reaction goes to the message's own chat", permanent=True)
        adapter.react(target, pid, op["emoji"])
        return pid
    if kind in ("edit", "reaction"):
        pid = own_message(conn, op.get("target_seq"), row.target)
        if kind == "edit":
            adapter.edit_text(row.target, pid, op["text"])
        else:
            adapter.react(row.target, pid, op["emoji"])
        return pid
    if kind == "file":
        with outbox_copy(session_path, op.get("path"), file_limit(adapter)) as path:
            return adapter.send_file(row.target, path, op.get("text"))
    raise DeliveryError(f"unknown outbound op {kind!r}", permanent=True)


def deliver_session(session_path: Path, settings, now: datetime | None = None,
                    kept: KeptSessions | None = None) -> int:
    """Deliver every due row of one session. Returns how many were delivered. With `kept`, the
    session's connection comes from there and stays open afterwards."""
    if kept is None:
        conn = open_session(session_path)
        try:
            return _deliver(conn, session_path, settings, now) if conn is not None else 0
        finally:
            if conn is not None:
                conn.close()
    with kept.lease(session_path) as conn:
        return _deliver(conn, session_path, settings, now) if conn is not None else 0


def _deliver(conn: sqlite3.Connection, session_path: Path, settings, now: datetime | None) -> int:
    now = now or datetime.now(timezone.utc)
    delivered = 0
    rows = due_rows(conn, _iso(now))
    allowed = targets_of(conn) if rows else set()
    stopped = turns.stopped(conn) if rows else set()
    for row in rows:
        if row.in_reply_to in stopped:  # a turn stopped with /stop: what it had not sent stays unsent
            drop_stopped(conn, row)
            continue
        # the claim is the one commit (one fsync) before a send; the acks' bookkeeping waits
        # until after the sends, off the answer's path
        if not claim(conn, row):
            continue
        try:
            handler = _OPS.get(row.op.get("op"))
            if handler is not None:
                platform_id = handler(session_path, row, settings)
            else:
                if row.target not in allowed:
                    raise DeliveryError(f"target {row.target} is not this session's chat or destination",
                                        permanent=True)
                adapter = get_adapter(row.target.channel_type, settings)
                platform_id = perform(adapter, conn, session_path, row, settings)
        except Exception as exc:  # any adapter failure keeps the row for a retry
            _failed(conn, settings, row, exc, now)
            continue
        conn.execute("UPDATE delivered SET status = 'delivered', platform_message_id = ?, "
                     "tries = tries + 1, delivered_at = ?, last_error = NULL WHERE message_out_id = ?",
                     (platform_id, _iso(datetime.now(timezone.utc)), row.id))
        delivered += 1
        metrics.REPLIES_OUT.labels(row.target.channel_type, "sent").inc()
        if handler is None:
            for hook in _SENT:
                try:
                    hook(session_path, row, platform_id)
                except Exception as exc:  # noqa: BLE001 - sent is sent; the hook's failure is logged
                    log.warning("after delivering %s: %s", row.id, exc)
    sync_acks(conn)
    typing_indicator.tick(conn, session_path, settings)
    if settings is not None:
        progress_for(settings).tick(conn, session_path)
    if typing_indicator.working(session_path) or has_retries(conn):
        clock_driven.add(session_path)
    else:
        clock_driven.discard(session_path)
    return delivered


def has_retries(conn: sqlite3.Connection) -> bool:
    return conn.execute("SELECT 1 FROM delivered WHERE status = 'retry' LIMIT 1").fetchone() is not None


# What a reply a dead predecessor was sending is marked with (docs/security.md: lost, never doubled).
INTERRUPTED = "interrupted by a restart while sending; counted as sent"


def settle_interrupted(session_path: Path) -> int:
    """At start-up, rows a dead predecessor left 'sending'. A chat send was on its way to the
    platform (which has no idempotency key): it counts as delivered rather than risk the user
    getting the reply twice. A system op is applied again (its handler is idempotent)."""
    conn = open_session(session_path)
    if conn is None:
        return 0
    try:
        rows = conn.execute("SELECT d.message_out_id, o.content FROM delivered d JOIN ob.messages_out o "
                            "ON o.id = d.message_out_id WHERE d.status = 'sending'").fetchall()
        for row_id, content in rows:
            try:
                op = json.loads(content).get("op")
            except (ValueError, AttributeError):
                op = None
            if is_system_op(op):
                conn.execute("UPDATE delivered SET status = 'retry', next_try_at = ? WHERE message_out_id = ?",
                             (_iso(datetime.now(timezone.utc)), row_id))
            else:
                conn.execute("UPDATE delivered SET status = 'delivered', last_error = ? WHERE message_out_id = ?",
                             (INTERRUPTED, row_id))
        return len(rows)
    finally:
        conn.close()


def _failed(conn, settings, row: Outgoing, exc: Exception, now: datetime) -> None:
    tries = conn.execute("SELECT tries FROM delivered WHERE message_out_id = ?", (row.id,)).fetchone()[0] + 1
    retry_after = exc.retry_after if isinstance(exc, DeliveryError) else None
    reason = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
    if gives_up(tries, exc):
        conn.execute("UPDATE delivered SET status = 'failed', tries = ?, last_error = ? WHERE message_out_id = ?",
                     (tries, reason, row.id))
        log.error("delivery of %s to %s failed for good after %d tries: %s", row.id, row.target, tries, reason)
        metrics.REPLIES_OUT.labels(row.target.channel_type, "failed").inc()
        if row.op.get("op") not in ("edit", "reaction"):  # a lost change to a message is no lost reply
            _tell_user(conn, settings, row, reason)
        return
    wait = backoff(tries, retry_after)
    conn.execute("UPDATE delivered SET status = 'retry', tries = ?, last_error = ?, next_try_at = ? "
                 "WHERE message_out_id = ?", (tries, reason, _iso(now + timedelta(seconds=wait)), row.id))
    log.warning("delivery of %s to %s failed (try %d), retrying in %.1fs: %s", row.id, row.target, tries, wait, reason)
    metrics.REPLIES_OUT.labels(row.target.channel_type, "retry").inc()


def _tell_user(conn, settings, row: Outgoing, reason: str) -> None:
    """Best effort: say in the session's own chat that a reply could not be delivered."""
    home = conn.execute("SELECT channel_type, platform_id, thread_id FROM routing").fetchone()
    if home is None:
        return
    target = Target(*home)  # this connection holds the session's write transaction: read through it
    try:
        adapter = get_adapter(target.channel_type, settings)
        adapter.send_text(target, f"(I could not deliver a reply: {reason})")
    except Exception as exc:  # the platform itself is down; the log line above is all we can do
        log.error("could not tell %s about the failed delivery: %s", target, exc)
