"""The turn's answer as the model writes it, for the chat's live message (pure: fed the SDK's messages).

Only the top-level text streams: a subagent's never (its messages carry parent_tool_use_id). Text
that a tool call follows ("Let me look that up…") stays shown while the tool runs and is replaced
when the next text begins. `<internal>…</internal>` is never shown: held back from its opening `<`
until it closes, and dropped then.
"""
from __future__ import annotations

import re

from claude_agent_sdk import StreamEvent

_INTERNAL = re.compile(r"<internal>.*?</internal>", re.S)
_OPEN = "<internal>"


def visible_text(raw: str) -> str:
    """What of the text written so far may be shown (pure)."""
    out = _INTERNAL.sub("", raw)
    cut = out.find(_OPEN)
    if cut >= 0:
        out = out[:cut]
    last = out.rfind("<")
    if last >= 0 and _OPEN.startswith(out[last:]):  # maybe the start of an <internal> still being written
        out = out[:last]
    return out.strip()


class Streamer:
    def __init__(self) -> None:
        self.raw = ""          # the text shown so far (its blocks joined)
        self.in_text = False   # a text block is being written
        self.stale = False     # a tool call followed the text: the next text replaces it

    def feed(self, msg) -> str | None:
        """The visible text when this message changed it (or ended a block), else None."""
        if not isinstance(msg, StreamEvent) or msg.parent_tool_use_id is not None:
            return None
        event = msg.event or {}
        kind = event.get("type")
        if kind == "content_block_start":
            block = (event.get("content_block") or {}).get("type")
            if block == "text":
                if self.stale:
                    self.raw, self.stale = "", False
                elif self.raw:
                    self.raw += "\n\n"
                self.in_text = True
            elif block in ("tool_use", "server_tool_use"):
                self.stale = bool(self.raw)
            return None
        if kind == "content_block_delta" and self.in_text:
            delta = event.get("delta") or {}
            if delta.get("type") == "text_delta" and delta.get("text"):
                self.raw += str(delta["text"])
                return visible_text(self.raw)
            return None
        if kind == "content_block_stop" and self.in_text:
            self.in_text = False
            return visible_text(self.raw)
        return None
