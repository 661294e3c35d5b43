"""While the agent works on someone's message, their chat shows "typing…".

The delivery loop opens every active session at least once a second; `tick` looks there for a
chat message the agent has claimed (processing_ack 'processing') and, every TYPING_EVERY_S,
asks the chat's adapter to show its indicator (Telegram's lasts 5 s, Discord's 10 s, WhatsApp's
until the reply). A reply clears it on the platform; if the agent keeps working, the next tick
shows it again. No turn types for longer than TYPING_MAX_S, so a stuck one stops saying it works.

The same observation times each turn by the host's clock (nanoclaw_turn_seconds): from the pass that
first saw the claim to the pass that saw it gone.

The calls go out on a small pool: a slow platform never holds up a delivery, and a failed
indicator is only logged (it is a courtesy, never retried).
"""
from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .. import metrics
from ..channels.base import get_adapter
from ..sessions.store import Target

log = logging.getLogger("nanoclaw.typing")

TYPING_EVERY_S = 4.0
TYPING_MAX_S = 300.0


@dataclass
class Working:
    message_id: str
    since: float
    last_sent: float | None = None
    channel: str = ""

    def ended(self, now: float) -> None:
        metrics.TURN_SECONDS.labels(self.channel).observe(max(0.0, now - self.since))


def due(w: Working, now: float) -> bool:
    """Show the indicator now? At once for a new turn, then every TYPING_EVERY_S, up to TYPING_MAX_S."""
    if now - w.since > TYPING_MAX_S:
        return False
    return w.last_sent is None or now - w.last_sent >= TYPING_EVERY_S


_working: dict[Path, Working] = {}
_in_flight: set[Path] = set()
_lock = threading.Condition()
_pool: ThreadPoolExecutor | None = None


def claimed_chat_message(conn: sqlite3.Connection, *, tasks_asking_progress: bool = False):
    """The newest chat message the agent is working on: (id, target, platform message id) or None.
    `conn` is inbound.db with the agent's outbound.db attached as `ob` (delivery.open_session).
    With tasks_asking_progress, a scheduled run counts too when its task asked for progress (the
    host wrote that into the run's message: inbound.db is the host's own file)."""
    # from the host's pending messages (its own index) to their acks: not through every ack the
    # session ever had (a claim is only ever on a message the host still has pending)
    row = conn.execute(
        "SELECT m.id, COALESCE(m.channel_type, r.channel_type), COALESCE(m.platform_id, r.platform_id), "
        "COALESCE(m.thread_id, r.thread_id), m.content FROM messages_in m "
        "JOIN ob.processing_ack a ON a.message_id = m.id LEFT JOIN routing r ON r.id = 1 "
        "WHERE m.status = 'pending' AND a.status = 'processing' AND (m.kind = 'chat' OR (? AND m.kind = 'task' "
        "AND json_valid(m.content) AND json_extract(m.content, '$.progress') = 1)) "
        "ORDER BY m.seq DESC LIMIT 1", (int(tasks_asking_progress),)).fetchone()
    if row is None or not row[1] or not row[2]:
        return None
    try:
        platform_message_id = json.loads(row[4]).get("message_id")
    except (ValueError, AttributeError):
        platform_message_id = None
    return row[0], Target(row[1], row[2], row[3]), platform_message_id


def working(session_path: Path) -> bool:
    """A turn is under way in this session (its indicator is kept up)."""
    with _lock:
        return session_path in _working


def tick(conn: sqlite3.Connection, session_path: Path, settings, now: float | None = None) -> bool:
    """Show the indicator for this session if it is due. True if a call was sent off."""
    now = time.monotonic() if now is None else now
    found = claimed_chat_message(conn)
    with _lock:
        if found is None:
            ended = _working.pop(session_path, None)
            if ended is not None:
                ended.ended(now)
            return False
        message_id, target, platform_message_id = found
        w = _working.get(session_path)
        if w is None or w.message_id != message_id:
            if w is not None:
                w.ended(now)
            w = _working[session_path] = Working(message_id, now, channel=target.channel_type)
        if not due(w, now) or session_path in _in_flight:
            return False
        w.last_sent = now
        _in_flight.add(session_path)
    _submit(session_path, target, platform_message_id, settings)
    return True


def _submit(session_path: Path, target: Target, platform_message_id: str | None, settings) -> None:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="nanoclaw-typing")
    try:
        _pool.submit(_show, session_path, target, platform_message_id, settings)
    except RuntimeError:  # interpreter shutting down
        with _lock:
            _in_flight.discard(session_path)


def _show(session_path: Path, target: Target, platform_message_id: str | None, settings) -> None:
    try:
        show = getattr(get_adapter(target.channel_type, settings), "typing", None)
        if show is not None:
            show(target, platform_message_id)
    except Exception as exc:  # a courtesy: never retried, never fatal
        log.info("typing indicator for %s not shown: %s", target, str(exc).splitlines()[0] if str(exc) else exc)
    finally:
        with _lock:
            _in_flight.discard(session_path)
            _lock.notify_all()


def settle(timeout: float = 10.0) -> bool:
    """Wait until no indicator call is on its way (True), or the timeout passed (False)."""
    with _lock:
        return _lock.wait_for(lambda: not _in_flight, timeout)
