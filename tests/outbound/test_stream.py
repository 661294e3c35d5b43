"""Streaming without a sandbox: what of the model's text may show (the runner's Streamer, pure), and the
host's live message under any order of stream growth, ticks, platform failures and the turn's end
(Hypothesis, over real session files, with the platform calls run when the test says): one live
message a turn, only ever the answer's own text, gone at the end."""
from __future__ import annotations

from claude_agent_sdk import StreamEvent
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from agent_runner.stream import Streamer, visible_text
from nanoclaw.channels.base import DeliveryError, register
from nanoclaw.config import Settings
from nanoclaw.outbound.progress import MIN_GROWTH, Progress, compose, next_step, Status, worth_editing
from nanoclaw.sessions import session_schema as schema
from nanoclaw.sessions import store
from nanoclaw.sessions.store import Target


def ev(event: dict, parent: str | None = None) -> StreamEvent:
    return StreamEvent(uuid="u", session_id="s", event=event, parent_tool_use_id=parent)


def text_block(*pieces, parent=None):
    yield ev({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}, parent)
    for p in pieces:
        yield ev({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}}, parent)
    yield ev({"type": "content_block_stop", "index": 0}, parent)


def tool_block(parent=None):
    yield ev({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "t", "name": "Bash",
                                                                           "input": {}}}, parent)
    yield ev({"type": "content_block_stop", "index": 1}, parent)


def shown(events) -> list[str]:
    s = Streamer()
    return [t for t in (s.feed(e) for e in events) if t is not None]


def test_top_level_text_streams_and_text_before_a_tool_call_is_replaced_by_the_next():
    out = shown([*text_block("Let me ", "look."), *tool_block(), *text_block("Found ", "it.")])
    assert out == ["Let me", "Let me look.", "Let me look.", "Found", "Found it.", "Found it."]


def test_a_subagents_text_never_streams():
    assert shown([*text_block("secret plan", parent="toolu_1"), *text_block("Hi")]) == ["Hi", "Hi"]


def test_internal_is_held_back_from_its_opening_bracket_until_it_closes():
    assert shown([*text_block("Sure. <inte", "rnal>thinking", "</internal> Done.")]) == \
        ["Sure.", "Sure.", "Sure.  Done.", "Sure.  Done."]
    assert visible_text("a <") == "a" and visible_text("a < b") == "a < b"


@given(st.lists(st.sampled_from(["x", " ", "<", "internal", ">", "</", "<internal>", "</internal>", "y"]),
                max_size=30))
def test_nothing_inside_internal_ever_shows_at_any_point(parts):
    raw = "".join(parts)
    final = visible_text(raw)
    for cut in range(len(raw) + 1):
        now = visible_text(raw[:cut])
        assert "<internal>" not in now
        if "<internal>" not in raw[:cut]:  # before any internal section, what shows is what the end shows
            assert final.startswith(now.rstrip("<").strip()) or "<" in raw, (now, final)


def test_the_live_message_is_the_answer_and_a_status_line_only_while_a_tool_runs():
    assert compose("Hello", None) == "Hello"
    assert compose("Hello", "⏳ Working… 0:05 · running `pytest`") == "Hello\n\n⏳ Working… 0:05 · running `pytest`"
    assert compose("", "⏳ Working… 0:10") == "⏳ Working… 0:10"
    assert not worth_editing("Hello", "Hello" + "x" * (MIN_GROWTH - 1))
    assert worth_editing("Hello", "Hello" + "x" * MIN_GROWTH) and worth_editing("Hello", "Goodbye")


def test_a_quick_answer_never_shows_a_live_message_and_a_draft_shows_at_once():
    status = Status("m1", Target("live", "-5"), since=0.0, stream_since=0.0, stream_first="Hi")
    kw = dict(after_s=10.0, last_edit=None, edit_every_s=3.0, blocked_until=0.0, streaming=True)
    assert next_step(status, 5.0, "Hi", **kw) is None  # one text, however long it stood: a quick answer
    status.stream_grew = True
    assert next_step(status, 0.3, "Hi", **kw) is None
    assert next_step(status, 0.6, "Hi", **kw) == "show"
    draft = Status("m1", Target("live", "5"), since=0.0, draft=True, stream_since=0.0, stream_first="Hi")
    assert next_step(draft, 0.01, "Hi", **kw) is None
    draft.stream_grew = True
    assert next_step(draft, 0.01, "Hi there", **kw) == "edit"
    assert next_step(status, 0.6, "x" * 5000, **kw) == "break"


