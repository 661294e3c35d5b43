"""Host secrets an agent may use through credential routes, and who may grant them.

A credential route lets an agent use a host secret (named in .env or the environment; the value never
leaves the host). Only the owner may approve a route for a secret the agent's admins were not given;
`delegate` gives them one (stored by name in the agent's container_config.admin_secrets)."""
from __future__ import annotations

import click

from ..db import database
from ..models import AgentGroup, audit
from ..proposal_rules import RuleError, check_secret_name
from ..proxy.policy_files import ROUTES_FILE, group_file, policy_root, read_policy_file
from .base import WHY, Mistake, get_agent, group, policy_edit, print_table, require_schema, settings


@group("credentials")
def credentials_group():
    """Credential routes and the host secrets an agent's admins may grant."""


def _delegated(agent: AgentGroup) -> list[str]:
    return list((agent.container_config or {}).get("admin_secrets", []))


def _save(agent: AgentGroup, names: list[str]) -> None:
    config = dict(agent.container_config or {})
    config["admin_secrets"] = sorted(set(names))
    AgentGroup.update(container_config=config).where(AgentGroup.id == agent.id).execute()


def _secret(name: str) -> str:
    try:
        return check_secret_name(name)
    except RuleError as exc:
        raise Mistake(str(exc)) from None


def _set_delegated(folder: str, secret_name: str, delegated: bool) -> str:
    require_schema()
    agent, name = get_agent(folder), _secret(secret_name)
    names = _delegated(agent)
    if not delegated and name not in names:
        raise Mistake(f"admins of {folder} were not given ${name}")
    with database.atomic():
        _save(agent, names + [name] if delegated else [n for n in names if n != name])
        audit("cli", "credentials.delegate" if delegated else "credentials.undelegate", folder, secret=name)
    return name


@credentials_group.command("delegate")
@click.argument("folder")
@click.argument("secret_name")
def delegate(folder, secret_name):
    """Let admins of agent FOLDER approve credential routes that use SECRET_NAME (a name, never a value)."""
    name = _set_delegated(folder, secret_name, True)
    click.echo(f"admins of {folder} may now grant ${name} to it; other secrets still need the owner")


@credentials_group.command("undelegate")
@click.argument("folder")
@click.argument("secret_name")
def undelegate(folder, secret_name):
    """Take SECRET_NAME back: only the owner may grant it to agent FOLDER again."""
    name = _set_delegated(folder, secret_name, False)
    click.echo(f"only the owner may grant ${name} to {folder} now")


@credentials_group.command("list")
@click.argument("folder", required=False)
def credentials_list(folder):
    """Each agent's credential routes (secret names only) and the secrets its admins may grant."""
    require_schema()
    agents = [get_agent(folder)] if folder else list(AgentGroup.select().order_by(AgentGroup.folder))
    rows = []
    for agent in agents:
        try:
            routes = read_policy_file(group_file(policy_root(settings()), agent.folder, ROUTES_FILE)).routes
        except RuleError as exc:
            raise Mistake(f"{agent.folder}: {exc}") from None
        rows += [[agent.folder, "route", r.describe()] for r in routes]
        rows += [[agent.folder, "admins may grant", f"${n}"] for n in _delegated(agent)]
    print_table(["AGENT", "KIND", "WHAT"], rows, empty="no credential routes and no delegated secrets")


@credentials_group.command("add")
@click.argument("folder")
@click.argument("match")
@click.argument("upstream")
@click.argument("secret_name")
@WHY
def credentials_add(folder, match, upstream, secret_name, why):
    """Give agent FOLDER a credential route: requests to MATCH (a /path/ prefix on $NANOCLAW_PROXY_URL,
    or a host name reached through http_proxy) go to UPSTREAM with the host's $SECRET_NAME added.

    \b
    Example: flask --app app nanoclaw credentials add andy /github/ https://api.github.com GITHUB_TOKEN
    """
    policy_edit("put", folder, match, upstream, _secret(secret_name), why)
    click.echo(f"{folder}: {match} -> {upstream} with ${secret_name}, from its next request")


@credentials_group.command("remove")
@click.argument("folder")
@click.argument("match")
@WHY
def credentials_remove(folder, match, why):
    """Remove agent FOLDER's credential route MATCH (its next request there is refused)."""
    policy_edit("remove_route", folder, match, why)
    click.echo(f"{folder} no longer has the route {match}")
