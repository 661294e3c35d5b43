"""Delivery: outbound rows reach the adapter once, retries with backoff, failure notice, targets checked."""
import json
import os
import threading
import shutil
from datetime import datetime, timedelta, timezone

import pytest

from nanoclaw.channels.base import DeliveryError
from nanoclaw.outbound import delivery as delivery_module
from nanoclaw.outbound import outbox as outbox_module
from nanoclaw.outbound.delivery import TRANSIENT_HORIZON_S, KeptSessions, backoff, deliver_session, gives_up
from nanoclaw.sessions import session_schema as schema
from nanoclaw.sessions.store import Target, prepare, set_destination, write_message


from tests.outbound.recorder import Recorder, agent_writes, session  # noqa: F401,E402  (session is a fixture)


def status(path):
    conn = schema.connect(path / "host" / schema.INBOUND)
    try:
        return [tuple(r) for r in conn.execute("SELECT status, tries, platform_message_id FROM delivered "
                                               "ORDER BY rowid")]
    finally:
        conn.close()


def test_text_edit_reaction_file_delivered_once(session):
    """(An agent's card is a system op with a record of its own: tests/approvals/test_card_trust.py.)"""
    (session / "agent" / "outbox" / "report.txt").write_text("numbers")
    agent_writes(session, {"op": "text", "text": "hi"}, {"op": "edit", "target_seq": 1, "text": "hi!"},
                 {"op": "reaction", "target_seq": 1, "emoji": "👍"}, {"op": "file", "path": "outbox/report.txt"})
    assert deliver_session(session, settings=None) == 4
    assert Recorder.sent == [("text", "chat-1", "hi"), ("edit", "p1", "hi!"), ("react", "p1", "👍"),
                             ("file", "report.txt", "numbers")]
    assert deliver_session(session, settings=None) == 0
    assert len(Recorder.sent) == 4


def test_a_sent_file_keeps_the_name_the_agent_gave_it(session):
    (session / "agent" / "outbox" / "69a0a488-chart.png").write_text("png")  # send_file's outbox copy
    agent_writes(session, {"op": "file", "path": "outbox/69a0a488-chart.png"})
    assert deliver_session(session, settings=None) == 1
    assert Recorder.sent == [("file", "chart.png", "png")]


def test_retry_with_backoff_then_success(session):
    Recorder.failures_left = 1
    agent_writes(session, {"op": "text", "text": "hello"})
    assert deliver_session(session, settings=None) == 0
    assert status(session)[0][:2] == ("retry", 1)
    assert deliver_session(session, settings=None) == 0  # not due yet
    later = datetime.now(timezone.utc) + timedelta(seconds=5)
    assert deliver_session(session, settings=None, now=later) == 1
    assert Recorder.sent == [("text", "chat-1", "hello")]


def test_three_unexplained_failures_mark_failed_and_tell_the_user(session):
    Recorder.failures_left, Recorder.failure = 3, KeyError("chat")
    agent_writes(session, {"op": "text", "text": "lost?"})
    t = datetime.now(timezone.utc)
    for i in range(3):
        deliver_session(session, settings=None, now=t + timedelta(seconds=60 * i))
    assert status(session)[0][:2] == ("failed", 3)
    assert Recorder.sent == [("text", "chat-1", "(I could not deliver a reply: 'chat')")]


def test_a_permanent_refusal_fails_at_once(session):
    Recorder.failures_left, Recorder.failure = 1, DeliveryError("400 chat not found", permanent=True)
    agent_writes(session, {"op": "text", "text": "to nowhere"})
    deliver_session(session, settings=None)
    assert status(session)[0][:2] == ("failed", 1)
    assert Recorder.sent == [("text", "chat-1", "(I could not deliver a reply: 400 chat not found)")]


