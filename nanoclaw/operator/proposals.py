"""Proposals: an agent's propose_egress / propose_credential_route / install_packages /
add_mcp_server / create_agent row → a pending_proposals row and a card with its diff → the owner
approves or rejects (`npr-<id>:approve|reject`, a reply to the card, or the page) → applied, audited,
and the agent is told what changed.

- The host checks every proposal itself before the card (a refusal is told to the agent at once)
  and again right before applying it.
- create_agent is only queued for an admin's agent: one with an admin role scoped to it, or one
  that talks with an owner or admin in their DM. The host decides, not the tool.
- Only the chosen approver, an owner or an admin may decide; the first decision wins (the row moves
  out of 'pending' atomically); later clicks are told who decided.
- install_packages rebuilds an image (minutes): it is applied on a worker thread and the card says
  so meanwhile. Changes that need a restart stop the group's running sandboxes, tell each of their
  agents what changed, and wake them; the SDK conversation resumes.
"""
from __future__ import annotations

import logging
import threading
from pathlib import Path

import peewee

from ..approvals.actions import NOT_HERE, NotAllowed, on_card, register_action
from ..approvals.common import connect, display, may_decide
from ..channels.base import Card, DeliveryError
from ..db import database
from ..inbound import lookups, router
from ..inbound.decide import trigger_pattern
from ..inbound.lookups import is_admin_agent
from ..inbound.wiring import resolve_engage
from ..models import AgentGroup, AuditLog, PendingProposal, Session, Wiring, audit, utcnow
from ..outbound.delivery import register_op
from ..proposal_rules import RuleError
from ..sessions.store import Target
from . import checks, skill_proposals
from .apply import ApplyError, apply, current_state, docker_available
from .common import card_place, connected, edit_card, replied_card, send_card, session_for, tell_agent
from ..sessions.wake import NO_WAKE
from .restart import runtime_for, stop_group

log = logging.getLogger("nanoclaw.operator.proposals")

PREFIX = "npr"
SLOW_KINDS = ("install_packages",)
APPROVE_AND_WIRE = "approve_wire"
APPROVE_WORDS = ("approve", "approved", "yes", "ok", "okay", "allow", "go")
_workers: list[threading.Thread] = []


# --- who may ask for what ----------------------------------------------------------------------

# --- the card ----------------------------------------------------------------------------------

def delegated_secrets(agent: AgentGroup) -> list[str]:
    """Host secrets the owner gave this agent's admins to grant (container_config.admin_secrets)."""
    return list((agent.container_config or {}).get("admin_secrets", []))


def owner_only(p: PendingProposal) -> bool:
    return checks.owner_only(p.kind, p.payload, delegated_secrets(p.agent_group))


def card_text(p: PendingProposal, diff: list[str], changed: str = "") -> tuple[str, str]:
    agent = p.agent_group
    title = f"{agent.name} asks: {checks.summary(p.kind, p.payload)}"
    body = "\n".join([f"{checks.KINDS.get(p.kind, p.kind)} for agent {agent.name} ({agent.folder})", *diff]
                     + ([checks.owner_only_line(p.kind, p.payload)] if owner_only(p) else [])
                     + ([f"Why: {p.reason}"] if p.reason else [])
                     + ([f"Changed on the page: {changed}"] if changed else [])
                     + [f"(proposal {p.ref}; reply to this card with a reason to reject it)"])
    return title, body


def card_for(settings, p: PendingProposal) -> Card:
    state = current_state(settings, p.agent_group, p.kind, p.payload)
    title, body = card_text(p, checks.diff(p.kind, p.payload, state), owner_changes(p))
    key = f"{PREFIX}-{p.token}"
    buttons = [("✅ Approve", f"{key}:approve")]
    mg = p.session.messaging_group if p.session_id else None
    if p.kind == "create_agent" and mg is not None:  # and answer in the chat it was asked from
        buttons.append((f"✅ Approve and add to {chat_label(mg)}", f"{key}:{APPROVE_AND_WIRE}"))
    return Card(title, body, (*buttons, ("❌ Reject", f"{key}:reject")))


def chat_label(mg) -> str:
    return (mg.name or f"{mg.channel_type} {mg.platform_id}")[:40]


