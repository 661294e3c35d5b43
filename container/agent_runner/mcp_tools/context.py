"""What every tool needs: the session store, the settings, and the turn in progress."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..config import RunnerConfig
from ..store import SessionStore
from ..targets import Target


class ToolError(Exception):
    """A refusal the model should read (returned as an is_error tool result, never raised past the tool)."""


@dataclass
class Turn:
    """The turn being answered: where a plain reply goes and which inbound row it answers."""
    reply_to: Target | None = None
    in_reply_to: str | None = None


@dataclass
class ToolContext:
    store: SessionStore
    config: RunnerConfig
    turn: Turn = field(default_factory=Turn)
    silent: bool = False  # a memory-save turn: nothing goes to a chat

    def default_target(self) -> Target | None:
        return self.turn.reply_to or self.store.routing()


def find_answer_row(conn, key: str, value: str) -> tuple[str, dict] | None:
    """The host's pending answer row (kind 'answer') whose content[key] is `value`, if it has come."""
    for row in conn.execute("SELECT id, content FROM messages_in WHERE kind = 'answer' AND status = 'pending' "
                            "ORDER BY seq"):
        try:
            content = json.loads(row[1])
        except ValueError:
            continue
        if isinstance(content, dict) and content.get(key) == value:
            return row[0], content
    return None
