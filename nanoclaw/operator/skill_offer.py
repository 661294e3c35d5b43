"""What a sandbox start offers of an agent's skills (issue 66, item 5): each pinned copy hashed again,
the ones that match mounted as this start's plugin, a changed one left out and the owner told once."""
from __future__ import annotations

import logging
import time
from pathlib import Path

from ..approvals.common import choose_approver, owner_tier, send_card
from ..channels.base import Card
from ..db import database
from ..models import audit
from . import skill_store

log = logging.getLogger("nanoclaw.operator.skills")


def changed_card(folder: str, row: skill_store.InstalledSkill) -> Card:
    return Card(f"The skill {row.name} of {folder} changed on disk",
                f"The host's copy of the skill {row.name} (agent {folder}) no longer has the bytes that were "
                f"approved (sha256:{row.hash[:16]}…), so it is not offered to the agent. If you changed it, add "
                f"it again to approve the new bytes: flask --app app nanoclaw skill add {folder} SOURCE. "
                f"Otherwise something else wrote to data/skills/{folder}/: remove it (skill remove {folder} {row.name}) and look at who could.")


def offer(settings):
    """folder, sandbox name -> the folder to mount at /workspace/skills (None: no skill to offer)."""

    def skills_for(folder: str, sandbox: str) -> Path | None:
        started = time.monotonic()
        checked = skill_store.verify(settings, folder)
        for row in checked.changed:
            _tell_once(settings, folder, row)
        where = skill_store.view(settings, sandbox, folder, checked.ready)
        if checked.ready or checked.changed:
            log.info("skills of %s: %d offered, %d changed and left out, checked in %.1f ms", folder,
                     len(checked.ready), len(checked.changed), (time.monotonic() - started) * 1000)
        return where
    return skills_for


def _tell_once(settings, folder: str, row: skill_store.InstalledSkill) -> None:
    if not skill_store.mark_told(row):
        return
    log.warning("the skill %s of %s changed on disk: not offered", row.name, folder)
    with database.connection_context():
        audit("host", "skill.changed", f"skill:{folder}/{row.name}", hash=row.hash)
        chosen = choose_approver(owner_tier(), "")
    if chosen is None:
        log.warning("nobody to tell that the skill %s of %s changed (no owner DM)", row.name, folder)
        return
    try:
        send_card(settings, chosen[1], changed_card(folder, row))
    except Exception as exc:  # the log line above and the audit row keep it
        log.warning("could not tell the owner that the skill %s of %s changed: %s", row.name, folder, exc)