def wire_new_agent(p: PendingProposal, folder: str, user_id: str) -> str:
    """The agent just created answers in the chat its creation was asked from: with the chat's
    defaults when nobody else answers there, else only when addressed by its name (@Name), so the
    chat's agent and the new one do not both answer every message."""
    mg = p.session.messaging_group
    agent = AgentGroup.get(AgentGroup.folder == folder)
    others = Wiring.select().where(Wiring.messaging_group == mg.id, Wiring.agent_group != agent.id).exists()
    if not others:
        connect(mg, agent, user_id)
        return f"It answers in {chat_label(mg)}."
    values = dict(resolve_engage(mg.kind, "pattern", trigger_pattern(None, agent.name)).__dict__)
    with database.atomic():
        _, created = Wiring.get_or_create(messaging_group=mg, agent_group=agent, defaults=values)
        if created:
            audit(user_id, "wiring.create", f"{mg.channel_type}:{mg.platform_id}", agent=agent.folder, kind=mg.kind,
                  via="proposal", **values)
    lookups.forget()
    return f"It answers in {chat_label(mg)} when a message starts with @{agent.name}."



# --- the system op -----------------------------------------------------------------------------

def deliver_proposal(session_path: Path, row, settings) -> str | None:
    """System op "proposal": check it, record it, show the owner its card (once)."""
    op = row.op
    ref, kind = str(op.get("ref") or "")[:32], str(op.get("kind") or "")
    if not ref:
        raise DeliveryError("malformed proposal (no ref)", permanent=True)
    with connected():
        session = session_for(session_path)
        if session is None:
            raise DeliveryError(f"no session {session_path.name} for this proposal", permanent=True)
        existing = PendingProposal.get_or_none(PendingProposal.session == session.id, PendingProposal.ref == ref)
        if existing is not None and (existing.card_message_id or existing.state != "pending"):
            return existing.card_message_id  # applied again after a restart: the card is out already
        try:
            payload = checks.check_payload(kind, op.get("payload"))
            reason = checks.check_reason(op.get("reason"))
            if kind == "create_agent" and not is_admin_agent(session):
                raise RuleError("only an admin's agent may create agents")
            if kind == "install_packages" and payload["apt"] and (why := docker_available(settings)):
                raise RuleError(f"apt packages need the Docker runtime ({why}); npm and pip packages work here")
            if kind == "skill":  # the host reads the folder itself, or checks the source before any fetch
                payload = (skill_proposals.prepare(settings, session.agent_group, payload["folder"])
                           if payload.get("folder") else
                           {"source": str(skill_proposals.check_source(settings, payload["source"])[0])})
        except RuleError as exc:
            audit(f"agent:{session.agent_group.folder}", "proposal.refused", f"proposal:{ref}", kind=kind,
                  error=str(exc))
            tell_agent(settings, session, f"Your proposal id={ref} was refused by the host before reaching the "
                                          f"owner: {exc}", message_id=f"proposal:{ref}:refused",
                       wake=NO_WAKE)  # its sandbox runs: it wrote the proposal a moment ago
            return None
        only_owner = checks.owner_only(kind, payload, delegated_secrets(session.agent_group))
        approver, target = card_place(session, session_path, owner_only=only_owner)
        try:
            with database.atomic():
                p, _ = PendingProposal.get_or_create(
                    session=session.id, ref=ref,
                    defaults=dict(agent_group=session.agent_group_id, kind=kind, payload=payload, reason=reason,
                                  approver_user_id=approver))
        except peewee.IntegrityError:
            p = PendingProposal.get(PendingProposal.session == session.id, PendingProposal.ref == ref)
        card = card_for(settings, p)
        audit(f"agent:{session.agent_group.folder}", "proposal.request", f"{PREFIX}-{p.token}", kind=kind,
              summary=checks.summary(kind, payload), diff=card.body.splitlines()[1:-1], approver=approver)
        if target is None:
            log.warning("proposal %s of %s: nobody to show it to (no owner DM, no chat); it waits on the page",
                        p.id, session.agent_group.folder)
            return None
        # where the card goes is recorded first: a click made before the send returns still counts
        PendingProposal.update(card_channel=target.channel_type, card_chat_id=target.platform_id).where(
            PendingProposal.id == p.id).execute()
        message_id = send_card(settings, target, card)
        PendingProposal.update(card_message_id=message_id).where(PendingProposal.id == p.id).execute()
    return message_id


