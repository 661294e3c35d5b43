"""The sweep's effects on real session files: the runner's own store code writes outbound.db (as it
does in the sandbox), the sweep reads it, resets rows in inbound.db, stops and wakes through the
callbacks it is given, and tells the user through the real Telegram adapter (fake Bot API)."""
from __future__ import annotations

import os
import sqlite3
import time

import pytest

from fakes.telegram_api import TOKEN, FakeTelegram
from nanoclaw.outbound import delivery
from nanoclaw.sessions.store import SessionRef
from nanoclaw.sessions import session_schema as schema  # also puts container/ on sys.path
from nanoclaw.sessions import store
from nanoclaw.lifecycle.sweep import (CLAIM_TOLERANCE_S, IDLE_S, MAX_TRIES, TASK_RUN_IDLE_S, backoff_s, read_view,
                                      settle_half_sent, sweep_pass)

from agent_runner.store import SessionStore  # noqa: E402
from agent_runner.targets import Target as RunnerTarget  # noqa: E402

CHAT = store.Target("telegram", "4242")
RUNNER_CHAT = RunnerTarget("telegram", "4242")


class Recorder:
    def __init__(self):
        self.stopped, self.woken = [], []

    def stop(self, folder, session_id):
        self.stopped.append(session_id)

    def wake(self, ref, task=False):
        self.woken.append((ref.session_id, task))


@pytest.fixture
def tg():
    with FakeTelegram() as fake:
        yield fake


@pytest.fixture
def settings(make_settings, tg):
    return make_settings(TELEGRAM_API_BASE=tg.url, TELEGRAM_BOT_TOKEN=TOKEN, TELEGRAM_WEBHOOK_SECRET="s" * 20)


@pytest.fixture
def session(settings):
    ref = SessionRef("andy", "s1", store.session_path(settings.sessions_dir, "andy", "s1"))
    store.prepare(ref.path, CHAT)
    agent = SessionStore.of_session(ref.path)
    yield ref, agent
    agent.close()


def row(path, message_id):
    conn = sqlite3.connect(path / "host" / schema.INBOUND)
    conn.row_factory = sqlite3.Row
    try:
        return dict(conn.execute("SELECT * FROM messages_in WHERE id = ?", (message_id,)).fetchone())
    finally:
        conn.close()


def backdate(path, message_id):
    conn = sqlite3.connect(path / "host" / schema.INBOUND)
    conn.execute("UPDATE messages_in SET process_after = '2000-01-01T00:00:00.000Z' WHERE id = ?", (message_id,))
    conn.commit()
    conn.close()


def sweep(ref, settings, rec, running, now, **kw):
    return sweep_pass([ref], {ref.session_id} if running else set(), settings, stop=rec.stop, wake=rec.wake,
                      now=now, **kw)


def say(path, text="what's the weather?", kind="chat"):
    return store.write_message(path, content={"text": text, "sender": "Olga"}, target=CHAT, kind=kind)


def test_claims_left_by_a_dead_sandbox_are_retried_with_backoff_and_the_session_woken(session, settings):
    ref, agent = session
    mid = say(ref.path)
    agent.claim([mid])
    rec, now = Recorder(), time.time()
    result = sweep(ref, settings, rec, running=False, now=now)
    r = row(ref.path, mid)
    assert (r["status"], r["tries"]) == ("pending", 1)
    assert abs(schema_epoch(r["process_after"]) - (now + backoff_s(0))) < 0.01
    assert rec.woken == [(ref.session_id, False)] and rec.stopped == [] and result.resets == 1


def schema_epoch(iso):
    from nanoclaw.lifecycle.sweep import epoch
    return epoch(iso)


def test_after_five_tries_the_message_fails_and_the_user_is_told_in_the_chat(session, settings, tg):
    ref, agent = session
    mid = say(ref.path, "Book the table for Friday")
    now = time.time()
    waits = []
    for attempt in range(MAX_TRIES):
        agent.forget_stale_claims()  # a new runner starts, then claims the row again and dies with it
        agent.claim([mid])
        sweep(ref, settings, Recorder(), running=False, now=now)
        r = row(ref.path, mid)
        if r["status"] == "pending":
            waits.append(round(schema_epoch(r["process_after"]) - now))
            now = schema_epoch(r["process_after"]) + 1
    assert waits == [5, 10, 20, 40]  # 5 s·2^tries
    r = row(ref.path, mid)
    assert (r["status"], r["tries"]) == ("failed", MAX_TRIES)
    sent = tg.calls("sendMessage")
    assert len(sent) == 1 and str(sent[0]["chat_id"]) == "4242"
    assert "could not process your message" in sent[0]["text"] and "Book the table for Friday" in sent[0]["text"]
    # a failed message is not picked up again, and the user is not told twice
    sweep(ref, settings, Recorder(), running=False, now=now + 100)
    assert len(tg.calls("sendMessage")) == 1


