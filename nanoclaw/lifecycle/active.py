"""Which sessions the background work looks at: the active ones, not all of them.

A session is active when it was used recently (routing and task runs stamp `last_active_at`),
when its sandbox runs, or when this process woke it a moment ago. The sweep and the delivery
loop cost grows with these, not with every session ever created; the start-up pass alone
reads all sessions once (a message left pending by a long outage is found there).
"""
from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

from ..db import database
from ..models import AgentGroup, Session
from ..sessions import store
from ..sessions.store import TASK_THREAD_PREFIX, SessionRef

WINDOW_S = 60 * 60  # twice the idle stop: retries, deliveries and idle stops all happen well inside


def _refs(settings, query) -> list[SessionRef]:
    return [SessionRef(folder, sid, store.session_path(settings.sessions_dir, folder, sid),
                       (thread or "").startswith(TASK_THREAD_PREFIX))
            for sid, folder, thread in query.tuples()]


def _select():
    return (Session.select(Session.id, AgentGroup.folder, Session.thread_id).join(AgentGroup)
            .where(Session.status == "active"))


def recent(settings, window_s: float = WINDOW_S, now: datetime | None = None) -> list[SessionRef]:
    """Sessions used within the window (an index range on last_active_at)."""
    now = now or datetime.now(timezone.utc).replace(tzinfo=None)
    with database.connection_context():
        return _refs(settings, _select().where(Session.last_active_at >= now - timedelta(seconds=window_s)))


def by_ids(settings, ids) -> list[SessionRef]:
    ids = list(ids)
    if not ids:
        return []
    with database.connection_context():
        return _refs(settings, _select().where(Session.id.in_(ids)))


def everything(settings) -> list[SessionRef]:
    """Every open session (the start-up pass)."""
    with database.connection_context():
        return _refs(settings, _select())


def session_ids_of(sandbox_names, install_id: str) -> set[str]:
    """Session ids of this install's running sandboxes (names end with -<session id>)."""
    prefix = f"nanoclaw-{install_id}-".lower()
    return {name.rsplit("-", 1)[-1] for name in sandbox_names if name.startswith(prefix)}


class ActiveSet:
    """recent ∪ running ∪ woken here; refreshed by the background jobs."""

    def __init__(self, settings, window_s: float = WINDOW_S):
        self.settings = settings
        self.window_s = window_s
        self.running_ids: set[str] = set()
        self._woken: dict[str, tuple[SessionRef, float]] = {}
        self.refs: dict[str, SessionRef] = {}

    def woken_ids(self):
        """A live view: sessions this process woke (within the window), as they are added."""
        return self._woken.keys()

    def woke(self, ref: SessionRef) -> None:
        self._woken[ref.session_id] = (ref, time.monotonic())
        self.refs.setdefault(ref.session_id, ref)

    def refresh(self, running_ids: set[str] | None = None) -> list[SessionRef]:
        if running_ids is not None:
            self.running_ids = set(running_ids)
        found = {r.session_id: r for r in recent(self.settings, self.window_s)}
        missing = self.running_ids - found.keys()
        found.update({r.session_id: r for r in by_ids(self.settings, missing)})
        cutoff = time.monotonic() - self.window_s
        for sid, (ref, at) in list(self._woken.items()):  # the sweep and delivery threads both refresh
            if at < cutoff:
                self._woken.pop(sid, None)
            else:
                found.setdefault(sid, ref)
        self.refs = found
        return list(found.values())
