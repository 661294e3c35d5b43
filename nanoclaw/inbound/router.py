"""The routing pipeline, top to bottom: record → gates → chat → facts → plan → write → wake.

One message goes through `route`: it is recorded for dedup, offered to the "before" gates, its
chat found (or made), then everything the decision needs is read at once (facts.py), the decision
made by pure functions (decide.py), and only then applied: sessions made, the message written to
each agent that takes it, the engaged ones woken.

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
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Callable

import peewee

from . import commands, dedup, decide, facts as facts_of, lookups, stopping
from .. import metrics
from ..channels.base import get_adapter
from ..channels.download import DEADLINE_S as DOWNLOAD_DEADLINE_S
from ..channels.events import InboundEvent, event_from_json
from ..db import database
from ..models import DroppedMessage, MessagingGroup, Session, User, UserDm, utcnow
from ..sessions import store
from .grown import grown_to, regrow
from .inbox import InboxFiles

log = logging.getLogger("nanoclaw.router")

GATE_STAGES = ("before", "unwired", "unknown_sender")
ACTIVITY_RESOLUTION_S = 1.0  # sessions.last_active_at is kept to the second
# Telegram sends an album as one update per item, usually within a second: each item waits this
# long after the latest one (sessions/store.write_message holds the earlier ones) so all arrive in one turn.
ALBUM_WAIT_S = 1.5
DOWNLOAD_S = DOWNLOAD_DEADLINE_S + 30  # the longest an item's files may take to arrive (asking, then downloading)
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


# After a message is written into a session: fn(event, session, path, message_id) (the history index).
_WRITTEN: list[Callable] = []


def on_written(fn: Callable) -> Callable:
    key = (fn.__module__, fn.__qualname__)
    _WRITTEN[:] = [f for f in _WRITTEN if (f.__module__, f.__qualname__) != key] + [fn]
    return fn


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


# --- the pipeline --------------------------------------------------------------------------------

def replay(stored: dict, settings, wake) -> RouteResult:
    """Route a stored event again (after an approval), with its original time; no dedup."""
    return route(event_from_json(stored), settings, wake, replay=True)


def route(event: InboundEvent, settings, wake, *, replay: bool = False, accepted: bool = False) -> RouteResult:
    """Route one inbound event (counted in nanoclaw_messages_in_total by its outcome). `wake(session)`
    is called for each session given a trigger. replay=True: an approved message routed again (it
    was recorded for dedup the first time); accepted=True: the webhook intake recorded it already."""
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


def _route(event: InboundEvent, settings, wake, *, replay: bool, accepted: bool) -> RouteResult:
    if event.from_self:
        return RouteResult(dropped="own_message")
    if not (replay or accepted) and dedup.record(event.channel, event.event_id) is None:
        return RouteResult(duplicate=True)
    remember_dm(event)
    if not replay:
        handled = _first_gate("before", event, settings, wake)
        if handled is not None:
            return handled
    # the chat: read, decide, act
    mg = lookups.chat(event.channel, event.chat_id)
    step = decide.chat_step(event.kind, event.mentioned, mg is not None, mg is not None and mg.denied_at is not None)
    if step == decide.CREATE:
        mg = create_chat(event)
    elif step != decide.USE:
        return drop(event, step, keep_content=False)
    elif not mg.name and event.chat_name:
        name_chat(mg, event.chat_name)
    grown = grown_to(mg.kind, event.kind, event.channel,
                     lookups.dm_user(event.channel, event.chat_id) if mg.kind == "dm" else None, event.user_id)
    if grown:  # a DM with a second person now: its private reach ends here
        mg = regrow(mg, event, grown, wake, lambda e, text: tell(e, settings, text))
    # the agents: read, decide, act
    thread_id = decide.thread_of(mg.kind, event.thread_id, event.thread_root)
    facts = facts_of.read(mg, event.user_id, thread_id, decide.session_thread(mg.kind, thread_id),
                          command=commands.parse(event.text) is not None)
    if not facts.agents:
        if decide.creates_chat(event.kind, event.mentioned):  # an addressed chat nobody answers in
            handled = _first_gate("unwired", event, settings, wake, mg)
            if handled is not None:
                return handled
        return drop(event, "no_agent_wired", keep_content=False)
    if commands.parse(event.text) in commands.HOST:
        handled = host_command(event, facts, settings)
        if handled is not None:
            return handled
    plan = decide.plan(facts, text=event.text, mentioned=event.mentioned, sender_is_bot=event.sender_is_bot)
    return act(event, facts, plan, settings, wake, replay)


def host_command(event: InboundEvent, facts: facts_of.Facts, settings) -> RouteResult | None:
    """/stop: the host's own, never written to a session. None: a stranger's, routed as any
    stranger's message (a card where the chat asks)."""
    if commands.for_another_bot(event.text, event.mentioned):
        return drop(event, "for_another_bot", keep_content=False)
    where = lambda session: session_dir(settings, session)  # noqa: E731
    plan = stopping.decide(facts, stopping.running_turns(facts, where), event.user_id,
                           facts.chat.unknown_sender_policy == "public")
    if plan.stranger:
        return None
    stopping.act(plan, where, lambda text: tell(event, settings, text))
    return RouteResult(handled="stop" if plan.stops else "stop_refused")


