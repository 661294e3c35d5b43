"""Proposals and help requests nobody decided expire like approvals do (NANOCLAW_APPROVAL_EXPIRY_HOURS,
72 h): the card says so, the agent is told, and a late click or reply is answered "expired".
Expired rows are removed later with the decided ones (lifecycle/records.py)."""
from __future__ import annotations

import logging
from datetime import datetime, timedelta

from ..approvals.common import EXPIRE_CHECK_S
from ..lifecycle.housekeeping import register_job
from ..models import HelpRequest, PendingProposal, audit, utcnow
from . import checks
from ..sessions.wake import NO_WAKE  # a background job: the sweep wakes what is due
from .common import edit_card, tell_agent

log = logging.getLogger("nanoclaw.operator")


def expire_proposal(settings, p: PendingProposal, now: datetime) -> bool:
    hours = settings.approval_expiry_hours
    claimed = (PendingProposal.update(state="expired", decided_by="system", decided_at=now,
                                      note=f"nobody decided within {hours} h")
               .where(PendingProposal.id == p.id, PendingProposal.state == "pending").execute())
    if claimed != 1:
        return False  # decided a moment ago
    summary = checks.summary(p.kind, p.payload)
    audit("system", "proposal.expire", f"npr-{p.token}", kind=p.kind, summary=summary, hours=hours)
    edit_card(settings, p, f"⏱ Expired: nobody decided within {hours} h: {summary}. Nothing was changed.")
    tell_agent(settings, p.session, f"Your proposal id={p.ref} ({summary}) expired: nobody decided within {hours} h. "
                                    "Nothing was changed; ask again if you still need it.",
               message_id=f"proposal:{p.ref}:decided", wake=NO_WAKE)
    return True


def expire_help(settings, h: HelpRequest, now: datetime) -> bool:
    hours = settings.approval_expiry_hours
    claimed = (HelpRequest.update(state="expired", answered_by="system", answered_at=now)
               .where(HelpRequest.id == h.id, HelpRequest.state == "open").execute())
    if claimed != 1:
        return False
    audit("system", "help.expire", f"nhr-{h.token}", hours=hours)
    edit_card(settings, h, f"⏱ Expired: nobody answered within {hours} h.")
    tell_agent(settings, h.session, f"Your question to the operator id={h.ref} expired: nobody answered within "
                                    f"{hours} h. Carry on without it, or ask again later.",
               message_id=f"help:{h.ref}:answer", wake=NO_WAKE)
    return True


@register_job("operator.expire", every_s=EXPIRE_CHECK_S)
def expire_open(settings, _manager=None, now: datetime | None = None) -> int:
    now = now or utcnow()
    cutoff = now - timedelta(hours=settings.approval_expiry_hours)
    done = sum(expire_proposal(settings, p, now) for p in
               PendingProposal.select().where(PendingProposal.state == "pending", PendingProposal.created_at <= cutoff))
    done += sum(expire_help(settings, h, now) for h in
                HelpRequest.select().where(HelpRequest.state == "open", HelpRequest.created_at <= cutoff))
    if done:
        log.info("expired %d proposal(s) and help request(s) nobody decided", done)
    return done
