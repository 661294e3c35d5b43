"""Central tables. The schema itself is created by migrations/; these classes are how the code reads and writes it."""
from __future__ import annotations

import json, secrets  # noqa: E401
from datetime import datetime, timezone

import peewee as pw

from .db import database


def utcnow() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def new_token() -> str:
    """128 random bits, URL-safe: the public part of a card's action ids (never a sequential id)."""
    return secrets.token_urlsafe(16)


class JSONField(pw.TextField):
    def db_value(self, value):
        return None if value is None else json.dumps(value, sort_keys=True)
    def python_value(self, value):  # noqa: E301
        return None if value is None else json.loads(value)


class Base(pw.Model):
    class Meta:
        database = database


class AgentGroup(Base):
    name = pw.CharField()
    folder = pw.CharField(unique=True)
    instructions = pw.TextField(default="")
    container_config = JSONField(default=dict)
    created_at = pw.DateTimeField(default=utcnow)

    class Meta:
        table_name = "agent_groups"


ENGAGE_MODES = ("pattern", "mention", "mention-sticky")
SENDER_SCOPES = ("all", "known")
VOICE_MODES = ("auto", "always", "never")  # auto: a voice note is answered with one (when a voice is set up)
WHILE_BUSY = ("queue", "steer", "interrupt")  # a message while the agent works (agent_runner/midturn.py)
IGNORED_POLICIES = ("drop", "accumulate")
UNKNOWN_SENDER_POLICIES = ("strict", "request_approval", "public")
CHAT_KINDS = ("dm", "group", "thread")
ROLES = ("owner", "admin")


class MessagingGroup(Base):
    channel_type = pw.CharField()
    platform_id = pw.CharField()
    name = pw.CharField(null=True)
    kind = pw.CharField(default="dm")
    unknown_sender_policy = pw.CharField(default="request_approval")
    denied_at = pw.DateTimeField(null=True)
    created_at = pw.DateTimeField(default=utcnow)

    class Meta:
        table_name = "messaging_groups"
        indexes = ((("channel_type", "platform_id"), True),)


class Wiring(Base):
    messaging_group = pw.ForeignKeyField(MessagingGroup, backref="wirings", on_delete="CASCADE")
    agent_group = pw.ForeignKeyField(AgentGroup, backref="wirings", on_delete="CASCADE")
    engage_mode = pw.CharField(default="mention")
    engage_pattern = pw.CharField(null=True)
    sender_scope = pw.CharField(default="all")
    ignored_message_policy = pw.CharField(default="drop")
    session_mode = pw.CharField(default="shared")
    priority = pw.IntegerField(default=0)
    progress = pw.BooleanField(default=True)  # migration 0012: a long turn's status message in the chat
    voice = pw.CharField(max_length=8, default="auto")  # migration 0018: answers as voice notes (VOICE_MODES)
    stream = pw.BooleanField(default=True)  # migration 0024: the answer shown in the chat as it is written
    while_busy = pw.CharField(max_length=10, default="queue")  # migration 0025 (WHILE_BUSY)
    created_at = pw.DateTimeField(default=utcnow)

    class Meta:
        table_name = "messaging_group_agents"
        indexes = ((("messaging_group", "agent_group"), True),)


class User(Base):
    id = pw.CharField(primary_key=True)  # "<channel>:<platform user id>"
    name = pw.CharField(null=True)
    created_at = pw.DateTimeField(default=utcnow)

    class Meta:
        table_name = "users"


class UserRole(Base):
    user = pw.ForeignKeyField(User, backref="roles", on_delete="CASCADE")
    role = pw.CharField()
    agent_group = pw.ForeignKeyField(AgentGroup, null=True, backref="roles", on_delete="CASCADE")
    created_at = pw.DateTimeField(default=utcnow)

    class Meta:
        table_name = "user_roles"
        indexes = ((("user", "role", "agent_group"), True),)


class AgentGroupMember(Base):
    user = pw.ForeignKeyField(User, backref="memberships", on_delete="CASCADE")
    agent_group = pw.ForeignKeyField(AgentGroup, backref="members", on_delete="CASCADE")
    created_at = pw.DateTimeField(default=utcnow)

    class Meta:
        table_name = "agent_group_members"
        indexes = ((("user", "agent_group"), True),)


