"""Cards an agent sends with buttons: its own buttons, never the host's.

The agent's `card` row says what each button reads and means (label, value). The host keeps that in
`agent_cards` and renders the buttons with ids of its own, `nac-<token>:<n>`, so nothing the agent
writes ever becomes an action id: a button labelled "Thanks" cannot approve the agent's own proposal.
A click is a message to that agent from the person who clicked ("[button] <label>", with the value
and the card), admitted like any message from them in that chat (the chat's stranger policy, the
wiring's sender scope); it decides nothing on the host. The card goes only to the session's chat or
one of its destinations.
"""
from __future__ import annotations

import logging
import uuid
from pathlib import Path

import peewee

from ..channels.base import Card, DeliveryError, get_adapter
from ..db import connected, database
from ..inbound import decide, lookups, router
from ..models import AgentCard, MessagingGroup, Session, User
from ..outbound.delivery import register_op
from ..sessions import store
from ..sessions.store import Target
from .actions import NOT_HERE, NotAllowed, on_card, register_action

log = logging.getLogger("nanoclaw.agent_cards")

PREFIX = "nac"
MAX_BUTTONS = 10
MAX_LABEL = 80
MAX_VALUE = 200


def clean_buttons(raw) -> list[tuple[str, str]]:
    """(label, value) pairs from the agent's row: strings only, clipped, at most MAX_BUTTONS. A
    button the agent gave an `action` (an old or forged row) keeps it only as its value."""
    buttons = []
    for b in raw if isinstance(raw, list) else []:
        if not isinstance(b, dict):
            continue
        label = " ".join(str(b.get("label") or "").split())[:MAX_LABEL]
        value = str(b.get("value") if b.get("value") is not None else b.get("action") or label)[:MAX_VALUE]
        if label:
            buttons.append((label, value))
    return buttons[:MAX_BUTTONS]


def click_text(title: str, label: str, value: str) -> str:
    """What the agent reads when someone clicks."""
    shown = f" (value: {value})" if value and value != label else ""
    card = f" on your card “{title}”" if title else ""
    return f"[button] {label}{shown}{card}"


def deliver_agent_card(session_path: Path, row, settings) -> str | None:
    """System op "card": show the agent's card where it may go; buttons get the host's own ids."""
    op = row.op
    if row.target not in store.allowed_targets(session_path):
        raise DeliveryError(f"target {row.target} is not this session's chat or destination", permanent=True)
    title, body = str(op.get("title") or "")[:200], str(op.get("body") or "")
    buttons = clean_buttons(op.get("buttons"))
    adapter = get_adapter(row.target.channel_type, settings)
    if not buttons:
        return adapter.send_card(row.target, Card(title, body))
    with connected():
        session = Session.get_or_none(Session.id == session_path.name)
        if session is None:
            raise DeliveryError(f"no session {session_path.name} for this card", permanent=True)
        try:
            with database.atomic():
                card, _ = AgentCard.get_or_create(
                    session=session.id, message_out_id=row.id,
                    defaults=dict(agent_group=session.agent_group_id, channel_type=row.target.channel_type,
                                  platform_id=row.target.platform_id, thread_id=row.target.thread_id,
                                  title=title, buttons=[list(b) for b in buttons]))
        except peewee.IntegrityError:
            card = AgentCard.get(AgentCard.session == session.id, AgentCard.message_out_id == row.id)
        if card.card_message_id:
            return card.card_message_id  # applied again after a restart: the card is out already
        message_id = adapter.send_card(row.target, Card(title, body, tuple(
            (label, f"{PREFIX}-{card.token}:{i}") for i, (label, _value) in enumerate(card.buttons))))
        AgentCard.update(card_message_id=message_id).where(AgentCard.id == card.id).execute()
    return message_id


register_op("card", deliver_agent_card)


def refusal(known: bool, policy: str, sender_scope: str) -> str | None:
    """Why this person may not click here (None: they may): the gates of a message from them."""
    admitted, _ = decide.sender_admitted(policy, known)
    if not admitted or (sender_scope == "known" and not known):
        return "Only people this agent knows can use its buttons here."
    return None


@register_action(PREFIX)
def clicked(action, ident: str, value: str, settings, wake) -> str | None:
    card = AgentCard.get_or_none(AgentCard.token == ident)
    if card is None:
        return "This card's buttons are no longer active."
    if not on_card(action, card.channel_type, card.platform_id):
        raise NotAllowed(NOT_HERE)
    if not value.isdigit() or int(value) >= len(card.buttons):
        return "Unknown choice."
    label, meaning = card.buttons[int(value)]
    mg = MessagingGroup.get_or_none(MessagingGroup.channel_type == card.channel_type,
                                    MessagingGroup.platform_id == card.platform_id)
    wiring = next((w for w in lookups.wirings(mg.id) if w.agent_group_id == card.agent_group_id), None) if mg else None
    if wiring is None:
        return "This agent no longer answers here."
    why_not = refusal(router.is_known(action.user_id, card.agent_group_id), mg.unknown_sender_policy,
                      wiring.sender_scope)
    if why_not:
        raise NotAllowed(why_not)
    session = card.session
    path = router.session_dir(settings, session)
    user = User.get_or_none(User.id == action.user_id)
    name = action.user_name or (user.name if user and user.name else None) or action.user_id
    store.write_message(path, target=Target(card.channel_type, card.platform_id, card.thread_id), trigger=True,
                        message_id=f"click:{card.token}:{action.event_id or uuid.uuid4().hex}",
                        content={"text": click_text(card.title, label, meaning), "sender": name,
                                 "sender_id": action.user_id, "message_id": action.message_id,
                                 "button": {"card": card.title, "label": label, "value": meaning}})
    wake(session)
    return None  # the agent answers in the chat; the platform only acknowledges the click
