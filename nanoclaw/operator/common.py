"""What help requests and proposals share: a DB connection on any thread, the session a system row
came from, where the owner's card goes, and telling the agent something."""
from __future__ import annotations

import logging
from contextlib import nullcontext
from pathlib import Path

from .. import router
from ..approvals import display, pick_approver
from ..channels.base import Card, get_adapter
from ..db import database
from ..models import Session
from ..sessions import session_schema as schema
from ..sessions import store
from ..sessions.store import Target

log = logging.getLogger("nanoclaw.operator")


def connected():
    """The delivery thread has no connection of its own; a request thread has one open."""
    return database.connection_context() if database.is_closed() else nullcontext()


def session_for(session_path: Path) -> Session | None:
    return Session.get_or_none(Session.id == session_path.name)


def routing_of(session_path: Path) -> Target | None:
    conn = schema.connect(session_path / schema.INBOUND, readonly=True)
    try:
        row = conn.execute("SELECT channel_type, platform_id, thread_id FROM routing").fetchone()
    finally:
        conn.close()
    return Target(*row) if row else None


def card_place(session: Session, session_path: Path) -> tuple[str | None, Target | None]:
    """(approver user id, where the card goes): the approver's DM (approvals' rule: group admins,
    then admins, then owners), else the agent's own chat, where only an owner or admin may decide."""
    home = routing_of(session_path)
    chosen = pick_approver(session.agent_group_id, home.channel_type if home else "")
    if chosen is not None:
        return chosen
    return None, home


def send_card(settings, target: Target, card: Card) -> str | None:
    return get_adapter(target.channel_type, settings).send_card(target, card)


def edit_card(settings, row, text: str) -> None:
    """Replace the card's text (dropping its buttons) to show the outcome; best effort."""
    if not row.card_message_id:  # decided a moment after the card went out: read where it went
        row = type(row).get_or_none(type(row).id == row.id) or row
    if not (row.card_channel and row.card_chat_id and row.card_message_id):
        return
    try:
        get_adapter(row.card_channel, settings).edit_text(Target(row.card_channel, row.card_chat_id),
                                                          row.card_message_id, text)
    except Exception as exc:
        log.warning("could not edit card %s: %s", row.card_message_id, exc)


_CURRENT = object()


def tell_agent(settings, session: Session, text: str, *, message_id: str, kind: str = "system",
               extra: dict | None = None, sender: str = "System", waker=_CURRENT) -> None:
    """A message in the agent's inbound.db that wakes it: what the owner decided or answered.
    waker: captured on the request thread when this runs on a worker (no app context there);
    without one, the background wake job starts a stopped sandbox within seconds."""
    path = router.session_dir(settings, session)
    store.write_message(path, content={"text": text, "sender": sender, **(extra or {})}, target=None,
                        kind=kind, trigger=True, message_id=message_id)
    wake = router.current_waker() if waker is _CURRENT else waker
    if wake is not None:
        wake(session)


__all__ = ["connected", "session_for", "routing_of", "card_place", "send_card", "edit_card", "tell_agent",
           "display"]
