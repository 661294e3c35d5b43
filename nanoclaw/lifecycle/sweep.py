"""Liveness and stuck detection: a pure decide() per session, and the effects that apply it.

The rules (issue 6 / seed item 9):
- sandbox not running but rows are claimed → reset them (tries + 1, backoff 5 s·2^tries);
- running, heartbeat older than max(30 min, the declared Bash timeout) → stop and reset;
- a claim older than its tolerance (60 s, or the declared Bash timeout while Bash runs) with no
  heartbeat since the claim → stop and reset;
- a turn that failed (the runner released its rows and told the user) → retried the same way,
  without stopping the sandbox;
- a message that has been tried MAX_TRIES times fails, and the user is told;
- a sandbox with no work for IDLE_S is stopped (sooner when wakes wait for capacity, and an
  isolated task run's sandbox as soon as its run is over); due work in a stopped session wakes it.

The effects (read_view, apply) touch only the host's inbound.db and read the agent's files.
"""
from __future__ import annotations

import json
import logging
import sqlite3
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ..sessions import session_schema as schema
from ..channels.base import get_adapter
from ..outbound import delivery
from ..sessions.store import agent_mtime, attach_outbound, heartbeat_file, inbound_db, outbound_db, routing_of

log = logging.getLogger("nanoclaw.sweep")

CEILING_S = 30 * 60
CLAIM_TOLERANCE_S = 60
IDLE_S = 30 * 60
MAX_TRIES = 5
BACKOFF_BASE_S = 5
RECENT_OUT_ROWS = 200  # failure notices are looked for among the agent's newest rows only


@dataclass(frozen=True)
class Claim:
    message_id: str
    claimed_at: float     # epoch seconds of the claim (processing_ack.status_changed)
    tries: int            # messages_in.tries before this reset


@dataclass(frozen=True)
class SessionView:
    running: bool
    heartbeat_at: float | None = None
    claims: tuple[Claim, ...] = ()
    current_tool: str | None = None
    tool_timeout_ms: int | None = None
    last_work_at: float | None = None
    has_due_work: bool = False
    failures: tuple[Claim, ...] = ()  # rows of a failed turn, released, not retried yet (claimed_at = failure)


@dataclass(frozen=True)
class Reset:
    message_id: str
    tries: int
    process_after: float


@dataclass(frozen=True)
class Decision:
    stop: str | None = None              # why the sandbox must be stopped
    resets: tuple[Reset, ...] = ()       # back to pending, later
    failed: tuple[str, ...] = ()         # tried too often: fail and tell the user
    wake: bool = False


def backoff_s(tries: int) -> float:
    return BACKOFF_BASE_S * 2 ** tries


def _release(claims: tuple[Claim, ...], now: float) -> tuple[tuple[Reset, ...], tuple[str, ...]]:
    resets, failed = [], []
    for c in claims:
        if c.tries + 1 >= MAX_TRIES:
            failed.append(c.message_id)
        else:
            resets.append(Reset(c.message_id, c.tries + 1, now + backoff_s(c.tries)))
    return tuple(resets), tuple(failed)


def bash_timeout_s(view: SessionView) -> float:
    if view.current_tool == "Bash" and view.tool_timeout_ms:
        return view.tool_timeout_ms / 1000
    return 0.0


def stuck_reason(view: SessionView, now: float) -> str | None:
    """Why a running sandbox must be stopped, if it must."""
    bash = bash_timeout_s(view)
    if view.heartbeat_at is not None and now - view.heartbeat_at > max(CEILING_S, bash):
        return "heartbeat_stale"
    tolerance = max(CLAIM_TOLERANCE_S, bash)
    for claim in view.claims:
        silent_since_claim = view.heartbeat_at is None or view.heartbeat_at <= claim.claimed_at
        if now - claim.claimed_at > tolerance and silent_since_claim:
            return "claim_stuck"
    return None


def decide(view: SessionView, now: float, idle_s: float = IDLE_S) -> Decision:
    failure_resets, failure_failed = _release(view.failures, now)
    if not view.running:
        resets, failed = _release(view.claims, now)
        resets += failure_resets
        return Decision(resets=resets, failed=failed + failure_failed, wake=bool(resets) or view.has_due_work)

    stop = stuck_reason(view, now)
    if stop:
        resets, failed = _release(view.claims, now)
        return Decision(stop=stop, resets=resets + failure_resets, failed=failed + failure_failed)
    if failure_resets or failure_failed:
        return Decision(resets=failure_resets, failed=failure_failed)

    if not view.claims and not view.has_due_work and view.last_work_at is not None \
            and now - view.last_work_at > idle_s:
        return Decision(stop="idle")
    return Decision()


# --- effects: read one session, apply one decision ------------------------------------------

