"""A turn's one live message in its chat: the answer as it is written, and a status line while the
agent works; removed when the finished answer arrives as a message of its own.

The answer so far comes from the runner (container_state.stream_text, for the message it answers:
stream.py); the status line from the runner's few words for the tool it runs (tool_subject). Both
are the agent's side, so the host only ever shows them in this one message of its own, in the turn's
own chat (the host's record of the message being answered); the status words are cleaned and cut.
- The message appears once the answer has been streaming STREAM_AFTER_S and grew meanwhile (so a
  quick answer, even one a loaded machine is slow to finish, never shows twice), or, with no text yet, once the turn has run NANOCLAW_PROGRESS_AFTER_S (10 s):
  "⏳ Working… 0:42 · running `pytest`". A Telegram private chat gets a draft instead
  (sendMessageDraft: no message at all, refreshed while a tool runs), shown at once.
- Edits: at most once every NANOCLAW_PROGRESS_EDIT_S per chat, never before a 429's retry_after,
  only when the text grew by MIN_GROWTH or the status changed, at most the platform's `max_edits`.
  An edit the platform refuses, a message the person deleted, or a text past the platform's length
  stops the live message for that turn (the answer is unaffected).
- When the turn ends the finished answer is delivered as a new message (delivery's claim: exactly
  once, and it notifies), and the live message is deleted (edited to a one-line summary where a
  platform cannot delete); a turn stopped with /stop keeps its text, ending "(stopped)", and one tried
  again (a new claim of its message) keeps it ending "(interrupted)" while the new attempt streams into
  a new message. A call still in flight when the turn ends removes the message when it returns.
`wire … --progress off` turns the status line off, `--stream off` the streamed text (the session's
`options`); a scheduled task's run shows neither unless the task asked for progress. A platform that
cannot edit (WhatsApp) keeps the typing indicator only.

The host keeps each shown message in the session's inbound.db (`status_messages`): a restarted host
takes a turn's message up again, and removes one whose turn ended. The platform calls go out on a
small pool, like the typing indicator's: a slow platform never holds up a delivery.
"""
from __future__ import annotations

import logging
import re
import sqlite3
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..channels.base import DeliveryError, get_adapter
from ..sessions import store, turns
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


STREAM_AFTER_S = 0.5     # the answer has been streaming this long before a message shows it
MIN_GROWTH = 40          # characters of new text worth an edit (the status line's changes always are)
DRAFT_REFRESH_S = 20.0   # a Telegram draft fades after about 30 s: shown again while a tool runs
DEFAULT_LIMIT = 4000     # characters a live message may hold where the platform names no limit
STOPPED_MARK = "(stopped)"
INTERRUPTED_MARK = "(interrupted)"  # the turn was tried again: its new attempt streams into a new message


def compose(stream: str, status: str | None) -> str:
    """The live message: the answer so far, and the status line below it while the agent works (pure)."""
    if not stream:
        return status or ""
    return f"{stream}\n\n{status}" if status else stream


def worth_editing(shown: str, text: str) -> bool:
    """Is `text` worth an edit of a message showing `shown`? Not for a few more words (pure)."""
    if text == shown:
        return False
    return not (text.startswith(shown) and len(text) - len(shown) < MIN_GROWTH)


@dataclass
class Status:
    message_in_id: str
    target: Target
    since: float
    shown: str | None = None           # the platform's id of the live message, once sent
    text: str = ""
    in_flight: bool = False
    draft: bool = False                # a Telegram private chat: drafts, no message
    stream_since: float | None = None  # when the answer was first seen streaming
    stream_first: str = ""             # the text first seen: a live message needs the answer to grow past it
    stream_grew: bool = False
    edits: int = 0
    broken: bool = False               # the platform refused: no more calls for this turn
    ended: bool = False                # the turn ended while a call was in flight: that call finishes it
    stream: str = ""                   # the streamed part of what is shown
    claim: str | None = None           # when the runner claimed the message: a new claim is a retried turn
    interrupted: bool = False          # ended by a retry: what it showed stays, marked "(interrupted)"
    native: bool = False               # the platform's own stream (Slack in a channel's thread): append only
    recipient: str | None = None       # who the answer is for (the host's record of the message's sender)


