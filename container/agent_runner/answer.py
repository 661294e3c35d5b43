"""The model's answer in a turn's stream: every text block of the top-level message whose stream
ends (message_stop) with stop_reason "end_turn" (pure).

The CLI's own result keeps only that message's last text block, so an answer the model wrote in two
blocks lost its first part. The answer is not sent at this point, a few ms before the result, but
with the result: only then has the CLI written the answer into its transcript, the conversation's
memory. A runner or CLI killed in between would otherwise leave an answered message unanswered in
the transcript, and the next turn would answer it again (the fault-injection test did exactly that).
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
        self.final = False
        self.said: set[str] = set()  # a repeated request's same answer is not a second one
        self.answers = 0

    def see(self, msg) -> str | None:
        if isinstance(msg, AssistantMessage) and msg.parent_tool_use_id is None:
            self.texts += [b.text for b in msg.content if isinstance(b, TextBlock) and b.text.strip()]
            return None
        if not isinstance(msg, StreamEvent) or msg.parent_tool_use_id is not None:
            return None  # a subagent's stream is not the answer
        kind = msg.event.get("type")
        if kind == "message_start":
            self.texts, self.final = [], False  # earlier text was said before a tool call, or its stream broke
        elif kind == "message_delta":
            self.final = (msg.event.get("delta") or {}).get("stop_reason") in FINAL_STOP_REASONS
        elif kind == "message_stop" and self.final:
            # only a whole message: a stream cut before its end is asked for again by the CLI, and that
            # second stream is the answer (a proxy killed mid-stream made one answer go out twice)
            answer = "\n\n".join(self.texts)
            self.texts, self.final = [], False
            if answer and answer not in self.said:
                self.said.add(answer)
                self.answers += 1
                return answer
        return None
