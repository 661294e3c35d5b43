"""The reads routing makes for every inbound message, as plain SQL.

Building a query through peewee's expression tree costs ~0.3 ms of Python per query, more than
the query; routing one message makes about eight. These are the same reads, written once as
SQL text (portable: the driver's parameter style, standard SQL) and mapped back onto the models,
so callers see the same objects.

Outside a round nothing is cached: every call reads the rows as they are. The intake routes the
events it accepted in rounds (a burst from one chat, typically); inside `routing_round()` the answers
are kept for the rest of the round, since those events arrived together and routing them one
after another reads the same rows. Only positive answers are kept (a chat or a session found, a
chat's wirings, a sender known): a gate that acts during routing (wires a chat, adds a member)
turns a "no" into a "yes" and is then asked again, never the reverse; and the round forgets
everything whenever a gate acted or an event was dropped.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from functools import cache

from ..db import database, hot_write
from ..models import AgentGroup, MessagingGroup, Session, UserDm, UserRole, Wiring

_memo = threading.local()


@contextmanager
def routing_round():
    """Keep answers for the rest of this block, on this thread (see the module doc)."""
    outer = getattr(_memo, "answers", None)
    if outer is None:
        _memo.answers = {}
    try:
        yield
    finally:
        if outer is None:
            _memo.answers = None


def forget() -> None:
    """Something changed what routing reads (a gate acted): ask the database again."""
    if getattr(_memo, "answers", None):
        _memo.answers.clear()


def _kept(key, read, keep=lambda _value: True):
    answers = getattr(_memo, "answers", None)
    if answers is None:
        return read()
    if key in answers:
        return answers[key]
    value = read()
    if keep(value):
        answers[key] = value
    return value


@cache
def _sql(template: str, param: str) -> str:
    return template.replace("?", param)


def _q(template: str) -> str:
    """The statement in the bound database's parameter style (? for SQLite, %s for PostgreSQL)."""
    return _sql(template, database.param)


@cache
def _fields(model) -> dict:
    """column name -> (attribute name, field) of a model."""
    return {f.column_name: (name, f) for name, f in model._meta.fields.items()}


def _models(model, template: str, params: tuple) -> list:
    """Rows of `SELECT <model's table columns> ...` as model instances (peewee's own row mapping
    costs more than the query; this is a dict per row)."""
    cursor = database.execute_sql(_q(template), params)
    fields = _fields(model)
    names = [d[0] for d in cursor.description]
    found = []
    for row in cursor.fetchall():
        values = {}
        for column, value in zip(names, row):
            attr, field = fields[column]
            values[attr] = field.python_value(value)
        instance = model(__no_default__=True, **values)
        instance._dirty.clear()  # as loaded: a later save() writes only what the caller changes
        found.append(instance)
    return found


def chat(channel: str, platform_id: str) -> MessagingGroup | None:
    return _kept(("chat", channel, platform_id), lambda: _chat(channel, platform_id), keep=_found)


def _found(value) -> bool:
    return value is not None


def _chat(channel: str, platform_id: str) -> MessagingGroup | None:
    rows = _models(MessagingGroup, "SELECT * FROM messaging_groups WHERE channel_type = ? AND platform_id = ?",
                   (channel, platform_id))
    return rows[0] if rows else None


def wirings(messaging_group_id: int) -> list[Wiring]:
    """The chat's wirings, highest priority first."""
    return _kept(("wirings", messaging_group_id), lambda: _wirings(messaging_group_id), keep=bool)


def _wirings(messaging_group_id: int) -> list[Wiring]:
    return _models(Wiring, "SELECT * FROM messaging_group_agents WHERE messaging_group_id = ?"
                           " ORDER BY priority DESC, id", (messaging_group_id,))


def is_owner_or_admin(user_id: str, agent_group_id: int | None = None) -> bool:
    """Owner, global admin, or (when agent_group_id is given) admin of that agent group."""
    row = database.execute_sql(_q(
        "SELECT 1 FROM user_roles WHERE user_id = ? AND (role = 'owner' OR (role = 'admin' AND"
        " (agent_group_id IS NULL OR agent_group_id = ?))) LIMIT 1"), (user_id, agent_group_id)).fetchone()
    return row is not None


def is_owner(user_id: str) -> bool:
    row = database.execute_sql(_q("SELECT 1 FROM user_roles WHERE user_id = ? AND role = 'owner' LIMIT 1"),
                               (user_id,)).fetchone()
    return row is not None


def is_known(user_id: str, agent_group_id: int) -> bool:
    """Owner, admin (global or of this agent group), or member: one round trip."""
    return _kept(("known", user_id, agent_group_id), lambda: _is_known(user_id, agent_group_id), keep=bool)


