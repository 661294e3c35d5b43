"""The proposal rules the runner checks inside the sandbox, for the host to check them again.

One definition (container/agent_runner/proposal_rules.py, stdlib only) serves both sides, the way
session_schema does.
"""
from agent_runner.proposal_rules import (  # container/ is on sys.path: see nanoclaw/__init__.py
    MAX_PACKAGES, HostEntry, RuleError, check_agent, check_host_entry, check_hostname, check_mcp_server,
    check_packages, check_path_prefix, check_port, check_route_match, check_secret_name, check_text,
    check_upstream, split_host_port)

__all__ = ["MAX_PACKAGES", "HostEntry", "RuleError", "check_agent", "check_host_entry", "check_hostname",
           "check_mcp_server", "check_packages", "check_path_prefix", "check_port", "check_route_match",
           "check_secret_name", "check_text", "check_upstream", "split_host_port"]