def run_until_settled(session, start):
    """Deliver at each row's next try time until it is delivered or failed; the tries it took."""
    t = start
    for _ in range(100):
        deliver_session(session, settings=None, now=t)
        conn = schema.connect(session / "host" / schema.INBOUND)
        st, tries, next_try = conn.execute("SELECT status, tries, next_try_at FROM delivered").fetchone()
        conn.close()
        if st != "retry":
            return st, tries, t - start
        t = datetime.strptime(next_try, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    raise AssertionError("never settled")


def test_a_platform_outage_of_half_an_hour_loses_no_reply(session):
    """5xx and 429 are waited out (backoff up to 5 min), not counted against three tries."""
    Recorder.failures_left, Recorder.failure = 12, DeliveryError("502 Bad Gateway")
    agent_writes(session, {"op": "text", "text": "still here"})
    st, tries, took = run_until_settled(session, datetime.now(timezone.utc))
    assert (st, tries) == ("delivered", 13)
    assert timedelta(minutes=20) < took < timedelta(minutes=45)
    assert Recorder.sent == [("text", "chat-1", "still here")]


def test_an_outage_longer_than_the_horizon_fails_and_tells_the_user(session):
    Recorder.failures_left, Recorder.failure = 1000, DeliveryError("503 Service Unavailable")
    agent_writes(session, {"op": "text", "text": "gone"})
    st, tries, took = run_until_settled(session, datetime.now(timezone.utc))
    assert st == "failed"
    assert timedelta(seconds=TRANSIENT_HORIZON_S) - timedelta(minutes=5) <= took <= timedelta(
        seconds=TRANSIENT_HORIZON_S)
    assert Recorder.sent == []  # the notice goes to the same platform, which is still down


def test_retry_after_is_honoured_and_backoff_is_capped():
    assert backoff(1, 30) == 30
    assert backoff(1, None) == 1 and backoff(2, None) == 2 and backoff(3, None) == 4
    assert backoff(20, None) == 300 and backoff(20, 900) == 900


def test_gives_up_by_kind_of_error():
    assert gives_up(1, DeliveryError("x", permanent=True))
    assert not gives_up(2, RuntimeError("x")) and gives_up(3, RuntimeError("x"))
    transient = DeliveryError("x", retry_after=5)
    assert not gives_up(10, transient)
    first = next(n for n in range(1, 100) if gives_up(n, transient))
    assert sum(backoff(n, None) for n in range(1, first)) < TRANSIENT_HORIZON_S <= sum(
        backoff(n, None) for n in range(1, first + 1))


def test_rows_for_foreign_chats_are_refused(session):
    agent_writes(session, {"op": "text", "text": "spam"}, target=("rec", "someone-else", None))
    set_destination(session, "team", Target("rec", "team-chat"))
    agent_writes(session, {"op": "text", "text": "to team"}, target=("rec", "team-chat", None))
    deliver_session(session, settings=None)
    assert Recorder.sent[1] == ("text", "team-chat", "to team")
    # the refusal is told in the session's own chat, never in the foreign one
    assert Recorder.sent[0][:2] == ("text", "chat-1") and "is not this session's chat" in Recorder.sent[0][2]
    assert len(Recorder.sent) == 2
    assert [s for s, _, _ in status(session)] == ["failed", "delivered"]


def test_file_outside_outbox_is_refused(session):
    agent_writes(session, {"op": "file", "path": "../inbound.db"})
    deliver_session(session, settings=None)
    assert status(session)[0][0] == "failed"
    assert all(kind != "file" for kind, *_ in Recorder.sent)


def test_a_fifo_or_a_file_past_the_platforms_limit_is_refused_without_blocking_or_copying(session, monkeypatch):
    """The agent controls its outbox: a FIFO there would hold a blocking open() until some writer
    came, and a sparse file copies its full size. Refused from fstat, before a byte is read; a file
    that grows past the limit while it is read is refused too."""
    outbox = session / "agent" / "outbox"
    os.mkfifo(outbox / "pipe.txt")
    with open(outbox / "sparse.bin", "wb") as f:
        f.truncate(8 << 30)
    (outbox / "fits.txt").write_text("x" * 100)
    monkeypatch.setattr(Recorder, "max_file_bytes", 100, raising=False)
    agent_writes(session, {"op": "file", "path": "outbox/pipe.txt"}, {"op": "file", "path": "outbox/sparse.bin"},
                 {"op": "file", "path": "outbox/fits.txt"})
    done = threading.Event()
    worker = threading.Thread(target=lambda: (deliver_session(session, settings=None), done.set()), daemon=True)
    worker.start()
    assert done.wait(30), "delivery hung on the agent's FIFO"
    assert [s[0] for s in status(session)] == ["failed", "failed", "delivered"]
    assert Recorder.sent[-1] == ("file", "fits.txt", "x" * 100)
    told = [text for kind, _, text in Recorder.sent if kind == "text"]
    assert "not a file in the outbox" in told[0] and "more than this platform takes (100)" in told[1]


def test_a_file_that_grows_while_it_is_copied_is_refused(session, monkeypatch):
    outbox = session / "agent" / "outbox"
    (outbox / "grows.txt").write_text("x" * 50)
    original = outbox_module.os.pread

    def growing(fd, n, offset):
        with open(outbox / "grows.txt", "a") as f:
            f.write("y" * 60)  # the agent appends while the host reads
        return original(fd, n, offset)

    monkeypatch.setattr(Recorder, "max_file_bytes", 100, raising=False)
    monkeypatch.setattr(outbox_module.os, "pread", growing)
    agent_writes(session, {"op": "file", "path": "outbox/grows.txt"})
    deliver_session(session, settings=None)
    assert status(session)[0][0] == "failed" and not any(kind == "file" for kind, *_ in Recorder.sent)


def test_completed_acks_are_copied_to_messages_in(session):
    mid = write_message(session, content={"text": "q"}, target=Target("rec", "chat-1"))
    conn = schema.connect(session / "agent" / schema.OUTBOUND)
    conn.execute("INSERT INTO processing_ack VALUES (?, 'completed', ?)", (mid, schema.utc_now_iso()))
    conn.close()
    deliver_session(session, settings=None)
    conn = schema.connect(session / "host" / schema.INBOUND, readonly=True)
    assert conn.execute("SELECT status FROM messages_in").fetchone()[0] == "completed"
    conn.close()


def test_a_reaction_to_the_persons_message_uses_the_hosts_own_record(session):
    Recorder.sent = []
    write_message(session, content={"text": "book it", "message_id": "p77"}, target=Target("rec", "chat-1"),
                  message_id="telegram:900")
    agent_writes(session, {"op": "reaction", "on_message_in": "telegram:900", "emoji": "👍"},
                 {"op": "reaction", "on_message_in": "telegram:not-ours", "emoji": "👍"})
    deliver_session(session, settings=None)
    assert Recorder.sent[0] == ("react", "p77", "👍")  # the id the host stored, in the message's chat
    assert [s[0] for s in status(session)][:2] == ["delivered", "failed"]  # a message not of this chat: refused
    assert not any(s[0] == "react" for s in Recorder.sent[1:])


# --- the delivery thread's kept connections ----------------------------------------------------

def test_a_kept_connection_serves_the_next_pass_and_never_outlives_its_files(session):
    """The delivery thread keeps each session's connection between passes; a session folder made
    anew, or an outbound.db the agent swapped, is read through a fresh one (never the old files)."""
    kept = KeptSessions()
    agent_writes(session, {"op": "text", "text": "one"})
    assert deliver_session(session, None, kept=kept) == 1
    first = kept.get(session)
    agent_writes(session, {"op": "text", "text": "two"})
    assert deliver_session(session, None, kept=kept) == 1
    assert kept.get(session) is first  # the same connection, open between passes

    shutil.rmtree(session)  # the session ends and a new one is made in the same place
    prepare(session, Target("rec", "chat-1"))
    agent_writes(session, {"op": "text", "text": "three"})
    assert deliver_session(session, None, kept=kept) == 1
    assert status(session) == [("delivered", 1, "p3")]  # recorded in the new inbound.db

    outbound = session / "agent" / schema.OUTBOUND  # the agent replaces its outbound.db
    for suffix in ("", "-wal", "-shm"):
        outbound.with_name(schema.OUTBOUND + suffix).unlink(missing_ok=True)
    agent_writes(session, {"op": "text", "text": "four"})
    assert deliver_session(session, None, kept=kept) == 1

    outbound.unlink()  # ...and then with a link to a file of the host's: nothing is read through it
    outbound.symlink_to(session / "host" / schema.INBOUND)
    assert deliver_session(session, None, kept=kept) == 0
    assert kept.get(session) is None
    assert [text for _, _, text in Recorder.sent] == ["one", "two", "three", "four"]
    kept.close()


def test_a_failed_pass_drops_its_kept_connection(session, monkeypatch):
    kept = KeptSessions()
    agent_writes(session, {"op": "text", "text": "one"})
    conn = kept.get(session)
    monkeypatch.setattr(delivery_module, "due_rows", lambda *_: (_ for _ in ()).throw(RuntimeError("boom")))
    with pytest.raises(RuntimeError):
        deliver_session(session, None, kept=kept)
    assert not kept.keeps(conn)
    monkeypatch.undo()
    assert deliver_session(session, None, kept=kept) == 1
    kept.retain([])  # the session is no longer live
    assert kept._open == {}


def settled_history(path, n):
    """n past turns, all answered and delivered: the agent's rows and acks, the host's records."""
    out = schema.connect(path / "agent" / schema.OUTBOUND)
    host = schema.connect(path / "host" / schema.INBOUND)
    now = schema.utc_now_iso()
    with out:
        out.execute("BEGIN")
        out.executemany("INSERT INTO messages_out (id, seq, in_reply_to, timestamp, channel_type, platform_id, content)"
                        " VALUES (?, ?, ?, ?, 'rec', 'chat-1', ?)",
                        [(f"out-{i}", i, f"in-{i}", now, json.dumps({"op": "text", "text": f"answer {i}"}))
                         for i in range(1, n + 1)])
        out.executemany("INSERT INTO processing_ack (message_id, status, status_changed) VALUES (?, 'completed', ?)",
                        [(f"in-{i}", now) for i in range(1, n + 1)])
    with host:
        host.execute("BEGIN")
        host.executemany("INSERT INTO messages_in (id, seq, timestamp, status, content) VALUES (?, ?, ?, 'completed', '{}')",
                         [(f"in-{i}", i, now) for i in range(1, n + 1)])
        host.executemany("INSERT INTO delivered (message_out_id, status, tries) VALUES (?, 'delivered', 1)",
                         [(f"out-{i}",) for i in range(1, n + 1)])
    out.close()
    host.close()


def pass_work(path, kept) -> int:
    """SQLite's virtual-machine steps (in hundreds) of one delivery pass that sends one new reply."""
    steps = [0]
    conn = kept.get(path)
    conn.set_progress_handler(lambda: steps.__setitem__(0, steps[0] + 1), 100)
    agent_writes(path, {"op": "text", "text": "the new answer"})
    before = len(Recorder.sent)
    assert deliver_session(path, None, kept=kept) == 1 and len(Recorder.sent) == before + 1
    conn.set_progress_handler(None, 0)
    return steps[0]


def test_a_reply_costs_a_long_session_no_more_than_a_new_one(tmp_path):
    """A session answers for weeks before its records are pruned: the pass that sends a reply must
    not look at every reply it ever sent (it scanned them all, each pass)."""
    Recorder.sent = []
    work = {}
    for n in (10, 3000):
        path = tmp_path / f"s{n}"
        prepare(path, Target("rec", "chat-1"))
        settled_history(path, n)
        kept = KeptSessions()
        pass_work(path, kept)  # the first pass of a connection also reads the schema
        work[n] = pass_work(path, kept)
        kept.close()
    assert Recorder.sent[-1] == ("text", "chat-1", "the new answer")
    assert work[3000] <= work[10] * 1.5 + 5, work


def test_a_row_the_agent_slips_in_below_a_sent_one_is_never_sent(session):
    """Rows are claimed in seq order, so what lies below the newest row with an outcome is settled;
    a row the agent inserts there afterwards (it writes its own file as it likes) is not news."""
    agent_writes(session, {"op": "text", "text": "one"}, {"op": "text", "text": "two"})
    assert deliver_session(session, None) == 2
    conn = schema.connect(session / "agent" / schema.OUTBOUND)
    conn.execute("INSERT INTO messages_out (id, seq, timestamp, channel_type, platform_id, content) "
                 "VALUES ('late', 0, ?, 'rec', 'chat-1', ?)", (schema.utc_now_iso(), json.dumps({"op": "text", "text": "late"})))
    conn.close()
    agent_writes(session, {"op": "text", "text": "three"})
    assert deliver_session(session, None) == 1
    assert [t for _k, _p, t in Recorder.sent] == ["one", "two", "three"]


def _host_card(session):
    """A host card shown for the agent (a proposal's): delivered through its system op."""
    delivery_module.register_op("test_host_card", lambda path, row, settings: "card-77")
    agent_writes(session, {"op": "test_host_card", "ref": "p1"})
    assert deliver_session(session, None) == 1
    return 1


def test_an_agent_cannot_edit_or_react_to_a_card_the_host_showed_for_it(session):
    seq = _host_card(session)
    agent_writes(session, {"op": "edit", "target_seq": seq, "text": "allow HTTPS to the package index, safe"},
                 {"op": "reaction", "target_seq": seq, "emoji": "✅"})
    deliver_session(session, None)
    assert Recorder.sent == []  # nothing reached the platform
    failed = [r for r in status(session) if r[0] == "failed"]
    assert len(failed) == 2


def test_the_hosts_record_decides_not_the_agents_rewritten_row(session):
    """The agent rewrites the delivered card's row into a plain message afterwards: the host's own
    record of what it delivered still says it was a card."""
    seq = _host_card(session)
    conn = schema.connect(session / "agent" / schema.OUTBOUND)
    conn.execute("UPDATE messages_out SET content = ? WHERE seq = ?", (json.dumps({"op": "text", "text": "x"}), seq))
    conn.close()
    agent_writes(session, {"op": "edit", "target_seq": seq, "text": "safe to approve"})
    deliver_session(session, None)
    assert Recorder.sent == []


def test_an_edit_reaches_only_a_message_in_its_own_chat(session):
    set_destination(session, "other", Target("rec", "chat-2"))
    agent_writes(session, {"op": "text", "text": "hi"})
    agent_writes(session, {"op": "edit", "target_seq": 1, "text": "moved"},
                 {"op": "reaction", "target_seq": 1, "emoji": "👍"}, target=("rec", "chat-2", None))
    deliver_session(session, None)
    assert Recorder.sent == [("text", "chat-1", "hi")]
    agent_writes(session, {"op": "edit", "target_seq": 1, "text": "hi!"})
    deliver_session(session, None)
    assert Recorder.sent[-1] == ("edit", "p1", "hi!")


def test_rows_of_a_stopped_turn_are_dropped_and_a_retry_of_one_too(session):
    from nanoclaw.sessions import turns
    Recorder.failures_left = 1  # the first answer of the stopped turn waits for a retry when the stop comes
    agent_writes(session, {"op": "text", "text": "half an answer"}, in_reply_to="m1")
    assert deliver_session(session, settings=None) == 0 and status(session)[0][0] == "retry"
    agent_writes(session, {"op": "text", "text": "the rest"}, in_reply_to="m1")
    agent_writes(session, {"op": "text", "text": "another turn's answer"}, in_reply_to="m2")
    turns.request_stop(session, ["m1"])
    later = datetime.now(timezone.utc) + timedelta(minutes=10)
    assert deliver_session(session, settings=None, now=later) == 1
    assert Recorder.sent == [("text", "chat-1", "another turn's answer")]
    assert [s for s, _t, _p in status(session)] == ["dropped", "dropped", "delivered"]
