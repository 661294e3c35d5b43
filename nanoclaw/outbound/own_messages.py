"""Which platform message an agent's edit or reaction may touch, decided from the host's records only
(delivered, messages_in): the agent names a row of its own or a message of its chat, never a card
the host showed for it, never another chat."""
from __future__ import annotations

import json
import sqlite3

from ..channels.base import DeliveryError
from ..sessions import session_schema as schema
from ..sessions.store import Target


def own_message(conn: sqlite3.Connection, seq, target: Target) -> str:
    """The platform id of the agent's own chat message #seq in `target`'s chat, from the host's
    records only: a message or file the host delivered for the agent there. Never a card the host
    showed for the agent (a proposal, a help request, a question: their text is the host's), and
    never a message in another chat."""
    try:
        seq = int(seq)
    except (TypeError, ValueError):
        raise DeliveryError(f"no message #{seq!r} to change", permanent=True) from None
    marks = ", ".join("?" * len(schema.AGENT_MESSAGE_OPS))
    found = conn.execute(
        f"SELECT platform_message_id, op, channel_type, platform_id FROM delivered WHERE seq = ? "
        f"AND status = 'delivered' AND platform_message_id IS NOT NULL ORDER BY op IN ({marks}) DESC, "
        "rowid DESC LIMIT 1", (seq, *schema.AGENT_MESSAGE_OPS)).fetchone()
    if found is None:
        raise DeliveryError(f"message #{seq} was never delivered", permanent=True)
    pid, op, channel, chat = found
    if op not in schema.AGENT_MESSAGE_OPS:
        raise DeliveryError(f"message #{seq} is not one of the agent's messages (it is a {op or 'host'} card)",
                            permanent=True)
    if (channel, chat) != (target.channel_type, target.platform_id):
        raise DeliveryError(f"message #{seq} is in another chat", permanent=True)
    return pid


def answered_message(conn, message_in_id) -> tuple[Target, str]:
    """The chat and platform id of a person's message, from the host's own inbound.db (the agent
    only names which of this session's messages; where it is and what it is called is ours)."""
    found = conn.execute("SELECT channel_type, platform_id, thread_id, content FROM messages_in "
                         "WHERE id = ? AND kind = 'chat'", (str(message_in_id),)).fetchone()
    try:
        pid = json.loads(found[3]).get("message_id") if found else None
    except (ValueError, AttributeError):
        pid = None
    if not found or not pid or not found[0] or not found[1]:
        raise DeliveryError(f"no message {message_in_id!r} of this chat to react to", permanent=True)
    return Target(found[0], found[1], found[2]), str(pid)
