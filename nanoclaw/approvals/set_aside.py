"""Events a listener set aside (inbound/set_aside.py), told to the owner on the page's "Waiting on you":
what came, from where, why it was not taken; "Dismiss" once seen. Owners only: a payload can be anyone's
words from any chat."""
from __future__ import annotations

from .actions import NotAllowed, register_action
from .pending import PendingItem, register_pending
from ..inbound import lookups
from ..inbound.set_aside import SetAsideEvent, dismiss, open_ones

PREFIX = "nse"


@register_pending("set_aside_events")
def set_aside_items(settings, user_id: str):
    if not lookups.is_owner(user_id):
        return
    for row in open_ones():
        yield PendingItem(
            key=f"{PREFIX}-{row.id}", kind="Set aside", created_at=row.set_aside_at,
            title=f"A {row.channel} event was not answered",
            body=f"The web program refused it {row.reason}. It is kept for the bug report; the messages "
                 f"after it were answered.",
            details=(("Event", row.event_key), ("Payload", row.payload[:300])),
            buttons=(("Dismiss", f"{PREFIX}-{row.id}:dismiss"),))


@register_action(PREFIX)
def decide(action, ident: str, value: str, settings, wake) -> str:
    if not lookups.is_owner(action.user_id):
        raise NotAllowed("Only an owner can dismiss a set-aside event.")
    if value != "dismiss" or not ident.isdigit():
        return "Unknown choice."
    return "Dismissed." if dismiss(int(ident)) else "Already dismissed."


__all__ = ["SetAsideEvent", "decide", "set_aside_items"]
