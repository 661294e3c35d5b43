"""The routing pipeline: chat → sender gate → wirings (fan-out) → engage → session → write → wake.

The decisions are pure functions (engages, sender_admitted, session_thread, creates_chat,
trigger_pattern) that tests call directly; route() applies them and does the writes.

Capabilities plug in through gates (register_gate), never by being imported here:
- "before"(event, settings, wake) -> RouteResult | None: may consume a message before routing
  (e.g. the approver's free-text answer to "what should the new agent be called?");
- "unwired"(event, mg, settings, wake) -> RouteResult | None: a known chat with no wiring
  (the unknown-channel approval); None lets the router drop it;
- "unknown_sender"(event, mg, wiring, settings) -> None: a stranger refused under the
  request_approval policy (the unknown-sender approval). The router still records the drop.
Nothing is cached across messages: each reads the wirings, roles and members as they are now
(the reads are plain SQL in lookups.py; within one intake round a positive answer is reused).
"""
from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field
from typing import Callable

import peewee

from . import commands, dedup, lookups
from .. import metrics
from ..channels.base import get_adapter
from ..channels.events import InboundEvent, event_from_json
from ..db import database
from ..models import (DroppedMessage, MessagingGroup, Session, User, UserDm, Wiring,
                      utcnow)
from ..sessions import session_schema as schema
from ..sessions import store
from .inbox import InboxFiles

log = logging.getLogger("nanoclaw.router")

GATE_STAGES = ("before", "unwired", "unknown_sender")
ACTIVITY_RESOLUTION_S = 1.0  # sessions.last_active_at is kept to the second
_GATES: dict[str, list[Callable]] = {stage: [] for stage in GATE_STAGES}


def register_gate(stage: str):
    """Decorator: `@register_gate("unwired") def gate(event, mg, settings, wake): ...`."""
    if stage not in _GATES:
        raise ValueError(f"unknown gate stage {stage!r}; use one of {GATE_STAGES}")

    def decorate(fn):
        key = (fn.__module__, fn.__qualname__)  # a re-imported module replaces, never doubles
        _GATES[stage][:] = [g for g in _GATES[stage] if (g.__module__, g.__qualname__) != key] + [fn]
        return fn
    return decorate


def gates(stage: str) -> list[Callable]:
    return list(_GATES[stage])


# --- pure decisions --------------------------------------------------------------------------

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


def creates_chat(kind: str, mentioned: bool) -> bool:
    """An unknown chat becomes a messaging group only when the bot is DM'd or mentioned;
    otherwise only its metadata is kept (in dropped_messages) and the content discarded."""
    return kind == "dm" or mentioned


# --- effects ---------------------------------------------------------------------------------

@dataclass
class RouteResult:
    duplicate: bool = False
    written: list[tuple[str, str, bool]] = field(default_factory=list)  # (folder, session id, trigger)
    dropped: str | None = None
    handled: str | None = None  # a gate consumed the message (e.g. "approval_name")


def is_owner_or_admin(user_id: str, agent_group_id: int | None = None) -> bool:
    """Owner, global admin, or (when agent_group_id is given) admin of that agent group."""
    return lookups.is_owner_or_admin(user_id, agent_group_id)


def is_known(user_id: str, agent_group_id: int) -> bool:
    """Owner, admin (global or of this agent group), or member."""
    return lookups.is_known(user_id, agent_group_id)


def drop(event: InboundEvent, reason: str, keep_content: bool = True) -> RouteResult:
    DroppedMessage.create(channel_type=event.channel, platform_id=event.chat_id, sender_id=event.user_id,
                          reason=reason, content=event.text if keep_content else None)
    log.info("dropped %s message in %s:%s from %s: %s", event.channel, event.channel, event.chat_id,
             event.user_id, reason)
    return RouteResult(dropped=reason)


def tell(event: InboundEvent, settings, text: str) -> None:
    """A short host reply in the chat (and thread) the message came from; best effort."""
    try:
        get_adapter(event.channel, settings).send_text(
            store.Target(event.channel, event.chat_id, event.thread_id), text)
    except Exception as exc:  # the platform is down: the log line is all we can do
        log.warning("could not reply in %s:%s: %s", event.channel, event.chat_id, exc)


