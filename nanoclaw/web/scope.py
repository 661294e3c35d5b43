"""Who may change what from the page, checked on every write (not only by what a page shows).

An owner or a global admin may change anything. An admin scoped to some agents may change only
those agents (their mounts, wirings, sessions, tasks), and a chat only where it does not reach
into someone else's: not a direct message that is not their own, and not a chat where an agent
outside their scope answers (its chat-level settings, the kind, name and stranger policy, belong
to that agent too).

The rules are pure functions over a Scope and a ChatFacts; chat_facts() reads what they need.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..models import MessagingGroup, UserDm, Wiring


@dataclass(frozen=True)
class Scope:
    user_id: str
    agents: frozenset[int] | None  # None: every agent (owner, global admin)

    def covers(self, agent_id: int) -> bool:
        return self.agents is None or agent_id in self.agents


@dataclass(frozen=True)
class ChatFacts:
    exists: bool
    kind: str | None                # the chat's kind as stored (None: a new chat)
    agents: frozenset[int]          # agent groups wired there now
    dm_person: str | None           # whose direct message it is (a DM only)


def dm_person(channel: str, chat_id: str) -> str:
    """The user a DM chat belongs to: as recorded in user_dms, else the platform's convention that a
    DM's chat id is the person's own id (Telegram, WhatsApp)."""
    dm = UserDm.get_or_none(UserDm.channel_type == channel, UserDm.platform_id == chat_id)
    return dm.user_id if dm is not None else f"{channel}:{chat_id}"


def chat_facts(channel: str, chat_id: str, kind: str | None = None) -> ChatFacts:
    """The facts of chat (channel, chat id); `kind`: what a new chat would be created as."""
    mg = MessagingGroup.get_or_none(MessagingGroup.channel_type == channel, MessagingGroup.platform_id == chat_id)
    actual = mg.kind if mg is not None else kind
    agents = frozenset(w.agent_group_id for w in Wiring.select(Wiring.agent_group).where(
        Wiring.messaging_group == mg)) if mg is not None else frozenset()
    return ChatFacts(mg is not None, actual, agents, dm_person(channel, chat_id) if actual == "dm" else None)


def wiring_refusal(scope: Scope, agent_id: int, chat: ChatFacts) -> str | None:
    """Why `scope` may not wire (or re-wire) agent `agent_id` in this chat; None when it may."""
    if not scope.covers(agent_id):
        return "you administer other agents, not this one"
    if scope.agents is None:
        return None
    if chat.dm_person is not None and chat.dm_person != scope.user_id:
        return "this chat is someone else's direct message; only the owner can wire it"
    if any(not scope.covers(a) for a in chat.agents - {agent_id}):
        return "an agent you do not administer answers in this chat; only the owner can change it"
    return None


def removal_refusal(scope: Scope, agent_id: int) -> str | None:
    return None if scope.covers(agent_id) else "you administer other agents, not this one"


def destination_refusal(scope: Scope, agent_id: int, chat: ChatFacts) -> str | None:
    """Why `scope` may not name this chat as a destination of agent `agent_id`: only a chat where it
    could wire the agent, and (for a scoped admin) only one NanoClaw has seen, whose kind it knows."""
    if scope.agents is not None and scope.covers(agent_id) and not chat.exists:
        return "NanoClaw has not seen this chat yet; wire your agent there first, or ask the owner"
    return wiring_refusal(scope, agent_id, chat)
