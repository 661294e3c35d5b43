"""An agent's destinations: the named places it may send to with `to`, besides the chat it answers.

Every chat the agent is wired to is one, named after the chat (its title, else `<channel>-<id>`);
the operator adds others (`destination add`, the `agent_destinations` table), and an operator's
name wins over a chat's. The host copies the list into each session's inbound.db (`sync`): the
runner reads it there, and delivery refuses a row for any place not on it (store.allowed_targets).
"""
from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from .. import platforms
from ..db import database
from ..models import AgentDestination, MessagingGroup, Session, Wiring, audit
from ..security import slugify
from . import store
from .store import Target

NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")


def chat_name(channel: str, platform_id: str, title: str | None) -> str:
    """A destination name for a wired chat (pure)."""
    return slugify(title or "") or slugify(f"{channel}-{platform_id}") or "chat"


def name_problem(name: str) -> str | None:
    if not NAME_RE.fullmatch(name or ""):
        return (f"{name!r} is not a destination name: use 1-64 lower-case letters, digits, '-' or '_', "
                "starting with a letter or digit")
    return None


def destinations_of(agent_group_id: int) -> dict[str, tuple[Target, str]]:
    """name → (where, what to call it) for the agent, wired chats first, then the operator's."""
    found: dict[str, tuple[Target, str]] = {}
    chats = (MessagingGroup.select().join(Wiring, on=(Wiring.messaging_group == MessagingGroup.id))
             .where(Wiring.agent_group == agent_group_id).order_by(MessagingGroup.id))
    for mg in chats:
        base = name = chat_name(mg.channel_type, mg.platform_id, mg.name)
        n = 2
        while name in found:
            name, n = f"{base}-{n}", n + 1
        label = f"{mg.name} ({mg.channel_type} {mg.kind})" if mg.name else f"{mg.channel_type} {mg.kind} {mg.platform_id}"
        found[name] = (Target(mg.channel_type, mg.platform_id, None), label)
    for row in AgentDestination.select().where(AgentDestination.agent_group == agent_group_id):
        found[row.name] = (Target(row.channel_type, row.platform_id, row.thread_id),
                           f"{row.channel_type} {row.platform_id}" + (f" thread {row.thread_id}" if row.thread_id else ""))
    return found


def sync(path: Path, agent_group_id: int) -> None:
    """Make the session's destinations table the agent's list, in one transaction."""
    if not store.inbound_db(path).exists():
        return
    wanted = destinations_of(agent_group_id)
    with store._inbound(path) as conn:
        conn.execute("DELETE FROM destinations")
        conn.executemany("INSERT INTO destinations (name, channel_type, platform_id, thread_id, display_name) "
                         "VALUES (?, ?, ?, ?, ?)",
                         [(name, t.channel_type, t.platform_id, t.thread_id, label)
                          for name, (t, label) in wanted.items()])


class DestinationError(ValueError):
    """A destination that cannot be added or removed; the message says why and what to do."""


class DestinationRefused(DestinationError):
    """The actor may not point this agent at that chat (a scoped admin outside their agents)."""


def add(actor: str, agent, name: str, channel: str, chat_id: str, thread: str | None = None,
        why: str | None = None, refusal: Callable[[str, str], str | None] | None = None) -> None:
    """Name (or re-point) a place the agent may send to, audited; the CLI and the page both use it.
    `refusal(channel, chat_id)`: why the actor may not name that chat (a scoped admin: the wiring
    rule), None when they may; without it (the owner's CLI) any chat may be named."""
    problem = name_problem(name)
    if problem:
        raise DestinationError(problem)
    if not channel.isidentifier():
        raise DestinationError(f"channel {channel!r} is not a channel name (one of: "
                               f"{', '.join((*platforms.names(), 'web', 'cli'))})")
    chat_id, thread = (chat_id or "").strip(), (thread or "").strip() or None
    if not chat_id:
        raise DestinationError("a chat id is needed")
    why_not = refusal(channel, chat_id) if refusal is not None else None
    if why_not:
        raise DestinationRefused(why_not)
    with database.atomic():
        row = AgentDestination.get_or_none(AgentDestination.agent_group == agent, AgentDestination.name == name)
        before = f"{row.channel_type}:{row.platform_id}" + (f" thread {row.thread_id}" if row.thread_id else "") \
            if row else None
        if row is None:
            AgentDestination.create(agent_group=agent, name=name, channel_type=channel, platform_id=chat_id,
                                    thread_id=thread, created_by=actor)
        else:
            AgentDestination.update(channel_type=channel, platform_id=chat_id, thread_id=thread).where(
                AgentDestination.id == row.id).execute()
        audit(actor, "destination.add", f"{agent.folder}:{name}", chat=f"{channel}:{chat_id}", thread=thread,
              **({"before": before} if before else {}), **({"why": why} if why else {}))


def remove(actor: str, agent, name: str, why: str | None = None) -> None:
    deleted = AgentDestination.delete().where(AgentDestination.agent_group == agent,
                                              AgentDestination.name == name).execute()
    if not deleted:
        raise DestinationError(f"{agent.folder} has no added destination {name!r} (a wired chat stays one until "
                               "it is unwired)")
    audit(actor, "destination.remove", f"{agent.folder}:{name}", **({"why": why} if why else {}))


def sync_agent(sessions_dir: Path, agent) -> int:
    """Copy the agent's list into every session of it that has an inbound.db; how many."""
    done = 0
    for session in Session.select().where(Session.agent_group == agent.id):
        path = store.session_path(sessions_dir, agent.folder, session.id)
        if store.inbound_db(path).exists():
            sync(path, agent.id)
            done += 1
    return done
