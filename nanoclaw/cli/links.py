"""Links between agents (issue 65, item 2): `agent link FROM TO --mode allowed|ask`, `agent unlink`,
`agent links`. No link, no contact; only the operator (the owner's CLI) makes one here."""
from __future__ import annotations

import click

from ..delegation.tables import MODES, AgentLink
from ..models import audit
from .agents import agent_group
from .base import Mistake, get_agent, print_table, require_schema


@agent_group.command("link")
@click.argument("from_folder", metavar="FROM")
@click.argument("to_folder", metavar="TO")
@click.option("--mode", type=click.Choice(MODES), required=True,
              help="allowed: FROM's asks go through; ask: each waits on a card to TO's owner (not built yet).")
def agent_link(from_folder, to_folder, mode):
    """Let the agent FROM ask the agent TO (ask_agent). TO answers in its own sandbox, with its own tools,
    memory (this link's own) and budget; FROM gets its answer inside the envelope, marked as TO's words."""
    require_schema()
    asker, asked = get_agent(from_folder), get_agent(to_folder)
    if asker.id == asked.id:
        raise Mistake("an agent cannot be linked to itself")
    link, created = AgentLink.get_or_create(from_agent=asker.id, to_agent=asked.id,
                                            defaults={"mode": mode, "created_by": "cli"})
    if not created:
        AgentLink.update(mode=mode).where(AgentLink.id == link.id).execute()
    audit("cli", "agent.link", f"link:{asker.folder}>{asked.folder}", mode=mode, before=None if created else link.mode)
    click.echo(f"{asker.folder} may ask {asked.folder} ({mode}); ask_agent is offered from its next sandbox start")


@agent_group.command("unlink")
@click.argument("from_folder", metavar="FROM")
@click.argument("to_folder", metavar="TO")
def agent_unlink(from_folder, to_folder):
    """FROM may no longer ask TO (from its next ask)."""
    require_schema()
    asker, asked = get_agent(from_folder), get_agent(to_folder)
    gone = AgentLink.delete().where(AgentLink.from_agent == asker.id, AgentLink.to_agent == asked.id).execute()
    if not gone:
        raise Mistake(f"{asker.folder} has no link to {asked.folder}")
    audit("cli", "agent.unlink", f"link:{asker.folder}>{asked.folder}")
    click.echo(f"{asker.folder} can no longer ask {asked.folder}")


@agent_group.command("links")
def agent_links():
    """Every link: who may ask whom, and how."""
    require_schema()
    rows = [[link.from_agent.folder, link.to_agent.folder, link.mode, link.created_by]
            for link in AgentLink.select().order_by(AgentLink.id)]
    print_table(["from", "to", "mode", "made by"], rows, empty="no links: no agent can ask another")