register_op("proposal", deliver_proposal)


# --- deciding ----------------------------------------------------------------------------------

def earlier(p: PendingProposal) -> str:
    if p.state == "expired":
        return "This proposal expired: nobody decided in time, and the agent was told."
    verb = {"approved": "approved", "rejected": "rejected", "failed": "approved (applying failed)",
            "applying": "approved (being applied)"}.get(p.state, p.state)
    return f"Already {verb} by {display(p.decided_by)}."


@register_action(PREFIX)
def on_click(action, ident: str, value: str, settings, wake) -> str:
    p = PendingProposal.get_or_none(PendingProposal.token == ident)
    if p is not None and not on_card(action, p.card_channel, p.card_chat_id):
        raise NotAllowed(NOT_HERE)
    return decide(ident, value, action.user_id, settings, wake)


def decide(ident: str, decision: str, user_id: str, settings, wake, note: str | None = None) -> str:
    """Approve or reject proposal `ident` as `user_id`; returns what to tell them."""
    p = PendingProposal.get_or_none(PendingProposal.token == ident)
    if p is None:
        return "This proposal no longer exists."
    if p.state != "pending":
        return earlier(p)
    wire = decision == APPROVE_AND_WIRE and p.kind == "create_agent" and p.session.messaging_group_id is not None
    if wire:
        decision = "approve"
    if decision not in ("approve", "reject"):
        return "Unknown choice."
    if not may_decide(user_id, p.approver_user_id or "", p.agent_group_id):
        raise NotAllowed(f"Only {display(p.approver_user_id) if p.approver_user_id else 'an owner'} or an admin "
                         "can decide this.")
    if wire and not lookups.is_owner_or_admin(user_id):  # the new agent is outside a scoped admin's agents
        raise NotAllowed("Only the owner or an admin of all agents can add the new agent to this chat; "
                         "✅ Approve creates it without.")
    if decision == "approve" and owner_only(p) and not lookups.is_owner(user_id):
        raise NotAllowed(checks.owner_only_line(p.kind, p.payload) if checks.granted_secret(p.kind, p.payload) is None
                         else f"Only the owner can grant ${checks.granted_secret(p.kind, p.payload)}: it is a host "
                              "secret this agent's admins were not given.")
    note = (note or "").strip()[:500] or None
    state = "applying" if decision == "approve" else "rejected"
    claimed = (PendingProposal.update(state=state, decided_by=user_id, decided_at=utcnow(), note=note)
               .where(PendingProposal.id == p.id, PendingProposal.state == "pending").execute())
    if claimed != 1:
        return earlier(PendingProposal.get_by_id(p.id))
    p = PendingProposal.get_by_id(p.id)
    key, who, summary = f"{PREFIX}-{p.token}", display(user_id), checks.summary(p.kind, p.payload)
    if decision == "reject":
        audit(user_id, "proposal.reject", key, kind=p.kind, summary=summary, reason=p.reason, note=note)
        edit_card(settings, p, f"❌ Rejected by {who}: {summary}" + (f"\nReason: {note}" if note else ""))
        tell_agent(settings, p.session, f"The owner rejected your proposal id={p.ref} ({summary})"
                                        + (f": {note}" if note else ".") + " Nothing was changed.",
                   message_id=f"proposal:{p.ref}:decided", wake=wake)
        return f"Rejected: {summary}."
    if p.kind in SLOW_KINDS:
        edit_card(settings, p, f"⏳ Approved by {who}: {summary}. Applying (this can take minutes)…")
        worker = threading.Thread(target=_apply_in_background, args=(p.id, user_id, settings, wake),
                                  name=f"proposal-{p.id}", daemon=True)
        _workers.append(worker)
        worker.start()
        return f"Approved: {summary}. Applying it now; the card will say when it is done."
    return finish(p, user_id, settings, wake, wire=wire)


