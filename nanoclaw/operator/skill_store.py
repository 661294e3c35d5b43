"""The skills each agent has (issue 66, items 2, 3 and 5): the host's pinned copies and its record of them.

A skill approved for an agent is a row of `agent_skills` (its name, content hash, where it came from,
who added it) and a copy of exactly those bytes under `data/skills/<agent>/<hash>/<name>/`, written
only by the host. At each sandbox start the host hashes each copy again (`verify`): a copy whose
bytes no longer match its row is not offered, and the owner is told once (`changed_told`). What is
offered is a folder built for that start (`view`): a plugin for the CLI (`.claude-plugin/plugin.json`
and `skills/<name>/`, hard links to the checked copy), bound read-only into the sandbox, so the model
sees each approved skill as `nanoclaw:<name>`, a name nothing the agent writes can take.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import peewee as pw

from ..db import database
from ..models import AgentGroup, Base, utcnow
from .skill_format import Skill, SkillRefused, read_folder

log = logging.getLogger("nanoclaw.operator.skills")

PLUGIN = "nanoclaw"  # the plugin's name: the model sees `nanoclaw:<skill>`


class InstalledSkill(Base):
    agent_group = pw.ForeignKeyField(AgentGroup, on_delete="CASCADE", column_name="agent_group_id")
    name = pw.CharField()
    description = pw.TextField()
    hash = pw.CharField()        # sha256 hex of the approved bytes (skill_format.content_hash)
    source = pw.TextField()      # a folder, URL#COMMIT[:SUBDIR], an archive URL, or "proposed by the agent"
    added_by = pw.CharField()
    added_at = pw.DateTimeField(default=utcnow)
    changed_told = pw.BooleanField(default=False)  # the owner heard that the host's copy changed

    class Meta:
        table_name = "agent_skills"
        indexes = ((("agent_group", "name"), True),)


def skills_root(settings) -> Path:
    return settings.data_dir / "skills"


def copy_path(settings, folder: str, digest: str, name: str) -> Path:
    return skills_root(settings) / folder / digest / name


def installed(folder: str) -> list[InstalledSkill]:
    with database.connection_context():
        return list(InstalledSkill.select().join(AgentGroup).where(AgentGroup.folder == folder)
                    .order_by(InstalledSkill.name))


def install(settings, agent: AgentGroup, source_dir: Path, skill: Skill, source: str, actor: str) -> InstalledSkill:
    """Pin `skill` (as read from `source_dir`) for `agent`: copy its files, check the copy hashes as
    what was shown, then record it (replacing a skill of that name, whose old copy goes)."""
    target = copy_path(settings, agent.folder, skill.hash, skill.name)
    if not target.is_dir():
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".incoming-", dir=target.parent))
        try:
            copied = staging / skill.name
            for f in skill.files:
                dest = copied / f.path
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(_read_exactly(source_dir / f.path, f.size))
                os.chmod(dest, f.mode)
            if read_folder(copied).hash != skill.hash:  # the source changed while it was copied
                raise SkillRefused("the files changed while they were copied; nothing was added")
            os.replace(copied, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    with database.atomic():
        old = InstalledSkill.get_or_none(InstalledSkill.agent_group == agent.id, InstalledSkill.name == skill.name)
        if old is not None:
            old.delete_instance()
        row = InstalledSkill.create(agent_group=agent.id, name=skill.name, description=skill.description,
                                    hash=skill.hash, source=source[:2000], added_by=actor)
    if old is not None and old.hash != skill.hash:
        _drop_copy(settings, agent.folder, old.hash)
    return row


def remove(settings, agent: AgentGroup, name: str) -> bool:
    with database.atomic():
        row = InstalledSkill.get_or_none(InstalledSkill.agent_group == agent.id, InstalledSkill.name == name)
        if row is None:
            return False
        row.delete_instance()
    _drop_copy(settings, agent.folder, row.hash)
    return True


@dataclass(frozen=True)
class Checked:
    ready: list[InstalledSkill]     # the copy hashes as approved
    changed: list[InstalledSkill]   # it does not (or is gone): not offered


def verify(settings, folder: str) -> Checked:
    """Hash each pinned copy of `folder`'s skills again (the host's own files, read without following links)."""
    ready, changed = [], []
    for row in installed(folder):
        try:
            ok = read_folder(copy_path(settings, folder, row.hash, row.name), advice=False).hash == row.hash
        except (SkillRefused, OSError):
            ok = False
        (ready if ok else changed).append(row)
    return Checked(ready, changed)


def view(settings, sandbox: str, folder: str, rows: list[InstalledSkill]) -> Path | None:
    """The plugin folder one sandbox start mounts: the checked copies, linked (no bytes copied).
    None when there is nothing to offer. Built fresh each start, so a removed skill is gone."""
    where = settings.data_dir / "run" / "skills" / sandbox
    shutil.rmtree(where, ignore_errors=True)
    if not rows:
        return None
    (where / ".claude-plugin").mkdir(parents=True)
    (where / ".claude-plugin" / "plugin.json").write_text(json.dumps(
        {"name": PLUGIN, "version": "1.0.0", "description": "Skills the owner approved for this agent"}))
    for row in rows:
        shutil.copytree(copy_path(settings, folder, row.hash, row.name), where / "skills" / row.name,
                        copy_function=_link_or_copy)
    return where


def mark_told(row: InstalledSkill) -> bool:
    """Claim telling the owner that this copy changed: True once per pinned version."""
    with database.connection_context():
        return InstalledSkill.update(changed_told=True).where(
            InstalledSkill.id == row.id, InstalledSkill.hash == row.hash,
            InstalledSkill.changed_told == False).execute() == 1  # noqa: E712 - peewee's comparison


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _read_exactly(path: Path, size: int) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        data = f.read(size + 1)
    if len(data) != size:
        raise SkillRefused(f"{path.name} changed while it was copied; nothing was added")
    return data


def _drop_copy(settings, folder: str, digest: str) -> None:
    """Remove a pinned version nobody else of this agent still uses."""
    with database.connection_context():
        used = (InstalledSkill.select().join(AgentGroup)
                .where(AgentGroup.folder == folder, InstalledSkill.hash == digest).exists())
    if not used:
        shutil.rmtree(skills_root(settings) / folder / digest, ignore_errors=True)
