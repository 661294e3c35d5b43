"""Session folders of chats that fell silent go, so the disk does not fill with old conversations.

A chat's session whose last message is NANOCLAW_SILENT_SESSION_DAYS (180) old, whose sandbox is
stopped, with nothing waiting for the agent, nothing undelivered and no scheduled task of its own,
has its folder (databases, files, the SDK transcript) packed into
`$NANOCLAW_DATA_DIR/archive/sessions/<folder>-<session id>-<date>.tar.gz` (0600) and removed, or
just removed with NANOCLAW_SILENT_SESSIONS=remove. The session itself stays: the chat's next
message starts a fresh conversation in a new folder (the agent's group folder and memory in
CLAUDE.md are untouched). Audited `session.archive` / `session.remove`.
"""
from __future__ import annotations

import logging
import os
import sqlite3
import tarfile
import time
from datetime import datetime, timezone

from ..models import AgentGroup, ScheduledTask, Session, audit
from ..security import UnsafePath
from ..sessions import store
from .backup import Walk, add_tree
from .housekeeping import register_job
from .retention import _epoch, keep_reason, read_run, remove_session_folder

log = logging.getLogger("nanoclaw.retention")

DAILY_S = 24 * 3600.0
FIRST_AFTER_S = 900.0


def archive_folder(settings, folder: str, session_id: str) -> str:
    """Pack the session's folder into the archive (0600); the archive's path."""
    path = store.session_path(settings.sessions_dir, folder, session_id)
    target = settings.data_dir / "archive" / "sessions"
    target.mkdir(parents=True, exist_ok=True)
    os.chmod(target.parent, 0o700)
    name = target / f"{folder}-{session_id}-{datetime.now(timezone.utc):%Y%m%d}.tar.gz"
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    walk = Walk()
    with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
        for part in ("host", "agent"):  # through descriptors, no link followed at any level (security.walk_tree)
            add_tree(tar, path / part, f"{folder}/{session_id}/{part}", walk, skip_suffixes=())  # the sandbox is stopped
    return str(name)


@register_job("retention.silent_sessions", every_s=DAILY_S, first_after_s=FIRST_AFTER_S)
def clear_silent(settings, manager, now: float | None = None) -> list[str]:
    """Archive (or remove) the folders of sessions silent longer than the setting; their ids."""
    now = time.time() if now is None else now
    keep_s = settings.silent_session_days * 86400
    cutoff = datetime.fromtimestamp(now - keep_s, timezone.utc).replace(tzinfo=None)
    with_tasks = {t.session_id for t in ScheduledTask.select(ScheduledTask.session).where(
        ScheduledTask.status.in_(("active", "paused")), ScheduledTask.session.is_null(False))}
    done = []
    for session in (Session.select(Session, AgentGroup).join(AgentGroup)
                    .where(Session.status == "active", Session.last_active_at <= cutoff)):
        folder = session.agent_group.folder
        path = store.session_path(settings.sessions_dir, folder, session.id)
        if not path.exists() or session.id in with_tasks:
            continue
        try:
            running = manager is not None and manager.is_running(folder, session.id)
            why = keep_reason(read_run(path, running=running, still_due=False,
                                       last_active=_epoch(session.last_active_at)), now, keep_s)
            if why:
                log.debug("keeping the silent session %s/%s: %s", folder, session.id, why)
                continue
            archived = archive_folder(settings, folder, session.id) if settings.silent_sessions == "archive" else None
            remove_session_folder(settings, folder, session.id)
        except (OSError, sqlite3.Error, UnsafePath, tarfile.TarError) as exc:
            log.warning("could not clear the silent session %s/%s (next pass tries again): %s", folder, session.id, exc)
            continue
        audit("system", "session.archive" if archived else "session.remove", session.id, folder=folder,
              archive=archived, reason=f"silent for {settings.silent_session_days} days")
        done.append(session.id)
    log.info("retention: %s %d session folder(s) silent for %d days", "archived" if settings.silent_sessions ==
             "archive" else "removed", len(done), settings.silent_session_days)
    return done


__all__ = ["archive_folder", "clear_silent"]