def modify(ident: str, payload: dict, user_id: str, settings, *, reason: str | None = None,
           why: str | None = None) -> tuple[bool, str]:
    """The page's "modify": change a pending proposal before it is decided, checked exactly like the
    agent's own. (changed, what to tell the owner). Audited with the field changes, why, and the
    recomputed diff; the chat card is replaced by one that shows the new version; the agent hears of
    the change with the decision. reason=None keeps the agent's reason."""
    p = PendingProposal.get_or_none(PendingProposal.token == ident)
    if p is None:
        return False, "This proposal no longer exists."
    if p.state != "pending":
        return False, f"{earlier(p)} It can no longer be changed."
    if p.kind == "skill":
        return False, "A skill is approved as the bytes shown: approve or reject it (the agent can propose another version)."
    if not may_decide(user_id, p.approver_user_id or "", p.agent_group_id):
        raise NotAllowed(f"Only {display(p.approver_user_id) if p.approver_user_id else 'an owner'} or an admin "
                         "can change this.")
    try:
        new = checks.check_payload(p.kind, payload)
        new_reason = p.reason if reason is None else checks.check_reason(reason)
        why = checks.check_text(why or "", "why", 500, required=False) or None
    except RuleError as exc:
        return False, f"Not changed: {exc}"
    before, after = {**p.payload, "reason": p.reason}, {**new, "reason": new_reason}
    changes = checks.field_changes(before, after)
    if not changes:
        return False, "Not changed: these are the proposal's current values."
    changed = (PendingProposal.update(payload=new, reason=new_reason)
               .where(PendingProposal.id == p.id, PendingProposal.state == "pending").execute())
    if changed != 1:
        return False, f"{earlier(PendingProposal.get_by_id(p.id))} It can no longer be changed."
    p = PendingProposal.get_by_id(p.id)
    state = current_state(settings, p.agent_group, p.kind, new)
    audit(user_id, "proposal.modify", f"{PREFIX}-{p.token}", kind=p.kind, why=why, changes=changes,
          before=checks.summary(p.kind, before), after=checks.summary(p.kind, new), values_before=before,
          values_after=after, diff=checks.diff(p.kind, new, state))
    _replace_card(settings, p, user_id)
    return True, (f"Changed ({'; '.join(changes)}). It now reads: {checks.summary(p.kind, new)}. "
                  "Approve or reject it now.")


def modifications(p: PendingProposal) -> list[AuditLog]:
    return list(AuditLog.select().where(AuditLog.action == "proposal.modify", AuditLog.target == f"{PREFIX}-{p.token}")
                .order_by(AuditLog.id))


def owner_changes(p: PendingProposal) -> str:
    """'host: a → b (why: …)' when the page changed it, else ''. The net change from the agent's own
    version to this one, so the agent learns exactly what it got."""
    mods = modifications(p)
    if not mods:
        return ""
    net = checks.field_changes(mods[0].detail.get("values_before") or {}, {**p.payload, "reason": p.reason})
    whys = [m.detail["why"] for m in mods if m.detail.get("why")]
    return ("; ".join(net) or "changed back to your version") + (f" (why: {' / '.join(whys)})" if whys else "")


def _replace_card(settings, p: PendingProposal, user_id: str) -> None:
    """The chat card showed the old version: mark it changed and send the new one in its place."""
    if not (p.card_channel and p.card_chat_id):
        return
    edit_card(settings, p, f"✏️ Changed by {display(user_id)} on the page: {checks.summary(p.kind, p.payload)}. "
                           "The new version follows.")
    try:
        message_id = send_card(settings, Target(p.card_channel, p.card_chat_id), card_for(settings, p))
    except Exception as exc:  # the page still shows it; the old card's buttons decide the same row
        log.warning("could not send the changed card of proposal %s: %s", p.id, exc)
        return
    PendingProposal.update(card_message_id=message_id).where(PendingProposal.id == p.id).execute()


def _apply_in_background(pid: int, user_id: str, settings, wake) -> None:
    with database.connection_context():
        finish(PendingProposal.get_by_id(pid), user_id, settings, wake)


