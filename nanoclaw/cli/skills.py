"""Skills in the Agent Skills format (issue 66): check one (`show`), add one to an agent from a folder,
a git commit or an archive with its sha256 (`add`), see and remove them (`list`, `remove`). What is
added is pinned by its content hash; the agent sees it from its next sandbox start."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import click

from ..models import audit
from ..operator import skill_sources, skill_store
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


def _get(url: str, limit: int) -> bytes:
    import requests  # only an archive source needs it

    with requests.get(url, stream=True, timeout=(10, 60), allow_redirects=True) as answer:
        answer.raise_for_status()
        data = b""
        for piece in answer.iter_content(64 * 1024):
            data += piece
            if len(data) > limit:
                raise SkillRefused(f"the archive is larger than {limit >> 20} MB")
    return data


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
        where = skill_sources.parse(source, sha256)
    except SkillRefused as exc:
        raise Mistake(str(exc)) from None
    work = Path(tempfile.mkdtemp(prefix="nanoclaw-skill-"))
    try:
        if where.kind == "folder":
            folder = Path(where.location).expanduser()
            if not folder.is_dir():
                raise Mistake(f"no folder {folder}")
        elif where.kind == "git":
            click.echo(f"fetching {where} …", err=True)
            folder = skill_sources.fetch_git(where, work, owner=True)
        else:
            click.echo(f"fetching {where.location} …", err=True)
            folder = skill_sources.fetch_archive(where, work, _get)
        skill = read_folder(folder)
        skill_store.install(settings(), agent, folder, skill, str(where), "cli")
    except SkillRefused as exc:
        click.echo(f"refused: {exc}", err=True)
        raise SystemExit(1) from None
    except OSError as exc:
        raise Mistake(f"cannot read the skill: {exc.strerror or exc}") from None
    except Exception as exc:  # requests' errors: the archive could not be fetched
        if type(exc).__module__.startswith("requests"):
            raise Mistake(f"could not fetch {where.location}: {exc}") from None
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    audit("cli", "skill.add", f"skill:{agent.folder}/{skill.name}", hash=skill.hash, source=str(where),
          files=len(skill.files), flags=list(skill.flags))
    _print(skill)
    click.echo(f"added to {agent.folder} as nanoclaw:{skill.name}; it is offered from the agent's next sandbox start")


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
