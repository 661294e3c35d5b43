"""Routing's decisions, as pure functions over the facts of one message (facts.py): which chat
step to take, which of the chat's agents get the message, which of them it engages, what a
stranger or a refused command gets. No I/O: tests call them with facts they build by hand.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from . import commands
from .facts import AgentFacts, Facts

CREATE, USE = "create", "use"


def chat_step(kind: str, mentioned: bool, found: bool, denied: bool) -> str:
    """What to do with the message's chat: USE it, CREATE it, or a drop reason. An unknown chat
    becomes a messaging group only when the bot is DM'd or mentioned; otherwise only its metadata
    is kept (in dropped_messages) and the content discarded."""
    if not found:
        return CREATE if creates_chat(kind, mentioned) else "no_agent_wired"
    return "denied_channel" if denied else USE


def creates_chat(kind: str, mentioned: bool) -> bool:
    return kind == "dm" or mentioned


def engages(engage_mode: str, engage_pattern: str | None, *, text: str, mentioned: bool, is_dm: bool,
            sticky_session: bool) -> bool:
    """Does this wiring engage on this message?"""
    if engage_mode == "pattern":
        if (engage_pattern or ".") == ".":
            return True  # '.' means every message, a photo without a caption too
        try:
            return re.search(engage_pattern, text or "", re.S) is not None
        except re.error:
            return False
    direct = mentioned or is_dm
    if engage_mode == "mention":
        return direct
    if engage_mode == "mention-sticky":
        return direct or sticky_session
    return False


def addressed(text: str, names: dict[int, str]) -> set[int]:
    """Which of a chat's agents (id -> name) the message is addressed to by name ('@Scout …' at its
    start). When one is, only it engages: in a chat with several agents, naming one is not a call to
    all. Empty when the message names none of them."""
    return {key for key, name in names.items() if name and re.match(trigger_pattern(None, name), text or "")}


def trigger_pattern(trigger: str | None, assistant_name: str = "Andy") -> str:
    """The engage_pattern for a v1-style trigger word: '@Andy' at the start of the message (after
    leading spaces), case-insensitive, ending at a word boundary; the trigger's characters are
    literal. No trigger given: '@<assistant name>'."""
    word = trigger.strip() if trigger and trigger.strip() else f"@{assistant_name}"
    return rf"(?i)^\s*{re.escape(word)}\b"


def sender_admitted(policy: str, known: bool) -> tuple[bool, str | None]:
    """The chat's unknown-sender gate: (admitted, drop reason)."""
    if known or policy == "public":
        return True, None
    return False, f"unknown_sender_{policy}"


def asks_approval(policy: str, engaged: bool, ignored_policy: str, sender_is_bot: bool) -> bool:
    """Is a refused stranger worth a card? Only under request_approval, only a person, and only
    when the wiring would have used the message (engaged, or kept as context): chatter that would
    be dropped anyway asks nobody."""
    return policy == "request_approval" and not sender_is_bot and (engaged or ignored_policy == "accumulate")


def is_sticky(session) -> bool:
    """mention-sticky: an active session that an engaging message reached (one made only to keep
    unmentioned messages as context does not make its thread sticky)."""
    return session is not None and session.status == "active" and session.engaged_at is not None


def thread_of(kind: str, thread_id: str | None, thread_root: str | None) -> str | None:
    """The thread a message belongs to: its own, or in a threaded chat (kind 'thread') the one a
    top-level message starts, so the answer goes under it (Discord: a thread made from a message
    has the message's id)."""
    return thread_id or (thread_root if kind == "thread" else None)


def session_thread(kind: str, thread_id: str | None) -> str:
    """Threads of a thread-capable chat get sessions of their own; elsewhere one per chat."""
    return (thread_id or "") if kind == "thread" else ""


@dataclass(frozen=True)
class Delivery:
    agent: AgentFacts
    engaged: bool                    # a trigger: the agent answers (else kept as context)
    command: str | None = None       # an admin's /clear or /compact, for the runner to act on


@dataclass(frozen=True)
class Plan:
    deliveries: tuple[Delivery, ...] = ()
    ask_about: AgentFacts | None = None   # a stranger's message worth an approval card, for this agent
    refused_sender: str | None = None     # why a stranger's message was not taken (a drop reason)
    refused_command: str | None = None    # the short answer to a command this sender may not give

    @property
    def drop_reason(self) -> str:
        return "command_refused" if self.refused_command else self.refused_sender or "no_agent_engaged"


def plan(facts: Facts, *, text: str, mentioned: bool, sender_is_bot: bool) -> Plan:
    """Which of the chat's agents get the message, and how (pure)."""
    chat = facts.chat
    command = commands.parse(text)
    names = {a.wiring.id: a.name for a in facts.agents}
    named = addressed(text, names) if len(facts.agents) > 1 else set()
    deliveries, ask_about, refused_sender, refused_command = [], None, None, None
    for agent in facts.agents:
        wiring = agent.wiring
        admitted, reason = sender_admitted(chat.unknown_sender_policy, agent.known)
        engaged = engages(wiring.engage_mode, wiring.engage_pattern, text=text, mentioned=mentioned,
                          is_dm=chat.kind == "dm", sticky_session=is_sticky(agent.session))
        if named and wiring.id not in named:
            engaged = False  # another agent of this chat was addressed by name
        if not admitted:
            if ask_about is None and asks_approval(chat.unknown_sender_policy, engaged,
                                                   wiring.ignored_message_policy, sender_is_bot):
                ask_about = agent  # one card per message, for the first agent that would have used it
            refused_sender = refused_sender or reason
            continue  # a refused sender's message is never accumulated either
        if wiring.sender_scope == "known" and not agent.known:
            continue
        if command is not None:
            verdict = commands.verdict(command, agent.admin)
            if not verdict.allowed:
                refused_command = refused_command or (verdict.reply if engaged else None)
                continue  # never written, not even as context
        if not engaged and wiring.ignored_message_policy == "drop":
            continue
        deliveries.append(Delivery(agent, engaged, command if command in commands.ADMIN_ONLY else None))
    return Plan(tuple(deliveries), ask_about, refused_sender, refused_command)
