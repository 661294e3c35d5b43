"""A long turn shows one status message in its chat, edited in place, removed at the end.

A turn still running after NANOCLAW_PROGRESS_AFTER_S (10 s) gets a message in the chat of the
person's message it answers: "⏳ Working… 0:42 · running `pytest`". What it says comes from the
agent's side (the runner's few words for the tool it runs, container_state.tool_subject), so the
host only ever puts it in that one message of the host's own, in the turn's own chat (the chat is
the host's record of the message being answered), cleaned and cut short. It is edited when its
text changes, at most once every NANOCLAW_PROGRESS_EDIT_S per chat and never before a platform's
429 allows; when the turn ends it is deleted (or, where a platform cannot delete, edited to a
one-line summary), and the answer comes as its own message, so notifications still fire. A
platform that cannot edit (WhatsApp) keeps the typing indicator only. `wire … --progress off`
turns it off for a chat (the session's `options`); a scheduled task's run shows none unless the task
asked for it (schedule_task's `progress`, kept in the host's own record of the task).

The host keeps each shown message in the session's inbound.db (`status_messages`), so one left by
a restart is removed by the next pass. The platform calls go out on a small pool, like the typing
indicator's: a slow platform never holds up a delivery.
"""
from __future__ import annotations

import logging
import re
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..channels.base import DeliveryError, get_adapter
from ..sessions import store
from ..sessions.store import Target
from .typing_indicator import claimed_chat_message

log = logging.getLogger("nanoclaw.progress")

MAX_SUBJECT = 48
_UNSAFE = re.compile(r"[\x00-\x1f\x7f`*_~<>\[\]|\\]")


def clean_subject(raw) -> str:
    """The agent's few words, as the host shows them: one line, no markup, short (pure)."""
    text = " ".join(_UNSAFE.sub(" ", str(raw or "")).split())
    return text if len(text) <= MAX_SUBJECT else text[:MAX_SUBJECT - 1].rstrip() + "…"


def clock(seconds: float) -> str:
    seconds = int(max(0, seconds)) // 5 * 5  # to 5 s: the text changes, and so is edited, at most that often
    return f"{seconds // 60}:{seconds % 60:02d}"


def status_text(elapsed_s: float, subject: str | None) -> str:
    """What the status message says (pure)."""
    what = clean_subject(subject)
    return f"⏳ Working… {clock(elapsed_s)}" + (f" · {what}" if what else "")


def summary_text(elapsed_s: float) -> str:
    return f"✓ Worked {clock(elapsed_s + 4.999)}"


@dataclass
class Status:
    message_in_id: str
    target: Target
    since: float
    shown: str | None = None           # the platform's id of the status message, once sent
    text: str = ""
    in_flight: bool = False


def next_step(status: Status, now: float, text: str, *, after_s: float, last_edit: float | None,
              edit_every_s: float, blocked_until: float) -> str | None:
    """'show', 'edit' or None for a turn under way (pure)."""
    if status.in_flight or now < blocked_until:
        return None
    if status.shown is None:
        return "show" if now - status.since >= after_s else None
    if text == status.text:
        return None
    return "edit" if last_edit is None or now - last_edit >= edit_every_s else None


