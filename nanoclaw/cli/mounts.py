"""Extra host folders an agent may see (validated against the allowlist now and at every start)."""
from __future__ import annotations

import click

from ..db import database
from ..models import AgentGroup, audit
from ..mounts import (MountRefused, MountRequest, current_allowlist, declared_mounts, protected_paths, save_mounts,
                      validate_mount)
from .base import Mistake, get_agent, group, print_table, require_schema, settings


@group("mount")
def mount_group():
    """Extra host folders an agent may see at /workspace/extra/<name> (read-only by default).

    Every mount must lie under a root of the allowlist file (NANOCLAW_MOUNT_ALLOWLIST,
    default ~/.config/nanoclaw/mount-allowlist.json), which lives outside the project.
    """


@mount_group.command("add")
@click.argument("folder")
@click.argument("host_path")
@click.option("--name", default="", help="Name under /workspace/extra/ (default: the folder's own name).")
@click.option("--rw", is_flag=True, help="Let the agent change files there (the allowlist root must allow it).")
def mount_add(folder, host_path, name, rw):
    """Let agent FOLDER see HOST_PATH (validated against the allowlist now and at every start)."""
    require_schema()
    agent = get_agent(folder)
    try:
        approved = validate_mount(MountRequest(host_path, name, rw), current_allowlist(settings().mount_allowlist),
                                  protected_paths(settings()))
    except MountRefused as exc:
        raise Mistake(str(exc)) from None
    mounts = [m for m in declared_mounts(agent) if m["name"] != approved.name]
    mounts.append({"host_path": host_path, "name": approved.name, "readwrite": rw})
    with database.atomic():
        save_mounts(agent, mounts)
        audit("cli", "mount.add", folder, host_path=str(approved.host_path), name=approved.name, readwrite=rw)
    mode = "read-write" if rw else "read-only"
    click.echo(f"{folder} will see {approved.host_path} at /workspace/extra/{approved.name} ({mode}) "
               "from its next sandbox start")
    if rw:
        click.echo(f"warning: read-write: the agent can create, change and delete any file under "
                   f"{approved.host_path}; remove with: flask --app app nanoclaw mount remove {folder} {approved.name}",
                   err=True)


@mount_group.command("list")
@click.argument("folder", required=False)
def mount_list(folder):
    """Show declared extra mounts (of one agent, or of all)."""
    require_schema()
    agents = [get_agent(folder)] if folder else list(AgentGroup.select().order_by(AgentGroup.folder))
    rows = [[a.folder, m["name"], "rw" if m.get("readwrite") else "ro", m["host_path"]]
            for a in agents for m in declared_mounts(a)]
    print_table(["AGENT", "NAME", "MODE", "HOST PATH"], rows,
                empty="no extra mounts; add one: flask --app app nanoclaw mount add FOLDER HOST_PATH")


@mount_group.command("remove")
@click.argument("folder")
@click.argument("name")
def mount_remove(folder, name):
    """Remove the extra mount NAME from agent FOLDER (from its next sandbox start)."""
    require_schema()
    agent = get_agent(folder)
    mounts = declared_mounts(agent)
    if not any(m["name"] == name for m in mounts):
        raise Mistake(f"{folder} has no extra mount named {name!r}")
    with database.atomic():
        save_mounts(agent, [m for m in mounts if m["name"] != name])
        audit("cli", "mount.remove", folder, name=name)
    click.echo(f"removed mount {name!r} from {folder}")