def epoch(iso: str | None) -> float | None:
    if not iso:
        return None
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def iso_at(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _mtime(path: Path) -> float | None:
    return agent_mtime(path)


@dataclass(frozen=True)
class Reading:
    view: SessionView
    due_task: bool = False  # due work includes a scheduled task (it goes first in the queue)
    ran_task: bool = False   # a task's message is in the session (an isolated run has had its run)


def _open(path: Path) -> tuple[sqlite3.Connection | None, bool]:
    """inbound.db read-only, with the agent's outbound.db attached when it has its tables."""
    inbound = inbound_db(path)
    if not inbound.exists():
        return None, False
    conn = sqlite3.connect(f"file:{inbound}?mode=ro", uri=True, timeout=5, isolation_level=None)
    conn.execute("PRAGMA busy_timeout=5000")
    return conn, attach_outbound(conn, path, ("messages_out", "processing_ack", "container_state"))


def read_view(path: Path, running: bool, now: float) -> Reading:
    """Everything decide() needs about one session, from its files (read-only)."""
    heartbeat = _mtime(heartbeat_file(path))
    outbound = outbound_db(path)
    work = [t for t in (_mtime(p) for p in (inbound_db(path), outbound, outbound.with_name(schema.OUTBOUND + "-wal")))
            if t is not None]
    conn, agent_tables = _open(path)
    if conn is None:
        return Reading(SessionView(running=running, heartbeat_at=heartbeat))
    now_iso = iso_at(now)
    try:
        claims, failures, tool, timeout_ms = (), (), None, None
        unacked = ""
        if agent_tables:
            unacked = " AND id NOT IN (SELECT message_id FROM ob.processing_ack)"
            claims = tuple(Claim(mid, epoch(changed) or now, tries) for mid, changed, tries in conn.execute(
                "SELECT a.message_id, a.status_changed, m.tries FROM ob.processing_ack a JOIN messages_in m "
                "ON m.id = a.message_id WHERE a.status = 'processing' AND m.status = 'pending'"))
            state = conn.execute("SELECT current_tool, tool_declared_timeout_ms FROM ob.container_state "
                                 "WHERE id = 1").fetchone()
            if state:
                tool, timeout_ms = state
            failures = _failures(conn)
        kinds = {k for (k,) in conn.execute(
            "SELECT DISTINCT kind FROM messages_in WHERE status = 'pending' AND trigger = 1 AND "
            f"(process_after IS NULL OR process_after <= ?){unacked}", (now_iso,))}
        ran_task = conn.execute("SELECT 1 FROM messages_in WHERE kind = 'task' LIMIT 1").fetchone() is not None
    except sqlite3.Error as exc:  # the agent mid-create: look again next sweep
        log.warning("could not read %s: %s", path, exc)
        return Reading(SessionView(running=running, heartbeat_at=heartbeat, last_work_at=max(work, default=None)))
    finally:
        conn.close()
    view = SessionView(running=running, heartbeat_at=heartbeat, claims=claims, current_tool=tool,
                       tool_timeout_ms=timeout_ms, last_work_at=max(work, default=None),
                       has_due_work=bool(kinds), failures=failures)
    return Reading(view, due_task="task" in kinds, ran_task=ran_task)


def _failures(conn: sqlite3.Connection) -> tuple[Claim, ...]:
    """Pending rows whose last turn failed after the host last scheduled them.

    The runner, when a turn fails, writes a `system` text row in reply and releases the rows; it
    will not try them again until the host bumps `tries`. A failure newer than the row's
    process_after (which the host sets at every retry) is one the host has not handled yet."""
    rows = conn.execute(
        "SELECT m.id, m.tries, m.process_after, MAX(o.timestamp) FROM ob.messages_out o "
        "JOIN messages_in m ON m.id = o.in_reply_to "
        "WHERE o.seq > (SELECT COALESCE(MAX(seq), 0) FROM ob.messages_out) - ? AND o.kind = 'system' "
        "AND json_extract(o.content, '$.op') = 'text' AND m.status = 'pending' "
        "AND m.id NOT IN (SELECT message_id FROM ob.processing_ack) GROUP BY m.id, m.tries, m.process_after",
        (RECENT_OUT_ROWS,)).fetchall()
    return tuple(Claim(mid, epoch(failed_at) or 0.0, tries) for mid, tries, after, failed_at in rows
                 if not after or (failed_at or "") > after)


def apply_resets(path: Path, decision: Decision) -> list[dict]:
    """Write the decision's resets and failures into inbound.db (the host's file). Returns the
    content of each message that failed for good (to tell the user about it)."""
    if not decision.resets and not decision.failed:
        return []
    conn = schema.connect(inbound_db(path))
    failed_contents = []
    try:
        conn.execute("BEGIN IMMEDIATE")
        for r in decision.resets:
            conn.execute("UPDATE messages_in SET tries = ?, process_after = ? WHERE id = ? AND status = 'pending'",
                         (r.tries, iso_at(r.process_after), r.message_id))
        for mid in decision.failed:
            row = conn.execute("SELECT content FROM messages_in WHERE id = ? AND status = 'pending'",
                               (mid,)).fetchone()
            if row is None:
                continue
            conn.execute("UPDATE messages_in SET status = 'failed', tries = ? WHERE id = ?", (MAX_TRIES, mid))
            try:
                failed_contents.append(json.loads(row[0]) or {})
            except ValueError:
                failed_contents.append({})
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    finally:
        conn.close()
    return failed_contents


def failure_notice(content: dict) -> str:
    text = " ".join(str(content.get("text") or "").split())
    quoted = f' ("{text[:80]}{"…" if len(text) > 80 else ""}")' if text else ""
    return (f"Sorry — I could not process your message{quoted}: it failed {MAX_TRIES} times. "
            "Please send it again.")


def tell_user(path: Path, settings, contents: list[dict]) -> None:
    """Say in the session's chat (through the adapter of its routing row) which messages failed."""
    target = routing_of(path)
    if target is None:
        log.error("no routing in %s: nobody to tell about %d failed message(s)", path, len(contents))
        return
    for content in contents:
        try:
            get_adapter(target.channel_type, settings).send_text(target, failure_notice(content))
        except Exception as exc:  # the platform is down too: the log is all that is left
            log.error("could not tell %s that a message failed: %s", target, exc)


# --- one pass over sessions -----------------------------------------------------------------

PRESSURE_IDLE_S = 60      # wakes wait for capacity: an idle sandbox makes room sooner
TASK_RUN_IDLE_S = 10      # an isolated task run's sandbox stops once its run is over


@dataclass
class PassResult:
    sessions: int = 0
    stopped: list[tuple[str, str, str]] = field(default_factory=list)  # (folder, session, why)
    resets: int = 0
    failed: int = 0
    woken: list[tuple[str, str]] = field(default_factory=list)


def settle_half_sent(refs) -> int:
    """At start-up, before this process sends anything: every session's sends a killed predecessor
    left 'sending' are settled (delivery.settle_interrupted), woken meanwhile or not. How many."""
    settled = 0
    for ref in refs:
        try:
            settled += delivery.settle_interrupted(ref.path)
        except Exception as exc:  # one broken session must not keep the others' rows 'sending'
            log.exception("could not settle the interrupted sends of %s: %s", ref.path, exc)
    return settled


def sweep_pass(refs, running_ids: set[str], settings, *, stop, wake, now: float, pressure: bool = False,
               skip=frozenset()) -> PassResult:
    """Decide and apply for each session of `refs` (active.SessionRef). `stop(folder, id)` stops
    a sandbox, `wake(ref, task=bool)` starts one (or queues it). Sessions in `skip` (woken while
    the start-up pass runs) are left to the next regular sweep."""
    result = PassResult()
    for ref in refs:
        if ref.session_id in skip:
            continue
        result.sessions += 1
        try:
            reading = read_view(ref.path, ref.session_id in running_ids, now)
            # an isolated run's sandbox, pre-woken before its time, waits for its run; once it ran, it goes
            idle = TASK_RUN_IDLE_S if ref.isolated_run and reading.ran_task else PRESSURE_IDLE_S if pressure \
                else IDLE_S
            d = decide(reading.view, now, idle)
            if d.stop:
                log.info("stopping %s/%s: %s", ref.folder, ref.session_id, d.stop)
                stop(ref.folder, ref.session_id)
                result.stopped.append((ref.folder, ref.session_id, d.stop))
            failed = apply_resets(ref.path, d)
            if d.resets:
                log.info("%s/%s: %d message(s) to retry (%s)", ref.folder, ref.session_id, len(d.resets),
                         ", ".join(f"{r.message_id} try {r.tries + 1}" for r in d.resets))
            if failed:
                log.warning("%s/%s: %d message(s) failed %d times; telling the user", ref.folder,
                            ref.session_id, len(failed), MAX_TRIES)
                tell_user(ref.path, settings, failed)
            result.resets += len(d.resets)
            result.failed += len(failed)
            if d.wake:
                wake(ref, task=reading.due_task)
                result.woken.append((ref.folder, ref.session_id))
        except Exception as exc:  # one broken session must not stop the sweep of the others
            log.exception("sweep of %s failed: %s", ref.path, exc)
    return result


__all__ = ["Claim", "SessionView", "Reset", "Decision", "Reading", "PassResult", "decide", "read_view",
           "apply_resets", "tell_user", "failure_notice", "backoff_s", "settle_half_sent", "sweep_pass"]
