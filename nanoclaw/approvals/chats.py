"""Unknown chats: someone addresses the bot in a chat no agent answers → a card
`nca-<id>:<agent folder>|create|ignore` to the approver; "create" asks for a name (a DM reply or the
page's form), makes the agent, wires the chat and replays the message. The card's value names an
agent by folder when it fits Telegram's 64-byte callback data, else as `#<id>`."""
from __future__ import annotations

import logging

import peewee

from ..channels.base import Card
from ..db import database
from ..channels.events import event_to_json
from ..inbound import lookups, router
from ..models import AgentGroup, MessagingGroup, PendingChannelApproval, audit, utcnow
from ..security import slugify
from ..sessions.store import Target
from .actions import NotAllowed, register_action
from .common import (CANCEL_WORDS, EXPIRED_ANSWER, add_member, agent_value, clicked_row, connect, create_agent,
                     display, dms_of,
                     earlier_decision, edit_card, excerpt, expire, expired, free_folder, may_decide, person,
                     pick_approver, say, send_card, where)
from .pending import FormAnswer, FormField, ItemForm, PendingItem, register_form, register_pending, register_reply

log = logging.getLogger("nanoclaw.approvals")


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
    stored = event_to_json(event)
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
                                                approver_user_id=approver, card_channel=dm.channel_type,
                                                card_chat_id=dm.platform_id)
    except peewee.IntegrityError:
        return router.drop(event, "no_agent_wired", keep_content=False)
    try:
        message_id = send_card(settings, dm, channel_card(row, agents))
    except Exception as exc:
        log.error("could not send the new-chat card for %s:%s to %s: %s; nothing is pending", mg.channel_type,
                  mg.platform_id, approver, exc)
        row.delete_instance()
        return None
    PendingChannelApproval.update(card_message_id=message_id).where(PendingChannelApproval.id == row.id).execute()
    audit("router", "approval.channel.request", f"nca-{row.token}", sender=event.user_id,
          chat=f"{mg.channel_type}:{mg.platform_id}", approver=approver)
    return router.drop(event, "no_agent_wired", keep_content=False)


def channel_card(row: PendingChannelApproval, agents: list[AgentGroup]) -> Card:
    mg = row.messaging_group
    who, place = person(row.sender_name, row.sender_id), where(mg.kind, mg.channel_type, mg.name, mg.platform_id)
    buttons = tuple((a.name, f"nca-{row.token}:{agent_value(a)}") for a in agents)
    buttons += (("➕ Create new", f"nca-{row.token}:create"), ("Ignore", f"nca-{row.token}:ignore"))
    question = "Connect it to which agent?" if agents else "Create an agent for it?"
    return Card("New chat — connect it?",
                f"{who} is writing to the bot {place}, and no agent answers there yet. {question}\n\n"
                f"Their message: “{excerpt(row.original_message.get('text'))}”", buttons)


def _agent_for(value: str) -> AgentGroup | None:
    if value.startswith("#") and value[1:].isdigit():
        return AgentGroup.get_or_none(AgentGroup.id == int(value[1:]))
    return AgentGroup.get_or_none(AgentGroup.folder == value)


@register_action("nca")
def decide_channel(action, ident: str, value: str, settings, wake) -> str:
    row, answer = clicked_row(PendingChannelApproval, "nca", CHANNEL_VERBS, ident, action, settings)
    if row is None:
        return answer
    if not may_decide(action.user_id, row.approver_user_id, None):
        raise NotAllowed(f"Only {display(row.approver_user_id)} or an admin can decide this.")
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
    _wire_and_replay(row, mg, agent, action.user_id, settings, wake)
    audit(action.user_id, "approval.channel.connect", key, chat=f"{mg.channel_type}:{mg.platform_id}",
          agent=agent.folder)
    edit_card(settings, row, f"🔌 Connected by {decider}: {agent.name} now answers {place}.")
    return f"Connected to {agent.name}."


def _wire_and_replay(row: PendingChannelApproval, mg: MessagingGroup, agent: AgentGroup, actor: str,
                     settings, wake) -> None:
    connect(mg, agent, actor)
    if row.sender_id:
        add_member(row.sender_id, row.sender_name, agent.id)
    router.replay(row.original_message, settings, wake)


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


def name_new_agent(row: PendingChannelApproval, user_id: str, text: str | None, settings, wake) -> str | None:
    """Create the agent named `text` (or drop the request on 'cancel'), wire the chat to it and
    replay its message. Returns what to tell the approver; None if the row was decided meanwhile."""
    mg = row.messaging_group
    place = where(mg.kind, mg.channel_type, mg.name, mg.platform_id)
    key = f"nca-{row.token}"
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


