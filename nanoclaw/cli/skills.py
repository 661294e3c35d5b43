"""Skills in the Agent Skills format (issue 66): check one (`show`), add one to an agent from a folder,
a git commit or an archive with its sha256 (`add`), see and remove them (`list`, `remove`). What is
added is pinned by its content hash; the agent sees it from its next sandbox start."""
from __future__ import annotations

from pathlib import Path

import click

from ..models import audit
from ..operator import skill_adding, skill_sources, skill_store
from ..operator.skill_format import Skill, SkillRefused, read_folder
from .base import Mistake, get_agent, group, print_table, require_schema, settings


@group("skill")
def skill_group():
    """Skills in the Agent Skills format: check one, add one to an agent (pinned by hash), list, remove."""


def _print(skill: Skill) -> None:
    click.echo(f"name: {skill.name}\ndescription: {skill.description}\nhash: sha256:{skill.hash}")
    click.echo(f"files ({len(skill.files)}, {sum(f.size for f in skill.files):,} bytes):")
    for f in skill.files:
        click.echo(f"  {f.mode:04o} {f.size:>9,}  {f.path}")
    for flag in skill.flags:
        click.echo(f"flag: {flag}")


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
    _print(skill)


@skill_group.command("add")
@click.argument("agent_folder", metavar="FOLDER")
@click.argument("source")
@click.option("--sha256", help="The archive's sha256, when SOURCE is an archive URL.")
def skill_add(agent_folder: str, source: str, sha256: str | None):
    """Add the skill SOURCE to the agent FOLDER, pinned to its exact bytes. SOURCE is a local folder, a
    git repository at a commit (URL#COMMIT or URL#COMMIT:SUBDIR; a branch or tag name is refused), or
    an https archive URL with --sha256. The host fetches and checks it (see `skill show`), prints what
    it adds, and the agent sees it from its next sandbox start as nanoclaw:NAME.

    \b
    Examples:
      flask --app app nanoclaw skill add andy ./skills/pdf-forms
      flask --app app nanoclaw skill add andy https://github.com/acme/skills#3f2a…c9:pdf-forms
    """
    require_schema()
    agent = get_agent(agent_folder)
    try:
        skill_sources.parse(source, sha256)
    except SkillRefused as exc:
        raise Mistake(str(exc)) from None
    try:
        skill = skill_adding.add(settings(), agent, source, sha256, "cli", owner=True,
                                 say=lambda line: click.echo(line, err=True))
    except SkillRefused as exc:
        click.echo(f"refused: {exc}", err=True)
        raise SystemExit(1) from None
    except OSError as exc:
        raise Mistake(f"cannot read the skill: {exc.strerror or exc}") from None
    _print(skill)
    click.echo(f"added to {agent.folder} as nanoclaw:{skill.name}; it is offered from the agent's next sandbox start")


@skill_group.command("trust")
@click.argument("prefix", required=False)
@click.option("--remove", is_flag=True, help="Trust it no longer.")
def skill_trust(prefix: str | None, remove: bool):
    """Let scoped admins add skills (on the page) from sources under PREFIX, an https URL prefix matched by
    host and whole path segments: https://github.com/acme trusts https://github.com/acme/skills, never
    https://github.com/acme-evil. The owner adds from any source. Without PREFIX, lists them."""
    require_schema()
    if prefix is None:
        click.echo("trusted sources: " + (", ".join(skill_adding.trusted(settings())) or "none"))
        return
    try:
        after = skill_adding.change_trust(settings(), "cli", prefix, add=not remove)
    except SkillRefused as exc:
        raise Mistake(str(exc)) from None
    click.echo("trusted sources: " + (", ".join(after) or "none"))


@skill_group.command("list")
@click.argument("agent_folder", metavar="[FOLDER]", required=False)
def skill_list(agent_folder: str | None):
    """The skills each agent (or FOLDER) has: name, hash, where from, who added it."""
    require_schema()
    from ..models import AgentGroup
    agents = [get_agent(agent_folder)] if agent_folder else list(AgentGroup.select().order_by(AgentGroup.folder))
    rows = [[a.folder, s.name, s.hash[:16], s.added_by, s.added_at.strftime("%Y-%m-%d %H:%M"), s.source]
            for a in agents for s in skill_store.installed(a.folder)]
    print_table(["agent", "skill", "hash", "added by", "added", "source"], rows, empty="no skills yet")


@skill_group.command("remove")
@click.argument("agent_folder", metavar="FOLDER")
@click.argument("name")
def skill_remove(agent_folder: str, name: str):
    """Remove the skill NAME from the agent FOLDER (from its next sandbox start)."""
    require_schema()
    agent = get_agent(agent_folder)
    if not skill_store.remove(settings(), agent, name):
        raise Mistake(f"{agent.folder} has no skill {name!r} (see: skill list {agent.folder})")
    audit("cli", "skill.remove", f"skill:{agent.folder}/{name}")
    click.echo(f"removed {name} from {agent.folder}")
