"""What help requests and proposals share: a DB connection on any thread, the session a system row
came from, where the owner's card goes, and telling the agent something."""
from __future__ import annotations

import logging
from pathlib import Path

from ..approvals.common import choose_approver, display, edit_card, owner_tier, pick_approver, send_card
from ..db import connected
from ..inbound import router
from ..models import Session
from ..sessions import store
from ..sessions.store import Target, routing_of

log = logging.getLogger("nanoclaw.operator")


def session_for(session_path: Path) -> Session | None:
    return Session.get_or_none(Session.id == session_path.name)


def replied_card(model, event):
    """The row of `model` (help request, proposal) whose chat card this message replies to, if any."""
    if event.reply_to is None or not event.reply_to.message_id:
        return None
    return (model.select().where(model.card_channel == event.channel, model.card_chat_id == event.chat_id,
                                 model.card_message_id == event.reply_to.message_id).first())


def card_place(session: Session, session_path: Path, owner_only: bool = False) -> tuple[str | None, Target | None]:
    """(approver user id, where the card goes): the approver's DM (approvals' rule: group admins,
    then admins, then owners; only owners for what only an owner may decide), else the agent's own
    chat, where only an owner or admin may decide."""
    home = routing_of(session_path)
    channel = home.channel_type if home else ""
    chosen = choose_approver(owner_tier(), channel) if owner_only else pick_approver(session.agent_group_id, channel)
    if chosen is not None:
        return chosen
    return None, home


def tell_agent(settings, session: Session, text: str, *, message_id: str, wake, kind: str = "system",
               extra: dict | None = None, sender: str = "System") -> None:
    """A message in the agent's inbound.db that wakes it: what the owner decided or answered."""
    path = router.session_dir(settings, session)
    store.write_message(path, content={"text": text, "sender": sender, **(extra or {})}, target=None,
                        kind=kind, trigger=True, message_id=message_id)
    wake(session)


__all__ = ["connected", "session_for", "routing_of", "card_place", "send_card", "edit_card", "tell_agent",
           "display"]
