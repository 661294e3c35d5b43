"""The history index made anew from what the session databases still hold (a backup taken before the
index existed, or a lost index): each session's people's messages (chat rows) and the replies the
host delivered. It reaches back as far as the sessions' own retention (NANOCLAW_KEEP_MESSAGES_DAYS)."""
from __future__ import annotations

import json
import logging

from ..db import connected
from ..sessions import session_schema as schema
from ..sessions import store
from . import history

log = logging.getLogger("nanoclaw.memory")


def rebuild(settings) -> tuple[int, str | None]:
    """(messages indexed, the oldest time now in the index)."""
    added = 0
    root = settings.sessions_dir
    with connected():
        for agent_dir in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
            for path in sorted(p for p in agent_dir.iterdir() if p.is_dir()):
                added += _one(agent_dir.name, path)
        return added, history.oldest()


def _one(folder: str, path) -> int:
    conn = store.open_session_readonly(path)
    if conn is None:
        return 0
    added = 0
    try:
        for row in conn.execute("SELECT id, timestamp, channel_type, platform_id, thread_id, content FROM messages_in "
                                "WHERE kind = 'chat'"):
            try:
                content = json.loads(row[5])
            except ValueError:
                continue
            if not isinstance(content, dict) or content.get("command") or not row[2]:
                continue
            history.add(folder, row[2], row[3], row[4], path.name, row[0], str(content.get("sender_id") or ""),
                        str(content.get("sender") or ""), row[1], str(content.get("text") or ""))
            added += 1
        if store.attach_outbound(conn, path):
            for row in conn.execute("SELECT o.id, d.delivered_at, o.channel_type, o.platform_id, o.thread_id, o.content "
                                    "FROM ob.messages_out o JOIN delivered d ON d.message_out_id = o.id "
                                    "WHERE d.status = 'delivered' AND o.kind = 'chat'"):
                try:
                    op = json.loads(row[5])
                except ValueError:
                    continue
                if isinstance(op, dict) and op.get("op") == "text" and row[2]:
                    history.add(folder, row[2], row[3], row[4], path.name, f"out:{row[0]}", f"agent:{folder}", "",
                                row[1] or schema.utc_now_iso(), str(op.get("text") or ""))
                    added += 1
    finally:
        conn.close()
    return added