class UserDm(Base):
    user = pw.ForeignKeyField(User, backref="dms", on_delete="CASCADE")
    channel_type = pw.CharField()
    platform_id = pw.CharField()
    created_at = pw.DateTimeField(default=utcnow)

    class Meta:
        table_name = "user_dms"
        indexes = ((("user", "channel_type"), True),)


class Session(Base):
    id = pw.CharField(primary_key=True)
    agent_group = pw.ForeignKeyField(AgentGroup, backref="sessions", on_delete="CASCADE")
    messaging_group = pw.ForeignKeyField(MessagingGroup, null=True, backref="sessions", on_delete="SET NULL")
    thread_id = pw.CharField(default="")  # "" = no thread; keeps the UNIQUE portable
    status = pw.CharField(default="active")
    created_at = pw.DateTimeField(default=utcnow)
    last_active_at = pw.DateTimeField(default=utcnow)
    engaged_at = pw.DateTimeField(null=True)  # first engaging message: mention-sticky sticks from here

    class Meta:
        table_name = "sessions"
        indexes = ((("agent_group", "messaging_group", "thread_id"), True),)


class AcceptedEvent(Base):
    channel = pw.CharField()
    event_id = pw.CharField()
    received_at = pw.DateTimeField(default=utcnow)
    payload = pw.TextField(null=True)          # the accepted event (JSON) until it is routed
    routed_at = pw.DateTimeField(null=True)

    class Meta:
        table_name = "inbound_events"
        indexes = ((("channel", "event_id"), True),)


class DroppedMessage(Base):
    channel_type = pw.CharField()
    platform_id = pw.CharField()
    sender_id = pw.CharField(null=True)
    reason = pw.CharField()
    content = pw.TextField(null=True)
    created_at = pw.DateTimeField(default=utcnow)

    class Meta:
        table_name = "dropped_messages"


class AuditLog(Base):
    at = pw.DateTimeField(default=utcnow)
    actor = pw.CharField()
    action = pw.CharField()
    target = pw.CharField(null=True)
    detail = JSONField(null=True)

    class Meta:
        table_name = "audit_log"


def audit(actor: str, action: str, target: str | None = None, **detail) -> None:
    AuditLog.create(actor=actor, action=action, target=target, detail=detail or None)


class CardRecord(Base):
    """What every table behind a host card keeps: its token (in action ids, page keys), platform message id, age."""
    token = pw.CharField(max_length=32, unique=True, default=new_token)
    card_message_id = pw.CharField(null=True)
    created_at = pw.DateTimeField(default=utcnow)


class ApproverCard(CardRecord):
    """A card someone must decide: who (the approver) and where the card went (its chat)."""
    approver_user_id = pw.CharField(null=True)
    card_channel = pw.CharField(null=True)
    card_chat_id = pw.CharField(null=True)


class PendingSenderApproval(ApproverCard):
    """An unknown sender waiting for the approver's nsa- card (one per chat and sender)."""
    messaging_group = pw.ForeignKeyField(MessagingGroup, on_delete="CASCADE")
    agent_group = pw.ForeignKeyField(AgentGroup, on_delete="CASCADE")
    sender_id = pw.CharField()
    sender_name = pw.CharField(null=True)
    original_message = JSONField()  # the InboundEvent, replayed on allow

    class Meta:
        table_name = "pending_sender_approvals"
        indexes = ((("messaging_group", "sender_id"), True),)


class PendingChannelApproval(ApproverCard):
    """An unwired chat waiting for the approver's nca- card (one per chat). state: card | naming."""
    messaging_group = pw.ForeignKeyField(MessagingGroup, unique=True, on_delete="CASCADE")
    sender_id = pw.CharField(null=True)
    sender_name = pw.CharField(null=True)
    original_message = JSONField()
    state = pw.CharField(default="card")
    updated_at = pw.DateTimeField(default=utcnow)

    class Meta:
        table_name = "pending_channel_approvals"


