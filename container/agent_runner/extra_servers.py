"""MCP servers the owner approved for this agent group (add_mcp_server), started by the CLI over
stdio inside this sandbox. The host passes them as NANOCLAW_MCP_SERVERS (JSON, never a secret):
{name: {"command", "args", "env": [variable names taken from this sandbox's environment]}}."""
from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping

from .proposal_rules import RuleError, check_mcp_server

log = logging.getLogger("agent_runner.extra_servers")


def extra_mcp_servers(env: Mapping[str, str] | None = None) -> dict:
    env = os.environ if env is None else env
    raw = env.get("NANOCLAW_MCP_SERVERS")
    if not raw:
        return {}
    try:
        declared = json.loads(raw)
    except ValueError:
        log.warning("NANOCLAW_MCP_SERVERS is not JSON; no extra MCP servers")
        return {}
    servers = {}
    for name, spec in (declared.items() if isinstance(declared, dict) else []):
        try:
            ok = check_mcp_server(name, (spec or {}).get("command"), spec.get("args"), spec.get("env"))
        except (RuleError, AttributeError) as exc:
            log.warning("extra MCP server %r skipped: %s", name, exc)
            continue
        servers[ok["name"]] = {"type": "stdio", "command": ok["command"], "args": ok["args"],
                               "env": {var: env[var] for var in ok["env"] if var in env}}
    return servers