def finish(p: PendingProposal, user_id: str, settings, wake, wire: bool = False) -> str:
    """Apply an approved proposal, record the outcome, restart if needed, tell the agent.
    wire: a new agent is also wired to the chat it was asked from."""
    key, who, summary = f"{PREFIX}-{p.token}", display(user_id), checks.summary(p.kind, p.payload)
    agent = AgentGroup.get_by_id(p.agent_group_id)
    changes = owner_changes(p)
    after_changes = f" after changing it: {changes}" if changes else ""
    try:
        if p.kind == "create_agent" and not is_admin_agent(p.session):  # roles may have changed since
            raise ApplyError("only an admin's agent may create agents, and this one no longer is one")
        outcome = apply(settings, agent, p.kind, p.payload, user_id)
        if wire:
            outcome.agent_text += " " + wire_new_agent(p, outcome.extra["folder"], user_id)
    except (ApplyError, RuleError) as exc:
        PendingProposal.update(state="failed", note=str(exc)[:500]).where(PendingProposal.id == p.id).execute()
        audit(user_id, "proposal.failed", key, kind=p.kind, summary=summary, error=str(exc))
        edit_card(settings, p, f"⚠️ Approved by {who} but could not be applied: {summary}\n{exc}")
        tell_agent(settings, p.session, f"The owner approved your proposal id={p.ref} ({summary}){after_changes}, "
                                        f"but applying it failed: {exc}. Nothing was changed.",
                   message_id=f"proposal:{p.ref}:decided", wake=wake)
        return f"Approved, but applying it failed: {exc}"
    PendingProposal.update(state="approved").where(PendingProposal.id == p.id).execute()
    fetched = outcome.extra.pop("fetched", None)  # a skill's source was fetched: its files go on a card of their own
    audit(user_id, "proposal.approve", key, kind=p.kind, summary=summary, reason=p.reason, diff=outcome.diff,
          agent=agent.folder, session=p.session_id, **({"changed": changes} if changes else {}), **outcome.extra)
    edit_card(settings, p, f"✅ Approved by {who}: {summary}\n" + "\n".join(outcome.diff))
    if fetched is not None:
        _files_card(settings, p, fetched)
    restarted = _restart(settings, agent, wake.manager) if outcome.restart else []
    sessions = {p.session_id: p.session, **{s.id: s for s in restarted}}
    for session in sessions.values():
        text = (f"The owner approved your proposal id={p.ref} ({summary}){after_changes}. {outcome.agent_text}"
                if session.id == p.session_id else
                f"Your sandbox was restarted: the owner approved a change for this agent ({summary}).")
        tell_agent(settings, session, text, message_id=f"proposal:{p.ref}:decided", wake=wake)
    return f"Approved: {summary}."


def _files_card(settings, p: PendingProposal, payload: dict) -> None:
    """After fetching a skill the agent named: the card with what was fetched, decided like any proposal."""
    second = PendingProposal.create(session=p.session_id, agent_group=p.agent_group_id, ref=f"{p.ref[:24]}-files",
                                    kind="skill", payload=payload, reason=p.reason, approver_user_id=p.approver_user_id,
                                    card_channel=p.card_channel, card_chat_id=p.card_chat_id)
    if not (p.card_channel and p.card_chat_id):
        return  # it waits on the page
    try:
        message_id = send_card(settings, Target(p.card_channel, p.card_chat_id), card_for(settings, second))
    except Exception as exc:  # the page still shows it
        log.warning("could not send the card of the fetched skill %s: %s", second.id, exc)
        return
    PendingProposal.update(card_message_id=message_id).where(PendingProposal.id == second.id).execute()


def _restart(settings, agent: AgentGroup, manager) -> list[Session]:
    try:
        return stop_group(settings, agent, runtime_for(settings, manager))
    except Exception as exc:  # no runtime here: the next start uses the new setup anyway
        log.warning("could not restart the sandboxes of %s: %s", agent.folder, exc)
        return []


def wait_for_workers(timeout: float = 600) -> None:
    """Tests: wait until slow proposals (image builds) are applied."""
    for worker in list(_workers):
        worker.join(timeout)
        _workers.remove(worker)


# --- a reply to the card: approve, or reject with the reply as the reason ----------------------

@router.register_gate("before")
def reply_to_card(event, settings, wake):
    p = replied_card(PendingProposal, event)
    if p is None:
        return None
    text = " ".join((event.text or "").split())
    decision = "approve" if text.lower().rstrip(".!") in APPROVE_WORDS else "reject"
    try:
        answer = decide(p.token, decision, event.user_id, settings, wake, note=None if decision == "approve" else text)
    except NotAllowed as exc:
        answer = str(exc)
    router.tell(event, settings, answer)
    return router.RouteResult(handled="proposal_reply")
