"""Pairing: claim the bot from a DM with a one-time code, without knowing your platform user id.

`flask --app app nanoclaw pair` makes a code (make_code); the first person who sends it to the bot
in a direct message, on any platform, gets the code's role for its agent and their DM is wired to
the agent. A "before" gate: it sees a DM only when its text has the shape of a code and a code was
made in the last day, so ordinary messages pass untouched and nothing is looked up for them.

A wrong, expired or used code gets the same short answer (no hint which), and a sender who keeps
guessing is refused for a while (FAILED_LIMIT per FAILED_WINDOW), whatever they send.
"""
from __future__ import annotations

import hashlib
import logging
import re
import secrets
from datetime import datetime, timedelta

from ..db import database
from ..inbound import lookups, router
from ..models import AgentGroup, AgentGroupMember, AuditLog, MessagingGroup, PairingCode, User, UserRole, audit, utcnow
from ..sessions.store import Target
from .common import connect, say

log = logging.getLogger("nanoclaw.pairing")

ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"  # no 0/O, no 1/I/L
LENGTH = 8                                    # 31^8 ≈ 8.5e11 codes
CODE_SHAPE = re.compile(rf"[{ALPHABET}]{{{LENGTH}}}")
IN_PROGRESS = timedelta(days=1)               # a code made this recently makes DMs of its shape tries
FAILED_LIMIT = 5
FAILED_WINDOW = timedelta(minutes=15)
NEUTRAL = "That code does not work. Ask the bot's owner for a new one (flask --app app nanoclaw pair)."
LIMITED = "Too many wrong codes; try again in 15 minutes."


# --- pure -------------------------------------------------------------------------------------

def make_code() -> str:
    return "".join(secrets.choice(ALPHABET) for _ in range(LENGTH))


def as_code(text: str | None) -> str | None:
    """The code a DM holds, if its whole text is one (spaces and dashes ignored, any case)."""
    if not text or len(text) > 40:
        return None
    squeezed = re.sub(r"[\s-]", "", text).upper()
    return squeezed if CODE_SHAPE.fullmatch(squeezed) else None


def digest(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()


def role_given(code_role: str | None, has_owner: bool) -> str:
    """The role a claim gives: the code's own, else owner for the first person, member after."""
    return code_role or ("member" if has_owner else "owner")


def usable(row: PairingCode | None, now: datetime) -> bool:
    return row is not None and row.used_at is None and row.expires_at > now


# --- effects ----------------------------------------------------------------------------------

def create(agent: AgentGroup, role: str | None, minutes: int, actor: str) -> tuple[str, PairingCode]:
    code = make_code()
    now = utcnow()
    row = PairingCode.create(code_hash=digest(code), agent_group=agent, role=role, created_by=actor,
                             created_at=now, expires_at=now + timedelta(minutes=minutes))
    audit(actor, "pair.create", agent.folder, role=role or "owner-or-member", minutes=minutes)
    return code, row


def failures(user_id: str, now: datetime) -> int:
    return AuditLog.select().where(AuditLog.action == "pair.failed", AuditLog.target == user_id,
                                   AuditLog.at >= now - FAILED_WINDOW).count()


def grant(user_id: str, name: str | None, agent: AgentGroup, role: str) -> None:
    user, _ = User.get_or_create(id=user_id, defaults={"name": name})
    if role == "member":
        AgentGroupMember.get_or_create(user=user, agent_group=agent)
        return
    scope = None if role == "owner" else agent
    exists = UserRole.select().where(UserRole.user == user, UserRole.role == role,
                                     UserRole.agent_group.is_null() if scope is None
                                     else UserRole.agent_group == scope).exists()
    if not exists:
        UserRole.create(user=user, role=role, agent_group=scope)


def claim(code: str, event, settings) -> str | None:
    """Spend the code for the sender; what to tell them, or None when it is not usable."""
    now = utcnow()
    with database.atomic():
        row = PairingCode.get_or_none(PairingCode.code_hash == digest(code))
        if not usable(row, now):
            return None
        spent = (PairingCode.update(used_at=now, used_by=event.user_id)
                 .where(PairingCode.id == row.id, PairingCode.used_at.is_null(), PairingCode.expires_at > now)
                 .execute())
        if spent != 1:
            return None  # someone else's message spent it a moment ago
        agent = row.agent_group
        role = role_given(row.role, UserRole.select().where(UserRole.role == "owner").exists())
        grant(event.user_id, event.sender_name or None, agent, role)
        mg = MessagingGroup.get_or_none(MessagingGroup.channel_type == event.channel,
                                        MessagingGroup.platform_id == event.chat_id)
        if mg is None:
            mg = MessagingGroup.create(channel_type=event.channel, platform_id=event.chat_id, kind="dm",
                                       name=event.sender_name or None)
        connect(mg, agent, event.user_id)
        audit(event.user_id, "pair.claimed", event.user_id, agent=agent.folder, role=role,
              chat=f"{event.channel}:{event.chat_id}", code_made_by=row.created_by)
    lookups.forget()
    log.info("%s paired with %s as %s", event.user_id, agent.folder, role)
    what = {"owner": "the owner", "admin": f"an admin of {agent.name}", "member": "a member"}[role]
    return f"Paired: you are {what} and this chat is wired to {agent.name}. Write to me here any time."


@router.register_gate("before")
def pair_by_code(event, settings, wake):
    """A DM whose whole text is a code, while pairing is in progress: claim it, or refuse neutrally."""
    if event.kind != "dm" or event.sender_is_bot or event.attachments:
        return None
    code = as_code(event.text)
    if code is None:
        return None
    now = utcnow()
    if not PairingCode.select().where(PairingCode.created_at >= now - IN_PROGRESS).exists():
        return None  # no pairing going on: an ordinary message that happens to look like a code
    target = Target(event.channel, event.chat_id, event.thread_id)
    if failures(event.user_id, now) >= FAILED_LIMIT:
        say(settings, target, LIMITED)
        return router.RouteResult(handled="pairing_limited")
    answer = claim(code, event, settings)
    if answer is None:
        audit(event.user_id, "pair.failed", event.user_id, chat=f"{event.channel}:{event.chat_id}")
        say(settings, target, NEUTRAL)
        return router.RouteResult(handled="pairing_refused")
    say(settings, target, answer)
    return router.RouteResult(handled="paired")