def remember_dm(event: InboundEvent) -> None:
    """A person writing to the bot directly: keep their user row and where their DM is
    (user_dms), so approval cards can reach them later."""
    if event.kind != "dm" or event.sender_is_bot or event.from_self:
        return
    if lookups.dm_of(event.user_id, event.channel) == (True, event.chat_id):
        return  # known already (the common case: one read, no write)
    try:
        with database.atomic():
            user = User.get_or_none(User.id == event.user_id)
            if user is None:
                user = User.create(id=event.user_id, name=event.sender_name or None)
            dm = UserDm.get_or_none(UserDm.user == user, UserDm.channel_type == event.channel)
            if dm is None:
                UserDm.create(user=user, channel_type=event.channel, platform_id=event.chat_id)
            elif dm.platform_id != event.chat_id:
                UserDm.update(platform_id=event.chat_id).where(UserDm.id == dm.id).execute()
    except peewee.IntegrityError:  # the same person's concurrent message recorded it first
        pass
    lookups.forget()


def resolve_chat(event: InboundEvent) -> MessagingGroup | None:
    """The chat's messaging group; an unknown one is created only when creates_chat() says so."""
    mg = lookups.chat(event.channel, event.chat_id)
    if mg is not None:
        if not mg.name and event.chat_name:
            MessagingGroup.update(name=event.chat_name).where(MessagingGroup.id == mg.id).execute()
            mg.name = event.chat_name
        return mg
    if not creates_chat(event.kind, event.mentioned):
        return None
    name = event.chat_name or (event.sender_name if event.kind == "dm" else None)
    try:
        with database.atomic():
            return MessagingGroup.create(channel_type=event.channel, platform_id=event.chat_id,
                                         kind=event.kind, name=name)
    except peewee.IntegrityError:  # a concurrent message created it
        return MessagingGroup.get(MessagingGroup.channel_type == event.channel,
                                  MessagingGroup.platform_id == event.chat_id)


def get_session(settings, wiring: Wiring, mg: MessagingGroup, thread: str, create: bool) -> Session | None:
    session = lookups.session(wiring.agent_group_id, mg.id, thread)
    if session is None and create:
        try:
            with database.atomic():
                session = Session.create(id=store.new_session_id(), agent_group=wiring.agent_group_id,
                                         messaging_group=mg.id, thread_id=thread)
        except peewee.IntegrityError:  # created by a concurrent request a moment ago
            session = Session.get(Session.agent_group == wiring.agent_group_id, Session.messaging_group == mg.id,
                                  Session.thread_id == thread)
    return session


def session_dir(settings, session: Session):
    return store.session_path(settings.sessions_dir, session.agent_group.folder, session.id)


def _already_written(path, message_id: str) -> bool:
    db = store.inbound_db(path)
    if not db.exists():
        return False
    conn = schema.connect(db, readonly=True)
    try:
        return conn.execute("SELECT 1 FROM messages_in WHERE id = ?", (message_id,)).fetchone() is not None
    finally:
        conn.close()


def replay(stored: dict, settings, wake) -> RouteResult:
    """Route a stored event again (after an approval), with its original time; no dedup."""
    return route(event_from_json(stored), settings, wake=wake, replay=True)


def route(event: InboundEvent, settings, wake, *, replay: bool = False, accepted: bool = False) -> RouteResult:
    """Route one inbound event (counted in nanoclaw_messages_in_total by its outcome)."""
    result = _route(event, settings, wake, replay=replay, accepted=accepted)
    metrics.MESSAGES_IN.labels(event.channel, *outcome_of(result)).inc()
    return result


def outcome_of(result: RouteResult) -> tuple[str, str]:
    """(outcome, reason) for the counter: written | handled | dropped | duplicate | ignored."""
    if result.duplicate:
        return "duplicate", ""
    if result.dropped:
        return "dropped", result.dropped
    if result.handled:
        return "handled", result.handled
    return ("written", "") if result.written else ("ignored", "")


