"""Memory as the host keeps it: read a scope's text, apply a change once, record who changed it.

An agent's change carries its request's key (session and request id): the change and its record are
one transaction, and a request seen before (a replay after a crash) answers what it answered then,
changing nothing twice. A person's change (CLI, page) is recorded with who and why.
"""
from __future__ import annotations

import os
from datetime import datetime, timedelta

import peewee

from ..db import database
from ..models import utcnow
from ..proxy.host_secrets import HostSecrets
from ..proxy.policy_files import ROUTES_FILE, group_file, policy_root, read_policy_file
from ..runtime.base import known_secrets
from ..upstreams import registry
from . import entries
from .scopes import Scope
from .tables import Memory, MemoryChange


def text_of(folder: str, scope: Scope) -> str:
    p = database.param
    row = database.execute_sql(f"SELECT text FROM memories WHERE agent_folder = {p} AND scope = {p}",
                               (folder, scope.name)).fetchone()
    return row[0] if row else ""


def host_secret_values(settings, folder: str | None = None) -> tuple[str, ...]:
    """Every secret value the host holds that a memory must never contain: the settings' (model key,
    platform tokens, the page's key), every model upstream's key, the agent's credential routes' tokens."""
    values = list(known_secrets(settings))
    if getattr(settings, "transcribe_api_key", None):
        values.append(settings.transcribe_api_key)
    names = set(registry.secret_names(policy_root(settings)))
    if folder:
        try:
            names |= {r.secret for r in read_policy_file(group_file(policy_root(settings), folder, ROUTES_FILE)).routes}
        except Exception:  # noqa: BLE001 - a broken file grants nothing; its names are still looked for below
            pass
    lookup = HostSecrets()
    values += [v for v in (lookup(n) or os.environ.get(n) for n in names) if v]
    return tuple(sorted(set(values), key=len, reverse=True))


def _save(folder: str, scope: Scope, text: str) -> None:
    updated = Memory.update(text=text, updated_at=utcnow()).where(
        Memory.agent_folder == folder, Memory.scope == scope.name).execute()
    if not updated:
        Memory.create(agent_folder=folder, scope=scope.name, text=text)


MAX_CHANGES_A_MINUTE = 30   # per session: a hostile agent cannot grow memory_changes without limit
BUSY = (f"Not saved: this conversation changed its memory {MAX_CHANGES_A_MINUTE} times in the last minute, the "
        "most it may; wait a minute, or put several facts in one change.")


def too_many(recent: int) -> bool:
    """Whether one more change would pass the session's limit (pure)."""
    return recent >= MAX_CHANGES_A_MINUTE


def agent_change(settings, folder: str, scope: Scope, change: entries.Change, *, session_id: str,
                 request_key: str, now: datetime | None = None) -> tuple[bool, str]:
    """Apply the agent's change (once per request_key): (ok, what the agent is told)."""
    done = MemoryChange.get_or_none(MemoryChange.request_key == request_key)
    if done is not None:
        return done.action != "refused", done.outcome
    since = (now or utcnow()) - timedelta(minutes=1)
    recent = MemoryChange.select().where(MemoryChange.agent_folder == folder, MemoryChange.created_at >= since,
                                         MemoryChange.session_id == session_id).count()
    if too_many(recent):
        return False, BUSY  # not recorded: a refusal must not grow the table either
    before = text_of(folder, scope)
    try:
        after = entries.apply(before, change, host_secret_values(settings, folder))
    except entries.Refused as exc:
        ok, told, after = False, f"Not saved: {exc}", before
    else:
        ok = True
        told = ("Saved. Your memory shows it from the next conversation (this one keeps the memory it started "
                "with)." if after != before else "Already in your memory; nothing changed.")
    try:
        with database.atomic():
            MemoryChange.create(agent_folder=folder, scope=scope.name, request_key=request_key,
                                actor=f"agent:{folder}", session_id=session_id,
                                action=change.action if ok else "refused", before_text=before, after_text=after,
                                outcome=told)
            if ok and after != before:
                _save(folder, scope, after)
    except peewee.IntegrityError:  # the same request, applied by a process a moment ago
        done = MemoryChange.get(MemoryChange.request_key == request_key)
        return done.action != "refused", done.outcome
    return ok, told


def person_change(settings, actor: str, folder: str, scope: Scope, text: str, *, action: str = "edit",
                  why: str | None = None) -> tuple[str, str]:
    """A person sets a scope's whole text (edit) or empties it (clear): (before, after). A clear also
    redacts every earlier change of the scope (who and when stay, the words go): cleared means gone."""
    before = text_of(folder, scope)
    after = "" if action == "clear" else entries.check_text(text, host_secret_values(settings, folder))
    with database.atomic():
        if action == "clear":
            MemoryChange.update(before_text=None, after_text=None).where(
                MemoryChange.agent_folder == folder, MemoryChange.scope == scope.name).execute()
        MemoryChange.create(agent_folder=folder, scope=scope.name, actor=actor, action=action,
                            before_text=None if action == "clear" else before, after_text=after, outcome=why or "")
        if after != before:
            _save(folder, scope, after)
    return before, after


def prune_changes(keep_days: int, now: datetime | None = None) -> int:
    """Change records older than the history's keeping time go (NANOCLAW_KEEP_HISTORY_DAYS)."""
    cutoff = (now or utcnow()) - timedelta(days=keep_days)
    return MemoryChange.delete().where(MemoryChange.created_at < cutoff).execute()


def visible_scopes(folder: str) -> list[str]:
    return [r.scope for r in Memory.select(Memory.scope).where(Memory.agent_folder == folder).order_by(Memory.scope)]
