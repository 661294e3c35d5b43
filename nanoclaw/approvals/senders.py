"""Unknown senders: a stranger writes in a wired chat under `request_approval` → a card
`nsa-<token>:allow|deny` to the approver; allow makes them a member and replays their message."""
from __future__ import annotations

import logging

import peewee

from ..db import database
from ..channels.events import event_to_json
from ..inbound import router
from ..models import AgentGroup, MessagingGroup, PendingSenderApproval, Wiring, audit
from .actions import NotAllowed, register_action
from .common import (add_member, clicked_row, display, earlier_decision, edit_card, excerpt, expire, expired,
                     may_decide, person, pick_approver, send_card, where)
from .pending import PendingItem, register_pending
from ..channels.base import Card

log = logging.getLogger("nanoclaw.approvals")


def sender_card(row: PendingSenderApproval) -> Card:
    mg, agent = row.messaging_group, row.agent_group
    who, place = person(row.sender_name, row.sender_id), where(mg.kind, mg.channel_type, mg.name, mg.platform_id)
    return Card("New sender", f"{who} wants to talk to {agent.name} {place} — allow?\n\n"
                              f"Their message: “{excerpt(row.original_message.get('text'))}”",
                (("✅ Allow", f"nsa-{row.token}:allow"), ("🚫 Deny", f"nsa-{row.token}:deny")))


SENDER_VERBS = {"approval.sender.allow": "allowed", "approval.sender.deny": "denied",
                "approval.sender.expire": "expired"}


@router.register_gate("unknown_sender")
def ask_about_sender(event, mg: MessagingGroup, wiring: Wiring, settings) -> None:
    """A stranger under request_approval: one card per (chat, sender) while it is pending."""
    waiting = PendingSenderApproval.get_or_none(PendingSenderApproval.messaging_group == mg,
                                                PendingSenderApproval.sender_id == event.user_id)
    if waiting is not None and expired(waiting, settings):
        expire(waiting, settings)  # too old: this message asks again
    elif waiting is not None:
        log.info("%s in %s:%s is already waiting for approval; message dropped", event.user_id,
                 mg.channel_type, mg.platform_id)
        return
    agent = wiring.agent_group
    chosen = pick_approver(agent.id, event.channel)
    if chosen is None:
        log.warning("nobody can approve %s in %s:%s for %s (no owner or admin with a reachable DM); dropped",
                    event.user_id, mg.channel_type, mg.platform_id, agent.folder)
        return
    approver, dm = chosen
    try:
        with database.atomic():
            row = PendingSenderApproval.create(messaging_group=mg, agent_group=agent, sender_id=event.user_id,
                                               sender_name=event.sender_name,
                                               original_message=event_to_json(event),
                                               approver_user_id=approver, card_channel=dm.channel_type,
                                               card_chat_id=dm.platform_id)
    except peewee.IntegrityError:  # a concurrent message from the same stranger asked already
        return
    try:
        message_id = send_card(settings, dm, sender_card(row))
    except Exception as exc:
        log.error("could not send the approval card for %s to %s: %s; nothing is pending", event.user_id,
                  approver, exc)
        row.delete_instance()
        return
    PendingSenderApproval.update(card_message_id=message_id).where(PendingSenderApproval.id == row.id).execute()
    audit("router", "approval.sender.request", f"nsa-{row.token}", sender=event.user_id, agent=agent.folder,
          chat=f"{mg.channel_type}:{mg.platform_id}", approver=approver)


@register_action("nsa")
def decide_sender(action, ident: str, value: str, settings, wake) -> str:
    row, answer = clicked_row(PendingSenderApproval, "nsa", SENDER_VERBS, ident, action, settings)
    if row is None:
        return answer
    if value not in ("allow", "deny"):
        return "Unknown choice."
    if not may_decide(action.user_id, row.approver_user_id, row.agent_group_id):
        raise NotAllowed(f"Only {display(row.approver_user_id)} or an admin can decide this.")
    if PendingSenderApproval.delete().where(PendingSenderApproval.id == row.id).execute() != 1:
        return earlier_decision(f"nsa-{ident}", SENDER_VERBS)  # another click won a moment ago
    mg, agent = row.messaging_group, row.agent_group
    who, place = person(row.sender_name, row.sender_id), where(mg.kind, mg.channel_type, mg.name, mg.platform_id)
    decider = display(action.user_id)
    if value == "allow":
        add_member(row.sender_id, row.sender_name, agent.id)
    audit(action.user_id, f"approval.sender.{value}", f"nsa-{ident}", sender=row.sender_id, agent=agent.folder,
          chat=f"{mg.channel_type}:{mg.platform_id}")
    if value == "allow":
        edit_card(settings, row, f"✅ Allowed by {decider}: {who} can now talk to {agent.name} {place}.")
        router.replay(row.original_message, settings, wake)
        return f"Allowed: {row.sender_name or row.sender_id} can talk to {agent.name} now."
    edit_card(settings, row, f"🚫 Denied by {decider}: {who} may not talk to {agent.name} {place}.")
    return f"Denied: {row.sender_name or row.sender_id} was not let in."


# --- the operator page's "Waiting on you" ------------------------------------------------------

@register_pending("sender_approvals")
def sender_approvals(settings, user_id: str):
    rows = (PendingSenderApproval.select(PendingSenderApproval, MessagingGroup, AgentGroup)
            .join(MessagingGroup).switch(PendingSenderApproval).join(AgentGroup))
    for row in rows:
        if expired(row, settings):
            continue  # the housekeeping job drops it and edits its card
        if not may_decide(user_id, row.approver_user_id, row.agent_group_id):
            continue
        mg, agent = row.messaging_group, row.agent_group
        text = (row.original_message or {}).get("text")
        yield PendingItem(
            key=f"nsa-{row.token}", kind="New sender", agent_folder=agent.folder, created_at=row.created_at,
            title=f"{person(row.sender_name, row.sender_id)} wants to talk to {agent.name}",
            body=f"Their message: “{excerpt(text)}”" if text else "",
            details=(("Where", where(mg.kind, mg.channel_type, mg.name, mg.platform_id)),
                     ("Asked", display(row.approver_user_id))),
            buttons=(("✅ Allow", f"nsa-{row.token}:allow"), ("🚫 Deny", f"nsa-{row.token}:deny")))