def create_for_chat(row: PendingChannelApproval, user_id: str, name: str, settings, wake, *,
                    folder: str | None = None, via: str = "chat") -> str | None:
    """Create the agent `name` (folder: a free slug of `folder`, default the name), wire the chat to
    it and replay its stored message; the chat flow and the page share this. Returns what to tell the
    approver; None if the row was decided meanwhile. ValueError when no folder can be made."""
    mg = row.messaging_group
    place = where(mg.kind, mg.channel_type, mg.name, mg.platform_id)
    key = f"nca-{row.token}"
    free_folder(folder or name)  # refuse before the row is spent
    if PendingChannelApproval.delete().where(PendingChannelApproval.id == row.id).execute() != 1:
        return None
    agent = create_agent(settings, name, user_id, folder=folder)
    audit(user_id, "approval.channel.create", key, chat=f"{mg.channel_type}:{mg.platform_id}", agent=agent.folder,
          via=via)
    edit_card(settings, row, f"➕ Created by {display(user_id)}: {agent.name} now answers {place}.")
    _wire_and_replay(row, mg, agent, user_id, settings, wake)
    return f"Created the agent {agent.name} (folder {agent.folder}); it now answers {place}."


# --- the operator page: the listing, a name replied there, the create form -----------------------

@register_reply("nca")
def reply_with_name(user_id: str, ident: str, text: str, settings, wake) -> str:
    row = PendingChannelApproval.get_or_none(PendingChannelApproval.token == ident)
    if row is None or row.state != "naming":
        return earlier_decision(f"nca-{ident}", CHANNEL_VERBS)
    if expired(row, settings):
        return EXPIRED_ANSWER if expire(row, settings) else earlier_decision(f"nca-{ident}", CHANNEL_VERBS)
    if not may_decide(user_id, row.approver_user_id, None):
        raise NotAllowed(f"Only {display(row.approver_user_id)} or an admin can decide this.")
    return name_new_agent(row, user_id, text, settings, wake) or \
        earlier_decision(f"nca-{ident}", CHANNEL_VERBS)


NAME_LIMIT = 64


@register_form("nca.create")
def create_from_page(user_id: str, ident: str, values: dict[str, str], settings, wake) -> FormAnswer:
    """The page's "Create a new agent" form of an unknown chat: name (and optionally folder) right
    there instead of a DM round trip; from the card or the naming state alike, first answer wins."""
    row = PendingChannelApproval.get_or_none(PendingChannelApproval.token == ident)
    if row is None:
        return FormAnswer(False, earlier_decision(f"nca-{ident}", CHANNEL_VERBS))
    if expired(row, settings):  # a page opened before it expired
        return FormAnswer(False, EXPIRED_ANSWER if expire(row, settings) else
                          earlier_decision(f"nca-{ident}", CHANNEL_VERBS))
    if not may_decide(user_id, row.approver_user_id, None):
        raise NotAllowed(f"Only {display(row.approver_user_id)} or an admin can decide this.")
    name = " ".join((values.get("name") or "").split())
    folder = (values.get("folder") or "").strip() or None
    if not name:
        return FormAnswer(False, "Give the new agent a name.")
    if len(name) > NAME_LIMIT:
        return FormAnswer(False, f"The name is longer than {NAME_LIMIT} characters.")
    try:
        answer = create_for_chat(row, user_id, name, settings, wake, folder=folder, via="web")
    except ValueError:
        return FormAnswer(False, f"'{folder or name}' has no letters or digits to make a folder from; "
                                 "type another " + ("folder." if folder else "name, or a folder."))
    return FormAnswer(True, answer) if answer else FormAnswer(False, earlier_decision(f"nca-{ident}", CHANNEL_VERBS))


def create_form(row) -> ItemForm:
    """Name the new agent right here (the chat card asks for it in a DM instead)."""
    return ItemForm("nca.create", row.token, "➕ Create a new agent for this chat", "Create and connect",
                    (FormField("name", "Name", hint="what the agent is called, e.g. Lab Helper", required=True),
                     FormField("folder", "Folder (optional)",
                               hint="leave empty to use the name; letters, digits, '-' and '_' are kept")),
                    preview="folder")


@register_pending("channel_approvals")
def channel_approvals(settings, user_id: str):
    agents = None
    for row in PendingChannelApproval.select(PendingChannelApproval, MessagingGroup).join(MessagingGroup):
        if expired(row, settings) or not may_decide(user_id, row.approver_user_id, None):
            continue
        mg = row.messaging_group
        text = (row.original_message or {}).get("text")
        place = where(mg.kind, mg.channel_type, mg.name, mg.platform_id)
        if row.state == "naming":
            buttons = ()
            body = (f"Waiting for {display(row.approver_user_id)} to reply with the new agent's name "
                    "in their DM, or name it here.")
        else:
            if agents is None:
                agents = list(AgentGroup.select().order_by(AgentGroup.id))
            buttons = tuple((a.name, f"nca-{row.token}:{agent_value(a)}") for a in agents)
            buttons += (("Ignore", f"nca-{row.token}:ignore"),)
            body = f"Their message: “{excerpt(text)}”" if text else ""
        yield PendingItem(
            key=f"nca-{row.token}", kind="New chat", created_at=row.updated_at or row.created_at,
            title=f"{person(row.sender_name, row.sender_id)} is writing {place}; no agent answers there",
            body=body, details=(("Asked", display(row.approver_user_id)),), buttons=buttons,
            forms=(create_form(row),))
