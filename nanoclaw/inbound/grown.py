"""A direct chat that grew into a room (Matrix calls a room of two a DM; the owner then invites Bob).

The chat's kind was fixed when it was first seen, and a DM carries its person's private reach (their
memory, their history across chats, the resumed SDK transcript of that private conversation). Before the
first message of the grown room reaches a sandbox: the chat takes its new kind (one way: a room that
shrinks again stays a room until the owner wires it again), every session of the DM is closed and its
sandbox stopped (its SDK session is never resumed), its wirings take the new kind's engage rule, and the
room is told once why. The message then starts a new session of the new kind, with the chat's reach.
`grown_to` is the decision, per message from the host's records (the kind the event carries, and the
sender against the DM's recorded person: a member count that lags or is missing cannot keep a second
person in a private session); `regrow` the effects.
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


ROOM_KIND = {"matrix": "thread"}  # what a grown DM becomes where the event does not say; else "group"


def grown_to(recorded_kind: str, event_kind: str, channel: str, dm_user: str | None, sender: str) -> str | None:
    """The kind a chat recorded as a DM has grown into, or None (pure): its message says it is a room now,
    or it comes from someone other than the person whose DM it is."""
    if recorded_kind != "dm":
        return None
    if event_kind in ("group", "thread"):
        return event_kind
    if dm_user is not None and sender != dm_user:
        return ROOM_KIND.get(channel, "group")
    return None


def regrow(mg: MessagingGroup, event, kind: str, wake, tell) -> MessagingGroup:
    """The effects; returns the chat as it is now. Only the first message to see the change acts."""
    with database.atomic():
        if MessagingGroup.update(kind=kind).where(MessagingGroup.id == mg.id,
                                                        MessagingGroup.kind == "dm").execute() != 1:
            lookups.forget()
            return MessagingGroup.get_by_id(mg.id)
        closed = list(Session.select().where(Session.messaging_group == mg.id, Session.status == "active"))
        for s in closed:  # its key is retired too, so the same thread in the room starts a new session
            Session.update(status="closed", thread_id=f"{s.thread_id}~dm-closed:{s.id}").where(Session.id == s.id).execute()
        engage, pattern = KIND_DEFAULTS[kind]
        Wiring.update(engage_mode=engage, engage_pattern=pattern).where(Wiring.messaging_group == mg.id).execute()
        audit("system", "chat.grown", f"{mg.channel_type}:{mg.platform_id}", was="dm", now=kind,
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
                mg.channel_type, mg.platform_id, len(closed), kind)
    tell(event, TOLD)
    return MessagingGroup.get_by_id(mg.id)