def _is_known(user_id: str, agent_group_id: int) -> bool:
    row = database.execute_sql(_q(
        "SELECT 1 FROM user_roles WHERE user_id = ? AND (role = 'owner' OR (role = 'admin' AND"
        " (agent_group_id IS NULL OR agent_group_id = ?)))"
        " UNION ALL SELECT 1 FROM agent_group_members WHERE user_id = ? AND agent_group_id = ? LIMIT 1"),
        (user_id, agent_group_id, user_id, agent_group_id)).fetchone()
    return row is not None


def session(agent_group_id: int, messaging_group_id: int, thread: str) -> Session | None:
    """The chat's session with this agent (its agent group loaded too: callers need the folder)."""
    return _kept(("session", agent_group_id, messaging_group_id, thread),
                 lambda: _session(agent_group_id, messaging_group_id, thread), keep=_found)


def _session(agent_group_id: int, messaging_group_id: int, thread: str) -> Session | None:
    rows = _models(Session, "SELECT * FROM sessions WHERE agent_group_id = ? AND messaging_group_id = ?"
                            " AND thread_id = ?", (agent_group_id, messaging_group_id, thread))
    if not rows:
        return None
    group = database.execute_sql(_q("SELECT name, folder FROM agent_groups WHERE id = ?"), (agent_group_id,)).fetchone()
    rows[0].agent_group = AgentGroup(id=agent_group_id, name=group[0], folder=group[1])
    return rows[0]


def dm_of(user_id: str, channel: str) -> tuple[bool, str | None]:
    """(the user exists, the platform id of their DM on this channel or None)."""
    return _kept(("dm", user_id, channel), lambda: _dm_of(user_id, channel), keep=lambda v: v[1] is not None)


def _dm_of(user_id: str, channel: str) -> tuple[bool, str | None]:
    row = database.execute_sql(_q(
        "SELECT u.id, d.platform_id FROM users u LEFT JOIN user_dms d ON d.user_id = u.id AND d.channel_type = ?"
        " WHERE u.id = ?"), (channel, user_id)).fetchone()
    return (False, None) if row is None else (True, row[1])


def dm_user(channel: str, chat_id: str) -> str | None:
    """The person whose direct chat this is (the first recorded), or None."""
    return _kept(("dm-user", channel, chat_id), lambda: _dm_user(channel, chat_id), keep=lambda v: v is not None)


def _dm_user(channel: str, chat_id: str) -> str | None:
    row = database.execute_sql(_q("SELECT user_id FROM user_dms WHERE channel_type = ? AND platform_id = ?"
                                  " ORDER BY id LIMIT 1"), (channel, chat_id)).fetchone()
    return row[0] if row else None


def naming_request(user_id: str) -> int | None:
    """The oldest unknown-chat request waiting for this approver to name a new agent."""
    return _kept(("naming", user_id), lambda: _naming_request(user_id))


def _naming_request(user_id: str) -> int | None:
    row = database.execute_sql(_q("SELECT id FROM pending_channel_approvals WHERE state = 'naming'"
                                  " AND approver_user_id = ? ORDER BY updated_at LIMIT 1"), (user_id,)).fetchone()
    return row[0] if row else None


def mark_engaged(session: Session, now) -> None:
    """The session got its first engaging message (the cached object is updated too)."""
    with hot_write():
        database.execute_sql(_q("UPDATE sessions SET engaged_at = ? WHERE id = ? AND engaged_at IS NULL"),
                             (Session.engaged_at.db_value(now), session.id))
    session.engaged_at = now


def touch_session(session_id: str, now) -> None:
    with hot_write():
        database.execute_sql(_q("UPDATE sessions SET last_active_at = ? WHERE id = ?"),
                             (Session.last_active_at.db_value(now), session_id))


def is_admin_agent(session: Session) -> bool:
    """An admin's agent: an admin role is scoped to its group, or its chat is the DM of an owner/admin.
    Only such an agent is offered create_agent, and only its proposal to create one is queued."""
    group = session.agent_group_id
    if UserRole.select().where(UserRole.role == "admin", UserRole.agent_group == group).exists():
        return True
    mg = session.messaging_group
    if mg is None or mg.kind != "dm":
        return False
    owners = [r.user_id for r in UserRole.select().where((UserRole.role == "owner") |
                                                         ((UserRole.role == "admin") & UserRole.agent_group.is_null()))]
    if not owners:
        return False
    if UserDm.select().where(UserDm.user.in_(owners), UserDm.channel_type == mg.channel_type,
                             UserDm.platform_id == mg.platform_id).exists():
        return True
    return f"{mg.channel_type}:{mg.platform_id}" in owners
