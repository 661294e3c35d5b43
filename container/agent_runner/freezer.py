"""Stop the SDK's CLI while the chat is quiet; continue it before the next prompt.

An idle CLI still wakes about once a second (it stats its config, reads /proc/self/statm, runs its
runtime's timers): about 0.3% of a core per warm sandbox, which no setting turns off and which was
most of what three idle sandboxes cost. A stopped process costs nothing, and SIGCONT takes
microseconds, so the next answer is not slower. Only the CLI itself is stopped: what the agent
started in the background (a server, a download) keeps running.
"""
from __future__ import annotations

import logging
import os
import signal

log = logging.getLogger("agent_runner.freezer")


def is_due(idle_since: float, now: float, after_s: float, frozen: bool) -> bool:
    """Whether to stop the CLI now: idle long enough, not already stopped, and not switched off (pure)."""
    return after_s > 0 and not frozen and now - idle_since >= after_s


class Freezer:
    def __init__(self) -> None:
        self.pid: int | None = None  # the CLI we stopped, until it is continued

    @property
    def frozen(self) -> bool:
        return self.pid is not None

    def freeze(self, pid: int | None) -> None:
        if pid is None or self.pid is not None:
            return
        try:
            os.kill(pid, signal.SIGSTOP)
        except OSError as e:  # gone already: the next turn starts a new one
            log.warning("could not stop the idle CLI (pid %d): %s", pid, e)
            return
        self.pid = pid
        log.info("idle: the CLI (pid %d) is stopped until the next message", pid)

    def thaw(self) -> None:
        """Continue the stopped CLI (a no-op when none is); before any prompt, interrupt or close,
        since a stopped process would not read them (a pending SIGTERM waits for SIGCONT)."""
        pid, self.pid = self.pid, None
        if pid is None:
            return
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