# --- the live message under any order of events (Hypothesis) -----------------------------------------

class LivePlatform:
    """A platform that can edit and delete; its answers are scripted by the test."""
    calls: list = []
    outcomes: list = []   # per call: "ok", "429", "refused"
    next_id = 0

    def __init__(self, settings):
        pass

    live_status = True
    stream_limit = 3000

    def _outcome(self, what, *args):
        outcome = LivePlatform.outcomes.pop(0) if LivePlatform.outcomes else "ok"
        LivePlatform.calls.append((what, outcome, *args))
        if outcome == "429":
            raise DeliveryError("429 Too Many Requests", retry_after=2)
        if outcome == "refused":
            raise DeliveryError("400 message to edit not found", permanent=True)

    def send_text(self, target, text):
        self._outcome("send", text)
        LivePlatform.next_id += 1
        return str(LivePlatform.next_id)

    def edit_text(self, target, pid, text):
        self._outcome("edit", pid, text)

    def delete_message(self, target, pid):
        self._outcome("delete", pid)


register("live")(LivePlatform)


class Deferred:
    """The progress pool, run when the test says: calls in flight while the turn goes on or ends."""

    def __init__(self):
        self.queue = []

    def submit(self, fn, *args):
        self.queue.append((fn, args))

    def run_one(self):
        if self.queue:
            fn, args = self.queue.pop(0)
            fn(*args)


def session(tmp_path):
    path = tmp_path / "s"
    store.prepare(path, Target("live", "-5"))
    store.write_message(path, content={"text": "write it", "message_id": "9"}, target=Target("live", "-5"),
                        message_id="m1")
    store.set_option(path, "stream", "on")
    (path / "agent").mkdir(exist_ok=True)
    out = schema.connect(path / "agent" / schema.OUTBOUND)
    out.execute("INSERT INTO processing_ack VALUES ('m1', 'processing', '2026-01-01T00:00:00.000Z')")
    return path, out


ANSWER = " ".join(f"w{i:03d}" for i in range(400))


def write_stream(out, text: str) -> None:
    """As the runner writes the answer so far for message m1."""
    out.execute("INSERT INTO container_state (id, stream_for, stream_text) VALUES (1, 'm1', ?) ON CONFLICT "
                "(id) DO UPDATE SET stream_for = 'm1', stream_text = excluded.stream_text", (text,))


def tick_at(live, path, now: float) -> None:
    """One delivery pass's tick, on the session's files as delivery opens them."""
    db = schema.connect(store.inbound_db(path))
    store.attach_outbound(db, path)
    try:
        live.tick(db, path, now)
    finally:
        db.close()

steps = st.lists(st.one_of(
    st.tuples(st.just("grow"), st.integers(1, 200)),
    st.tuples(st.just("tick"), st.floats(0.05, 4.0)),
    st.tuples(st.just("run"), st.just(0)),
), min_size=1, max_size=60)


@hsettings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=steps, outcomes=st.lists(st.sampled_from(["ok", "ok", "ok", "429", "refused"]), max_size=20),
       drain_first=st.booleans())
