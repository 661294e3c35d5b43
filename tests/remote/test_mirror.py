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
    {"container": {"tool_declared_timeout_ms": "5"}}, {"out": [row(1), row(2, id="id1")]},
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


# --- the invariants docs/security.md cites, over a prepared copy and any run of accepted pushes --

ids = st.sampled_from([f"id{i}" for i in range(12)])
pushes = st.lists(st.fixed_dictionaries({
    "out": st.lists(st.tuples(st.integers(1, 40), ids, st.text(max_size=8)), max_size=6),
    "keep_from_seq": st.none() | st.integers(0, 45)}), min_size=1, max_size=8)


def as_payload(push: dict) -> dict:
    """A push as a runner would send it: its rows in rising seq order (each seq once)."""
    rows, seen = [], set()
    for seq, rid, text in sorted(push["out"]):
        if seq not in seen:
            seen.add(seq)
            rows.append(row(seq, id=rid, content=json.dumps({"op": "text", "text": text})))
    return {"out": rows, "keep_from_seq": push["keep_from_seq"]}


def kept(conn) -> dict[int, tuple]:
    return {r[1]: tuple(r) for r in conn.execute("SELECT id, seq, in_reply_to, timestamp, kind, channel_type, "
                                                 "platform_id, thread_id, content FROM messages_out")}


@settings(max_examples=200, deadline=None)
@given(pushes)
def test_any_run_of_pushes_keeps_seq_rising_rows_unchanged_and_ids_single(tmp_path_factory, run):
    conn = mirror.open_copy(tmp_path_factory.mktemp("copy") / "outbound.db")
    try:
        mirror.apply(conn, mirror.check({"out": [row(s) for s in range(1, 6)]}))  # what the host already has
        before, top = kept(conn), mirror.max_seq(conn)
        for push in run:
            payload = as_payload(push)
            try:
                checked = mirror.check(payload)
            except mirror.BadPush:  # refused whole: the copy as it was
                assert kept(conn) == before
                continue
            added, new_top = mirror.apply(conn, checked)
            after = kept(conn)
            assert new_top >= top  # seq only rises
            for seq, was in before.items():  # a kept row is never rewritten; it goes only by a prune below keep_from_seq
                if seq in after:
                    assert after[seq] == was
                else:
                    assert payload["keep_from_seq"] is not None and seq < payload["keep_from_seq"] and seq < new_top
            fresh = {seq: r for seq, r in after.items() if seq not in before}
            assert len(fresh) <= added and all(seq > top for seq in fresh)  # only past what the host had (a prune may take some)
            taken = [r[0] for r in after.values()]
            assert len(taken) == len(set(taken))  # no id twice
            assert not {r[0] for r in fresh.values()} & {r[0] for r in before.values()}  # nor an id it had again
            before, top = after, new_top
    finally:
        conn.close()


def test_acks_as_changes_keep_the_rest_and_release_what_is_gone(copy):
    full = [{"message_id": f"m{n}", "status": "completed", "status_changed": "t"} for n in range(5)]
    mirror.apply(copy, mirror.check({"acks": full}))
    mirror.apply(copy, mirror.check({"acks_delta": True, "acks": [
        {"message_id": "m5", "status": "processing", "status_changed": "u"}], "acks_gone": ["m0"]}))
    kept = dict(copy.execute("SELECT message_id, status FROM processing_ack").fetchall())
    assert kept == {"m1": "completed", "m2": "completed", "m3": "completed", "m4": "completed", "m5": "processing"}
    with pytest.raises(mirror.BadPush):
        mirror.check({"acks_delta": True, "acks_gone": [{"id": 1}]})


# --- what decoding a push builds stays within the room the door takes for it (issue 60, item 5) --

def built_while_decoding(body: bytes) -> int:
    """Peak bytes allocated while `body` is decoded into a push (refused or not)."""
    import tracemalloc
    tracemalloc.start()
    try:
        try:
            push = mirror.decode(body)
        except mirror.BadPush:
            push = None
        return tracemalloc.get_traced_memory()[1]
    finally:
        del push
        tracemalloc.stop()


def within_room(body: bytes) -> bool:
    from nanoclaw.remote.bodies import room_for
    return built_while_decoding(body) <= room_for(len(body), mirror.MAX_VALUES) - len(body)


def listed(field: str, item: bytes, size: int) -> bytes:
    """A body of about `size` bytes: one list of `item` repeated."""
    count = max(1, size // (len(item) + 1))
    return b'{"%s":[' % field.encode() + b",".join([item] * count) + b"]}"


ACK = b'{"message_id":"ab","status":"failed","status_changed":"cd"}'
ROW = b'{"id":"i%d","seq":%d,"timestamp":"t","kind":"k","content":"c"}'


@pytest.mark.parametrize("body", [
    listed("acks_gone", b'"ab"', 10 << 20),         # 2M two-letter ids: refused for their number, before any is built
    listed("acks_gone", b'"ab"', 100_000),          # as many as a push may hold, each built
    listed("acks", ACK, 10 << 20), listed("acks", ACK, 600_000),
    b'{"out":[' + b",".join(ROW % (n, n) for n in range(1, 501)) + b"]}",
    listed("x", b"[]", 10 << 20),                   # a field the shape does not name: skipped, nothing built
    b'{"out":[{"id":"a","seq":1,"timestamp":"t","kind":"k","content":"' + b"\\u00e9" * (4 << 20) + b'"}]}',
])
def test_what_a_push_builds_stays_within_the_room_the_door_takes_for_it(body):
    assert within_room(body)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([b'"a"', b'"ab"', b"1", b"[]", b"{}", b"null", ACK, b'"' + b"x" * 300 + b'"']),
                min_size=1, max_size=400), st.sampled_from(["acks_gone", "acks", "out", "state", "x"]),
       st.integers(1, 2_000))
def test_any_push_builds_no_more_than_its_room(items, field, repeat):
    joined = b",".join(items)
    assert within_room(listed(field, joined, min(repeat * len(joined), 2 << 20)))


def test_a_push_the_runner_would_send_is_taken_and_one_past_what_it_sends_is_refused():
    fill = "é, [x]" * (300 << 10)  # 8 MiB of rows as the runner encodes them (PUSH_BYTES), commas and all
    honest = json.dumps({"out": [row(n, content=fill) for n in range(1, 5)], "acks": [
        {"message_id": f"m{n}", "status": "completed", "status_changed": "t"} for n in range(5000)],
        "heartbeat": 1.5}, ensure_ascii=False).encode()
    assert (8 << 20) < len(honest) <= mirror.MAX_PUSH
    assert [r[-1] for r in mirror.decode(honest).out] == [fill] * 4
    with pytest.raises(mirror.BadPush, match="at most"):
        mirror.decode(b" " * (mirror.MAX_PUSH + 1))
