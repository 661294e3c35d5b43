"""Help requests and proposals on the operator page's "Waiting on you" (nanoclaw.pending).

Each item carries its card's buttons (the same action ids), so deciding on the page runs the same
handler as the chat card and the first decision wins either way. A help request takes its answer
in the reply box. A proposal has no free reply box on the page (where "ok" would approve and any
other text reject): its Approve/Reject buttons, a "Reject with a reason" form whose reason the
agent is told, and a "Modify" form that changes it before the decision (proposals.modify: the
tool's checks, audited). A reply to the chat card keeps the chat's rule: a reason rejects it.
"""
from __future__ import annotations

from ..approvals.common import display, may_decide
from ..models import HelpRequest, PendingProposal
from ..approvals.pending import FormAnswer, FormField, ItemForm, PendingItem, register_form, register_pending
from . import checks, edit_form, help_requests, proposals

MODIFY = "npr.modify"
REJECT = "npr.reject"


@register_pending("help_requests")
def open_help_requests(settings, user_id: str):
    for h in HelpRequest.select().where(HelpRequest.state == "open"):
        if not may_decide(user_id, h.approver_user_id or "", h.agent_group_id):
            continue
        card = help_requests.card_for(h)
        yield PendingItem(key=f"{help_requests.PREFIX}-{h.token}", kind="Help request", title=card.title,
                          body=h.text, created_at=h.created_at, buttons=card.buttons,
                          agent_folder=h.agent_group.folder, reply_prefix=help_requests.PREFIX,
                          details=(("Asked", display(h.approver_user_id) if h.approver_user_id else "owners"),
                                   ("Request", h.ref)))


@register_pending("proposals")
def pending_proposals(settings, user_id: str):
    for p in PendingProposal.select().where(PendingProposal.state == "pending"):
        if not may_decide(user_id, p.approver_user_id or "", p.agent_group_id):
            continue
        card = proposals.card_for(settings, p)
        fields = edit_form.fields(p.kind, p.payload, p.reason)
        forms = (ItemForm(MODIFY, p.token, "✏️ Modify before deciding", "Save changes", fields),) * bool(fields)
        forms += (ItemForm(REJECT, p.token, "✖ Reject with a reason", "Reject", (
            FormField("reason", "Reason (the agent is told)", multiline=True, required=True,
                      hint="e.g. use the company mirror instead"),)),)
        yield PendingItem(key=f"{proposals.PREFIX}-{p.token}", kind=checks.KINDS.get(p.kind, "Proposal"),
                          title=card.title, body=card.body, created_at=p.created_at, buttons=card.buttons,
                          agent_folder=p.agent_group.folder, forms=forms, details=(("Proposal", p.ref),))


@register_form(MODIFY)
def modify_from_page(user_id: str, ident: str, values: dict[str, str], settings, wake) -> FormAnswer:
    p = PendingProposal.get_or_none(PendingProposal.token == ident)
    if p is None or p.kind not in edit_form.EDITABLE:
        return FormAnswer(False, "This proposal no longer exists." if p is None else "This kind cannot be modified.")
    payload, reason = edit_form.parse(p.kind, values)
    ok, message = proposals.modify(ident, payload, user_id, settings, reason=reason, why=values.get("why"))
    return FormAnswer(ok, message)


@register_form(REJECT)
def reject_from_page(user_id: str, ident: str, values: dict[str, str], settings, wake) -> FormAnswer:
    reason = " ".join((values.get("reason") or "").split())
    if not reason:
        return FormAnswer(False, "Say why it is rejected: the agent is told the reason.")
    p = PendingProposal.get_or_none(PendingProposal.token == ident)
    if p is None:
        return FormAnswer(False, "This proposal no longer exists.")
    was_pending = p.state == "pending"
    message = proposals.decide(ident, "reject", user_id, settings, wake, note=reason)
    p = PendingProposal.get_by_id(p.id)
    # decided before (here or in chat), or not theirs to decide: the message says which
    return FormAnswer(was_pending and p.state == "rejected" and p.decided_by == user_id, message)
