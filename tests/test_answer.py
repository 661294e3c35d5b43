"""The answer of a turn: every text block of the model's final message (the CLI's result keeps only
the last), once, also when a stream was cut and asked for again; the pure rules and the real runner."""
from __future__ import annotations


from nanoclaw.sessions import session_schema as _schema  # noqa: F401 - puts container/ on sys.path
from tests.fakes.model_api import Reply
from tests.test_runner import Layout, RunnerProc, fake  # noqa: F401 - fake is a fixture

from agent_runner.answer import AnswerSpotter  # noqa: E402
from claude_agent_sdk import AssistantMessage, StreamEvent, TextBlock, ToolUseBlock  # noqa: E402


def event(kind: str, stop_reason: str | None = None, parent: str | None = None) -> StreamEvent:
    ev = {"type": kind}
    if kind == "message_delta":
        ev["delta"] = {"stop_reason": stop_reason, "stop_sequence": None}
    return StreamEvent(uuid="u", session_id="s", event=ev, parent_tool_use_id=parent)


def said(*texts: str, parent: str | None = None) -> list:
    return [AssistantMessage(content=[TextBlock(t)], model="m", parent_tool_use_id=parent) for t in texts]


def spot(messages: list) -> list[str]:
    spotter = AnswerSpotter()
    return [a for a in map(spotter.see, messages) if a is not None]


def test_the_answer_is_the_text_of_the_message_that_ends_the_turn():
    assert spot([event("message_start"), *said("Hi Alice!"), event("message_delta", "end_turn"),
                 event("message_stop")]) == ["Hi Alice!"]


def test_a_stream_cut_short_is_not_the_answer_its_repeat_is_once():
    # the proxy dies after end_turn but before message_stop: the CLI asks again and gets it whole
    assert spot([event("message_start"), *said("ack 1"), event("message_delta", "end_turn"),
                 event("message_start"), *said("ack 1"), event("message_delta", "end_turn"),
                 event("message_stop")]) == ["ack 1"]


def test_every_text_block_of_the_answer_is_kept_not_only_the_last():
    # the CLI's own result holds only the last block ("second part")
    assert spot([event("message_start"), *said("first part", "second part"),
                 event("message_delta", "end_turn"), event("message_stop")]) == ["first part\n\nsecond part"]


def test_text_before_a_tool_call_is_not_the_answer():
    tool = AssistantMessage(content=[ToolUseBlock(id="t1", name="Bash", input={"command": "ls"})], model="m")
    assert spot([event("message_start"), *said("Let me look."), tool, event("message_delta", "tool_use"),
                 event("message_stop"), event("message_start"), *said("Two files."), event("message_delta", "end_turn"),
                 event("message_stop")]) == ["Two files."]


def test_a_subagents_stream_and_an_empty_answer_are_not_answers():
    sub = "toolu_sub"
    assert spot([event("message_start", parent=sub), *said("inner result", parent=sub),
                 event("message_delta", "end_turn", parent=sub)]) == []
    assert spot([event("message_start"), *said("   "), event("message_delta", "end_turn"),
                 event("message_stop")]) == []


def test_a_turn_sent_back_by_a_stop_hook_can_answer_twice():
    spotter = AnswerSpotter()
    seen = [spotter.see(m) for m in [event("message_start"), *said("Done."), event("message_delta", "end_turn"),
                                     event("message_stop"), event("message_start"), *said("Also this."),
                                     event("message_delta", "end_turn"), event("message_stop")]]
    assert [a for a in seen if a] == ["Done.", "Also this."] and spotter.answers == 2


def test_a_stream_cut_after_end_turn_is_answered_once(tmp_path, fake):  # noqa: F811
    """The proxy dies after the model's end_turn but before its message_stop: the CLI asks again, and
    the chat gets the answer once (counting the cut stream's text as an answer sent it twice)."""
    lay = Layout.make(tmp_path)
    calls = []

    def script(req):
        calls.append(req)
        return Reply.say("ack 1", cut_before="message_stop" if len(calls) == 1 else "")
    fake.script = script
    runner = RunnerProc(lay, fake, {"CLAUDE_CODE_MAX_RETRIES": "2"})
    try:
        mid = lay.write("note 1")
        lay.wait_ack(mid, timeout=60)
    finally:
        runner.stop()
    assert len([c for c in calls if c.is_model_call]) >= 2, "the cut stream was asked for again"
    assert [r["content"]["text"] for r in lay.out_rows()] == ["ack 1"]
