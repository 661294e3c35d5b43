"""An `ask` link: each ask waits on a card to the asked agent's admins or owner (the approvals' usual
order): approve once, approve always (the link becomes `allowed`, audited), or reject. The card says
what the asked agent can do, so the one deciding sees what the asker would reach through it."""
from __future__ import annotations

import logging

from ..approvals.actions import NOT_HERE, NotAllowed, on_card, register_action
from ..approvals.common import display, edit_card, may_decide, pick_approver, send_card
from ..channels.base import Card
from ..db import database
from ..inbound import router
from ..models import AgentGroup, audit
from ..proxy.policy_files import EGRESS_FILE, ROUTES_FILE, group_file, policy_root, read_policy_file
from ..proposal_rules import RuleError
from . import ops
from .tables import AgentAsk, AgentLink

log = logging.getLogger("nanoclaw.delegation")
PREFIX = "nag"


def can_do(settings, agent: AgentGroup) -> str:
    """What the agent reaches beyond its sandbox, from the host's records (one line)."""
    root, parts = policy_root(settings), []
    try:
        hosts = read_policy_file(group_file(root, agent.folder, EGRESS_FILE)).as_list()
        routes = list(read_policy_file(group_file(root, agent.folder, ROUTES_FILE)).routes)
    except RuleError:
        hosts, routes = ["(its policy files are broken)"], []
    if hosts:
        parts.append("reach " + ", ".join(hosts[:8]) + ("…" if len(hosts) > 8 else ""))
    if routes:
        parts.append("call " + ", ".join(r.describe().split(" with ")[0] for r in routes[:5]) + " with the host's tokens")
    servers = sorted(((agent.container_config or {}).get("mcp_servers") or {}))
    if servers:
        parts.append("use the MCP servers " + ", ".join(servers))
    return f"{agent.name} can " + "; ".join(parts) + "." if parts else f"{agent.name} reaches nothing beyond its sandbox."


def card_for(settings, ask: AgentAsk) -> Card:
    asker = AgentGroup.get(AgentGroup.folder == ask.from_folder)
    asked = AgentGroup.get(AgentGroup.folder == ask.to_folder)
    text = " ".join(ask.text.split())
    body = "\n".join([f"{asker.name} asks {asked.name} (agent {asked.folder}):", text[:1500],
                      "", can_do(settings, asked),
                      f"Chain: {' → '.join([*ask.chain, ask.to_folder])}",
                      "Approve always makes the link allowed: later asks go through without a card."])
    key = f"{PREFIX}-{ask.token}"
    return Card(f"{asker.name} wants to ask {asked.name}", body,
                (("✅ Approve once", f"{key}:approve"), ("✅ Approve always", f"{key}:always"), ("❌ Reject", f"{key}:reject")))


def show(settings, ask: AgentAsk) -> str | None:
    """Send the card; None when it is out, else why nobody can see it."""
    asked = AgentGroup.get(AgentGroup.folder == ask.to_folder)
    chosen = pick_approver(asked.id, "")
    if chosen is None:
        return f"nobody can approve asks to {asked.folder} (no owner or admin with a direct chat)"
    approver, target = chosen
    AgentAsk.update(approver_user_id=approver, card_channel=target.channel_type,
                    card_chat_id=target.platform_id).where(AgentAsk.id == ask.id).execute()
    try:
        message_id = send_card(settings, target, card_for(settings, AgentAsk.get_by_id(ask.id)))
    except Exception as exc:  # noqa: BLE001 - the asker is told instead of waiting on a card nobody saw
        log.warning("could not send the card of ask %s: %s", ask.id, exc)
        return f"the card for {asked.folder}'s owner could not be sent"
    AgentAsk.update(card_message_id=message_id).where(AgentAsk.id == ask.id).execute()
    audit(f"agent:{ask.from_folder}", "agent.ask.request", f"{PREFIX}-{ask.token}", to=ask.to_folder, approver=approver)
    return None


@register_action(PREFIX)
def on_click(action, ident: str, value: str, settings, wake) -> str:
    ask = AgentAsk.get_or_none(AgentAsk.token == ident)
    if ask is None:
        return "This ask no longer exists."
    if not on_card(action, ask.card_channel, ask.card_chat_id):
        raise NotAllowed(NOT_HERE)
    return decide(ask, value, action.user_id, settings)


def decide(ask: AgentAsk, value: str, user_id: str, settings, reason: str | None = None) -> str:
    asked = AgentGroup.get_or_none(AgentGroup.folder == ask.to_folder)
    if asked is None or not may_decide(user_id, ask.approver_user_id or "", asked.id):
        raise NotAllowed(f"Only {display(ask.approver_user_id)} or an admin of {ask.to_folder} can decide this.")
    if value not in ("approve", "always", "reject"):
        return "Unknown choice."
    state = "rejected" if value == "reject" else "open"
    with database.atomic():
        claimed = AgentAsk.update(state=state, decided_by=user_id).where(
            AgentAsk.id == ask.id, AgentAsk.state == "pending").execute()
    if claimed != 1:
        return f"Already decided by {display(AgentAsk.get_by_id(ask.id).decided_by)}."
    who, key = display(user_id), f"{PREFIX}-{ask.token}"
    if value == "reject":
        audit(user_id, "agent.ask.reject", key, to=ask.to_folder, asker=ask.from_folder, reason=reason)
        edit_card(settings, ask, f"❌ Rejected by {who}: {ask.from_folder} asking {ask.to_folder}."
                                 + (f"\nReason: {reason}" if reason else ""))
        ops.refuse(settings, ask, f"{ask.to_folder}'s owner rejected the ask" + (f": {reason}" if reason else ""))
        return "Rejected."
    if value == "always":
        asking = AgentGroup.get(AgentGroup.folder == ask.from_folder)
        AgentLink.update(mode="allowed").where(AgentLink.from_agent == asking.id, AgentLink.to_agent == asked.id).execute()
        audit(user_id, "agent.link", f"link:{ask.from_folder}>{ask.to_folder}", mode="allowed", before="ask", via=key)
    audit(user_id, "agent.ask.approve", key, to=ask.to_folder, asker=ask.from_folder, always=value == "always")
    edit_card(settings, ask, f"✅ Approved by {who}{' (always)' if value == 'always' else ''}: {ask.from_folder} "
                             f"asking {ask.to_folder}.")
    ops.forward(settings, AgentAsk.get_by_id(ask.id))
    return "Approved" + (": later asks go through without a card." if value == "always" else ".")


@router.register_gate("before")
def reply_to_ask_card(event, settings, wake):
    """A reply to the card: "yes" (and the like) approves once; anything else rejects, with the reply as
    the reason the asking agent is told."""
    if event.reply_to is None or not event.reply_to.message_id:
        return None
    ask = AgentAsk.get_or_none(AgentAsk.card_channel == event.channel, AgentAsk.card_chat_id == str(event.chat_id),
                               AgentAsk.card_message_id == event.reply_to.message_id)
    if ask is None:
        return None
    text = " ".join((event.text or "").split())
    approve = text.lower().rstrip(".!") in ("approve", "approved", "yes", "ok", "okay", "allow", "go")
    try:
        answer = decide(ask, "approve" if approve else "reject", event.user_id, settings,
                        reason=None if approve else text[:500])
    except NotAllowed as exc:
        answer = str(exc)
    router.tell(event, settings, answer)
    return router.RouteResult(handled="ask_reply")


ops.on_ask_mode(show)