def _first_gate(stage: str, event, settings, wake, *args) -> RouteResult | None:
    for gate in gates(stage):
        handled = gate(event, *args, settings, wake)
        if handled is not None:
            lookups.forget()  # the gate acted (it may have made an agent and wired a chat)
            return handled
    return None


def act(event: InboundEvent, facts: facts_of.Facts, plan: decide.Plan, settings, wake, replay: bool
        ) -> RouteResult:
    """Apply the plan: ask about a stranger, make the sessions, write the message, wake."""
    if plan.ask_about is not None:
        for gate in gates("unknown_sender"):
            gate(event, facts.chat, plan.ask_about.wiring, settings)
    result = RouteResult()
    target = store.Target(event.channel, event.chat_id, facts.thread_id)
    message_id = f"{event.channel}:{event.event_id}"
    files = InboxFiles(event, settings)  # downloaded once, on first use, copied into each session
    for delivery in plan.deliveries:
        session = delivery.agent.session or new_session(delivery.agent.wiring, facts.chat, facts.thread)
        path = session_dir(settings, session)
        if not store.inbound_db(path).exists():
            store.prepare(path, target)
        elif replay and _already_written(path, message_id):
            continue  # this agent had it already (it knew the sender); do not wake it again
        content = event.content()
        if delivery.command:
            content["command"] = delivery.command  # for the runner: act on the conversation, not a chat line
        if event.attachments:
            if event.album:  # the album's items so far wait for this one however long it downloads
                store.hold_album(path, event.album, album_wait(DOWNLOAD_S))
            content["attachments"] = files.save_into(path)
        store.write_message(path, content=content, target=target, trigger=delivery.engaged,
                            timestamp=event.timestamp, message_id=message_id, album=event.album,
                            process_after=album_wait() if event.album else None)
        _stamp(session, delivery.engaged, settings)
        for hook in _WRITTEN:
            try:
                hook(event, session, path, message_id)
            except Exception as exc:  # noqa: BLE001 - the message is written; a hook's failure is logged
                log.warning("after writing %s into %s: %s", message_id, session.id, exc)
        result.written.append((session.agent_group.folder, session.id, delivery.engaged))
        if delivery.engaged:
            wake(session)
    if not result.written:
        if plan.refused_command:
            tell(event, settings, plan.refused_command)
        return drop(event, plan.drop_reason)
    return result


# --- effects ---------------------------------------------------------------------------------------

def album_wait(longer_s: float = 0.0) -> str:
    """When an album's items may be taken: ALBUM_WAIT_S (and longer_s) from now (UTC ISO,
    messages_in.process_after)."""
    return (utcnow() + timedelta(seconds=ALBUM_WAIT_S + longer_s)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _stamp(session: Session, engaged: bool, settings) -> None:
    if engaged:
        metrics.mark_awaiting(settings.data_dir, session.agent_group.folder, time.time())
    now = utcnow()
    if not session.last_active_at or (now - session.last_active_at).total_seconds() >= ACTIVITY_RESOLUTION_S:
        lookups.touch_session(session.id, now)  # a burst of messages stamps it once a second, not each time
        session.last_active_at = now
    if engaged and session.engaged_at is None:
        lookups.mark_engaged(session, now)


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
    if lookups.dm_user(event.channel, event.chat_id) not in (None, event.user_id):
        return  # someone else's direct chat: a second person there makes it a room (grown.py), never theirs
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


def create_chat(event: InboundEvent) -> MessagingGroup:
    name = event.chat_name or (event.sender_name if event.kind == "dm" else None)
    try:
        with database.atomic():
            return MessagingGroup.create(channel_type=event.channel, platform_id=event.chat_id,
                                         kind=event.kind, name=name)
    except peewee.IntegrityError:  # a concurrent message created it
        return MessagingGroup.get(MessagingGroup.channel_type == event.channel,
                                  MessagingGroup.platform_id == event.chat_id)


def name_chat(mg: MessagingGroup, name: str) -> None:
    """A chat known by id only gets the title the platform sent with this message."""
    MessagingGroup.update(name=name).where(MessagingGroup.id == mg.id).execute()
    mg.name = name


def new_session(wiring, mg: MessagingGroup, thread: str) -> Session:
    try:
        with database.atomic():
            Session.create(id=store.new_session_id(), agent_group=wiring.agent_group_id, messaging_group=mg.id,
                           thread_id=thread)
    except peewee.IntegrityError:  # created by a concurrent request a moment ago
        pass
    return lookups.session(wiring.agent_group_id, mg.id, thread)


def session_dir(settings, session: Session):
    return store.session_path(settings.sessions_dir, session.agent_group.folder, session.id)


def _already_written(path, message_id: str) -> bool:
    return store.message_exists(path, message_id)
