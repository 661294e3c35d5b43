"""`egress list|add|remove`: the HTTPS hosts an agent may reach through the proxy, set by the
operator (an agent can only propose one). Applied by the proxy on the next request; audited."""
from __future__ import annotations

import click

from ..models import AgentGroup
from ..operator import policy_edits as edits
from .base import WHY, Mistake, get_agent, group, policy_edit, print_table, require_schema, settings


@group("egress")
def egress_group():
    """HTTPS hosts each agent may reach (exact host[:port], or *.domain for its subdomains)."""


@egress_group.command("list")
@click.argument("folder", required=False)
def egress_list(folder):
    """The hosts of one agent, or of every agent."""
    require_schema()
    agents = [get_agent(folder)] if folder else list(AgentGroup.select().order_by(AgentGroup.folder))
    rows = []
    for agent in agents:
        try:
            rows += [[agent.folder, host] for host in edits.current(settings(), agent)[0]]
        except edits.EditRefused as exc:
            raise Mistake(str(exc)) from None
    print_table(["AGENT", "HOST"], rows, empty="no agent may reach any host (add one with `egress add AGENT HOST`)")


@egress_group.command("add")
@click.argument("folder")
@click.argument("host")
@WHY
def egress_add(folder, host, why):
    """Let agent FOLDER reach HOST over HTTPS (e.g. api.github.com, *.example.org, 10.0.0.5:8443)."""
    diff = policy_edit("allow_host", folder, host, why)
    click.echo(f"{folder} may reach {host} from its next request" if diff else f"{folder} may reach {host} already")


@egress_group.command("remove")
@click.argument("folder")
@click.argument("host")
@WHY
def egress_remove(folder, host, why):
    """Take HOST away from agent FOLDER (its next request there is refused)."""
    policy_edit("revoke_host", folder, host, why)
    click.echo(f"{folder} may no longer reach {host}")