class PendingQuestion(CardRecord):
    """An agent's ask_user_question card (ncq-), answered at most once, until expires_at."""
    session = pw.ForeignKeyField(Session, on_delete="CASCADE")
    question_id = pw.CharField()
    title = pw.CharField(default="")
    question = pw.TextField()
    options = JSONField()
    channel_type = pw.CharField()
    platform_id = pw.CharField()
    thread_id = pw.CharField(null=True)
    expires_at = pw.DateTimeField()
    answered_at = pw.DateTimeField(null=True)
    answered_by = pw.CharField(null=True)
    answer_index = pw.IntegerField(null=True)
    expired_at = pw.DateTimeField(null=True)  # migration 0007: the card was marked expired
    asked_user_id = pw.CharField(null=True)   # migration 0008: who the agent asked (they or an admin answer)

    class Meta:
        table_name = "pending_questions"
        indexes = ((("session", "question_id"), True),)


ALL_MODELS = [AgentGroup, MessagingGroup, Wiring, User, UserRole, AgentGroupMember, UserDm, Session,
              AcceptedEvent, DroppedMessage, AuditLog, PendingSenderApproval, PendingChannelApproval,
              PendingQuestion]


# --- the web page (migration 0002_web) -------------------------------------------------------

class WebPassword(Base):
    user = pw.ForeignKeyField(User, primary_key=True, backref="web_password", on_delete="CASCADE")
    password_hash = pw.CharField(max_length=512)
    updated_at = pw.DateTimeField(default=utcnow)

    class Meta:
        table_name = "web_passwords"


class WebLoginToken(Base):
    token_hash = pw.CharField(max_length=64, unique=True)
    user = pw.ForeignKeyField(User, backref="web_login_tokens", on_delete="CASCADE")
    created_at = pw.DateTimeField(default=utcnow)
    expires_at = pw.DateTimeField()
    used_at = pw.DateTimeField(null=True)

    class Meta:
        table_name = "web_login_tokens"


class WebSession(Base):
    token_hash = pw.CharField(max_length=64, unique=True)
    user = pw.ForeignKeyField(User, backref="web_sessions", on_delete="CASCADE")
    created_at = pw.DateTimeField(default=utcnow)
    last_seen_at = pw.DateTimeField(default=utcnow)
    expires_at = pw.DateTimeField()

    class Meta:
        table_name = "web_sessions"


class WebMessage(Base):
    chat_id = pw.CharField()
    direction = pw.CharField(max_length=8)  # in (the user's) | out (the agent's)
    sender = pw.CharField(null=True)
    text = pw.TextField(default="")
    card = JSONField(null=True)
    file_name = pw.CharField(null=True)
    file_path = pw.CharField(max_length=1024, null=True)
    reactions = JSONField(null=True)
    created_at = pw.DateTimeField(default=utcnow)
    updated_at = pw.DateTimeField(default=utcnow)

    class Meta:
        table_name = "web_messages"


ALL_MODELS += [WebPassword, WebLoginToken, WebSession, WebMessage]


# --- scheduled tasks (migration 0004_scheduled_tasks) -----------------------------------------

TASK_KINDS = ("once", "cron", "every")
TASK_CONTEXTS = ("group", "isolated")


class ScheduledTask(Base):
    """A task an agent scheduled in one chat; times are naive UTC."""
    id = pw.CharField(primary_key=True)
    agent_group = pw.ForeignKeyField(AgentGroup, backref="tasks", on_delete="CASCADE")
    session = pw.ForeignKeyField(Session, null=True, backref="tasks", on_delete="SET NULL")
    messaging_group_id = pw.IntegerField(null=True)  # its chat: the only one whose agent ops see it
    prompt = pw.TextField()
    schedule_kind = pw.CharField()  # once | cron | every
    schedule_value = pw.CharField()
    context_mode = pw.CharField(default="group")  # group | isolated
    progress = pw.BooleanField(default=False)     # a long run shows a status message in its chat
    status = pw.CharField(default="active")  # active | paused | done | cancelled | failed
    next_run_at = pw.DateTimeField(null=True)
    last_run_at = pw.DateTimeField(null=True)
    runs = pw.IntegerField(default=0)
    last_error = pw.TextField(null=True)
    created_at = pw.DateTimeField(default=utcnow)
    updated_at = pw.DateTimeField(default=utcnow)

    class Meta:
        table_name = "scheduled_tasks"


ALL_MODELS += [ScheduledTask]


# --- help requests and proposals from agents (migration 0005_operator) ------------------------

