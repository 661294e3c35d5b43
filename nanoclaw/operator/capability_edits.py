"""The operator's own changes to an agent's packages and MCP servers, from the agent's page.

Each goes through the rules an agent's proposal meets (checks.check_payload), takes effect the way
an approval does (apply.set_packages / the group's container_config), restarts the group's running
sandboxes on the same conversation, tells the agent what changed and why, and is audited with who,
why and the diff. Installing runs in the request: pip wheels take seconds, an image build a minute.
"""
from __future__ import annotations

from ..db import database
from ..inbound import lookups
from ..models import AgentGroup, audit
from ..proposal_rules import RuleError
from . import checks
from .apply import ApplyError, set_packages
from .common import tell_agent
from .restart import runtime_for, stop_group


class CapabilityRefused(ValueError):
    """The change breaks a rule or could not be applied; the message says which."""


def _restart_and_tell(settings, agent: AgentGroup, text: str, message_id: str, wake) -> None:
    try:
        restarted = stop_group(settings, agent, runtime_for(settings, wake.manager))
    except Exception:  # noqa: BLE001 - no runtime here: the next start has the change anyway
        restarted = []
    for session in restarted:
        tell_agent(settings, session, text, message_id=f"{message_id}:{session.id}", wake=wake)


def _who(actor: str) -> str:
    return "The owner" if lookups.is_owner(actor) else "An admin"


def _why(why: str | None) -> str:
    return f" ({why})." if why else "."


def _packages(agent: AgentGroup) -> dict[str, list[str]]:
    have = (agent.container_config or {}).get("packages") or {}
    return {m: list(have.get(m, [])) for m in checks.PACKAGE_MANAGERS}


def add_packages(settings, actor: str, agent: AgentGroup, manager: str, names: str, why: str | None = None,
                 *, wake) -> list[str]:
    if manager not in checks.PACKAGE_MANAGERS:
        raise CapabilityRefused(f"{manager!r} is not a package manager here ({', '.join(checks.PACKAGE_MANAGERS)})")
    try:
        payload = checks.check_payload("install_packages", {manager: names})
    except RuleError as exc:
        raise CapabilityRefused(str(exc)) from None
    have = _packages(AgentGroup.get_by_id(agent.id))
    new = [p for p in payload[manager] if p not in have[manager]]
    if not new:
        return []
    wanted = {**have, manager: sorted(have[manager] + new)}
    try:
        checks.check_payload("install_packages", wanted)  # all of them together obey the rules too
        set_packages(settings, agent, wanted, {manager: new})
    except RuleError as exc:
        raise CapabilityRefused(f"together with what is installed already: {exc}") from None
    except ApplyError as exc:
        raise CapabilityRefused(str(exc)) from None
    diff = [f"+ {manager}: {p}" for p in new]
    audit(actor, "packages.add", agent.folder, diff=diff, **({"why": why} if why else {}))
    _restart_and_tell(settings, agent, f"{_who(actor)} installed {manager} packages for you: {' '.join(new)}; your sandbox "
                      "restarted with them" + _why(why), f"packages-added:{manager}:{' '.join(new)}", wake)
    return diff


def remove_package(settings, actor: str, agent: AgentGroup, manager: str, name: str, why: str | None = None,
                   *, wake) -> list[str]:
    have = _packages(AgentGroup.get_by_id(agent.id))
    if name not in have.get(manager, []):
        raise CapabilityRefused(f"{agent.folder} has no {manager} package {name!r}")
    wanted = {**have, manager: [p for p in have[manager] if p != name]}
    try:
        set_packages(settings, agent, wanted, {manager: [name]})
    except ApplyError as exc:
        raise CapabilityRefused(str(exc)) from None
    diff = [f"- {manager}: {name}"]
    audit(actor, "packages.remove", agent.folder, diff=diff, **({"why": why} if why else {}))
    _restart_and_tell(settings, agent, f"{_who(actor)} removed the {manager} package {name}; your sandbox restarted "
                      "without it" + _why(why), f"package-removed:{manager}:{name}", wake)
    return diff


def _server_line(server: dict) -> str:
    return f"{server['name']}: {server.get('command', '')} {' '.join(server.get('args', []))}".rstrip()


def _set_server(agent: AgentGroup, name: str, server: dict | None) -> dict | None:
    """Put (or with None, remove) one MCP server in the group's config; returns the one it replaced."""
    with database.atomic():
        fresh = AgentGroup.get_by_id(agent.id)
        config = dict(fresh.container_config or {})
        servers = dict(config.get("mcp_servers") or {})
        old = servers.pop(name, None)
        if server is None and old is None:
            return None
        if server is not None:
            servers[name] = server
        config["mcp_servers"] = servers
        AgentGroup.update(container_config=config).where(AgentGroup.id == agent.id).execute()
    return old


def add_mcp_server(settings, actor: str, agent: AgentGroup, name: str, command: str, args: list[str],
                   env: list[str], why: str | None = None, *, wake) -> list[str]:
    """Add or change an MCP server (stdio, started by the agent's CLI inside its sandbox)."""
    try:
        server = checks.check_payload("mcp_server", {"name": name, "command": command, "args": args, "env": env})
    except RuleError as exc:
        raise CapabilityRefused(str(exc)) from None
    old = _set_server(agent, server["name"], server)
    if old == server:
        return []
    diff = ([f"- {_server_line(old)}"] if old else []) + [f"+ {_server_line(server)}"]
    audit(actor, "mcp.add", agent.folder, diff=diff, server=server["name"], **({"why": why} if why else {}))
    _restart_and_tell(settings, agent, f"{_who(actor)} {'changed' if old else 'added'} the MCP server {server['name']}; your "
                      f"sandbox restarted and its tools are available as mcp__{server['name']}__*" + _why(why),
                      f"mcp-added:{server['name']}", wake)
    return diff


def remove_mcp_server(settings, actor: str, agent: AgentGroup, name: str, why: str | None = None,
                      *, wake) -> list[str]:
    """Take an MCP server away: its sandboxes restart without it (the conversation goes on, and the
    agent is told why it is gone)."""
    old = _set_server(agent, name, None)
    if old is None:
        raise CapabilityRefused(f"{agent.folder} has no MCP server {name!r}")
    diff = [f"- {_server_line({'name': name, **old})}"]
    audit(actor, "mcp.remove", agent.folder, diff=diff, server=name, **({"why": why} if why else {}))
    _restart_and_tell(settings, agent, f"{_who(actor)} removed the MCP server {name}; your sandbox restarted without "
                      "it" + _why(why), f"mcp-removed:{name}", wake)
    return diff
