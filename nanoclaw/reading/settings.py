"""The owner's changes to what an agent may reach of the web, audited; and the fetch log they read."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from ..db import database
from ..inbound import lookups
from ..models import AgentGroup, audit, utcnow
from .access import Access, access_of, changed
from .tables import AgentInternet, WebFetch


def current(agent: AgentGroup, search_configured: bool = False) -> Access:
    return access_of(AgentInternet.get_or_none(AgentInternet.agent_group == agent), search_configured)


class NotOwner(PermissionError):
    pass


def change(actor: str, agent: AgentGroup, *, read: str | None = None, search: str | None = None,
           browser: str | None = None, why: str | None = None) -> Access:
    """Set the agent's access (ValueError for a value that is not one); takes effect at the next read,
    and in the tools offered at its next sandbox start. Only the owner (or the CLI, run by the one who
    runs the host) changes it: an agent's admin may not widen what the agent reaches."""
    if not (actor == "cli" or lookups.is_owner(actor)):
        raise NotOwner("only the owner changes what an agent may reach of the web")
    with database.atomic():
        before = current(agent)
        after = changed(before, read, search, browser)
        if after != before or AgentInternet.get_or_none(AgentInternet.agent_group == agent) is None:
            AgentInternet.insert(agent_group=agent, read=after.read, search=after.search, browser=after.browser,
                                 updated_at=utcnow()).on_conflict(
                conflict_target=[AgentInternet.agent_group],
                update={AgentInternet.read: after.read, AgentInternet.search: after.search,
                        AgentInternet.browser: after.browser, AgentInternet.updated_at: utcnow()}).execute()
            audit(actor, "internet.set", agent.folder, before=before.__dict__, after=after.__dict__, why=why)
    return after


def fetches(folder: str | None = None, limit: int = 50) -> list[WebFetch]:
    query = WebFetch.select().order_by(WebFetch.fetched_at.desc(), WebFetch.id.desc()).limit(limit)
    if folder:
        query = query.where(WebFetch.agent_folder == folder)
    return list(query)


def prune(keep_days: int, now: datetime | None = None) -> int:
    cutoff = (now or datetime.now(timezone.utc)).replace(tzinfo=None) - timedelta(days=keep_days)
    return WebFetch.delete().where(WebFetch.fetched_at < cutoff).execute()
