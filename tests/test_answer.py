"""The answer goes out when the model ends its turn, not when the CLI ends it: the real runner in
bubblewrap with a Stop hook that holds the CLI's result back, plus the pure spotting rules."""
from __future__ import annotations

import json
import os
import signal
import time

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


HOLD = ('touch "$CLAUDE_PROJECT_DIR/held"; '
        'for i in $(seq 600); do [ -e "$CLAUDE_PROJECT_DIR/release" ] && exit 0; sleep 0.05; done')


def held_runner(lay: Layout, fake, **env) -> RunnerProc:  # noqa: F811
    """A runner whose group settings hold every turn's end (a Stop hook) until the test releases it:
    what the CLI does after the model's last byte, stretched from milliseconds to as long as we like."""
    (lay.group / ".claude").mkdir()
    (lay.group / ".claude" / "settings.json").write_text(json.dumps(
        {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": HOLD}]}]}}))
    return RunnerProc(lay, fake, env)


def test_the_reply_is_written_before_the_cli_finishes_its_turn(tmp_path, fake):  # noqa: F811
    lay = Layout.make(tmp_path)
    fake.script = lambda r: Reply.say("Hi Alice!")
    runner = held_runner(lay, fake, NANOCLAW_TURN_TIMEOUT_S="8")
    try:
        mid = lay.write("hello there")
        reply = lay.wait_out(lambda r: r["in_reply_to"] == mid, timeout=20)  # the hook holds the result 30 s
        assert reply["content"] == {"op": "text", "text": "Hi Alice!"}
        assert lay.acks().get(mid) == "completed", "the message's outcome is written with its answer"
        deadline = time.monotonic() + 20
        while not (lay.group / "held").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert (lay.group / "held").exists(), "the Stop hook runs after the answer: the CLI's result is still to come"
        (lay.group / "release").touch()
        assert [r["content"]["text"] for r in lay.out_rows()] == ["Hi Alice!"]

        # the turn ends; its result's text is not sent again
        fake.script = lambda r: Reply.say("Second.")
        mid2 = lay.write("again")
        lay.wait_out(lambda r: r["in_reply_to"] == mid2, timeout=60)
        assert [r["content"]["text"] for r in lay.out_rows()] == ["Hi Alice!", "Second."], "each said once"

        # a turn whose answer went out and which then fails (here: the hook outlasts the turn's time
        # limit) is not the chat's news: no failure message, no retry of an answered message
        (lay.group / "release").unlink()
        fake.script = lambda r: Reply.say("Still here.")
        mid3 = lay.write("and now?")
        lay.wait_out(lambda r: r["in_reply_to"] == mid3, timeout=60)
        deadline = time.monotonic() + 60
        while "turn failed after its answer went out" not in runner.logs() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "turn failed after its answer went out" in runner.logs()
        assert [r["content"]["text"] for r in lay.out_rows()] == ["Hi Alice!", "Second.", "Still here."]
        assert lay.acks().get(mid3) == "completed"
    finally:
        runner.stop()


def test_a_runner_killed_after_the_answer_leaves_nothing_to_answer_again(tmp_path, fake):  # noqa: F811
    """The answer is out and only the CLI's bookkeeping is left when the sandbox dies (SIGKILL: no
    clean-up runs): the message counts as answered, not as one to put to the agent again."""
    from nanoclaw.runtime.bwrap import _descendants
    lay = Layout.make(tmp_path)
    fake.script = lambda r: Reply.say("Hi Alice!")
    runner = held_runner(lay, fake)
    try:
        mid = lay.write("hello there")
        lay.wait_out(lambda r: r["in_reply_to"] == mid, timeout=20)
        pid = runner.runtime.pid_of(runner.name)
        for p in _descendants(pid) + [pid]:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass  # gone with its parent
    finally:
        runner.stop()
    assert lay.acks().get(mid) == "completed", "a claim left 'processing' would be retried and answered twice"
