"""`destination add|list|remove`: named places an agent may send to besides the chat it answers.

Every chat the agent is wired to is a destination already (named after the chat); these commands
name others. A change reaches the agent's sessions at once (their inbound.db) and the agent sees it
in the error a wrong `to` gets, or in its prompt from its next start."""
from __future__ import annotations

import click

from ..models import AgentDestination
from ..sessions import destinations
from .base import CHAT_ID_ARGS, Mistake, get_agent, group, print_table, require_schema, settings


@group("destination")
def destination_group():
    """Named places an agent may send to (`to` of send_message, send_file, send_card)."""


@destination_group.command("add", context_settings=CHAT_ID_ARGS)
@click.argument("agent_folder")
@click.argument("name")
@click.argument("channel")
@click.argument("chat_id")
@click.option("--thread", help="A thread or topic id in that chat.")
def destination_add(agent_folder, name, channel, chat_id, thread):
    """Let AGENT_FOLDER send to CHANNEL CHAT_ID under NAME.

    \b
    Example: flask --app app nanoclaw destination add andy family telegram -1001234567
    """
    require_schema()
    agent = get_agent(agent_folder)
    try:
        destinations.add("cli", agent, name, channel, chat_id, thread)
    except destinations.DestinationError as exc:
        raise Mistake(str(exc)) from None
    synced = destinations.sync_agent(settings().sessions_dir, agent)
    click.echo(f"{agent.folder} may send to {name} ({channel}:{chat_id}{' thread ' + thread if thread else ''}); "
               f"{synced} session(s) updated")


@destination_group.command("list")
@click.argument("agent_folder", required=False)
def destination_list(agent_folder):
    """The destinations of one agent, or of every agent (wired chats included)."""
    require_schema()
    from ..models import AgentGroup
    agents = [get_agent(agent_folder)] if agent_folder else list(AgentGroup.select().order_by(AgentGroup.folder))
    rows = []
    for agent in agents:
        named = {r.name for r in AgentDestination.select().where(AgentDestination.agent_group == agent)}
        for name, (target, label) in destinations.destinations_of(agent.id).items():
            where = f"{target.channel_type}:{target.platform_id}" + (f" thread {target.thread_id}" if target.thread_id
                                                                    else "")
            rows.append([agent.folder, name, where, "added" if name in named else "wired chat", label])
    print_table(["agent", "name", "where", "why", "shown as"], rows,
                empty="no destinations (wire a chat, or add one with `destination add`)")


@destination_group.command("remove")
@click.argument("agent_folder")
@click.argument("name")
def destination_remove(agent_folder, name):
    """Remove a destination you added (a wired chat stays one until it is unwired)."""
    require_schema()
    agent = get_agent(agent_folder)
    try:
        destinations.remove("cli", agent, name)
    except destinations.DestinationError as exc:
        raise Mistake(f"{exc} (see `destination list {agent.folder}`)") from None
    synced = destinations.sync_agent(settings().sessions_dir, agent)
    click.echo(f"removed {name} from {agent.folder}; {synced} session(s) updated")
