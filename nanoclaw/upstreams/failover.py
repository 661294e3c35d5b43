"""Failover at the door, as pure decisions and one small state: which links of an agent's chain to try
for a call and in what order, which answers count as the upstream failing, and the circuit breaker
that skips an upstream that keeps failing.

The door tries the next link when the upstream answers 429, 529 or another 5xx, or cannot be
reached, before any byte of the answer went to the sandbox (a stream whose first event is an error
counts), within FAILOVER_DEADLINE_S for the whole call. When the chain fails, the sandbox gets the
primary's status with a retry-after of at least the breaker's open time, so the CLI's own retries do
not run the chain again at once.
"""
from __future__ import annotations

import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass

from .chains import AgentModel, Link
from .registry import DEFAULT

BREAKER_FAILURES = 3      # failures of one upstream within BREAKER_WINDOW_S open its breaker...
BREAKER_WINDOW_S = 60.0
BREAKER_OPEN_S = 30.0     # ...for this long: the chain skips it (unless nothing else is left)
FAILOVER_DEADLINE_S = 120.0  # all tries of one call together


def failed(status: int) -> bool:
    """An answer that says the upstream cannot serve the call now (the next link may)."""
    return status in (429, 529) or 500 <= status <= 599


@dataclass(frozen=True)
class Refused:
    status: int
    message: str


def candidates(choice: AgentModel | None, asked: str | None, *, free: set[str], budget_spent: bool,
               open_upstreams: set[str]) -> list[Link] | Refused:
    """The links to try, in order (pure).

    No choice: any model, on the default upstream, as the call says. With one: the call must name a
    model of the chain (the CLI is told the agent's model, so only a call made some other way names
    another); the chain is tried from the first link of that model on. With the budget spent only
    the links on free upstreams are left. Links whose breaker is open go last, so an open breaker is
    skipped while there is anything else to try."""
    if choice is None:
        links = [Link(DEFAULT, asked or "")]
    else:
        models = choice.models()
        if asked not in models:
            return Refused(400, f"nanoclaw: this agent runs on {', '.join(models)}; the model {asked!r} is not one "
                                "of them (the owner sets an agent's models: flask --app app nanoclaw model set …)")
        chain = list(choice.chain)
        links = chain[next(i for i, link in enumerate(chain) if link.model == asked):]
    if budget_spent:
        links = [link for link in (choice.chain if choice else links) if link.upstream in free]
    closed = [link for link in links if link.upstream not in open_upstreams]
    return closed + [link for link in links if link.upstream in open_upstreams]


class Breaker:
    """Per upstream: BREAKER_FAILURES failures within BREAKER_WINDOW_S open it for BREAKER_OPEN_S; a
    success closes it. Thread-safe; the clock is injectable."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self._failures: dict[str, deque] = defaultdict(deque)
        self._open_until: dict[str, float] = {}
        self._lock = threading.Lock()

    def open_upstreams(self) -> set[str]:
        now = self.clock()
        with self._lock:
            return {name for name, until in self._open_until.items() if until > now}

    def open_for(self, name: str) -> float:
        with self._lock:
            return max(0.0, self._open_until.get(name, 0.0) - self.clock())

    def failure(self, name: str) -> bool:
        """Count a failure; True when it opened the breaker just now."""
        now = self.clock()
        with self._lock:
            seen = self._failures[name]
            seen.append(now)
            while seen and seen[0] < now - BREAKER_WINDOW_S:
                seen.popleft()
            if len(seen) >= BREAKER_FAILURES and self._open_until.get(name, 0.0) <= now:
                self._open_until[name] = now + BREAKER_OPEN_S
                seen.clear()
                return True
            return False

    def success(self, name: str) -> None:
        with self._lock:
            self._failures.pop(name, None)
            self._open_until.pop(name, None)
