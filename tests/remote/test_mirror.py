"""What a remote runner pushes is checked before it reaches the host's copy of its outbound.db."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from nanoclaw.remote import mirror


def row(seq, **over):
    r = {"id": f"id{seq}", "seq": seq, "in_reply_to": None, "timestamp": "2026-11-26T10:00:00.000Z",
         "kind": "chat", "channel_type": "telegram", "platform_id": "111", "thread_id": None,
         "content": json.dumps({"op": "text", "text": f"hi {seq}"})}
    return {**r, **over}


@pytest.fixture
def copy(tmp_path):
    conn = mirror.open_copy(tmp_path / "outbound.db")
    yield conn
    conn.close()


def test_new_rows_are_appended_and_mirrored_rows_never_change(copy):
    mirror.apply(copy, mirror.check({"out": [row(1), row(2)]}))
    rewrite = row(2, content=json.dumps({"op": "text", "text": "rewritten"}))
    added, top = mirror.apply(copy, mirror.check({"out": [rewrite, row(3)]}))
    assert (added, top) == (1, 3)
    texts = [json.loads(c)["text"] for (c,) in copy.execute("SELECT content FROM messages_out ORDER BY seq")]
    assert texts == ["hi 1", "hi 2", "hi 3"]


def test_an_id_the_host_already_has_is_not_taken_again(copy):
    mirror.apply(copy, mirror.check({"out": [row(1)]}))
    added, _top = mirror.apply(copy, mirror.check({"out": [row(2, id="id1")]}))
    assert added == 0


def test_acks_state_and_tool_are_taken_as_sent(copy):
    mirror.apply(copy, mirror.check({
        "acks": [{"message_id": "m1", "status": "processing", "status_changed": "t"}],
        "state": [{"key": "sdk_session_id", "value": "s1"}],
        "container": {"current_tool": "Bash", "tool_declared_timeout_ms": 5000, "tool_started_at": "t",
                      "tool_subject": "ls"}}))
    mirror.apply(copy, mirror.check({"acks": [{"message_id": "m1", "status": "completed", "status_changed": "u"}]}))
    assert [tuple(r) for r in copy.execute("SELECT message_id, status FROM processing_ack")] == [("m1", "completed")]
    assert copy.execute("SELECT current_tool FROM container_state").fetchone()[0] == "Bash"


@pytest.mark.parametrize("payload", [
    [], "x", {"out": "x"}, {"out": [row(2), row(1)]}, {"out": [{**row(1), "seq": True}]}, {"out": [row(0)]},
    {"out": [row(1, content="x" * (mirror.MAX_CONTENT + 1))]}, {"out": [row(1, kind=None)]},
    {"out": [row(1, id={"a": 1})]}, {"acks": [{"message_id": "m", "status": "owned", "status_changed": "t"}]},
    {"out": [row(i + 1) for i in range(mirror.MAX_ROWS + 1)]}, {"heartbeat": "now"},
    {"container": {"tool_declared_timeout_ms": "5"}},
])
def test_a_malformed_push_is_refused_whole(payload, copy):
    with pytest.raises(mirror.BadPush):
        mirror.check(payload)
    assert mirror.max_seq(copy) == 0


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                                        max_size=5), max_leaves=20)


@settings(max_examples=300)
@given(st.dictionaries(st.sampled_from(["out", "acks", "state", "container", "keep_from_seq", "heartbeat", "x"]),
                       json_values, max_size=6))
def test_any_json_is_either_refused_or_written_without_a_crash(payload):
    import sqlite3
    from nanoclaw.sessions import session_schema as schema
    try:
        push = mirror.check(payload)
    except mirror.BadPush:
        return
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.executescript(schema.OUTBOUND_DDL)
    mirror.apply(conn, push)
