"""An agent's memory on its page: what it remembers, per scope, and who changed it when. The owner sees
and changes every scope; an admin of the agent its chats' memories and their own private memory, never
another person's; each write is checked here, whatever the page showed."""
from __future__ import annotations

from flask import flash, g, redirect, request, url_for

from ..inbound import lookups
from ..memory import entries, notes
from ..memory.scopes import Scope
from ..memory.tables import MemoryChange
from .admin import agent_for_write, bp, forbidden, settings
from .changes import clean_why


def may_see(user_id: str, scope: Scope) -> bool:
    """The owner: every scope; an agent's admin: chats, and their own private memory (pure, given the role)."""
    return scope.kind == "chat" or scope.key == user_id or lookups.is_owner(user_id)


def memories_for(agent, user_id: str) -> list[tuple[Scope, str]]:
    out = []
    for name in notes.visible_scopes(agent.folder):
        scope = Scope.parse(name)
        if may_see(user_id, scope):
            out.append((scope, notes.text_of(agent.folder, scope)))
    return out


def changes_for(agent, user_id: str, limit: int = 10) -> list[MemoryChange]:
    rows = MemoryChange.select().where(MemoryChange.agent_folder == agent.folder).order_by(MemoryChange.id.desc())
    return [c for c in rows.limit(100) if may_see(user_id, Scope.parse(c.scope))][:limit]


@bp.post("/admin/agents/<folder>/memory")
def memory_set(folder: str):
    a = agent_for_write(folder)
    try:
        scope = Scope.parse(request.form.get("scope") or "")
    except ValueError as exc:
        flash(str(exc), "error")
        return redirect(url_for("admin.agent", folder=a.folder) + "#memory")
    if not may_see(g.user_id, scope):
        return forbidden("that is another person's private memory")
    action = "clear" if request.form.get("clear") else "edit"
    try:
        notes.person_change(settings(), g.user_id, a.folder, scope, request.form.get("text") or "", action=action,
                            why=clean_why(request.form.get("why")))
    except entries.Refused as exc:
        flash(str(exc), "error")
    else:
        flash(f"{a.name}'s memory ({scope.describe()}) was {'cleared' if action == 'clear' else 'saved'}; it shows "
              "from the agent's next conversation.", "ok")
    return redirect(url_for("admin.agent", folder=a.folder) + "#memory")
