"""A direct chat that grew into a room (Matrix calls a room of two a DM; the owner then invites Bob).

The chat's kind was fixed when it was first seen, and a DM carries its person's private reach (their
memory, their history across chats, the resumed SDK transcript of that private conversation). Before the
first message of the grown room reaches a sandbox: the chat takes its new kind (one way: a room that
shrinks again stays a room until the owner wires it again), every session of the DM is closed and its
sandbox stopped (its SDK session is never resumed), its wirings take the new kind's engage rule, and the
room is told once why. The message then starts a new session of the new kind, with the chat's reach.
`has_grown` is the decision; `regrow` the effects.
"""
from __future__ import annotations

import logging

from ..db import database
from ..models import MessagingGroup, Session, Wiring, audit
from . import lookups
from .wiring import KIND_DEFAULTS

log = logging.getLogger("nanoclaw.router")

TOLD = ("This room has more people in it now, so I have started a fresh conversation here: what was said "
        "privately before, and the private memory that came with it, stay out of it. Mention me to talk to me; "
        "the owner can wire the room again to change that.")


def has_grown(recorded_kind: str, event_kind: str) -> bool:
    """A chat recorded as a DM whose message says it is now a room (pure)."""
    return recorded_kind == "dm" and event_kind in ("group", "thread")


def regrow(mg: MessagingGroup, event, wake, tell) -> MessagingGroup:
    """The effects; returns the chat as it is now. Only the first message to see the change acts."""
    with database.atomic():
        if MessagingGroup.update(kind=event.kind).where(MessagingGroup.id == mg.id,
                                                        MessagingGroup.kind == "dm").execute() != 1:
            lookups.forget()
            return MessagingGroup.get_by_id(mg.id)
        closed = list(Session.select().where(Session.messaging_group == mg.id, Session.status == "active"))
        if closed:
            Session.update(status="closed").where(Session.id.in_([s.id for s in closed])).execute()
        engage, pattern = KIND_DEFAULTS[event.kind]
        Wiring.update(engage_mode=engage, engage_pattern=pattern).where(Wiring.messaging_group == mg.id).execute()
        audit("system", "chat.grown", f"{mg.channel_type}:{mg.platform_id}", was="dm", now=event.kind,
              closed=[s.id for s in closed], first_other=event.user_id)
    lookups.forget()
    manager = getattr(wake, "manager", None)
    for session in closed:
        if manager is not None:
            try:
                manager.stop(session.agent_group.folder, session.id)
            except Exception as exc:  # noqa: BLE001 - closed all the same: nothing new reaches it
                log.warning("could not stop the sandbox of %s/%s: %s", session.agent_group.folder, session.id, exc)
    log.warning("%s:%s was a DM and now has more people: %d session(s) closed, a new %s session starts",
                mg.channel_type, mg.platform_id, len(closed), event.kind)
    tell(event, TOLD)
    return MessagingGroup.get_by_id(mg.id)
