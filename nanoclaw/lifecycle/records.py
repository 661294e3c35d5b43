"""How long the central database keeps its records, so it never grows without bound.

Once a day (and by `flask … nanoclaw prune`) rows past their keeping time go, and the pass logs
what it removed:
- routed webhook events and dropped-message records: NANOCLAW_KEEP_EVENTS_DAYS (14); an event not
  yet routed is never removed (intake recovery still needs it);
- decided proposals, answered or expired help requests, questions past their expiry, the numbered
  options of cards sent where there are no buttons: NANOCLAW_KEEP_DECIDED_DAYS (90);
- audit entries: NANOCLAW_KEEP_AUDIT_DAYS (365);
- events a listener set aside (inbound/set_aside.py): NANOCLAW_KEEP_HISTORY_DAYS (365).
Open items are not removed here: they expire (operator/expiry.py, approvals, questions) and are
removed once they have been expired that long. `cutoffs` is the pure decision.
"""
from __future__ import annotations

import logging
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timedelta

from agent_runner import change_log

from ..models import (AuditLog, CardChoice, DroppedMessage, HelpRequest, AcceptedEvent, PendingProposal,
                      PendingQuestion, utcnow)
from ..inbound import set_aside
from ..outbound import delivery
from .active import everything
from .housekeeping import register_job

log = logging.getLogger("nanoclaw.retention")

DAILY_S = 24 * 3600.0
FIRST_AFTER_S = 600.0  # not during start-up
DECIDED = ("approved", "rejected", "failed", "expired")


@dataclass(frozen=True)
class Cutoffs:
    events: datetime
    decided: datetime
    audit: datetime
    history: datetime


def cutoffs(settings, now: datetime) -> Cutoffs:
    """Rows older than these go (pure)."""
    return Cutoffs(events=now - timedelta(days=settings.keep_events_days),
                   decided=now - timedelta(days=settings.keep_decided_days),
                   audit=now - timedelta(days=settings.keep_audit_days),
                   history=now - timedelta(days=settings.keep_history_days))


def prune(settings, now: datetime | None = None) -> dict[str, int]:
    """Remove what is past its keeping time; how many of each."""
    c = cutoffs(settings, now or utcnow())
    removed = {
        "routed webhook events": AcceptedEvent.delete().where(AcceptedEvent.routed_at.is_null(False),
                                                             AcceptedEvent.routed_at < c.events).execute(),
        "dropped-message records": DroppedMessage.delete().where(DroppedMessage.created_at < c.events).execute(),
        "decided proposals": PendingProposal.delete().where(PendingProposal.state.in_(DECIDED),
                                                            PendingProposal.decided_at < c.decided).execute(),
        "closed help requests": HelpRequest.delete().where(HelpRequest.state != "open",
                                                           HelpRequest.answered_at < c.decided).execute(),
        "past questions": PendingQuestion.delete().where(PendingQuestion.expires_at < c.decided).execute(),
        "options of old cards": CardChoice.delete().where(CardChoice.created_at < c.decided).execute(),
        "audit entries": AuditLog.delete().where(AuditLog.at < c.audit).execute(),
        "set-aside events": set_aside.prune(c.history),
    }
    log.info("retention: removed %s", ", ".join(f"{n} {what}" for what, n in removed.items()))
    return removed


def prune_session(path, cutoff_iso: str) -> tuple[int, int]:
    """The host's side of one session: messages the agent finished before the cutoff (unless a
    reply to one still waits for delivery), delivery records of replies the agent removed (its
    side: SessionStore.prune, at sandbox start), and all but the latest entries of inbound.db's
    change log. (messages, records) removed."""
    conn = delivery.open_session(path)
    if conn is None:
        return 0, 0
    try:
        with conn:
            conn.execute("BEGIN IMMEDIATE")
            messages = conn.execute(
                "DELETE FROM messages_in WHERE status IN ('completed', 'failed') AND timestamp < ? AND id NOT IN "
                "(SELECT o.in_reply_to FROM ob.messages_out o LEFT JOIN delivered d ON d.message_out_id = o.id "
                " WHERE o.in_reply_to IS NOT NULL AND (d.status IS NULL OR d.status NOT IN ('delivered', 'failed')))",
                (cutoff_iso,)).rowcount
            records = conn.execute("DELETE FROM delivered WHERE message_out_id NOT IN "
                                   "(SELECT id FROM ob.messages_out)").rowcount
            change_log.prune(conn)  # the log a remote copy follows keeps its latest entries only
        return messages, records
    finally:
        conn.close()


def prune_sessions(settings, now: datetime | None = None) -> tuple[int, int]:
    cutoff = ((now or utcnow()) - timedelta(days=settings.keep_messages_days)).strftime("%Y-%m-%dT%H:%M:%S")
    messages = records = 0
    for ref in everything(settings):
        try:
            m, r = prune_session(ref.path, cutoff)
        except sqlite3.Error as exc:  # busy or broken: next time
            log.warning("could not prune %s: %s", ref.path, exc)
            continue
        messages, records = messages + m, records + r
    log.info("retention: removed %d finished messages and %d delivery records from session databases", messages,
             records)
    return messages, records


@register_job("retention.records", every_s=DAILY_S, first_after_s=FIRST_AFTER_S)
def prune_job(settings, _manager=None) -> None:
    prune(settings)
    prune_sessions(settings)