def next_step(status: Status, now: float, text: str, *, after_s: float, last_edit: float | None,
              edit_every_s: float, blocked_until: float, streaming: bool = False, max_edits: int | None = None,
              limit: int = DEFAULT_LIMIT) -> str | None:
    """'show', 'edit', 'break' or None for a turn under way (pure)."""
    if status.in_flight or status.broken or now < blocked_until or not text:
        return None
    if len(text) > limit:
        return "break"
    if status.draft:  # at once, but not for a quick answer (a draft arriving after it would linger)
        if not (streaming and status.stream_grew) and now - status.since < after_s:
            return None
        due = last_edit is None or now - last_edit >= edit_every_s
        fresh = text != status.text or now - (last_edit or 0.0) >= DRAFT_REFRESH_S
        return "edit" if due and fresh else None
    if status.shown is None:
        streamed_enough = (streaming and status.stream_grew and status.stream_since is not None
                           and now - status.stream_since >= STREAM_AFTER_S)
        return "show" if streamed_enough or now - status.since >= after_s else None
    if not worth_editing(status.text, text) or (max_edits is not None and status.edits >= max_edits):
        return None
    return "edit" if last_edit is None or now - last_edit >= edit_every_s else None


class Progress:
    """The delivery thread's live messages (one per session with a turn under way)."""

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
            claim = claimed_at(conn, found[0]) if found is not None else None
            retried = status is not None and found is not None and status.message_in_id == found[0] \
                and status.claim is not None and claim != status.claim
            if found is None or retried or (status is not None and status.message_in_id != found[0]):
                if status is not None:
                    status.interrupted = retried
                    self._status.pop(session_path, None)
                    if status.in_flight:
                        status.ended = True  # the call under way removes the message when it returns
                    else:
                        self._submit(self._finish, session_path, status, now)
                if found is None:
                    if status is None:
                        self._leftovers(conn, session_path, now)
                    return
            message_in_id, target, _pid = found
            wants = self.wanted(conn, target)
            if not any(wants):
                return
            adapter = get_adapter(target.channel_type, self.settings)
            status = self._status.get(session_path) or self._begin(conn, session_path, message_in_id, target,
                                                                   adapter, now, adopt=not retried)
            status.claim = status.claim or claim
            stream = stream_text(conn, message_in_id) if wants[1] else ""
            if stream and status.stream_since is None:
                status.stream_since, status.stream_first = now, stream
            elif stream and stream != status.stream_first:
                status.stream_grew = True
            if not status.stream_grew:
                stream = ""  # one text that never grew is a quick answer: its own message will say it
            subject = tool_subject(conn)
            # with text the text is the news: a status line only while a tool runs
            line = status_text(now - status.since, subject) if (wants[0] and not stream) or (stream and subject) \
                else None
            text = compose(stream, line)
            native = status.native or (status.shown is None and not status.draft and bool(stream)
                                       and getattr(adapter, "native_stream", lambda _t: False)(target))
            if native:
                text = stream  # the platform's stream holds the answer alone, and only ever grows
            chat = (target.channel_type, target.platform_id)
            step = next_step(status, now, text, after_s=self.settings.progress_after_s if wants[0] else float("inf"),
                             last_edit=self._last_edit.get(chat), edit_every_s=self.settings.progress_edit_s,
                             blocked_until=self._blocked.get(chat, 0.0), streaming=bool(stream),
                             max_edits=getattr(adapter, "max_edits", None),
                             limit=getattr(adapter, "stream_limit", DEFAULT_LIMIT))
            if step == "edit" and status.native and not text.startswith(status.text):
                step = "break"  # the text before a tool call was replaced: a stream cannot take that back
            if step == "break":
                status.broken = True
                return
            if step is None:
                return
            status.native = native
            status.in_flight = True
            self._last_edit[chat] = now
        fn = self._draft if status.draft else self._show if step == "show" else self._edit
        self._submit(fn, session_path, status, (text, stream))

    def _begin(self, conn, session_path: Path, message_in_id: str, target: Target, adapter, now: float,
               adopt: bool = True) -> Status:
        """A turn's status, taking up the message a restarted host showed for it (not a retried turn's)."""
        status = Status(message_in_id, target, now, draft=bool(getattr(adapter, "drafts", lambda _t: False)(target)))
        row = conn.execute("SELECT platform_message_id, text FROM status_messages WHERE message_in_id = ?",
                           (message_in_id,)).fetchone()
        sender = conn.execute("SELECT json_extract(content, '$.sender_id') FROM messages_in WHERE id = ? AND "
                              "json_valid(content)", (message_in_id,)).fetchone()
        status.recipient = sender[0] if sender and isinstance(sender[0], str) else None
        if row is not None and not status.draft and adopt:
            status.shown, status.text = row[0], row[1] or ""
        self._status[session_path] = status
        return status

    def wanted(self, conn, target: Target) -> tuple[bool, bool]:
        """(status line, streamed text) for this chat: its wiring's choices, and only where the
        platform can edit a message."""
        options = dict(conn.execute("SELECT key, value FROM options WHERE key IN ('progress', 'stream')").fetchall())
        adapter = get_adapter(target.channel_type, self.settings)
        if not getattr(adapter, "live_status", False):
            return False, False
        return options.get("progress") != "off", options.get("stream") == "on"

    def _leftovers(self, conn, session_path: Path, now: float) -> None:
        """A live message a restarted host showed and never removed."""
        for row in conn.execute("SELECT message_in_id, channel_type, platform_id, thread_id, platform_message_id, "
                                "text FROM status_messages").fetchall():
            status = Status(row[0], Target(row[1], row[2], row[3]), now, shown=row[4], text=row[5] or "")
            self._submit(self._finish, session_path, status, now)

    # --- the calls, on the pool ------------------------------------------------------------------
    def _submit(self, fn, session_path: Path, status: Status, arg) -> None:
        try:
            self._pool.submit(fn, session_path, status, arg)
        except RuntimeError:  # shutting down
            status.in_flight = False

    def _done(self, session_path: Path, status: Status) -> None:
        """A call returned: the turn may have ended meanwhile."""
        with self._lock:
            status.in_flight = False
            ended = status.ended
        if ended:
            self._finish(session_path, status, time.monotonic())

    def _show(self, session_path: Path, status: Status, shown: tuple[str, str]) -> None:
        text, stream = shown
        try:
            adapter = get_adapter(status.target.channel_type, self.settings)
            pid = (adapter.start_stream(status.target, status.recipient, text) if status.native
                   else adapter.send_text(status.target, text))
            if pid:
                store.record_status_message(session_path, status.message_in_id, status.target, str(pid), text)
            with self._lock:
                status.shown, status.text, status.stream = str(pid) if pid else "", text, stream
        except Exception as exc:  # anything but a 429 may have been shown after all: never a second one
            self._failed(status, exc, broken=True)
        finally:
            self._done(session_path, status)

    def _edit(self, session_path: Path, status: Status, shown: tuple[str, str]) -> None:
        text, stream = shown

        def call(adapter) -> None:
            if status.native:
                adapter.append_stream(status.target, status.shown, text[len(status.text):])
            else:
                adapter.edit_text(status.target, status.shown, text)
            status.edits += 1
            if stream:
                store.record_status_message(session_path, status.message_in_id, status.target, status.shown, text)
        self._change(session_path, status, shown, call)

    def _draft(self, session_path: Path, status: Status, shown: tuple[str, str]) -> None:
        self._change(session_path, status, shown, lambda adapter: adapter.send_draft(
            status.target, draft_id(status), shown[0]))

    def _change(self, session_path: Path, status: Status, shown: tuple[str, str], call) -> None:
        """A change to what is shown (an edit, an append, a draft): refused, this turn's live message ends."""
        try:
            call(get_adapter(status.target.channel_type, self.settings))
            with self._lock:
                status.text, status.stream = shown
        except Exception as exc:
            self._failed(status, exc, broken=True)
        finally:
            self._done(session_path, status)

    def _finish(self, session_path: Path, status: Status, now: float) -> None:
        if status.shown and not status.draft:
            adapter = get_adapter(status.target.channel_type, self.settings)
            try:
                stopped = status.message_in_id in turns_stopped(session_path)
                remove = getattr(adapter, "delete_message", None)
                mark = STOPPED_MARK if stopped else INTERRUPTED_MARK if status.interrupted else None
                if status.native:  # the platform's stream ends first (the mark with it)
                    self._end_stream(adapter, status, mark)
                if mark and status.stream:  # what was written stays, marked
                    if not status.native:
                        adapter.edit_text(status.target, status.shown, f"{status.stream}\n\n{mark}")
                elif remove is not None:
                    remove(status.target, status.shown)
                else:
                    adapter.edit_text(status.target, status.shown, summary_text(now - status.since))
            except Exception as exc:  # a courtesy: logged, never retried
                log.info("live message in %s not removed: %s", status.target,
                         str(exc).splitlines()[0] if str(exc) else exc)
        store.forget_status_message(session_path, status.message_in_id, status.shown or None)

    @staticmethod
    def _end_stream(adapter, status: Status, mark: str | None) -> None:
        try:
            if mark and status.stream:
                adapter.append_stream(status.target, status.shown, f"\n\n{mark}")
            adapter.stop_stream(status.target, status.shown)
        except Exception as exc:  # already stopped, or gone: it is deleted next all the same
            log.info("stream in %s not stopped: %s", status.target, str(exc).splitlines()[0] if str(exc) else exc)

    def _failed(self, status: Status, exc: Exception, broken: bool = False) -> None:
        with self._lock:
            if isinstance(exc, DeliveryError) and exc.retry_after:
                chat = (status.target.channel_type, status.target.platform_id)
                self._blocked[chat] = time.monotonic() + exc.retry_after
            elif broken:  # refused, deleted by the person, too long: this turn's live message ends here
                status.broken = True
        log.info("live message in %s: %s", status.target, str(exc).splitlines()[0] if str(exc) else exc)


def draft_id(status: Status) -> int:
    """A non-zero draft id, the same for the whole turn (Telegram animates changes to one draft)."""
    return (zlib.crc32(status.message_in_id.encode()) & 0x7FFFFFFF) or 1


def claimed_at(conn, message_in_id: str) -> str | None:
    """When the runner claimed the message (its file: a changed time only ever starts a new live message)."""
    try:
        row = conn.execute("SELECT status_changed FROM ob.processing_ack WHERE message_id = ?",
                           (message_in_id,)).fetchone()
    except sqlite3.Error:
        return None
    return row[0] if row else None


def turns_stopped(session_path: Path) -> set[str]:
    conn = store.open_session_readonly(session_path)
    if conn is None:
        return set()
    try:
        return turns.stopped(conn)
    finally:
        conn.close()


def stream_text(conn, message_in_id: str) -> str:
    """The answer so far, when the runner writes it for this turn's message (the agent's file: shown
    only in the live message, never trusted)."""
    try:
        row = conn.execute("SELECT stream_for, stream_text FROM ob.container_state WHERE id = 1").fetchone()
    except sqlite3.Error:  # a runner of before the columns, or no state yet
        return ""
    return str(row[1] or "").strip() if row and row[0] == message_in_id else ""


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