class Progress:
    """The delivery thread's status messages (one per session with a turn under way)."""

    def __init__(self, settings):
        self.settings = settings
        self._status: dict[Path, Status] = {}
        self._last_edit: dict[tuple[str, str], float] = {}     # per chat
        self._blocked: dict[tuple[str, str], float] = {}       # per chat, a platform's 429
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="nanoclaw-progress")

    def tick(self, conn: sqlite3.Connection, session_path: Path, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        found = claimed_chat_message(conn, tasks_asking_progress=True)
        with self._lock:
            status = self._status.get(session_path)
            if found is None or (status is not None and status.message_in_id != found[0]):
                if status is not None and not status.in_flight:
                    self._status.pop(session_path, None)
                    self._submit(self._finish, session_path, status, now)
                if found is None:
                    if status is None:
                        self._leftovers(conn, session_path, now)
                    return
            message_in_id, target, _pid = found
            if not self.wanted(conn, target):
                return
            status = self._status.setdefault(session_path, Status(message_in_id, target, now))
            text = status_text(now - status.since, tool_subject(conn))
            chat = (target.channel_type, target.platform_id)
            step = next_step(status, now, text, after_s=self.settings.progress_after_s,
                             last_edit=self._last_edit.get(chat), edit_every_s=self.settings.progress_edit_s,
                             blocked_until=self._blocked.get(chat, 0.0))
            if step is None:
                return
            status.in_flight = True
            self._last_edit[chat] = now
        self._submit(self._show if step == "show" else self._edit, session_path, status, text)

    def wanted(self, conn, target: Target) -> bool:
        """Progress for this chat: its wiring did not turn it off, and its platform can edit."""
        row = conn.execute("SELECT value FROM options WHERE key = 'progress'").fetchone()
        if row is not None and row[0] == "off":
            return False
        adapter = get_adapter(target.channel_type, self.settings)
        return bool(getattr(adapter, "live_status", False))

    def _leftovers(self, conn, session_path: Path, now: float) -> None:
        """A status message a restarted host showed and never removed."""
        for row in conn.execute("SELECT message_in_id, channel_type, platform_id, thread_id, platform_message_id "
                                "FROM status_messages").fetchall():
            status = Status(row[0], Target(row[1], row[2], row[3]), now, shown=row[4])
            self._submit(self._finish, session_path, status, now)

    # --- the calls, on the pool ------------------------------------------------------------------
    def _submit(self, fn, session_path: Path, status: Status, arg) -> None:
        try:
            self._pool.submit(fn, session_path, status, arg)
        except RuntimeError:  # shutting down
            status.in_flight = False

    def _show(self, session_path: Path, status: Status, text: str) -> None:
        try:
            pid = get_adapter(status.target.channel_type, self.settings).send_text(status.target, text)
            if pid:
                store.record_status_message(session_path, status.message_in_id, status.target, str(pid))
            with self._lock:
                status.shown, status.text = str(pid) if pid else "", text
        except Exception as exc:
            self._failed(status, exc)
        finally:
            status.in_flight = False

    def _edit(self, session_path: Path, status: Status, text: str) -> None:
        try:
            get_adapter(status.target.channel_type, self.settings).edit_text(status.target, status.shown, text)
            with self._lock:
                status.text = text
        except Exception as exc:
            self._failed(status, exc)
        finally:
            status.in_flight = False

    def _finish(self, session_path: Path, status: Status, now: float) -> None:
        if status.shown:
            adapter = get_adapter(status.target.channel_type, self.settings)
            try:
                remove = getattr(adapter, "delete_message", None)
                if remove is not None:
                    remove(status.target, status.shown)
                else:
                    adapter.edit_text(status.target, status.shown, summary_text(now - status.since))
            except Exception as exc:  # a courtesy: logged, never retried
                log.info("status message in %s not removed: %s", status.target,
                         str(exc).splitlines()[0] if str(exc) else exc)
        store.forget_status_message(session_path, status.message_in_id)

    def _failed(self, status: Status, exc: Exception) -> None:
        if isinstance(exc, DeliveryError) and exc.retry_after:
            with self._lock:
                chat = (status.target.channel_type, status.target.platform_id)
                self._blocked[chat] = time.monotonic() + exc.retry_after
        log.info("status message in %s: %s", status.target, str(exc).splitlines()[0] if str(exc) else exc)


def tool_subject(conn) -> str | None:
    """The runner's few words for the tool it runs now (the agent's file: shown, never trusted)."""
    try:
        row = conn.execute("SELECT current_tool, tool_subject FROM ob.container_state WHERE id = 1").fetchone()
    except sqlite3.Error:  # a runner of before the column, or no state yet
        return None
    return (row[1] or (f"using {row[0]}" if row[0] else None)) if row else None


_BY_SETTINGS: dict[int, tuple[object, Progress]] = {}


def progress_for(settings) -> Progress:
    """The process's status messages for these settings (kept with them, like the adapters)."""
    kept = _BY_SETTINGS.get(id(settings))
    if kept is None:
        kept = _BY_SETTINGS[id(settings)] = (settings, Progress(settings))
    return kept[1]
