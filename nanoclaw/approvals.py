"""Approvals: unknown senders (`nsa-<id>:allow|deny`) and unknown chats
(`nca-<id>:<agent folder>|create|ignore`).

The router calls the gates below; the approver answers with a card in their DM.
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

import peewee

from . import lookups, router
from .actions import register_action
from .channels.base import Card, get_adapter
from .db import database
from .housekeeping import register_job
from .models import (AgentGroup, AgentGroupMember, AuditLog, MessagingGroup, PendingChannelApproval,
                     PendingSenderApproval, User, UserDm, UserRole, Wiring, audit, utcnow)
from .pending import FormAnswer, register_form, register_reply
from .security import folder_problem, slugify
from .sessions.store import Target
from .wiring import resolve_engage

log = logging.getLogger("nanoclaw.approvals")

PLATFORM_NAMES = {"telegram": "Telegram", "whatsapp": "WhatsApp", "slack": "Slack", "discord": "Discord",
                  "web": "the web chat", "cli": "the local chat"}
EXCERPT = 200
CANCEL_WORDS = ("cancel", "ignore", "stop", "never mind", "nevermind")


# --- pure helpers ----------------------------------------------------------------------------

def platform_name(channel: str) -> str:
    return PLATFORM_NAMES.get(channel, channel.capitalize())


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
    """The card value naming an agent: its folder, or '#<id>' when the folder is long or would
    read as one of the other choices."""
    if len(agent.folder) <= 40 and agent.folder not in ("create", "ignore") and not agent.folder.startswith("#"):
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
    if not (path / "CLAUDE.md").exists():
        (path / "CLAUDE.md").write_text(f"# {name}\n\n{instructions}\n")
    with database.atomic():
        agent = AgentGroup.create(name=name, folder=folder, instructions=instructions)
        audit(actor, "agent.create", folder, name=name, via="approval")
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
        audit("system", "approval.sender.expire", f"nsa-{row.id}", sender=row.sender_id, agent=row.agent_group.folder,
              chat=f"{mg.channel_type}:{mg.platform_id}", hours=hours)
        edit_card(settings, row, f"⏱ Expired: nobody decided within {hours} h, so "
                                 f"{person(row.sender_name, row.sender_id)} was not let in to talk to "
                                 f"{row.agent_group.name} {place}. If they write again, you will be asked again.")
    else:
        if PendingChannelApproval.delete().where(PendingChannelApproval.id == row.id,
                                                 PendingChannelApproval.state == row.state).execute() != 1:
            return False
        audit("system", "approval.channel.expire", f"nca-{row.id}", chat=f"{mg.channel_type}:{mg.platform_id}",
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


# --- unknown sender (nsa-) -------------------------------------------------------------------

def sender_card(row: PendingSenderApproval) -> Card:
    mg, agent = row.messaging_group, row.agent_group
    who, place = person(row.sender_name, row.sender_id), where(mg.kind, mg.channel_type, mg.name, mg.platform_id)
    return Card("New sender", f"{who} wants to talk to {agent.name} {place} — allow?\n\n"
                              f"Their message: “{excerpt(row.original_message.get('text'))}”",
                (("✅ Allow", f"nsa-{row.id}:allow"), ("🚫 Deny", f"nsa-{row.id}:deny")))


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
                                               original_message=router.event_to_json(event),
                                               approver_user_id=approver)
    except peewee.IntegrityError:  # a concurrent message from the same stranger asked already
        return
    try:
        message_id = send_card(settings, dm, sender_card(row))
    except Exception as exc:
        log.error("could not send the approval card for %s to %s: %s; nothing is pending", event.user_id,
                  approver, exc)
        row.delete_instance()
        return
    PendingSenderApproval.update(card_channel=dm.channel_type, card_chat_id=dm.platform_id,
                                 card_message_id=message_id).where(PendingSenderApproval.id == row.id).execute()
    audit("router", "approval.sender.request", f"nsa-{row.id}", sender=event.user_id, agent=agent.folder,
          chat=f"{mg.channel_type}:{mg.platform_id}", approver=approver)


@register_action("nsa")
def decide_sender(action, ident: str, value: str, settings) -> str:
    row = PendingSenderApproval.get_or_none(PendingSenderApproval.id == ident) if ident.isdigit() else None
    if row is None:
        return earlier_decision(f"nsa-{ident}", SENDER_VERBS)
    if expired(row, settings):
        return EXPIRED_ANSWER if expire(row, settings) else earlier_decision(f"nsa-{ident}", SENDER_VERBS)
    if value not in ("allow", "deny"):
        return "Unknown choice."
    if not may_decide(action.user_id, row.approver_user_id, row.agent_group_id):
        return f"Only {display(row.approver_user_id)} or an admin can decide this."
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
        router.replay(row.original_message, settings, wake=router.current_waker())
        return f"Allowed: {row.sender_name or row.sender_id} can talk to {agent.name} now."
    edit_card(settings, row, f"🚫 Denied by {decider}: {who} may not talk to {agent.name} {place}.")
    return f"Denied: {row.sender_name or row.sender_id} was not let in."


# --- unknown chat (nca-) ---------------------------------------------------------------------

CHANNEL_VERBS = {"approval.channel.connect": "connected", "approval.channel.create": "a new agent was created",
                 "approval.channel.ignore": "ignored", "approval.channel.expire": "expired"}


@router.register_gate("unwired")
def ask_about_channel(event, mg: MessagingGroup, settings, wake):
    """A chat no agent answers: wire it silently for an owner/admin when there is exactly one agent,
    else one card per chat (a later message replaces the stored one)."""
    if event.sender_is_bot:
        return None
    agents = list(AgentGroup.select().order_by(AgentGroup.id))
    if len(agents) == 1 and router.is_owner_or_admin(event.user_id, agents[0].id):
        connect(mg, agents[0], event.user_id)
        audit(event.user_id, "approval.channel.autowire", f"{mg.channel_type}:{mg.platform_id}",
              agent=agents[0].folder)
        log.info("wired %s:%s to %s for its owner/admin %s", mg.channel_type, mg.platform_id, agents[0].folder,
                 event.user_id)
        return router.route(event, settings, wake=wake, replay=True)
    stored = router.event_to_json(event)
    waiting = PendingChannelApproval.get_or_none(PendingChannelApproval.messaging_group == mg)
    if waiting is not None and expired(waiting, settings):
        expire(waiting, settings)  # too old: this message asks again
    updated = (PendingChannelApproval.update(original_message=stored, sender_id=event.user_id,
                                             sender_name=event.sender_name, updated_at=utcnow())
               .where(PendingChannelApproval.messaging_group == mg).execute())
    if updated:
        return router.drop(event, "no_agent_wired", keep_content=False)  # the card is out already
    chosen = pick_approver(None, event.channel)
    if chosen is None:
        log.warning("nobody can approve the new chat %s:%s (no owner or admin with a reachable DM); dropped",
                    mg.channel_type, mg.platform_id)
        return None
    approver, dm = chosen
    try:
        with database.atomic():
            row = PendingChannelApproval.create(messaging_group=mg, sender_id=event.user_id,
                                                sender_name=event.sender_name, original_message=stored,
                                                approver_user_id=approver)
    except peewee.IntegrityError:
        return router.drop(event, "no_agent_wired", keep_content=False)
    try:
        message_id = send_card(settings, dm, channel_card(row, agents))
    except Exception as exc:
        log.error("could not send the new-chat card for %s:%s to %s: %s; nothing is pending", mg.channel_type,
                  mg.platform_id, approver, exc)
        row.delete_instance()
        return None
    PendingChannelApproval.update(card_channel=dm.channel_type, card_chat_id=dm.platform_id,
                                  card_message_id=message_id).where(PendingChannelApproval.id == row.id).execute()
    audit("router", "approval.channel.request", f"nca-{row.id}", sender=event.user_id,
          chat=f"{mg.channel_type}:{mg.platform_id}", approver=approver)
    return router.drop(event, "no_agent_wired", keep_content=False)


def channel_card(row: PendingChannelApproval, agents: list[AgentGroup]) -> Card:
    mg = row.messaging_group
    who, place = person(row.sender_name, row.sender_id), where(mg.kind, mg.channel_type, mg.name, mg.platform_id)
    buttons = tuple((a.name, f"nca-{row.id}:{agent_value(a)}") for a in agents)
    buttons += (("➕ Create new", f"nca-{row.id}:create"), ("Ignore", f"nca-{row.id}:ignore"))
    question = "Connect it to which agent?" if agents else "Create an agent for it?"
    return Card("New chat — connect it?",
                f"{who} is writing to the bot {place}, and no agent answers there yet. {question}\n\n"
                f"Their message: “{excerpt(row.original_message.get('text'))}”", buttons)


def _agent_for(value: str) -> AgentGroup | None:
    if value.startswith("#") and value[1:].isdigit():
        return AgentGroup.get_or_none(AgentGroup.id == int(value[1:]))
    return AgentGroup.get_or_none(AgentGroup.folder == value)


@register_action("nca")
def decide_channel(action, ident: str, value: str, settings) -> str:
    row = PendingChannelApproval.get_or_none(PendingChannelApproval.id == ident) if ident.isdigit() else None
    if row is None:
        return earlier_decision(f"nca-{ident}", CHANNEL_VERBS)
    if expired(row, settings):
        return EXPIRED_ANSWER if expire(row, settings) else earlier_decision(f"nca-{ident}", CHANNEL_VERBS)
    if not may_decide(action.user_id, row.approver_user_id, None):
        return f"Only {display(row.approver_user_id)} or an admin can decide this."
    if row.state == "naming":
        return f"Waiting for {display(row.approver_user_id)} to reply with the new agent's name."
    mg = row.messaging_group
    place = where(mg.kind, mg.channel_type, mg.name, mg.platform_id)
    decider = display(action.user_id)
    key = f"nca-{ident}"
    if value == "create":
        claimed = (PendingChannelApproval.update(state="naming", approver_user_id=action.user_id, updated_at=utcnow())
                   .where(PendingChannelApproval.id == row.id, PendingChannelApproval.state == "card").execute())
        if claimed != 1:
            return earlier_decision(key, CHANNEL_VERBS)
        edit_card(settings, row, f"➕ {decider} is creating a new agent for the chat {place}.")
        prompt_to = (Target(action.channel, action.chat_id) if action.chat_id
                     else next(iter(dms_of(action.user_id)), None))
        if prompt_to is not None:
            say(settings, prompt_to, f"What should the new agent for the chat {place} be called? "
                                     "Reply with a name (or 'cancel').")
        return "Reply with the new agent's name."
    if value == "ignore":
        agent = None
    else:
        agent = _agent_for(value)
        if agent is None:
            return "That agent no longer exists; pick another one."
    if PendingChannelApproval.delete().where(PendingChannelApproval.id == row.id,
                                             PendingChannelApproval.state == "card").execute() != 1:
        return earlier_decision(key, CHANNEL_VERBS)
    if agent is None:
        audit(action.user_id, "approval.channel.ignore", key, chat=f"{mg.channel_type}:{mg.platform_id}")
        edit_card(settings, row, f"Ignored by {decider}: no agent answers {place}.")
        return "Ignored."
    _wire_and_replay(row, mg, agent, action.user_id, settings)
    audit(action.user_id, "approval.channel.connect", key, chat=f"{mg.channel_type}:{mg.platform_id}",
          agent=agent.folder)
    edit_card(settings, row, f"🔌 Connected by {decider}: {agent.name} now answers {place}.")
    return f"Connected to {agent.name}."


def _wire_and_replay(row: PendingChannelApproval, mg: MessagingGroup, agent: AgentGroup, actor: str,
                     settings, wake=None) -> None:
    connect(mg, agent, actor)
    if row.sender_id:
        add_member(row.sender_id, row.sender_name, agent.id)
    router.replay(row.original_message, settings, wake=wake or router.current_waker())


@router.register_gate("before")
def take_new_agent_name(event, settings, wake):
    """The approver's DM reply after "Create new": the new agent's name (or 'cancel')."""
    if event.kind != "dm":
        return None
    naming = lookups.naming_request(event.user_id)  # every DM asks this: one plain read
    row = PendingChannelApproval.get_or_none(PendingChannelApproval.id == naming) if naming is not None else None
    if row is None:
        return None
    if expired(row, settings):
        expire(row, settings)
        return None  # the naming was abandoned long ago: an ordinary message
    answer = name_new_agent(row, event.user_id, event.text, settings, wake)
    if answer is None:
        return None  # decided meanwhile: an ordinary message after all
    say(settings, Target(event.channel, event.chat_id, event.thread_id), answer)
    return router.RouteResult(handled="approval_name")


def name_new_agent(row: PendingChannelApproval, user_id: str, text: str | None, settings, wake=None) -> str | None:
    """Create the agent named `text` (or drop the request on 'cancel'), wire the chat to it and
    replay its message. Returns what to tell the approver; None if the row was decided meanwhile."""
    mg = row.messaging_group
    place = where(mg.kind, mg.channel_type, mg.name, mg.platform_id)
    key = f"nca-{row.id}"
    name = " ".join((text or "").split())[:64]
    if name.lower() in CANCEL_WORDS:
        if PendingChannelApproval.delete().where(PendingChannelApproval.id == row.id).execute() != 1:
            return None
        audit(user_id, "approval.channel.ignore", key, chat=f"{mg.channel_type}:{mg.platform_id}")
        edit_card(settings, row, f"Ignored by {display(user_id)}: no agent answers {place}.")
        return f"OK, nothing was created; no agent answers {place}."
    if not slugify(name):
        return "That name has no letters or digits to make a folder from. Reply with another name, or 'cancel'."
    return create_for_chat(row, user_id, name, settings, wake)


def create_for_chat(row: PendingChannelApproval, user_id: str, name: str, settings, wake=None, *,
                    folder: str | None = None, via: str = "chat") -> str | None:
    """Create the agent `name` (folder: a free slug of `folder`, default the name), wire the chat to
    it and replay its stored message; the chat flow and the page share this. Returns what to tell the
    approver; None if the row was decided meanwhile. ValueError when no folder can be made."""
    mg = row.messaging_group
    place = where(mg.kind, mg.channel_type, mg.name, mg.platform_id)
    key = f"nca-{row.id}"
    free_folder(folder or name)  # refuse before the row is spent
    if PendingChannelApproval.delete().where(PendingChannelApproval.id == row.id).execute() != 1:
        return None
    agent = create_agent(settings, name, user_id, folder=folder)
    audit(user_id, "approval.channel.create", key, chat=f"{mg.channel_type}:{mg.platform_id}", agent=agent.folder,
          via=via)
    edit_card(settings, row, f"➕ Created by {display(user_id)}: {agent.name} now answers {place}.")
    _wire_and_replay(row, mg, agent, user_id, settings, wake=wake)
    return f"Created the agent {agent.name} (folder {agent.folder}); it now answers {place}."


# --- the operator page (web/waiting_sources.py lists these rows; a name can be replied there) --

@register_reply("nca")
def reply_with_name(user_id: str, ident: str, text: str, settings) -> str:
    row = PendingChannelApproval.get_or_none(PendingChannelApproval.id == ident) if ident.isdigit() else None
    if row is None or row.state != "naming":
        return earlier_decision(f"nca-{ident}", CHANNEL_VERBS)
    if expired(row, settings):
        return EXPIRED_ANSWER if expire(row, settings) else earlier_decision(f"nca-{ident}", CHANNEL_VERBS)
    if not may_decide(user_id, row.approver_user_id, None):
        return f"Only {display(row.approver_user_id)} or an admin can decide this."
    return name_new_agent(row, user_id, text, settings, router.current_waker()) or \
        earlier_decision(f"nca-{ident}", CHANNEL_VERBS)


NAME_LIMIT = 64


@register_form("nca.create")
def create_from_page(user_id: str, ident: str, values: dict[str, str], settings) -> FormAnswer:
    """The page's "Create a new agent" form of an unknown chat: name (and optionally folder) right
    there instead of a DM round trip; from the card or the naming state alike, first answer wins."""
    row = PendingChannelApproval.get_or_none(PendingChannelApproval.id == ident) if ident.isdigit() else None
    if row is None:
        return FormAnswer(False, earlier_decision(f"nca-{ident}", CHANNEL_VERBS))
    if expired(row, settings):  # a page opened before it expired
        return FormAnswer(False, EXPIRED_ANSWER if expire(row, settings) else
                          earlier_decision(f"nca-{ident}", CHANNEL_VERBS))
    if not may_decide(user_id, row.approver_user_id, None):
        return FormAnswer(False, f"Only {display(row.approver_user_id)} or an admin can decide this.")
    name = " ".join((values.get("name") or "").split())
    folder = (values.get("folder") or "").strip() or None
    if not name:
        return FormAnswer(False, "Give the new agent a name.")
    if len(name) > NAME_LIMIT:
        return FormAnswer(False, f"The name is longer than {NAME_LIMIT} characters.")
    try:
        answer = create_for_chat(row, user_id, name, settings, router.current_waker(), folder=folder, via="web")
    except ValueError:
        return FormAnswer(False, f"'{folder or name}' has no letters or digits to make a folder from; "
                                 "type another " + ("folder." if folder else "name, or a folder."))
    return FormAnswer(True, answer) if answer else FormAnswer(False, earlier_decision(f"nca-{ident}", CHANNEL_VERBS))
