"""Spot the model's answer in a turn's stream before the CLI's result (pure).

After the model's last byte the CLI still writes its transcript, runs Stop hooks and totals the
turn before it emits the result: 2-4 ms on a warm turn, as long as a hook takes with one. The answer
is known earlier: a top-level message whose stream ends with stop_reason "end_turn" is the model's
answer, and its text blocks have all arrived as AssistantMessages by the time its message_delta
does. Handing it on then is what puts the reply in the chat before the turn's bookkeeping.
"""
from __future__ import annotations

from claude_agent_sdk import AssistantMessage, StreamEvent, TextBlock

# The CLI answers a message of no text with a nudge of its own and asks again: not an answer yet.
FINAL_STOP_REASONS = ("end_turn", "stop_sequence")


class AnswerSpotter:
    """Feed it every message of one turn; `see` returns the answer's text when a message ends the
    model's turn with text, else None. A turn a Stop hook sends back to the model can answer again."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.answers = 0

    def see(self, msg) -> str | None:
        if isinstance(msg, AssistantMessage) and msg.parent_tool_use_id is None:
            self.texts += [b.text for b in msg.content if isinstance(b, TextBlock) and b.text.strip()]
            return None
        if not isinstance(msg, StreamEvent) or msg.parent_tool_use_id is not None:
            return None  # a subagent's stream is not the answer
        kind = msg.event.get("type")
        if kind == "message_start":
            self.texts = []  # the text of earlier messages in this turn was said before a tool call
        elif kind == "message_delta" and (msg.event.get("delta") or {}).get("stop_reason") in FINAL_STOP_REASONS:
            texts, self.texts = self.texts, []
            if texts:
                self.answers += 1
                return "\n\n".join(texts)
        return None
