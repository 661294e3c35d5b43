"""Nothing in the central database grows without bound: on a back-dated install, `prune` (the daily
job's pass) removes exactly what is past its keeping time, says what, and keeps the rest."""
from __future__ import annotations

import logging
from datetime import timedelta

from nanoclaw.memory import history
from nanoclaw.memory.tables import History
from nanoclaw.models import (AgentGroup, AuditLog, CardChoice, DroppedMessage, HelpRequest, AcceptedEvent, MessagingGroup,
                             PendingProposal, PendingQuestion, Session, utcnow)


def days_ago(n: float):
    return utcnow() - timedelta(days=n)


def test_prune_removes_what_is_past_its_time_and_keeps_the_rest(app, cli, caplog):
    assert cli("agent", "create", "Andy").exit_code == 0
    agent = AgentGroup.get()
    mg = MessagingGroup.create(channel_type="telegram", platform_id="42", kind="dm")
    session = Session.create(id="s1", agent_group=agent, messaging_group=mg)
    AcceptedEvent.create(channel="telegram", event_id="old", received_at=days_ago(20), routed_at=days_ago(20))
    AcceptedEvent.create(channel="telegram", event_id="new", received_at=days_ago(1), routed_at=days_ago(1))
    AcceptedEvent.create(channel="telegram", event_id="unrouted", received_at=days_ago(30), payload="{}")
    DroppedMessage.create(channel_type="telegram", platform_id="9", reason="no_agent_wired", created_at=days_ago(20))
    DroppedMessage.create(channel_type="telegram", platform_id="9", reason="no_agent_wired", created_at=days_ago(2))
    AuditLog.create(actor="cli", action="old", at=days_ago(400))
    AuditLog.create(actor="cli", action="kept", at=days_ago(300))
    for ref, state, decided in (("p-old", "approved", 100), ("p-new", "rejected", 10), ("p-open", "pending", None)):
        PendingProposal.create(session=session, agent_group=agent, ref=ref, kind="egress", payload={"host": "a.b"},
                               state=state, decided_at=days_ago(decided) if decided else None, created_at=days_ago(100))
    HelpRequest.create(session=session, agent_group=agent, ref="h-old", text="?", state="answered",
                       answered_at=days_ago(100))
    HelpRequest.create(session=session, agent_group=agent, ref="h-open", text="?", created_at=days_ago(100))
    PendingQuestion.create(session=session, question_id="q-old", question="?", options=[], channel_type="telegram",
                           platform_id="42", expires_at=days_ago(100))
    PendingQuestion.create(session=session, question_id="q-new", question="?", options=[], channel_type="telegram",
                           platform_id="42", expires_at=days_ago(1))
    CardChoice.create(channel="matrix", chat_id="!r:x", message_id="$old", buttons=[["Allow", "nsa-x:allow"]],
                      created_at=days_ago(100))
    CardChoice.create(channel="matrix", chat_id="!r:x", message_id="$new", buttons=[["Allow", "nsa-y:allow"]],
                      created_at=days_ago(1))

    from nanoclaw.inbound.set_aside import SetAsideEvent
    for key, age in (("aside-long-ago", 400), ("aside-this-year", 300)):  # kept as long as the history
        SetAsideEvent.create(channel="signal", event_key=key, reason="5 times", payload="{}", set_aside_at=days_ago(age))
    from nanoclaw.memory.tables import MemoryChange
    for key, age in (("changed-long-ago", 400), ("changed-this-year", 300)):  # kept as long as the history
        MemoryChange.create(agent_folder="andy", scope="chat:telegram:42", actor="cli", action="edit",
                            before_text="", after_text=key, created_at=days_ago(age))
    for key, age in (("said-long-ago", 400), ("said-this-year", 300)):  # the history index keeps 365 days
        history.add("andy", "telegram", "42", None, "s1", key, "telegram:42", "A",
                    days_ago(age).strftime("%Y-%m-%dT%H:%M:%S"), f"message {key}")

    with caplog.at_level(logging.INFO, logger="nanoclaw.retention"):
        result = cli("prune")
    assert result.exit_code == 0, result.output
    assert result.output.strip() == ("removed 1 routed webhook events, 1 dropped-message records, 1 decided proposals, "
                                     "1 closed help requests, 1 past questions, 1 options of old cards, "
                                     "1 audit entries, 1 set-aside events; from session "
                                     "databases 0 finished messages, 0 delivery records; 1 message(s) from the "
                                     "history index, 1 memory change record(s)")
    assert [h.message_key for h in History.select()] == ["said-this-year"]
    assert [e.event_key for e in SetAsideEvent.select()] == ["aside-this-year"]
    assert [c.after_text for c in MemoryChange.select()] == ["changed-this-year"]
    assert "retention: removed 1 routed webhook events" in caplog.text
    assert sorted(e.event_id for e in AcceptedEvent.select()) == ["new", "unrouted"]  # recovery still needs it
    assert DroppedMessage.select().count() == 1
    assert [p.ref for p in PendingProposal.select().order_by(PendingProposal.ref)] == ["p-new", "p-open"]
    assert [h.ref for h in HelpRequest.select()] == ["h-open"]  # open ones expire first, then go
    assert [q.question_id for q in PendingQuestion.select()] == ["q-new"]
    assert [c.message_id for c in CardChoice.select()] == ["$new"]
    assert {a.action for a in AuditLog.select()} >= {"kept"} and not AuditLog.select().where(
        AuditLog.action == "old").exists()
    assert cli("prune").output.strip().startswith("removed 0 routed webhook events")


