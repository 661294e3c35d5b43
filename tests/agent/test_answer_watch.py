"""The runner knows a turn's answer when the model ends its turn, before the CLI's result message."""
from __future__ import annotations

from claude_agent_sdk import AssistantMessage, ResultMessage, StreamEvent, TextBlock, ToolUseBlock

from agent_runner.provider import AnswerWatch


def event(kind: str, stop_reason: str | None = None, parent: str | None = None) -> StreamEvent:
    body = {"type": kind}
    if kind == "message_delta":
        body["delta"] = {"stop_reason": stop_reason}
    return StreamEvent(uuid="u", session_id="s", event=body, parent_tool_use_id=parent)


def said(*blocks, parent: str | None = None) -> AssistantMessage:
    return AssistantMessage(content=list(blocks), model="claude", parent_tool_use_id=parent)


def result(text: str) -> ResultMessage:
    return ResultMessage(subtype="success", duration_ms=1, duration_api_ms=1, is_error=False, num_turns=1,
                         session_id="s", result=text)


def told(messages) -> list[str]:
    watch = AnswerWatch()
    return [answer for m in messages if (answer := watch.feed(m)) is not None]


def test_the_answer_is_told_at_the_models_end_turn_not_at_the_result():
    # the order a real CLI streams a turn in (include_partial_messages): the assistant message with
    # the block's text comes at the block's end, the end_turn after it, the result last
    turn = [event("message_start"), event("content_block_start"), event("content_block_delta"),
            said(TextBlock("Final answer.")), event("content_block_stop"), event("message_delta", "end_turn")]
    assert told(turn) == ["Final answer."]
    assert told(turn[:-1] + [event("message_stop"), result("Final answer.")]) == []  # not before it


def test_a_message_that_calls_a_tool_is_not_the_answer_and_the_next_one_is():
    turn = [event("message_start"), said(TextBlock("Let me look.")), said(ToolUseBlock("t1", "Bash", {})),
            event("message_delta", "tool_use"), event("message_stop"),
            event("message_start"), said(TextBlock("It is 3 pm.")), event("message_delta", "end_turn")]
    assert told(turn) == ["It is 3 pm."]


def test_what_the_result_might_join_otherwise_waits_for_the_result():
    two_blocks = [event("message_start"), said(TextBlock("One.")), said(TextBlock("Two.")),
                  event("message_delta", "end_turn")]
    no_text = [event("message_start"), event("message_delta", "end_turn")]
    unstreamed = [said(TextBlock("API Error: overloaded")), event("message_delta", "end_turn")]  # no message_start
    subagent = [event("message_start", parent="task-1"), said(TextBlock("sub"), parent="task-1"),
                event("message_delta", "end_turn", parent="task-1")]
    assert told(two_blocks) == told(no_text) == told(unstreamed) == told(subagent) == []
