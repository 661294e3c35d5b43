"""The agent's `memory` and `search_history` tools, applied on the host.

Each is a system op row the runner writes (`{"op": "memory", "request_id": …}`); delivery hands it to
the handler here, on the session's own worker (a search in one session never delays another). The
scope of every read and write is decided from the session the row came from (scopes.py), never from
the op's fields; the answer goes back as a completed `answer` row in the session's inbound.db.
"""
from __future__ import annotations

import logging
import re
from datetime import datetime, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

from ..db import database
from ..models import MessagingGroup
from ..outbound import delivery
from ..sessions import store
from . import entries, history, notes, query
from .scopes import reach_of

log = logging.getLogger("nanoclaw.memory")

_WHEN = re.compile(r"^\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2})?)?$")


def answer_id(request_id: str) -> str:
    return f"answer:{request_id}"


def local_to_utc(value, tz: str) -> str | None:
    """A local date or date-time in the user's time zone as the UTC ISO the index keeps; None when
    empty; ValueError when it is not one."""
    text = str(value or "").strip()
    if not text:
        return None
    if not _WHEN.match(text):
        raise ValueError(f"{text!r} is not a local date (2026-03-29) or time (2026-03-29 14:00)")
    parsed = datetime.fromisoformat(text.replace(" ", "T"))
    return parsed.replace(tzinfo=ZoneInfo(tz)).astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


def _answered(session_path: Path, message_id: str) -> bool:
    return store.message_exists(session_path, message_id)


def _answer(session_path: Path, request_id: str, ok: bool, text: str, kind: str) -> None:
    store.write_message(session_path, content={"ok": ok, "text": text if ok else f"Error: {text}", "tool": kind},
                        target=None, kind="answer", trigger=False, message_id=answer_id(request_id),
                        status="completed")


def handle_memory(session_path: Path, row, settings) -> None:
    op = row.op
    request_id = str(op.get("request_id") or row.id)[:64]
    if _answered(session_path, answer_id(request_id)):
        return None
    folder, session_id = session_path.parent.name, session_path.name
    with database.connection_context():
        reach = reach_of(settings.sessions_dir, folder, session_id)
        if reach is None:
            _answer(session_path, request_id, False, "this conversation is unknown to the host", "memory")
            return None
        change = entries.Change(str(op.get("action") or ""), str(op.get("text") or "")[:2000],
                                str(op.get("old_text") or "")[:2000])
        ok, told = notes.agent_change(settings, folder, reach.memory, change, session_id=session_id,
                                      request_key=f"{folder}/{session_id}/{request_id}")
    _answer(session_path, request_id, ok, told, "memory")
    return None


def handle_search(session_path: Path, row, settings) -> None:
    op = row.op
    request_id = str(op.get("request_id") or row.id)[:64]
    if _answered(session_path, answer_id(request_id)):
        return None
    folder, session_id = session_path.parent.name, session_path.name
    try:
        with database.connection_context():
            reach = reach_of(settings.sessions_dir, folder, session_id)
            if reach is None:
                raise ValueError("this conversation is unknown to the host")
            after = local_to_utc(op.get("after"), settings.timezone)
            before = local_to_utc(op.get("before"), settings.timezone)
            limit = op.get("limit") if isinstance(op.get("limit"), int) else 10
            terms, hits = history.search(folder, reach, str(op.get("query") or ""), limit=limit, after=after,
                                         before=before)
            text = render(hits, terms, settings.timezone, reach.everything)
    except (query.BadQuery, ValueError) as exc:
        _answer(session_path, request_id, False, str(exc), "search_history")
        return None
    except Exception as exc:  # noqa: BLE001 - never an SQL error to the agent: it is told the search failed
        log.error("history search of %s failed: %s", folder, type(exc).__name__)
        _answer(session_path, request_id, False, "the search failed on the host; try other words", "search_history")
        return None
    _answer(session_path, request_id, True, text, "search_history")
    return None


def render(hits, terms, tz: str, everywhere: bool) -> str:
    if not hits:
        return "Nothing found" + (" in what this agent saw." if everywhere else " in this chat's history.")
    names: dict[tuple[str, str], str] = {}
    if everywhere:
        for h in hits:
            key = (h.channel, h.chat_id)
            if key not in names:
                chat = MessagingGroup.get_or_none(MessagingGroup.channel_type == h.channel,
                                                  MessagingGroup.platform_id == h.chat_id)
                names[key] = chat.name if chat is not None and chat.name else f"{h.channel}:{h.chat_id}"
    lines = [f"{len(hits)} message(s), newest first:"]
    for i, h in enumerate(hits, 1):
        when = datetime.fromisoformat(h.said_at.rstrip("Z")[:19]).replace(tzinfo=timezone.utc).astimezone(ZoneInfo(tz))
        who = "you" if h.sender_id.startswith("agent:") else (h.sender_name or h.sender_id)
        where = f" in {names[(h.channel, h.chat_id)]}" if everywhere else ""
        lines.append(f"{i}. {when:%Y-%m-%d %H:%M}, {who}{where}: {query.excerpt(h.text, terms)}")
    return "\n".join(lines)


delivery.register_op("memory", handle_memory)
delivery.register_op("search_history", handle_search)
