"""What each agent may reach of the web, and the record of what it read."""
from __future__ import annotations

import click

from ..models import AgentGroup
from ..reading import settings as reading
from ..reading.access import READ_MODES, SWITCH
from .base import WHY, Mistake, get_agent, group, print_table, require_schema, settings


@group("internet")
def internet_group():
    """What agents may reach of the web: reading pages, searching, and a browser for pages that need JavaScript."""


@internet_group.command("set")
@click.argument("folder")
@click.option("--read", type=click.Choice(READ_MODES), help="on: any public page; listed: only the hosts on the agent's "
                                                            "egress allowlist; off: none.")
@click.option("--search", type=click.Choice(SWITCH), help="Web search through the provider NANOCLAW_SEARCH names.")
@click.option("--browser", type=click.Choice(SWITCH), help="A browser for pages that need JavaScript: a sandboxed Chromium on the host.")
@WHY
def internet_set(folder, read, search, browser, why):
    """Change what the agent FOLDER may reach. Takes effect at its next read; the tools it is offered
    change at its next sandbox start.

    \b
    Example:
      flask --app app nanoclaw internet set andy --read listed --why "only the docs site"
    """
    require_schema()
    if read is None and search is None and browser is None:
        raise Mistake("say what to change: --read, --search or --browser")
    agent = get_agent(folder)
    try:
        after = reading.change("cli", agent, read=read, search=search, browser=browser, why=why)
    except ValueError as exc:
        raise Mistake(str(exc)) from None
    click.echo(f"{agent.folder}: read {after.read}, search {after.search}, browser {after.browser}")


@internet_group.command("show")
@click.argument("folder", required=False)
def internet_show(folder):
    """What each agent (or FOLDER) may reach."""
    require_schema()
    agents = [get_agent(folder)] if folder else list(AgentGroup.select().order_by(AgentGroup.folder))
    rows = []
    for agent in agents:
        access = reading.current(agent, settings().search != "none")
        rows.append([agent.folder, access.read, access.search, access.browser])
    print_table(["agent", "read", "search", "browser"], rows, empty="no agents yet")


@internet_group.command("log")
@click.argument("folder", required=False)
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
def internet_log(folder, limit):
    """The latest reads (of FOLDER's agent, or of all): when, which session, the URL, the page's status,
    bytes read and the outcome. The page's text is never kept."""
    require_schema()
    if folder:
        get_agent(folder)
    rows = [[f"{f.fetched_at:%Y-%m-%d %H:%M:%S}", f.agent_folder, f.session_id[:12], f.tool, f.url[:80],
             "" if f.status is None else str(f.status), str(f.bytes), f.outcome[:60]] for f in reading.fetches(folder, limit)]
    print_table(["when (UTC)", "agent", "session", "tool", "url", "status", "bytes", "outcome"], rows,
                empty="nothing read yet")
