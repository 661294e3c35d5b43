"""/stop in chat: read which of the chat's agents has a turn running and who started it, decide who
may stop what (pure), then record the stops and say so. The message itself is never stored.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from . import commands
from .facts import AgentFacts, Facts
from ..channels.base import get_adapter
from ..sessions import turns
from ..sessions.store import routing_of

log = logging.getLogger("nanoclaw.stop")

STOPPED = "Stopped."
NOTHING = "Nothing is running here to stop."
ONLY = "Only the owner, an admin of this agent or the person whose message started the turn can use /stop here."


@dataclass(frozen=True)
class StopPlan:
    stops: tuple[tuple[AgentFacts, turns.Running], ...] = ()
    reply: str | None = None
    stranger: bool = False  # no agent here knows the sender: theirs is a stranger's message


def decide(facts: Facts, running: dict[int, turns.Running | None], user_id: str, public: bool) -> StopPlan:
    """Which running turns this person's /stop stops (pure). `running` maps a wiring id to the turn
    its session holds now."""
    listening = [a for a in facts.agents if a.known or public]
    if not listening:
        return StopPlan(stranger=True)
    busy = [(a, running[a.wiring.id]) for a in listening if running.get(a.wiring.id) is not None]
    if not busy:
        return StopPlan(reply=NOTHING)
    allowed = tuple((a, r) for a, r in busy if commands.may_stop(a.admin, r.started_by == user_id))
    return StopPlan(allowed, STOPPED if allowed else ONLY)


def running_turns(facts: Facts, session_dir) -> dict[int, turns.Running | None]:
    """Each agent's running turn in this chat (the effect decide needs: files read, nothing written)."""
    return {a.wiring.id: turns.running(session_dir(a.session)) if a.session is not None else None
            for a in facts.agents}


def act(plan: StopPlan, session_dir, tell) -> None:
    for agent, turn in plan.stops:
        turns.request_stop(session_dir(agent.session), turn.ids)
        log.info("turn of session %s stopped from chat (%d message(s))", agent.session.id, len(turn.ids))
    if plan.reply:
        tell(plan.reply)


def stop_session(path, settings, task_id: str | None = None) -> turns.Running | None:
    """Stop the session's running turn (with task_id: only a run of that task) from the page or the
    CLI, and say so in its chat (best effort). None when nothing (of the task) runs there."""
    turn = turns.running(path)
    if turn is None or (task_id is not None and turn.task_id != task_id):
        return None
    turns.request_stop(path, turn.ids)
    target = routing_of(path)
    if target is not None:
        try:
            get_adapter(target.channel_type, settings).send_text(target, STOPPED)
        except Exception as exc:  # noqa: BLE001 - the stop is recorded; the notice is a courtesy
            log.warning("could not tell %s the turn was stopped: %s", target, exc)
    return turn
