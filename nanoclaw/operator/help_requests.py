"""Help requests: the agent's ask_operator(text) → a help_requests row and a card for the owner →
the owner's reply (a chat reply to the card, or the page's reply box) → an `answer` row in the
session's inbound.db.

The tool waits up to 60 s for that row (content.help_ref); a reply that comes later is a normal
triggering message, so it wakes the agent and becomes its next message. The card's one button,
`nhr-<id>:dismiss`, closes the request without an answer (the agent is told so). The first answer
wins; only the approver, an owner or an admin may answer.
"""
from __future__ import annotations

import logging
from pathlib import Path

import peewee

from ..inbound import router
from ..approvals.actions import NOT_HERE, NotAllowed, on_card, register_action
from ..approvals.common import display, excerpt, may_decide
from ..channels.base import Card, DeliveryError
from ..db import database
from ..outbound.delivery import register_op
from ..models import HelpRequest, audit, utcnow
from ..approvals.pending import register_reply
from .common import card_place, connected, edit_card, replied_card, send_card, session_for, tell_agent

log = logging.getLogger("nanoclaw.operator.help")

PREFIX = "nhr"
MAX_ANSWER = 4000


def card_for(h: HelpRequest) -> Card:
    agent = h.agent_group
    return Card(f"{agent.name} needs help", f"{h.text}\n\n(Reply to this message to answer {agent.name}; "
                                            f"help request {h.ref})",
                (("Dismiss", f"{PREFIX}-{h.token}:dismiss"),))


def deliver_help_request(session_path: Path, row, settings) -> str | None:
    """System op "help_request": record it and show the owner its card (once)."""
    op = row.op
    ref, text = str(op.get("ref") or "")[:32], str(op.get("text") or "").strip()[:4000]
    if not ref or not text:
        raise DeliveryError("malformed help request (needs ref and text)", permanent=True)
    with connected():
        session = session_for(session_path)
        if session is None:
            raise DeliveryError(f"no session {session_path.name} for this help request", permanent=True)
        existing = HelpRequest.get_or_none(HelpRequest.session == session.id, HelpRequest.ref == ref)
        if existing is not None and (existing.card_message_id or existing.state != "open"):
            return existing.card_message_id
        approver, target = card_place(session, session_path)
        try:
            with database.atomic():
                h, _ = HelpRequest.get_or_create(session=session.id, ref=ref,
                                                 defaults=dict(agent_group=session.agent_group_id, text=text,
                                                               approver_user_id=approver))
        except peewee.IntegrityError:
            h = HelpRequest.get(HelpRequest.session == session.id, HelpRequest.ref == ref)
        audit(f"agent:{session.agent_group.folder}", "help.request", f"{PREFIX}-{h.token}", text=excerpt(text, 500),
              approver=approver)
        if target is None:
            log.warning("help request %s of %s: nobody to show it to; it waits on the page", h.id,
                        session.agent_group.folder)
            return None
        # where the card goes is recorded first: a click made before the send returns still counts
        HelpRequest.update(card_channel=target.channel_type, card_chat_id=target.platform_id).where(
            HelpRequest.id == h.id).execute()
        message_id = send_card(settings, target, card_for(h))
        HelpRequest.update(card_message_id=message_id).where(HelpRequest.id == h.id).execute()
    return message_id


register_op("help_request", deliver_help_request)


def answer(ident: str, text: str | None, user_id: str, settings, wake) -> str:
    """Answer help request `ident` (None text = dismiss). Returns what to tell the person."""
    h = HelpRequest.get_or_none(HelpRequest.token == ident)
    if h is None:
        return "This help request no longer exists."
    if h.state == "expired":
        return "This request expired: nobody answered in time, and the agent was told."
    if h.state != "open":
        return f"Already answered by {display(h.answered_by)}."
    if not may_decide(user_id, h.approver_user_id or "", h.agent_group_id):
        raise NotAllowed(f"Only {display(h.approver_user_id) if h.approver_user_id else 'an owner'} or an admin "
                         "can answer this.")
    text = " ".join((text or "").split()) if text is not None else None
    if text is not None and not text:
        return "The answer is empty."
    text = text[:MAX_ANSWER] if text else None
    claimed = (HelpRequest.update(state="answered", answer=text, answered_by=user_id, answered_at=utcnow())
               .where(HelpRequest.id == h.id, HelpRequest.state == "open").execute())
    if claimed != 1:
        return f"Already answered by {display(HelpRequest.get_by_id(h.id).answered_by)}."
    who, agent = display(user_id), h.agent_group
    shown = text if text is not None else "(dismissed without an answer)"
    tell_agent(settings, h.session, f"(the operator's answer to your help request id={h.ref}: "
                                    f"“{excerpt(h.text, 120)}”) {shown}",
               message_id=f"help:{h.ref}", wake=wake, kind="answer", sender=who,
               extra={"sender_id": user_id, "help_ref": h.ref, "answer": shown})
    audit(user_id, "help.answer" if text is not None else "help.dismiss", f"{PREFIX}-{h.token}",
          agent=agent.folder, session=h.session_id)
    edit_card(settings, h, f"{agent.name} asked: {excerpt(h.text, 300)}\n\n"
                           + (f"↩ {who} answered: {text}" if text is not None else f"Dismissed by {who}."))
    return f"Sent to {agent.name}." if text is not None else f"Dismissed; {agent.name} was told."


@register_action(PREFIX)
def on_click(action, ident: str, value: str, settings, wake) -> str:
    h = HelpRequest.get_or_none(HelpRequest.token == ident)
    if h is not None and not on_card(action, h.card_channel, h.card_chat_id):
        raise NotAllowed(NOT_HERE)
    if value != "dismiss":
        return "Reply to the card with your answer."
    return answer(ident, None, action.user_id, settings, wake)


@register_reply(PREFIX)
def page_reply(user_id: str, ident: str, text: str, settings, wake) -> str:
    return answer(ident, text, user_id, settings, wake)


@router.register_gate("before")
def reply_to_card(event, settings, wake):
    """A chat reply to a help card is the answer."""
    h = replied_card(HelpRequest, event)
    if h is None:
        return None
    try:
        told = answer(h.token, event.text, event.user_id, settings, wake)
    except NotAllowed as exc:
        told = str(exc)
    router.tell(event, settings, told)
    return router.RouteResult(handled="help_reply")
