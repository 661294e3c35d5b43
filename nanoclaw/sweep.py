"""Liveness and stuck detection: a pure decide() per session, and the effects that apply it.

The rules (issue 6 / seed item 9):
- sandbox not running but rows are claimed → reset them (tries + 1, backoff 5 s·2^tries);
- running, heartbeat older than max(30 min, the declared Bash timeout) → stop and reset;
- a claim older than its tolerance (60 s, or the declared Bash timeout while Bash runs) with no
  heartbeat since the claim → stop and reset;
- a message that has been tried MAX_TRIES times fails, and the user is told;
- a sandbox with no work for IDLE_S is stopped; due work in a stopped session wakes it.
"""
from __future__ import annotations

from dataclasses import dataclass

CEILING_S = 30 * 60
CLAIM_TOLERANCE_S = 60
IDLE_S = 30 * 60
MAX_TRIES = 5
BACKOFF_BASE_S = 5


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


def decide(view: SessionView, now: float) -> Decision:
    if not view.running:
        if view.claims:
            resets, failed = _release(view.claims, now)
            return Decision(resets=resets, failed=failed, wake=bool(resets) or view.has_due_work)
        return Decision(wake=view.has_due_work)

    bash = bash_timeout_s(view)
    if view.heartbeat_at is not None and now - view.heartbeat_at > max(CEILING_S, bash):
        resets, failed = _release(view.claims, now)
        return Decision(stop="heartbeat_stale", resets=resets, failed=failed)

    tolerance = max(CLAIM_TOLERANCE_S, bash)
    for claim in view.claims:
        silent_since_claim = view.heartbeat_at is None or view.heartbeat_at <= claim.claimed_at
        if now - claim.claimed_at > tolerance and silent_since_claim:
            resets, failed = _release(view.claims, now)
            return Decision(stop="claim_stuck", resets=resets, failed=failed)

    if not view.claims and not view.has_due_work and view.last_work_at is not None \
            and now - view.last_work_at > IDLE_S:
        return Decision(stop="idle")
    return Decision()
