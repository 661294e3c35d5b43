"""What the approval flows share: who approves, how a person and a place are named on a card,
the card's edits, joining a chat to an agent, and expiry. The flows themselves: senders.py
(unknown senders, `nsa-<id>:allow|deny`) and chats.py (unknown chats,
`nca-<id>:<agent folder>|create|ignore`).

The router calls their gates; the approver answers with a card in their DM.
- Approver: the agent group's admins, then global admins, then owners — the first of them with
  a reachable DM, preferring a DM on the platform the message came from.
- Only the chosen approver or an admin may answer; the first answer wins (the pending row is
  deleted atomically); the card is edited to say who decided; a later click is told so.
- Every request and decision is in audit_log. Nothing is remembered after a deny or ignore:
  a later message asks again.
- A request nobody decides expires after NANOCLAW_APPROVAL_EXPIRY_HOURS (a housekeeping job, or
  the first click or message that finds it too old): the row goes, the card says it expired, a
  late click is told so, and the next message from that sender or chat asks again.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from .. import platforms
from ..channels.base import Card, get_adapter
from ..db import database
from ..db import announce
from ..inbound import router
from ..inbound.wiring import resolve_engage
from ..lifecycle.housekeeping import register_job
from ..models import (AgentGroup, AgentGroupMember, AuditLog, MessagingGroup, PendingChannelApproval,
                      PendingSenderApproval, User, UserDm, UserRole, Wiring, audit, utcnow)
from ..security import folder_problem, slugify, write_text_nofollow
from ..sessions.store import Target
from .actions import NOT_HERE, NotAllowed, on_card

log = logging.getLogger("nanoclaw.approvals")

CHANNEL_NAMES = {"web": "the web chat", "cli": "the local chat"}  # the two that are no platform
EXCERPT = 200
CANCEL_WORDS = ("cancel", "ignore", "stop", "never mind", "nevermind")


# --- pure helpers ----------------------------------------------------------------------------

def platform_name(channel: str) -> str:
    found = platforms.get(channel)
    return found.label if found else CHANNEL_NAMES.get(channel, channel.capitalize())


def person(name: str | None, user_id: str | None) -> str:
    """'Alice (telegram:42)'."""
    if not user_id:
        return name or "Someone"
    return f"{name} ({user_id})" if name and name != user_id else user_id


def where(kind: str, channel: str, chat_name: str | None, chat_id: str) -> str:
    """'in the Telegram group 'Team'' / 'in a direct message on Telegram'."""
    platform = platform_name(channel)
    if kind == "dm":
        return f"in a direct message on {platform}"
    return f"in the {platform} group '{chat_name}'" if chat_name else f"in a {platform} group (id {chat_id})"


def excerpt(text: str | None, limit: int = EXCERPT) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


@dataclass(frozen=True)
class Candidate:
    user_id: str
    dms: tuple[Target, ...]


def choose_approver(tiers: list[list[Candidate]], channel: str) -> tuple[str, Target] | None:
    """The first tier with someone reachable decides; inside it, a DM on `channel` wins."""
    for tier in tiers:
        reachable = [c for c in tier if c.dms]
        for c in reachable:
            for dm in c.dms:
                if dm.channel_type == channel:
                    return c.user_id, dm
        if reachable:
            return reachable[0].user_id, reachable[0].dms[0]
    return None


def agent_value(agent: AgentGroup) -> str:
    """The card value naming an agent: its folder, or '#<id>' when the folder is long (the whole
    `nca-<22-char token>:<value>` must fit Telegram's 64-byte callback data) or would read as one of
    the other choices."""
    if len(agent.folder) <= 36 and agent.folder not in ("create", "ignore") and not agent.folder.startswith("#"):
        return agent.folder
    return f"#{agent.id}"


# --- who approves ----------------------------------------------------------------------------

def dms_of(user_id: str) -> tuple[Target, ...]:
    """Where a user can be reached privately: user_dms, else a DM chat whose id is their platform id
    (Telegram and WhatsApp DMs are)."""
    found = [Target(d.channel_type, d.platform_id) for d in UserDm.select().where(UserDm.user == user_id)
             .order_by(UserDm.id)]
    channel, _, native = user_id.partition(":")
    if native and not any(t.channel_type == channel for t in found):
        mg = MessagingGroup.get_or_none(MessagingGroup.channel_type == channel, MessagingGroup.platform_id == native,
                                        MessagingGroup.kind == "dm")
        if mg is not None:
            found.append(Target(channel, native))
    return tuple(found)


def approver_tiers(agent_group_id: int | None) -> list[list[Candidate]]:
    def users(query) -> list[Candidate]:
        seen, out = set(), []
        for role in query.order_by(UserRole.id):
            if role.user_id not in seen:
                seen.add(role.user_id)
                out.append(Candidate(role.user_id, dms_of(role.user_id)))
        return out
    tiers = []
    if agent_group_id is not None:
        tiers.append(users(UserRole.select().where(UserRole.role == "admin", UserRole.agent_group == agent_group_id)))
    tiers.append(users(UserRole.select().where(UserRole.role == "admin", UserRole.agent_group.is_null())))
    tiers.append(users(UserRole.select().where(UserRole.role == "owner")))
    return tiers


def owner_tier() -> list[list[Candidate]]:
    return approver_tiers(None)[-1:]


def pick_approver(agent_group_id: int | None, channel: str) -> tuple[str, Target] | None:
    return choose_approver(approver_tiers(agent_group_id), channel)


def may_decide(user_id: str, approver_user_id: str, agent_group_id: int | None) -> bool:
    return user_id == approver_user_id or router.is_owner_or_admin(user_id, agent_group_id)


def display(user_id: str | None) -> str:
    if not user_id:
        return "someone"
    user = User.get_or_none(User.id == user_id)
    return (user.name if user and user.name else None) or user_id


# --- shared effects --------------------------------------------------------------------------

def send_card(settings, target: Target, card: Card) -> str | None:
    return get_adapter(target.channel_type, settings).send_card(target, card)


def edit_card(settings, row, text: str) -> None:
    """Replace the card's text (and drop its buttons) to show the outcome; best effort."""
    if not row.card_message_id:  # decided a moment after the card went out: read where it went
        row = type(row).get_or_none(type(row).id == row.id) or row
    if not (row.card_channel and row.card_chat_id and row.card_message_id):
        return
    try:
        get_adapter(row.card_channel, settings).edit_text(Target(row.card_channel, row.card_chat_id),
                                                          row.card_message_id, text)
    except Exception as exc:
        log.warning("could not edit the card %s in %s:%s: %s", row.card_message_id, row.card_channel,
                    row.card_chat_id, exc)


def say(settings, target: Target, text: str) -> None:
    try:
        get_adapter(target.channel_type, settings).send_text(target, text)
    except Exception as exc:
        log.warning("could not write to %s:%s: %s", target.channel_type, target.platform_id, exc)


def earlier_decision(key: str, verbs: dict[str, str]) -> str:
    """What a click on an already-decided card is told (from audit_log)."""
    entry = (AuditLog.select().where(AuditLog.target == key, AuditLog.action.in_(list(verbs)))
             .order_by(AuditLog.id.desc()).first())
    if entry is None:
        return "This request is no longer pending."
    if entry.action.endswith(".expire"):
        return EXPIRED_ANSWER
    return f"Already decided: {verbs[entry.action]} by {display(entry.actor)}."


def add_member(user_id: str, name: str | None, agent_group_id: int) -> None:
    with database.atomic():
        user, _ = User.get_or_create(id=user_id, defaults={"name": name})
        AgentGroupMember.get_or_create(user=user, agent_group=agent_group_id)


def connect(mg: MessagingGroup, agent: AgentGroup, actor: str) -> Wiring:
    """Wire the chat to the agent with the defaults of the chat's kind."""
    values = dict(resolve_engage(mg.kind, None, None).__dict__)
    with database.atomic():
        wiring, created = Wiring.get_or_create(messaging_group=mg, agent_group=agent, defaults=values)
        if mg.denied_at is not None:
            MessagingGroup.update(denied_at=None).where(MessagingGroup.id == mg.id).execute()
        if created:
            audit(actor, "wiring.create", f"{mg.channel_type}:{mg.platform_id}", agent=agent.folder,
                  kind=mg.kind, via="approval", **values)
    return wiring


def free_folder(wanted: str) -> str:
    """The folder a new agent asking for `wanted` (its name, or a folder typed on the page) gets: the
    slug, with -2, -3… when it is taken or reserved. ValueError when no slug can be made of it."""
    base = slugify(wanted)
    if not base:
        raise ValueError(f"'{wanted}' gives no usable folder name")
    folder, n = base, 2
    while folder_problem(folder) or AgentGroup.get_or_none(AgentGroup.folder == folder):
        folder = f"{base[:58]}-{n}"
        n += 1
    return folder


def create_agent(settings, name: str, actor: str, folder: str | None = None) -> AgentGroup:
    """A new agent group named `name`, its folder a free slug of `folder` (default: the name), with
    its CLAUDE.md."""
    folder = free_folder(folder or name)
    instructions = f"You are {name}, a helpful personal assistant."
    path = settings.groups_dir / folder
    path.mkdir(parents=True, exist_ok=True)
    if not (path / "CLAUDE.md").exists() and not (path / "CLAUDE.md").is_symlink():
        write_text_nofollow(path, "CLAUDE.md", f"# {name}\n\n{instructions}\n")
    with database.atomic():
        agent = AgentGroup.create(name=name, folder=folder, instructions=instructions)
        audit(actor, "agent.create", folder, name=name, via="approval")
    announce(settings.data_dir, "proxy")  # its door opens now, not at the proxy's next look
    return agent


# --- expiry ----------------------------------------------------------------------------------

EXPIRE_CHECK_S = 60.0
EXPIRED_ANSWER = "This request expired."


def asked_at(row) -> datetime:
    """When a request's clock started: its card went out, or (a new chat being named) the approver
    chose "Create new"."""
    if isinstance(row, PendingChannelApproval) and row.state == "naming":
        return row.updated_at or row.created_at
    return row.created_at


def is_expired(asked: datetime, now: datetime, hours: float) -> bool:
    return now - asked >= timedelta(hours=hours)


def expired(row, settings, now: datetime | None = None) -> bool:
    return is_expired(asked_at(row), now or utcnow(), settings.approval_expiry_hours)


def expire(row, settings) -> bool:
    """Drop one request nobody decided in time and say so on its card. False if it was decided
    (or claimed for naming) a moment ago."""
    hours = settings.approval_expiry_hours
    mg = row.messaging_group
    place = where(mg.kind, mg.channel_type, mg.name, mg.platform_id)
    if isinstance(row, PendingSenderApproval):
        if PendingSenderApproval.delete().where(PendingSenderApproval.id == row.id).execute() != 1:
            return False
        audit("system", "approval.sender.expire", f"nsa-{row.token}", sender=row.sender_id, agent=row.agent_group.folder,
              chat=f"{mg.channel_type}:{mg.platform_id}", hours=hours)
        edit_card(settings, row, f"⏱ Expired: nobody decided within {hours} h, so "
                                 f"{person(row.sender_name, row.sender_id)} was not let in to talk to "
                                 f"{row.agent_group.name} {place}. If they write again, you will be asked again.")
    else:
        if PendingChannelApproval.delete().where(PendingChannelApproval.id == row.id,
                                                 PendingChannelApproval.state == row.state).execute() != 1:
            return False
        audit("system", "approval.channel.expire", f"nca-{row.token}", chat=f"{mg.channel_type}:{mg.platform_id}",
              hours=hours)
        edit_card(settings, row, f"⏱ Expired: nobody decided within {hours} h, so no agent answers {place}. "
                                 "If someone writes there again, you will be asked again.")
    log.info("approval %s-%s expired after %d h", "nsa" if isinstance(row, PendingSenderApproval) else "nca",
             row.id, hours)
    return True


@register_job("approvals.expire", every_s=EXPIRE_CHECK_S)
def expire_approvals(settings, _manager=None, now: datetime | None = None) -> int:
    """Expire the sender and chat approvals nobody decided within the expiry period."""
    now = now or utcnow()
    cutoff = now - timedelta(hours=settings.approval_expiry_hours)
    rows = list(PendingSenderApproval.select().where(PendingSenderApproval.created_at <= cutoff))
    rows += list(PendingChannelApproval.select().where(
        ((PendingChannelApproval.state == "card") & (PendingChannelApproval.created_at <= cutoff))
        | ((PendingChannelApproval.state == "naming") & (PendingChannelApproval.updated_at <= cutoff))))
    return sum(1 for row in rows if expired(row, settings, now) and expire(row, settings))


def clicked_row(model, prefix: str, verbs, ident: str, action, settings):
    """(row, None) for the approval card being clicked, or (None, what to answer instead): decided
    before, or expired now. NotAllowed when the click was made outside the card's own chat."""
    row = model.get_or_none(model.token == ident)
    if row is None:
        return None, earlier_decision(f"{prefix}-{ident}", verbs)
    if expired(row, settings):
        return None, EXPIRED_ANSWER if expire(row, settings) else earlier_decision(f"{prefix}-{ident}", verbs)
    if not on_card(action, row.card_channel, row.card_chat_id):
        raise NotAllowed(NOT_HERE)
    return row, None
