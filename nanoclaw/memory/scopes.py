"""Whose memory a conversation uses and what history it may search, decided by the host from its own
records, never from anything the agent says.

- private:<user id>: a person's own memory with this agent, used where that person is the only one
  in the conversation and is its owner or one of its admins: their direct messages (any platform),
  the web chat as them, and `flask nanoclaw chat` (the owner);
- chat:<channel>:<chat id>: every other chat has one memory, shared by its threads and sessions; a
  scheduled task's run uses its chat's; the session a webhook wakes uses its chat's, even in a DM.
History: the owner's own conversations search everything the agent saw (the owner can read it all
on the page anyway); every other conversation searches its own chat only.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..inbound import lookups
from ..models import AgentGroup, MessagingGroup, Session, User, UserDm, UserRole
from ..sessions import store

PRIVATE, CHAT = "private", "chat"


@dataclass(frozen=True)
class Scope:
    kind: str   # private | chat
    key: str    # the person's user id | <channel>:<chat id>

    @property
    def name(self) -> str:
        return f"{self.kind}:{self.key}"

    @classmethod
    def parse(cls, name: str) -> "Scope":
        kind, _, key = (name or "").partition(":")
        if kind not in (PRIVATE, CHAT) or not key:
            raise ValueError(f"not a memory scope: {name!r}")
        return cls(kind, key)

    def describe(self) -> str:
        if self.kind == PRIVATE:
            return f"{self.key}'s own"
        channel, _, chat = self.key.partition(":")
        return f"the chat {channel}:{chat}"


@dataclass(frozen=True)
class Reach:
    """What one conversation may read and write."""
    memory: Scope
    everything: bool          # search all the agent saw (the owner's own conversations)
    channel: str
    chat_id: str


def decide(channel: str, chat_id: str, chat_kind: str, person: str | None,
           privileged: Callable[[str], bool], owner: Callable[[str], bool]) -> Reach:
    """The conversation's reach (pure, given the role checks): `person` is the one human of a direct
    conversation (the DM's user, the web chat's, the owner for the local CLI chat), None elsewhere."""
    if channel == "web":
        person = chat_id.partition("|")[2] or None
    elif channel != "cli" and chat_kind != "dm":
        person = None
    if person and privileged(person):
        return Reach(Scope(PRIVATE, person), owner(person), channel, chat_id)
    return Reach(Scope(CHAT, f"{channel}:{chat_id}"), False, channel, chat_id)


def dm_person(channel: str, chat_id: str) -> str | None:
    """The user whose direct chat this is, from the host's record of each person's DM."""
    if channel == "cli":
        role = UserRole.select().join(User).where(UserRole.role == "owner").order_by(UserRole.id).first()
        return role.user.id if role else None
    dm = UserDm.select(UserDm, User).join(User).where(UserDm.channel_type == channel,
                                                      UserDm.platform_id == chat_id).order_by(UserDm.id).first()
    return dm.user.id if dm else None


def reach_of(sessions_dir, folder: str, session_id: str) -> Reach | None:
    """The reach of a session, from its central row (or, for a task run's session, its routing)."""
    agent = AgentGroup.get_or_none(AgentGroup.folder == folder)
    session = Session.get_or_none(Session.id == session_id)
    if agent is None or session is None or session.agent_group_id != agent.id:
        return None
    chat = MessagingGroup.get_or_none(MessagingGroup.id == session.messaging_group_id) \
        if session.messaging_group_id else None
    if chat is not None and session.thread_id.startswith(store.WEBHOOK_THREAD_PREFIX):
        return decide(chat.channel_type, chat.platform_id, "group", None, lambda _u: False, lambda _u: False)
    if chat is None:
        target = store.routing_of(store.session_path(sessions_dir, folder, session_id))
        if target is None:
            return None
        chat = MessagingGroup.get_or_none(MessagingGroup.channel_type == target.channel_type,
                                          MessagingGroup.platform_id == target.platform_id)
        if chat is None:
            return decide(target.channel_type, target.platform_id, "group", None, lambda _u: False,
                          lambda _u: False)
    return decide(chat.channel_type, chat.platform_id, chat.kind, dm_person(chat.channel_type, chat.platform_id),
                  lambda user: lookups.is_owner_or_admin(user, agent.id), lookups.is_owner)
