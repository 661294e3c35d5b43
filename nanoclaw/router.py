"""The routing pipeline: chat → sender gate → wirings (fan-out) → engage → session → write → wake.

The decisions are pure functions (engages, sender_admitted, session_thread) that tests
call directly; route() applies them and does the writes.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

import peewee

from .channels.base import InboundEvent
from .db import database
from .models import (AgentGroupMember, DroppedMessage, InboundEvent as InboundEventRow, MessagingGroup,
                     Session, UserRole, Wiring, utcnow)
from .sessions import store

log = logging.getLogger("nanoclaw.router")


# --- pure decisions --------------------------------------------------------------------------

def engages(engage_mode: str, engage_pattern: str | None, *, text: str, mentioned: bool, is_dm: bool,
            sticky_session: bool) -> bool:
    """Does this wiring engage on this message?"""
    if engage_mode == "pattern":
        try:
            return re.search(engage_pattern or ".", text or "", re.S) is not None
        except re.error:
            return False
    direct = mentioned or is_dm
    if engage_mode == "mention":
        return direct
    if engage_mode == "mention-sticky":
        return direct or sticky_session
    return False


def sender_admitted(policy: str, known: bool) -> tuple[bool, str | None]:
    """The chat's unknown-sender gate: (admitted, drop reason)."""
    if known or policy == "public":
        return True, None
    return False, f"unknown_sender_{policy}"


def session_thread(kind: str, thread_id: str | None) -> str:
    """Threads of a thread-capable chat get sessions of their own; elsewhere one per chat."""
    return (thread_id or "") if kind == "thread" else ""


# --- effects ---------------------------------------------------------------------------------

@dataclass
class RouteResult:
    duplicate: bool = False
    written: list[tuple[str, str, bool]] = field(default_factory=list)  # (folder, session id, trigger)
    dropped: str | None = None


def is_known(user_id: str, agent_group_id: int) -> bool:
    """Owner, admin (global or of this agent group), or member."""
    if UserRole.select().where(UserRole.user == user_id, (UserRole.role == "owner") |
                               ((UserRole.role == "admin") & (UserRole.agent_group.is_null() |
                                                              (UserRole.agent_group == agent_group_id)))).exists():
        return True
    return AgentGroupMember.select().where(AgentGroupMember.user == user_id,
                                           AgentGroupMember.agent_group == agent_group_id).exists()


def record_event(channel: str, event_id: str) -> bool:
    """Dedup by (channel, platform event id). False if it was seen before."""
    try:
        with database.atomic():
            InboundEventRow.create(channel=channel, event_id=event_id)
        return True
    except peewee.IntegrityError:
        return False


def drop(event: InboundEvent, reason: str, keep_content: bool = True) -> RouteResult:
    DroppedMessage.create(channel_type=event.channel, platform_id=event.chat_id, sender_id=event.user_id,
                          reason=reason, content=event.text if keep_content else None)
    log.info("dropped %s message in %s:%s from %s: %s", event.channel, event.channel, event.chat_id,
             event.user_id, reason)
    return RouteResult(dropped=reason)


def get_session(settings, wiring: Wiring, mg: MessagingGroup, thread: str, create: bool) -> Session | None:
    session = Session.get_or_none(Session.agent_group == wiring.agent_group_id, Session.messaging_group == mg.id,
                                  Session.thread_id == thread)
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


def route(event: InboundEvent, settings, wake=None) -> RouteResult:
    """Route one inbound event. `wake(session)` is called for each session given a trigger."""
    if event.from_self:
        return RouteResult(dropped="own_message")
    if not record_event(event.channel, event.event_id):
        return RouteResult(duplicate=True)
    mg = MessagingGroup.get_or_none(MessagingGroup.channel_type == event.channel,
                                    MessagingGroup.platform_id == event.chat_id)
    if mg is None:
        return drop(event, "no_agent_wired", keep_content=False)
    if mg.denied_at is not None:
        return drop(event, "denied_channel", keep_content=False)
    wirings = list(Wiring.select().where(Wiring.messaging_group == mg).order_by(Wiring.priority.desc(), Wiring.id))
    if not wirings:
        return drop(event, "no_agent_wired", keep_content=False)

    result = RouteResult()
    thread = session_thread(mg.kind, event.thread_id)
    target = store.Target(event.channel, event.chat_id, event.thread_id)
    refused_sender = None
    for wiring in wirings:
        known = is_known(event.user_id, wiring.agent_group_id)
        admitted, reason = sender_admitted(mg.unknown_sender_policy, known)
        if not admitted:
            refused_sender = reason
            continue
        if wiring.sender_scope == "known" and not known:
            continue
        existing = get_session(settings, wiring, mg, thread, create=False)
        engaged = engages(wiring.engage_mode, wiring.engage_pattern, text=event.text, mentioned=event.mentioned,
                          is_dm=mg.kind == "dm", sticky_session=existing is not None and existing.status == "active")
        if not engaged and wiring.ignored_message_policy == "drop":
            continue
        session = existing or get_session(settings, wiring, mg, thread, create=True)
        path = session_dir(settings, session)
        if not (path / store.schema.INBOUND).exists():
            store.prepare(path, target)
        store.write_message(path, content=event.content(), target=target, trigger=engaged,
                            timestamp=event.timestamp, message_id=f"{event.channel}:{event.event_id}")
        Session.update(last_active_at=utcnow()).where(Session.id == session.id).execute()
        result.written.append((session.agent_group.folder, session.id, engaged))
        if engaged and wake is not None:
            wake(session)
    if not result.written:
        return drop(event, refused_sender or "no_agent_engaged")
    return result
