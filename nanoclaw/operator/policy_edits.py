"""The operator's own changes to what an agent may reach: egress hosts and credential routes, from
the CLI (`egress …`, `credentials add|remove`) and the agent's page. Each is checked by the same
rules as an agent's proposal, written so the proxy applies it on the very next request, and
audited with who, why and the before/after (names only, never a secret's value)."""
from __future__ import annotations

from ..models import AgentGroup, audit
from ..proposal_rules import RuleError
from ..proxy import policy_files
from ..proxy.policy_files import (EGRESS_FILE, ROUTES_FILE, add_egress, diff_lines, group_file, policy_root, put_route,
                                  read_policy_file, remove_egress)


class EditRefused(ValueError):
    """The change breaks a rule or the file on disk is broken; the message says which."""


def _done(actor: str, action: str, agent: AgentGroup, before: list[str], after: list[str], why: str | None,
          **detail) -> list[str]:
    diff = diff_lines(before, after)
    if diff:
        audit(actor, action, agent.folder, diff=diff, **detail, **({"why": why} if why else {}))
    return diff


def current(settings, agent: AgentGroup) -> tuple[list[str], list]:
    """(egress entries, credential routes) as the proxy reads them now; EditRefused when a file is broken."""
    root = policy_root(settings)
    try:
        egress = read_policy_file(group_file(root, agent.folder, EGRESS_FILE)).as_list()
        routes = list(read_policy_file(group_file(root, agent.folder, ROUTES_FILE)).routes)
    except RuleError as exc:
        raise EditRefused(f"a policy file of {agent.folder} is invalid, fix it by hand first: {exc}") from None
    return egress, routes


def allow_host(settings, actor: str, agent: AgentGroup, host: str, why: str | None = None) -> list[str]:
    try:
        before, after = add_egress(policy_root(settings), agent.folder, host)
    except RuleError as exc:
        raise EditRefused(str(exc)) from None
    return _done(actor, "egress.add", agent, before, after, why, host=host)


def revoke_host(settings, actor: str, agent: AgentGroup, host: str, why: str | None = None) -> list[str]:
    try:
        before, after = remove_egress(policy_root(settings), agent.folder, host)
    except RuleError as exc:
        raise EditRefused(str(exc)) from None
    if before == after:
        raise EditRefused(f"{agent.folder} is not allowed {host!r} (see `egress list {agent.folder}`)")
    return _done(actor, "egress.remove", agent, before, after, why, host=host)


def put(settings, actor: str, agent: AgentGroup, match: str, upstream: str, secret: str,
        why: str | None = None) -> list[str]:
    try:
        before, after = put_route(policy_root(settings), agent.folder,
                                  {"match": match, "upstream": upstream, "secret": secret})
    except RuleError as exc:
        raise EditRefused(str(exc)) from None
    return _done(actor, "credentials.route_add", agent, before, after, why, match=match, secret=secret)


def remove_route(settings, actor: str, agent: AgentGroup, match: str, why: str | None = None) -> list[str]:
    try:
        before, after = policy_files.remove_route(policy_root(settings), agent.folder, match)
    except RuleError as exc:
        raise EditRefused(f"the credential routes of {agent.folder} are invalid, fix them first: {exc}") from None
    if before == after:
        raise EditRefused(f"{agent.folder} has no credential route {match!r} (see `credentials list {agent.folder}`)")
    return _done(actor, "credentials.route_remove", agent, before, after, why, match=match)