def test_keeping_times_are_settings(make_settings):
    from nanoclaw.lifecycle.records import cutoffs
    settings = make_settings(NANOCLAW_KEEP_EVENTS_DAYS="3", NANOCLAW_KEEP_AUDIT_DAYS="30")
    now = utcnow()
    c = cutoffs(settings, now)
    assert (now - c.events, now - c.decided, now - c.audit) == (timedelta(days=3), timedelta(days=90),
                                                                timedelta(days=30))


def test_a_sessions_finished_rows_go_on_both_sides_and_nothing_undelivered(tmp_path, make_settings):
    """A back-dated session: the runner (at its start) removes replies the host delivered, the host
    removes messages the agent finished and the delivery records of removed replies; what is recent,
    still pending, or waiting for delivery stays."""
    import time as _time
    from agent_runner.store import SessionStore
    from nanoclaw.lifecycle.records import prune_session
    from nanoclaw.outbound import delivery
    from nanoclaw.sessions import store
    from nanoclaw.sessions.store import Target
    chat = Target("cli", "c")
    folder = tmp_path / "s1"
    store.prepare(folder, chat)
    old, new = "2026-01-01T10:00:00.000Z", store.schema.utc_now_iso()
    ids = {name: store.write_message(folder, content={"text": name}, target=chat, timestamp=ts)
           for name, ts in (("old-done", old), ("old-pending", old), ("new-done", new), ("old-reply-waiting", old))}
    runner = SessionStore.of_session(folder)
    runner.complete([ids["old-done"], ids["new-done"], ids["old-reply-waiting"]])
    for text, to in (("answer-old", "old-done"), ("answer-new", "new-done"), ("answer-waiting", "old-reply-waiting"),
                     ("newest", "new-done")):
        runner.write_out({"op": "text", "text": text}, chat, in_reply_to=ids[to])
    runner.out.execute("UPDATE messages_out SET timestamp = ? WHERE json_extract(content, '$.text') IN "
                       "('answer-old', 'answer-waiting')", (old,))
    conn = delivery.open_session(folder)
    delivery.sync_acks(conn)
    for text in ("answer-old", "answer-new", "newest"):  # delivered; answer-waiting is not (the platform is down)
        row_id = runner.out.execute("SELECT id FROM messages_out WHERE json_extract(content, '$.text') = ?",
                                    (text,)).fetchone()[0]
        conn.execute("INSERT INTO delivered (message_out_id, status, tries) VALUES (?, 'delivered', 1)", (row_id,))
    conn.close()

    assert runner.prune(30) == (1, 0)           # answer-old only
    texts = [r[0] for r in runner.out.execute("SELECT json_extract(content, '$.text') FROM messages_out ORDER BY seq")]
    assert texts == ["answer-new", "answer-waiting", "newest"]
    cutoff = _time.strftime("%Y-%m-%dT%H:%M:%S", _time.gmtime(_time.time() - 30 * 86400))
    assert prune_session(folder, cutoff) == (1, 1)  # old-done, and answer-old's delivery record
    inbound = store.schema.connect(store.inbound_db(folder), readonly=True)
    left = {r[0] for r in inbound.execute("SELECT json_extract(content, '$.text') FROM messages_in")}
    assert left == {"old-pending", "new-done", "old-reply-waiting"}
    inbound.close()
    assert runner.prune(30) == (0, 1)           # the outcome of the message the host removed
    runner.close()


def test_the_daily_pass_keeps_inbound_dbs_change_log_to_its_latest_entries(tmp_path, monkeypatch):
    """A year of a busy chat leaves the log a remote copy follows no longer than a few days of it
    (issue 44): past that, a remote runner so far behind gets the whole file."""
    from agent_runner import change_log
    from agent_runner.store import SessionStore
    from nanoclaw.lifecycle.records import prune_session
    from nanoclaw.sessions import store
    monkeypatch.setattr(change_log, "KEEP_CHANGES", 50)
    monkeypatch.setattr(change_log.prune, "__defaults__", (50,))
    folder = tmp_path / "s1"
    store.prepare(folder, store.Target("cli", "c"))
    SessionStore.of_session(folder).close()  # a sandbox ran: outbound.db is there
    conn = store.schema.connect(store.inbound_db(folder))
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO messages_in (id, seq, timestamp, content) VALUES (?, ?, '2026-11-01T00:00:00Z', '{}')",
                     [(f"m{n}", n + 10) for n in range(400)])
    conn.execute("COMMIT")
    held = change_log.position(conn)
    assert conn.execute("SELECT COUNT(*) FROM changes").fetchone()[0] > 400
    prune_session(folder, "2026-01-01T00:00:00")
    assert conn.execute("SELECT COUNT(*) FROM changes").fetchone()[0] <= 50
    conn.execute("INSERT INTO messages_in (id, seq, timestamp, content) VALUES ('late', 9999, 't', '{}')")
    conn.execute("BEGIN")
    assert change_log.since(conn, held)["tables"]["messages_in"]["rows"][0][0] == "late"  # a runner at the top
    assert change_log.since(conn, {**held, "seq": 5}) is None                              # one from before the cut
    conn.execute("COMMIT")