def test_one_live_message_only_the_answers_text_and_gone_at_the_end(tmp_path_factory, steps, outcomes, drain_first):
    tmp = tmp_path_factory.mktemp("live")
    path, out = session(tmp)
    settings = Settings.load(environ={"NANOCLAW_DATA_DIR": str(tmp), "TZ": "UTC"}, dotenv_path=tmp / "x")
    LivePlatform.calls, LivePlatform.outcomes = [], list(outcomes)
    live = Progress(settings)
    live._pool = Deferred()
    written, now = 0, 0.0

    for kind, amount in steps:
        if kind == "grow":
            written = min(len(ANSWER), written + amount)
            write_stream(out, ANSWER[:written])
        elif kind == "tick":
            now += amount
            tick_at(live, path, now)
        else:
            live._pool.run_one()
    # the turn ends: its answer is a message of its own (delivery); the live message goes
    out.execute("UPDATE processing_ack SET status = 'completed'")
    out.execute("UPDATE container_state SET stream_for = NULL, stream_text = NULL")
    if drain_first:
        while live._pool.queue:
            live._pool.run_one()
    now += 1
    tick_at(live, path, now)
    while live._pool.queue:
        live._pool.run_one()
    now += 1
    tick_at(live, path, now)
    while live._pool.queue:
        live._pool.run_one()

    sent = [c for c in LivePlatform.calls if c[0] == "send" and c[1] == "ok"]
    assert len([c for c in LivePlatform.calls if c[0] == "send"]) <= 1  # one live message a turn, never two
    for c in LivePlatform.calls:
        text = c[-1] if c[0] in ("send", "edit") else ""
        words = "" if text.startswith("⏳") else text.split("\n\n⏳")[0]  # a status line alone, after 10 s
        assert ANSWER.startswith(words), text  # only ever the answer's own words
    if sent:
        pid = str(LivePlatform.next_id)
        assert all(c[2] == pid for c in LivePlatform.calls if c[0] in ("edit", "delete"))
        deletes = [c for c in LivePlatform.calls if c[0] == "delete"]
        assert len(deletes) == 1, LivePlatform.calls  # removed once the turn ended, in-flight call or not
        after = LivePlatform.calls[LivePlatform.calls.index(deletes[0]) + 1:]
        assert not [c for c in after if c[0] in ("send", "edit")]  # nothing shown after it went
    db = schema.connect(store.inbound_db(path), readonly=True)
    assert db.execute("SELECT COUNT(*) FROM status_messages").fetchone()[0] == 0
    db.close()
    out.close()


def test_a_platform_that_caps_edits_gets_no_more_than_its_cap():
    from nanoclaw.platforms.signal.adapter import SignalAdapter
    cap = SignalAdapter.max_edits
    status = Status("m1", Target("signal", "+15550001"), since=0.0, shown="1", text="a", stream_grew=True)
    kw = dict(after_s=10.0, last_edit=None, edit_every_s=3.0, blocked_until=0.0, streaming=True, max_edits=cap)
    status.edits = cap - 1
    assert next_step(status, 1.0, "a" + "b" * MIN_GROWTH, **kw) == "edit"
    status.edits = cap
    assert next_step(status, 1.0, "a" + "b" * MIN_GROWTH, **kw) is None  # Signal's clients show 10 at most


def test_a_retried_turn_marks_its_earlier_message_interrupted_and_streams_into_a_new_one(tmp_path):
    path, out = session(tmp_path)
    settings = Settings.load(environ={"NANOCLAW_DATA_DIR": str(tmp_path), "TZ": "UTC"}, dotenv_path=tmp_path / "x")
    LivePlatform.calls, LivePlatform.outcomes, LivePlatform.next_id = [], [], 0
    live = Progress(settings)
    live._pool = Deferred()
    now = 0.0

    def grow(text):
        write_stream(out, text)

    def tick(dt):
        nonlocal now
        now += dt
        tick_at(live, path, now)
        while live._pool.queue:
            live._pool.run_one()

    grow("w000 w001")
    tick(0.1)
    grow(ANSWER[:200])
    tick(1.0)
    [first] = [c for c in LivePlatform.calls if c[0] == "send"]
    # the runner died; its successor claims the message again and starts the answer over
    out.execute("UPDATE processing_ack SET status_changed = '2026-01-01T00:01:00.000Z'")
    grow("w000")
    tick(1.0)
    assert ("edit", "ok", "1", ANSWER[:200].strip() + "\n\n(interrupted)") in LivePlatform.calls
    grow(ANSWER[:300])
    tick(1.0)
    sends = [c for c in LivePlatform.calls if c[0] == "send"]
    assert len(sends) == 2 and sends[0] == first and ANSWER.startswith(sends[1][2])
    assert not [c for c in LivePlatform.calls if c[0] == "delete" and c[2] == "1"]  # kept, marked
    out.close()
