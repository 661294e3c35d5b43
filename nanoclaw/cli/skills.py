"""Skills in the Agent Skills format (issue 66): `skill show FOLDER` checks one and prints what the owner
would approve (its front matter, files, content hash and flags). Adding, approving and offering
skills to agents are not built yet; until they are, no skill is offered to any agent."""
from __future__ import annotations

from pathlib import Path

import click

from ..operator.skill_format import SkillRefused, read_folder
from .base import Mistake, group


@group("skill")
def skill_group():
    """Skills in the Agent Skills format: check one before it is added (adding comes next)."""


@skill_group.command("show")
@click.argument("folder", type=click.Path(file_okay=False, path_type=Path))
def skill_show(folder: Path):
    """Check FOLDER as a skill (SKILL.md with name and description, its files) and print its files, its
    content hash (what an approval pins) and anything worth reading first. Exit 1 when it is refused."""
    if not folder.exists():
        raise Mistake(f"no folder {folder}")
    try:
        skill = read_folder(folder)
    except SkillRefused as exc:
        click.echo(f"refused: {exc}", err=True)
        raise SystemExit(1) from None
    except OSError as exc:
        raise Mistake(f"cannot read {folder}: {exc.strerror or exc}") from None
    click.echo(f"name: {skill.name}\ndescription: {skill.description}\nhash: sha256:{skill.hash}")
    click.echo(f"files ({len(skill.files)}, {sum(f.size for f in skill.files):,} bytes):")
    for f in skill.files:
        click.echo(f"  {f.mode:04o} {f.size:>9,}  {f.path}")
    for flag in skill.flags:
        click.echo(f"flag: {flag}")