def test_a_failed_turn_is_retried_without_stopping_the_sandbox(session, settings):
    ref, agent = session
    mid = say(ref.path)
    agent.claim([mid])
    # the model call failed: the runner tells the user and gives the row back
    agent.finish_turn([mid], {"op": "text", "text": "Sorry — the model call failed"}, RUNNER_CHAT,
                      in_reply_to=mid, ok=False)
    rec = Recorder()
    sweep(ref, settings, rec, running=True, now=time.time())
    assert row(ref.path, mid)["tries"] == 1 and rec.stopped == []
    sweep(ref, settings, rec, running=True, now=time.time() + 1)
    assert row(ref.path, mid)["tries"] == 1  # that failure is handled: no second retry for it
    backdate(ref.path, mid)  # the backoff passed; the runner tries again, and fails again
    agent.claim([mid])
    agent.finish_turn([mid], {"op": "text", "text": "Sorry — again"}, RUNNER_CHAT, in_reply_to=mid, ok=False)
    sweep(ref, settings, rec, running=True, now=time.time())
    assert row(ref.path, mid)["tries"] == 2


def test_a_claim_silent_past_its_tolerance_stops_the_sandbox(session, settings):
    ref, agent = session
    mid = say(ref.path)
    agent.touch_heartbeat()
    agent.claim([mid])
    old = time.time() - 120
    os.utime(ref.path / "agent" / schema.HEARTBEAT, (old, old))  # no sign of life since the claim
    rec = Recorder()
    result = sweep(ref, settings, rec, running=True, now=time.time() + CLAIM_TOLERANCE_S + 1)
    assert rec.stopped == [ref.session_id] and result.stopped[0][2] == "claim_stuck"
    assert row(ref.path, mid)["tries"] == 1


def test_a_working_sandbox_is_left_alone(session, settings):
    ref, agent = session
    mid = say(ref.path)
    agent.claim([mid])
    agent.set_tool("Bash", 600_000)  # a long command with a declared timeout
    agent.touch_heartbeat()
    old = time.time() - 300  # silent for 5 minutes: fine while the declared 10-minute Bash runs
    os.utime(ref.path / "agent" / schema.HEARTBEAT, (old, old))
    rec = Recorder()
    sweep(ref, settings, rec, running=True, now=time.time())
    assert rec.stopped == [] and row(ref.path, mid)["tries"] == 0


def test_idle_sandboxes_are_stopped_an_isolated_run_as_soon_as_it_is_over(session, settings):
    ref, agent = session
    mid = say(ref.path)
    agent.complete([mid])
    rec = Recorder()
    sweep(ref, settings, rec, running=True, now=time.time() + 60)
    assert rec.stopped == []
    sweep(ref, settings, rec, running=True, now=time.time() + IDLE_S + 1)
    assert rec.stopped == [ref.session_id]
    # an isolated task run's own session: kept while it waits for its run (pre-woken), stopped
    # as soon as the run is over
    run = SessionRef("andy", "run1", store.session_path(settings.sessions_dir, "andy", "run1"), isolated_run=True)
    store.prepare(run.path, CHAT)
    rec = Recorder()
    sweep(run, settings, rec, running=True, now=time.time() + TASK_RUN_IDLE_S + 1)
    assert rec.stopped == []
    task = say(run.path, "read the news", kind="task")
    runner = SessionStore.of_session(run.path)
    runner.complete([task])
    runner.close()
    sweep(run, settings, rec, running=True, now=time.time() + TASK_RUN_IDLE_S + 1)
    assert rec.stopped == [run.session_id]


def test_due_work_in_a_stopped_session_wakes_it_tasks_flagged(session, settings):
    ref, _agent = session
    say(ref.path, "check the mail", kind="task")
    rec = Recorder()
    sweep(ref, settings, rec, running=False, now=time.time())
    assert rec.woken == [(ref.session_id, True)]
    view = read_view(ref.path, False, time.time()).view
    assert view.has_due_work and view.claims == ()


def test_a_send_a_killed_host_left_half_done_is_not_sent_again(session, settings, tg):
    ref, agent = session
    agent.write_out({"op": "text", "text": "Here is your answer"}, RUNNER_CHAT)
    conn = schema.connect(ref.path / "host" / schema.INBOUND)
    out_id = sqlite3.connect(ref.path / "agent" / schema.OUTBOUND).execute("SELECT id FROM messages_out").fetchone()[0]
    conn.execute("INSERT INTO delivered (message_out_id, status, tries) VALUES (?, 'sending', 0)", (out_id,))
    conn.close()
    assert settle_half_sent([ref]) == 1
    assert delivery.deliver_session(ref.path, settings) == 0
    assert tg.calls("sendMessage") == []
