"""Sandboxes that fail to start: count them per session, back off, and tell the chat once.

A start fails when the runtime refuses it (a refused mount, a missing image) or when the sandbox
dies before its runner touched the heartbeat (the runner touches it first thing, so a sandbox gone
without a beat since its start crashed while starting: a broken entry point, an import error).
The sweep wakes a session with due work every 10 s; without this it would restart a broken
sandbox every 10 s forever, in silence. After NOTICE_AFTER failures in a row the chat is told once
(with a short reason from the sandbox's log) and further starts wait BASE_BACKOFF_S·2^n, at most
MAX_BACKOFF_S. A start whose runner got going resets the count.

The decisions are pure functions; StartFailures keeps the per-session state of one manager.
"""
from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from pathlib import Path

from ..sessions.store import agent_mtime, heartbeat_file

NOTICE_AFTER = 3
BASE_BACKOFF_S = 10.0
MAX_BACKOFF_S = 300.0
REASON_MAX = 200
_ERROR_LINE = re.compile(r"^(?:[\w.]+(?:Error|Exception|Exit)\b|bwrap:|nanoclaw-sandbox:|prlimit:|error:|fatal:)",
                         re.I)


@dataclass
class StartState:
    failures: int = 0                   # consecutive failed starts
    last_failure_at: float = 0.0        # epoch seconds
    started_at: float | None = None     # our last start, not judged yet
    told: bool = False                  # the chat heard about this streak
    reason: str = ""


# --- pure decisions ------------------------------------------------------------------------------

def came_up(started_at: float, heartbeat_at: float | None) -> bool:
    """Did the runner of a start at `started_at` get going (touch its heartbeat since)?"""
    return heartbeat_at is not None and heartbeat_at >= started_at


def wait_s(failures: int, last_failure_at: float, now: float) -> float:
    """Seconds before the next start may be tried: none until NOTICE_AFTER failures, then doubling."""
    if failures < NOTICE_AFTER:
        return 0.0
    delay = min(MAX_BACKOFF_S, BASE_BACKOFF_S * 2 ** (failures - NOTICE_AFTER + 1))
    return max(0.0, last_failure_at + delay - now)


def should_tell(state: StartState) -> bool:
    return state.failures >= NOTICE_AFTER and not state.told


def short_reason(log_text: str, fallback: str = "it stopped right after starting") -> str:
    """The line of a sandbox log that says what went wrong (the last error-looking line, else the
    last line), one line, at most REASON_MAX characters."""
    lines = [" ".join(line.split()) for line in (log_text or "").splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        return fallback
    errors = [line for line in lines if _ERROR_LINE.match(line)]
    line = errors[-1] if errors else lines[-1]
    return line if len(line) <= REASON_MAX else line[:REASON_MAX - 1] + "…"


def notice(reason: str) -> str:
    return (f"{reason}. It failed to start {NOTICE_AFTER} times in a row; I will keep trying, less often "
            "(at most every 5 minutes), and the details are in the service log")


# --- per-session state of one manager ------------------------------------------------------------

def heartbeat_of(session_dir: Path) -> float | None:
    return agent_mtime(heartbeat_file(session_dir))


class StartFailures:
    """Thread-safe bookkeeping by sandbox name. The manager calls started() before a start,
    failed() when the runtime refused it, judge() before a new start of a sandbox that is not
    running, stopped() when it stops one itself."""

    def __init__(self):
        self._lock = threading.Lock()
        self._states: dict[str, StartState] = {}

    def state(self, name: str) -> StartState | None:
        return self._states.get(name)

    def started(self, name: str, now: float) -> None:
        with self._lock:
            self._states.setdefault(name, StartState()).started_at = now

    def failed(self, name: str, reason: str, now: float) -> StartState:
        with self._lock:
            state = self._states.setdefault(name, StartState())
            state.failures += 1
            state.last_failure_at = now
            state.started_at = None
            state.reason = reason
            return state

    def judge(self, name: str, heartbeat_at: float | None, log_text, now: float) -> tuple[StartState | None, bool]:
        """The sandbox we started last is gone: did it come up? Returns (its state, whether this
        judgement found a new failure); (None, False) when nothing is held against it. `log_text()`
        is read only for a new failure."""
        with self._lock:
            state = self._states.get(name)
            if state is None or state.started_at is None:
                return state, False
            if came_up(state.started_at, heartbeat_at):
                del self._states[name]
                return None, False
            state.started_at = None  # judged once, by whoever got here first
        return self.failed(name, short_reason(log_text()), now), True

    def stopped(self, name: str, heartbeat_at: float | None) -> None:
        """We stopped it: never a failure; a success if its runner had come up."""
        with self._lock:
            state = self._states.get(name)
            if state is None or state.started_at is None:
                return
            if came_up(state.started_at, heartbeat_at):
                del self._states[name]
            else:
                state.started_at = None

    def take_notice(self, name: str) -> bool:
        """True once per streak, when it is time to tell the chat."""
        with self._lock:
            state = self._states.get(name)
            if state is None or not should_tell(state):
                return False
            state.told = True
            return True