class HelpRequest(ApproverCard):
    """An agent's ask_operator: open until the owner replies (card reply or the page)."""
    session = pw.ForeignKeyField(Session, on_delete="CASCADE")
    agent_group = pw.ForeignKeyField(AgentGroup, on_delete="CASCADE")
    ref = pw.CharField()
    text = pw.TextField()
    state = pw.CharField(default="open")  # open | answered
    answer = pw.TextField(null=True)
    answered_by = pw.CharField(null=True)
    answered_at = pw.DateTimeField(null=True)

    class Meta:
        table_name = "help_requests"
        indexes = ((("session", "ref"), True),)


class PendingProposal(ApproverCard):
    """A change an agent proposed (egress, credential route, packages, MCP server, new agent)."""
    session = pw.ForeignKeyField(Session, on_delete="CASCADE")
    agent_group = pw.ForeignKeyField(AgentGroup, on_delete="CASCADE")
    ref = pw.CharField()
    kind = pw.CharField()
    payload = JSONField()
    reason = pw.TextField(default="")
    state = pw.CharField(default="pending")  # pending | approved | rejected | failed
    decided_by = pw.CharField(null=True)
    decided_at = pw.DateTimeField(null=True)
    note = pw.TextField(null=True)

    class Meta:
        table_name = "pending_proposals"
        indexes = ((("session", "ref"), True),)


ALL_MODELS += [HelpRequest, PendingProposal]


# --- the trust boundary (migration 0008_trust) ----------------------------------------------------

class AgentCard(CardRecord):
    """A card an agent sent with buttons. The buttons carry `nac-<token>:<n>`; what the agent gave
    each button (label, value) stays here, so nothing the agent writes ever becomes an action id."""
    session = pw.ForeignKeyField(Session, on_delete="CASCADE")
    agent_group = pw.ForeignKeyField(AgentGroup, on_delete="CASCADE")
    message_out_id = pw.CharField()
    channel_type = pw.CharField()
    platform_id = pw.CharField()
    thread_id = pw.CharField(null=True)
    title = pw.TextField()
    buttons = JSONField()                     # [[label, value], ...]

    class Meta:
        table_name = "agent_cards"
        indexes = ((("session", "message_out_id"), True),)


ALL_MODELS += [AgentCard]


# --- pairing (migration 0009_pairing) ------------------------------------------------------------

class PairingCode(Base):
    """A one-time code (only its SHA-256 kept) that gives the first person who sends it in a DM a
    role for an agent and wires their DM to it. role NULL: owner when there is none yet, else member."""
    code_hash = pw.CharField(max_length=64, unique=True)
    agent_group = pw.ForeignKeyField(AgentGroup, on_delete="CASCADE")
    role = pw.CharField(null=True)
    created_by = pw.CharField()
    created_at = pw.DateTimeField(default=utcnow)
    expires_at = pw.DateTimeField()
    used_at = pw.DateTimeField(null=True)
    used_by = pw.CharField(null=True)

    class Meta:
        table_name = "pairing_codes"


ALL_MODELS += [PairingCode]


class AgentDestination(Base):
    """A place the operator named for an agent to send to (migration 0010_destinations)."""
    agent_group = pw.ForeignKeyField(AgentGroup, on_delete="CASCADE")
    name = pw.CharField(max_length=64)
    channel_type = pw.CharField()
    platform_id = pw.CharField()
    thread_id = pw.CharField(null=True)
    created_by = pw.CharField()
    created_at = pw.DateTimeField(default=utcnow)

    class Meta:
        table_name = "agent_destinations"
        indexes = ((("agent_group", "name"), True),)


ALL_MODELS += [AgentDestination]


# --- cards where a platform has no buttons (migration 0014_card_choices) -----------------------------

class CardChoice(Base):
    """The numbered options of a card on a platform without buttons (channels/choices.py): which
    action each number stands for, by the card's own message. Kept as long as decided records."""
    channel = pw.CharField()
    chat_id = pw.CharField()
    message_id = pw.CharField()
    buttons = JSONField()                     # [[label, action_id], ...]
    created_at = pw.DateTimeField(default=utcnow)

    class Meta:
        table_name = "card_choices"
        indexes = ((("channel", "message_id"), True),)


ALL_MODELS += [CardChoice]
