"""An agent whose every model failed: its owner (or an admin of it, as for any approval) is told once
per outage, with what failed and what to do; the card says so again when the agent answers again.
The proxy records outages (proxy/outages.py); this job, in the web program, tells them."""
from __future__ import annotations

import logging

from ..approvals.common import edit_card, pick_approver, send_card
from ..channels.base import Card
from ..lifecycle.housekeeping import register_job
from ..models import AgentGroup, utcnow
from ..usage.tables import ModelOutage

log = logging.getLogger("nanoclaw.outages")


def card_for(agent: AgentGroup, outage: ModelOutage) -> Card:
    what = f"{outage.status}" if outage.status else "unreachable"
    body = (f"Every model {agent.name} may use failed a call ({outage.upstream}: {what}"
            f"{': ' + outage.detail if outage.detail else ''}). Its messages wait and are tried again; "
            f"check the upstream (flask --app app nanoclaw upstream test {outage.upstream}) or give {agent.name} a "
            "fallback (flask --app app nanoclaw model set … --fallback …).")
    return Card(f"{agent.name}: its models are not answering", body)


@register_job("model.outages", every_s=60)  # and at once when the proxy announces one (db.py: changes told)
def tell(settings, manager, now=None) -> int:
    told = 0
    for outage in ModelOutage.select().where(ModelOutage.told_at.is_null()).order_by(ModelOutage.id):
        agent = AgentGroup.get_or_none(AgentGroup.folder == outage.agent_folder)
        if agent is not None:
            _card(settings, agent, outage)
        ModelOutage.update(told_at=utcnow()).where(ModelOutage.id == outage.id).execute()
        told += 1
    for outage in ModelOutage.select().where(ModelOutage.ended_at.is_null(False), ModelOutage.decided_by.is_null(),
                                             ModelOutage.card_message_id.is_null(False)):
        agent = AgentGroup.get_or_none(AgentGroup.folder == outage.agent_folder)
        if agent is not None:
            edit_card(settings, outage, f"{card_for(agent, outage).body}\n\n✓ {agent.name} answers again.")
        ModelOutage.update(decided_by="recovered").where(ModelOutage.id == outage.id).execute()
    return told


def _card(settings, agent: AgentGroup, outage: ModelOutage) -> None:
    chosen = pick_approver(agent.id, "")
    if chosen is None:
        log.warning("nobody to tell that %s's models are failing (no owner DM)", agent.folder)
        return
    approver, target = chosen
    ModelOutage.update(approver_user_id=approver, card_channel=target.channel_type,
                       card_chat_id=target.platform_id).where(ModelOutage.id == outage.id).execute()
    try:
        message_id = send_card(settings, target, card_for(agent, outage))
    except Exception as exc:  # the log line of the proxy has it all
        log.warning("could not send the outage card of %s: %s", agent.folder, exc)
        return
    ModelOutage.update(card_message_id=message_id).where(ModelOutage.id == outage.id).execute()
