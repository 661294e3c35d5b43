"""`pair`: a one-time code that lets a person claim the bot from a DM (approvals/pairing.py)."""
from __future__ import annotations

import click

from .. import platforms
from ..approvals import common, pairing
from ..models import AgentGroup, UserRole
from .base import Mistake, command, get_agent, require_schema, settings


def _agent_for(folder: str | None) -> AgentGroup:
    """The named agent; else the only one; else a new default one (NANOCLAW_ASSISTANT_NAME)."""
    if folder:
        return get_agent(folder)
    agents = list(AgentGroup.select().order_by(AgentGroup.id))
    if len(agents) == 1:
        return agents[0]
    if agents:
        raise Mistake("there are several agents; name one: " + ", ".join(a.folder for a in agents))
    agent = common.create_agent(settings(), settings().assistant_name, "cli")
    click.echo(f"created the agent {agent.name} (folder {agent.folder})")
    return agent


@command("pair")
@click.argument("agent_folder", required=False)
@click.option("--role", type=click.Choice(["owner", "admin", "member"]), default=None,
              help="What the person gets. Default: owner when there is no owner yet, else member.")
@click.option("--minutes", type=click.IntRange(1, 1440), default=10, show_default=True,
              help="How long the code works.")
def pair_cmd(agent_folder, role, minutes):
    """Print a one-time code; the first person who sends it to the bot in a direct message (any
    platform) gets the role for AGENT_FOLDER and their DM is wired to it.

    \b
    Without AGENT_FOLDER: the only agent, or a new one named $NANOCLAW_ASSISTANT_NAME when there is none.
    Example: flask --app app nanoclaw pair
    """
    require_schema()
    agent = _agent_for(agent_folder)
    code, _row = pairing.create(agent, role, minutes, "cli")
    has_owner = UserRole.select().where(UserRole.role == "owner").exists()
    who = {"owner": "the owner", "admin": f"an admin of {agent.name}", "member": f"a member of {agent.name}"}[
        pairing.role_given(role, has_owner)]
    click.echo(f"Send this code to your bot in a direct message within {minutes} minutes "
               f"({' or '.join(p.label for p in platforms.all_platforms())}); whoever sends it first becomes {who}:")
    click.echo("")
    click.echo(code)
    click.echo("")
