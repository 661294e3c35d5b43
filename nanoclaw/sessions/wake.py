"""Wake: how the host starts or nudges the sandbox of a session it has just written to.

Everything that writes a session (the router, approvals replaying a message, an answer to a
question, a decision told to the agent) is handed one Wake and calls it with the session. The
composition (nanoclaw/service.py) makes one per process; the background jobs connect it to their
sandbox manager when they start in this process. Unconnected (a `flask` command, a worker without
the scheduler lock, a runtime not working yet) a wake does nothing, and nothing is lost: the
background's sweep finds the message within seconds and wakes the session then.
"""
from __future__ import annotations

from typing import Callable


class Wake:
    def __init__(self):
        self._start: Callable[[str, str], None] | None = None
        self.manager = None  # the sandbox manager behind it, for restarts (None: pick a runtime)

    def connect(self, start: Callable[[str, str], None] | None, manager=None) -> None:
        """start(agent folder, session id) starts or nudges that session's sandbox."""
        self._start, self.manager = start, manager

    @property
    def connected(self) -> bool:
        return self._start is not None

    def __call__(self, session) -> None:
        self.session(session.agent_group.folder, session.id)

    def session(self, folder: str, session_id: str) -> None:
        start = self._start
        if start is not None:
            start(folder, session_id)


NO_WAKE = Wake()  # never connected: for code paths with no sandboxes to start (tools, scripts)