def _route(event: InboundEvent, settings, wake, *, replay: bool = False, accepted: bool = False) -> RouteResult:
    """Route one inbound event. `wake(session)` is called for each session given a trigger.
    replay=True: an approved message routed again (it was recorded for dedup the first time);
    accepted=True: the webhook intake recorded it for dedup already (nanoclaw/intake.py)."""
    if event.from_self:
        return RouteResult(dropped="own_message")
    if not (replay or accepted) and dedup.record(event.channel, event.event_id) is None:
        return RouteResult(duplicate=True)
    remember_dm(event)
    if not replay:
        for gate in gates("before"):
            handled = gate(event, settings, wake)
            if handled is not None:
                lookups.forget()  # the gate acted (it may have made an agent and wired a chat)
                return handled
    mg = resolve_chat(event)
    if mg is None:
        return drop(event, "no_agent_wired", keep_content=False)
    if mg.denied_at is not None:
        return drop(event, "denied_channel", keep_content=False)
    wirings = lookups.wirings(mg.id)
    if not wirings:
        for gate in gates("unwired") if creates_chat(event.kind, event.mentioned) else ():  # addressed only
            handled = gate(event, mg, settings, wake)
            if handled is not None:
                lookups.forget()
                return handled
        return drop(event, "no_agent_wired", keep_content=False)
    return _fan_out(event, mg, wirings, settings, wake, replay)


def _fan_out(event: InboundEvent, mg: MessagingGroup, wirings: list[Wiring], settings, wake, replay: bool
             ) -> RouteResult:
    result = RouteResult()
    thread_id = thread_of(mg.kind, event.thread_id, event.thread_root)
    thread = session_thread(mg.kind, thread_id)
    target = store.Target(event.channel, event.chat_id, thread_id)
    message_id = f"{event.channel}:{event.event_id}"
    command = commands.parse(event.text)
    refused_sender = refused_command = None
    asked = False
    files = InboxFiles(event, settings)  # downloaded once, on first use, copied into each session
    named = addressed(event.text, {w.id: w.agent_group.name for w in wirings}) if len(wirings) > 1 else set()
    for wiring in wirings:
        known = is_known(event.user_id, wiring.agent_group_id)
        admitted, reason = sender_admitted(mg.unknown_sender_policy, known)
        existing = get_session(settings, wiring, mg, thread, create=False)
        engaged = engages(wiring.engage_mode, wiring.engage_pattern, text=event.text, mentioned=event.mentioned,
                          is_dm=mg.kind == "dm", sticky_session=is_sticky(existing))
        if named and wiring.id not in named:
            engaged = False  # another agent of this chat was addressed by name
        if not admitted:
            if not asked and asks_approval(mg.unknown_sender_policy, engaged, wiring.ignored_message_policy,
                                           event.sender_is_bot):
                asked = True  # one card per message, for the first agent that would have used it
                for gate in gates("unknown_sender"):
                    gate(event, mg, wiring, settings)
            refused_sender = refused_sender or reason
            continue  # a refused sender's message is never accumulated either
        if wiring.sender_scope == "known" and not known:
            continue
        if command is not None:
            verdict = commands.verdict(command, is_owner_or_admin(event.user_id, wiring.agent_group_id))
            if not verdict.allowed:
                refused_command = refused_command or (verdict.reply if engaged else None)
                continue  # never written, not even as context
        if not engaged and wiring.ignored_message_policy == "drop":
            continue
        session = existing or get_session(settings, wiring, mg, thread, create=True)
        path = session_dir(settings, session)
        if not store.inbound_db(path).exists():
            store.prepare(path, target)
        elif replay and _already_written(path, message_id):
            continue  # this agent had it already (it knew the sender); do not wake it again
        content = event.content()
        if command in commands.ADMIN_ONLY:
            content["command"] = command  # for the runner: act on the conversation, not a chat line
        if event.attachments:
            content["attachments"] = files.save_into(path)
        store.write_message(path, content=content, target=target, trigger=engaged,
                            timestamp=event.timestamp, message_id=message_id)
        if engaged:
            metrics.mark_awaiting(settings.data_dir, session.agent_group.folder, time.time())
        now = utcnow()
        if not session.last_active_at or (now - session.last_active_at).total_seconds() >= ACTIVITY_RESOLUTION_S:
            lookups.touch_session(session.id, now)  # a burst of messages stamps it once a second, not each time
            session.last_active_at = now
        if engaged and session.engaged_at is None:
            lookups.mark_engaged(session, now)
        result.written.append((session.agent_group.folder, session.id, engaged))
        if engaged:
            wake(session)
    if not result.written:
        if refused_command:
            tell(event, settings, refused_command)
            return drop(event, "command_refused")
        return drop(event, refused_sender or "no_agent_engaged")
    return result
