"""What routing one message needs to know, read in one place before anything is decided: its chat,
the agents wired there, and for each whether the sender is known to it (or administers it) and the
session the message would go to. The reads are lookups.py's plain SQL (kept for a round).
"""
from __future__ import annotations

from dataclasses import dataclass

from . import lookups


@dataclass(frozen=True)
class AgentFacts:
    wiring: object            # models.Wiring
    name: str                 # the agent's name (a message may address it as @Name)
    known: bool               # the sender is its owner, an admin of it or a member
    admin: bool               # the sender is the owner or an admin of it (admin-only commands)
    session: object | None    # models.Session this chat (and thread) already has with it


@dataclass(frozen=True)
class Facts:
    chat: object              # models.MessagingGroup
    thread_id: str | None     # the thread the answer goes to
    thread: str               # the session's thread key ('' for one session per chat)
    agents: tuple[AgentFacts, ...]


def read(chat, user_id: str, thread_id: str | None, thread: str, *, command: bool) -> Facts:
    """The facts of a message from `user_id` in `chat` (its thread worked out by the caller). What
    only some messages need is read only for them: roles for a command, names where several agents
    answer (a message may address one)."""
    wirings = lookups.wirings(chat.id)
    agents = []
    for wiring in wirings:
        group = wiring.agent_group_id
        known = lookups.is_known(user_id, group)
        agents.append(AgentFacts(wiring, wiring.agent_group.name if len(wirings) > 1 else "", known,
                                 command and known and lookups.is_owner_or_admin(user_id, group),
                                 lookups.session(group, chat.id, thread)))
    return Facts(chat, thread_id, thread, tuple(agents))
