"""The pending items of the approval and question capabilities, for "Waiting on you".

Each item carries exactly the buttons of its chat card (same action ids), so a decision on
the page runs the capability's own handler and the first answer wins either way. Only items
the user may decide are listed (the handlers check again). New capabilities register their
own providers with nanoclaw.pending.register_pending; these live here only because the
approval modules were written before the registry existed.
"""
from __future__ import annotations

from datetime import timezone
from zoneinfo import ZoneInfo

from ..models import (AgentGroup, MessagingGroup, PendingChannelApproval, PendingQuestion, PendingSenderApproval,
                      Session, utcnow)
from ..pending import FormField, ItemForm, PendingItem, register_pending


@register_pending("sender_approvals")
def sender_approvals(settings, user_id: str):
    from .. import approvals
    rows = (PendingSenderApproval.select(PendingSenderApproval, MessagingGroup, AgentGroup)
            .join(MessagingGroup).switch(PendingSenderApproval).join(AgentGroup))
    for row in rows:
        if approvals.expired(row, settings):
            continue  # the housekeeping job drops it and edits its card
        if not approvals.may_decide(user_id, row.approver_user_id, row.agent_group_id):
            continue
        mg, agent = row.messaging_group, row.agent_group
        text = (row.original_message or {}).get("text")
        yield PendingItem(
            key=f"nsa-{row.id}", kind="New sender", agent_folder=agent.folder, created_at=row.created_at,
            title=f"{approvals.person(row.sender_name, row.sender_id)} wants to talk to {agent.name}",
            body=f"Their message: “{approvals.excerpt(text)}”" if text else "",
            details=(("Where", approvals.where(mg.kind, mg.channel_type, mg.name, mg.platform_id)),
                     ("Asked", approvals.display(row.approver_user_id))),
            buttons=(("✅ Allow", f"nsa-{row.id}:allow"), ("🚫 Deny", f"nsa-{row.id}:deny")))


def create_form(row) -> ItemForm:
    """Name the new agent right here (the chat card asks for it in a DM instead)."""
    return ItemForm("nca.create", str(row.id), "➕ Create a new agent for this chat", "Create and connect",
                    (FormField("name", "Name", hint="what the agent is called, e.g. Lab Helper", required=True),
                     FormField("folder", "Folder (optional)",
                               hint="leave empty to use the name; letters, digits, '-' and '_' are kept")),
                    preview="folder")


@register_pending("channel_approvals")
def channel_approvals(settings, user_id: str):
    from .. import approvals
    agents = None
    for row in PendingChannelApproval.select(PendingChannelApproval, MessagingGroup).join(MessagingGroup):
        if approvals.expired(row, settings) or not approvals.may_decide(user_id, row.approver_user_id, None):
            continue
        mg = row.messaging_group
        text = (row.original_message or {}).get("text")
        place = approvals.where(mg.kind, mg.channel_type, mg.name, mg.platform_id)
        if row.state == "naming":
            buttons = ()
            body = (f"Waiting for {approvals.display(row.approver_user_id)} to reply with the new agent's name "
                    "in their DM, or name it here.")
        else:
            if agents is None:
                agents = list(AgentGroup.select().order_by(AgentGroup.id))
            buttons = tuple((a.name, f"nca-{row.id}:{approvals.agent_value(a)}") for a in agents)
            buttons += (("Ignore", f"nca-{row.id}:ignore"),)
            body = f"Their message: “{approvals.excerpt(text)}”" if text else ""
        yield PendingItem(
            key=f"nca-{row.id}", kind="New chat", created_at=row.updated_at or row.created_at,
            title=f"{approvals.person(row.sender_name, row.sender_id)} is writing {place}; no agent answers there",
            body=body, details=(("Asked", approvals.display(row.approver_user_id)),), buttons=buttons,
            forms=(create_form(row),))


@register_pending("questions")
def questions(settings, user_id: str):
    from .. import questions as q
    rows = (PendingQuestion.select(PendingQuestion, Session).join(Session)
            .where(PendingQuestion.answered_at.is_null(), PendingQuestion.expires_at > utcnow()))
    for pq in rows:
        if not q.may_answer(user_id, pq.session):
            continue
        card = q.card_for(pq)
        folder = pq.session.agent_group.folder
        yield PendingItem(key=f"ncq-{pq.id}", kind="Question", agent_folder=folder, created_at=pq.created_at,
                          title=card.title, body=card.body, buttons=card.buttons,
                          details=(("Asked in", f"{pq.channel_type}:{pq.platform_id}"),
                                   ("Open until", local(settings, pq.expires_at))))


def local(settings, naive_utc) -> str:
    return naive_utc.replace(tzinfo=timezone.utc).astimezone(ZoneInfo(settings.timezone)).strftime("%Y-%m-%d %H:%M")
