"""The proposal rules the runner checks inside the sandbox, for the host to check them again.

One definition (container/agent_runner/proposal_rules.py, stdlib only) serves both sides, the way
session_schema does. The host adds what only it knows: every chat platform's secret prefixes (the
registry), which no agent may be granted or ask an MCP server for.
"""
from agent_runner import proposal_rules as _rules
from agent_runner.proposal_rules import (  # the runner is a package of this project (pyproject.toml)
    MAX_PACKAGES, HostEntry, RuleError, check_agent, check_host_entry, check_hostname, check_packages,
    check_path_prefix, check_port, check_route_match, check_text, check_upstream, split_host_port)

from .platforms import secret_prefixes

# More names only the host may use, known where settings are (each model upstream's secret name):
# the app factory adds a source here (create_app), read at every check, so an upstream added while a
# program runs is reserved at once.
_more_reserved: list = []


def reserve(source) -> None:
    """source() -> names (or prefixes) no agent may ask a credential route or an MCP server for."""
    _more_reserved[:] = [source]


def reserved() -> tuple[str, ...]:
    extra: tuple[str, ...] = ()
    for source in _more_reserved:
        try:
            extra += tuple(source())
        except Exception:  # noqa: BLE001 - a source that cannot answer reserves nothing more
            pass
    return secret_prefixes() + extra


def check_secret_name(raw: str) -> str:
    return _rules.check_secret_name(raw, reserved=reserved())


def check_mcp_server(name, command, args=None, env=None) -> dict:
    return _rules.check_mcp_server(name, command, args, env, reserved=reserved())


__all__ = ["reserve", "reserved", "MAX_PACKAGES", "HostEntry", "RuleError", "check_agent", "check_host_entry", "check_hostname",
           "check_mcp_server", "check_packages", "check_path_prefix", "check_port", "check_route_match",
           "check_secret_name", "check_text", "check_upstream", "split_host_port"]
