"""Forgetting: a search's answer kept in a session quotes what was said, so `history forget` empties
those answers too (every search answer of the agent's sessions: what they quoted may be gone now)."""
from __future__ import annotations

import json

from ..sessions import session_schema as schema
from ..sessions import store


def scrub_answers(settings, folder: str) -> int:
    root = settings.sessions_dir / folder
    emptied = 0
    if not root.is_dir():
        return 0
    for path in sorted(p for p in root.iterdir() if p.is_dir()):
        db = store.inbound_db(path)
        if not db.exists():
            continue
        conn = schema.connect(db)
        try:
            with conn:
                conn.execute("BEGIN IMMEDIATE")
                rows = conn.execute("SELECT id, content FROM messages_in WHERE kind = 'answer'").fetchall()
                for row_id, content in rows:
                    try:
                        data = json.loads(content)
                    except ValueError:
                        continue
                    if isinstance(data, dict) and data.get("tool") == "search_history":
                        conn.execute("UPDATE messages_in SET content = ? WHERE id = ?",
                                     (json.dumps({"ok": False, "text": "(forgotten)", "tool": "search_history"}),
                                      row_id))
                        emptied += 1
        finally:
            conn.close()
    return emptied
