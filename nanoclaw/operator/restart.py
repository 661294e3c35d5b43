"""Restart an agent group's running sandboxes so they pick up a new image or MCP server.

The session stays the same: the runner keeps the SDK session id in outbound.db and the transcript
in the session folder, so the new sandbox resumes the conversation. Stopping gives back any message
in flight (the runner releases its claims); the wake that follows starts the new sandbox.
"""
from __future__ import annotations

import logging

from ..models import AgentGroup, Session
from ..sandboxes.manager import sandbox_name
from ..runtime.select import select_runtime

log = logging.getLogger("nanoclaw.operator.restart")


def running_sessions(settings, agent: AgentGroup, runtime) -> list[Session]:
    return [s for s in Session.select().where(Session.agent_group == agent.id)
            if runtime.is_running(sandbox_name(settings.install_id, agent.folder, s.id))]


def stop_group(settings, agent: AgentGroup, runtime) -> list[Session]:
    """Stop every running sandbox of the group; returns their sessions (to be told and woken)."""
    stopped = []
    for session in running_sessions(settings, agent, runtime):
        runtime.stop(sandbox_name(settings.install_id, agent.folder, session.id))
        log.info("stopped the sandbox of %s/%s for a capability change", agent.folder, session.id)
        stopped.append(session)
    return stopped


def runtime_for(settings, manager=None):
    if manager is not None:
        return manager.runtime
    return select_runtime(settings, log)
