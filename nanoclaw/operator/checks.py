"""The host's own check of a proposal (the sandbox is not trusted) and the readable diff of its
effect. Pure: the current state is passed in. A diff names hosts, routes, packages and variable
names, never a secret value."""
from __future__ import annotations

import shlex

from ..proposal_rules import (RuleError, check_agent, check_host_entry, check_mcp_server, check_packages,
                              check_route_match, check_secret_name, check_text, check_upstream)

KINDS = {
    "egress": "Network access",
    "credential_route": "Credential route",
    "install_packages": "Packages",
    "mcp_server": "MCP server",
    "create_agent": "New agent",
    "skill": "Skill",
}
SKILL_FIELDS = ("name", "description", "hash", "files", "flags", "excerpt")  # the host's reading, never the agent's

PACKAGE_MANAGERS = ("apt", "npm", "pip")


def check_payload(kind: str, payload) -> dict:
    """The normalised payload, or RuleError."""
    if kind not in KINDS:
        raise RuleError(f"unknown proposal kind {kind!r}")
    if not isinstance(payload, dict):
        raise RuleError("the proposal has no payload")
    if kind == "egress":
        return {"host": str(check_host_entry(str(payload.get("host") or "")))}
    if kind == "credential_route":
        return {"match": check_route_match(str(payload.get("match") or "")),
                "upstream": check_upstream(str(payload.get("upstream") or "")),
                "secret": check_secret_name(str(payload.get("secret") or ""))}
    if kind == "install_packages":
        apt, npm, pip = check_packages(payload.get("apt"), payload.get("npm"), payload.get("pip"))
        return {"apt": apt, "npm": npm, "pip": pip}
    if kind == "mcp_server":
        return check_mcp_server(payload.get("name"), payload.get("command"), payload.get("args"),
                                payload.get("env"))
    if kind == "skill":
        return check_skill(payload)
    name, instructions = check_agent(payload.get("name"), payload.get("instructions"))
    return {"name": name, "instructions": instructions}


def check_skill(payload: dict) -> dict:
    """A folder of the agent's workspace, or a source it names (URL#COMMIT[:FOLDER]), exactly one; the
    host's reading of it is kept as it is when the payload is the host's own record (written by
    skill_proposals, never taken from the agent: the delivery replaces it)."""
    if bool(payload.get("folder")) == bool(payload.get("source")):
        raise RuleError("name either a folder of your working folder or a source (https://host/repo#COMMIT)")
    read = {k: payload[k] for k in SKILL_FIELDS if k in payload}
    if read and (set(read) != set(SKILL_FIELDS) or not isinstance(read["files"], list)):
        raise RuleError("the host's reading of this skill is incomplete; propose it again")
    if payload.get("source"):
        return {"source": check_text(str(payload["source"]), "source", 500), **read}
    folder = check_text(str(payload.get("folder") or "").removeprefix("/workspace/group/"), "folder", 200)
    parts = folder.split("/")
    if folder.startswith("/") or ".." in parts or "" in parts:
        raise RuleError("folder: a path inside your working folder (e.g. skills/pdf-tools), without ..")
    return {"folder": folder, **read}


def check_reason(reason) -> str:
    return check_text(reason if isinstance(reason, str) else "", "reason", required=False)


def route_line(payload: dict) -> str:
    return (f"{payload['match']} -> {payload['upstream']} with Authorization: Bearer ${payload['secret']}")


FIELD_LABELS = {"host": "host", "match": "host or path", "upstream": "upstream", "secret": "secret name",
                "apt": "apt packages", "npm": "npm packages", "name": "name", "command": "command",
                "args": "args", "env": "env names", "instructions": "instructions", "reason": "reason"}


def _shown(key: str, value) -> str:
    if isinstance(value, (list, tuple)):
        return (shlex.join(value) if key == "args" else " ".join(value)) or "(none)"
    text = " ".join(str(value or "").split())
    return (text if len(text) <= 120 else text[:119] + "…") or "(empty)"


def field_changes(old: dict, new: dict) -> list[str]:
    """'label: old → new' for each field that differs. Payloads hold names, never secret values."""
    keys = list(new) + [k for k in old if k not in new]
    return [f"{FIELD_LABELS.get(k, k)}: {_shown(k, old.get(k))} → {_shown(k, new.get(k))}"
            for k in keys if old.get(k) != new.get(k)]


def granted_secret(kind: str, payload: dict) -> str | None:
    """The host secret a proposal would let the agent use (a credential route's), if any."""
    return payload.get("secret") if kind == "credential_route" else None


def owner_only(kind: str, payload: dict, delegated) -> bool:
    """Only the owner may grant a host secret that was not given to this agent's admins."""
    if kind in ("skill", "create_agent"):  # instructions the agent runs on, a new agent: the owner's call
        return True
    secret = granted_secret(kind, payload)
    return secret is not None and secret not in set(delegated)


def owner_only_line(kind: str, payload: dict) -> str:
    if kind == "skill":
        return "Only the owner can approve a skill: its instructions become this agent's."
    if kind == "create_agent":
        return "Only the owner can approve a new agent."
    return (f"Only the owner can approve this: ${granted_secret(kind, payload)} is a host secret this agent's "
            "admins were not given (flask --app app nanoclaw credentials delegate AGENT NAME gives one).")


def summary(kind: str, payload: dict) -> str:
    """One line for a card title and the agent's messages."""
    if kind == "egress":
        return f"allow HTTPS to {payload['host']}"
    if kind == "credential_route":
        return f"a credential route {payload['match']} -> {payload['upstream']} (token ${payload['secret']})"
    if kind == "install_packages":
        parts = [f"{m} {' '.join(payload.get(m, []))}" for m in PACKAGE_MANAGERS if payload.get(m)]
        return "install " + "; ".join(parts)
    if kind == "mcp_server":
        return f"add the MCP server {payload['name']}"
    if kind == "skill" and "hash" not in payload:
        return f"fetch a skill from {payload['source'][:200]}"
    if kind == "skill":
        return f"add the skill {payload['name']} (sha256:{payload['hash'][:12]}…)"
    return f"create the agent {payload['name']!r}"


def diff(kind: str, payload: dict, current: dict) -> list[str]:
    """What changes, as '- old' / '+ new' lines. `current` holds what the diff compares against:
    egress: {"allow": [...]}, credential_route: {"routes": [readable lines]}, install_packages:
    {"apt": [...], "npm": [...], "image": tag, "new_image": tag}, mcp_server: {"servers": {...}}."""
    if kind == "egress":
        before = list(current.get("allow", []))
        return [f"  {h}" for h in before] + ([] if payload["host"] in before else [f"+ {payload['host']}"])
    if kind == "credential_route":
        same = [r for r in current.get("routes", []) if r.split(" -> ", 1)[0] == payload["match"]]
        return [f"- {r}" for r in same] + [f"+ {route_line(payload)}"]
    if kind == "install_packages":
        lines = []
        for manager in PACKAGE_MANAGERS:
            have = set(current.get(manager, []))
            new = [p for p in payload.get(manager, []) if p not in have]
            if new:
                lines.append(f"+ {manager}: {' '.join(new)}")
            kept = sorted(have)
            if kept:
                lines.append(f"  {manager} (already): {' '.join(kept)}")
        if current.get("image") and current.get("new_image"):
            lines.append(f"- image {current['image']}")
            lines.append(f"+ image {current['new_image']} (rebuilt; the sandbox restarts)")
        if current.get("prefix"):
            lines.append(f"  {current['prefix']}")
        return lines
    if kind == "mcp_server":
        old = current.get("servers", {}).get(payload["name"])
        line = f"{payload['name']}: {payload['command']} {' '.join(payload['args'])}".rstrip()
        if payload["env"]:
            line += f" (env from the sandbox: {', '.join(payload['env'])})"
        out = [f"- {old['name']}: {old['command']} {' '.join(old.get('args', []))}".rstrip()] if old else []
        return out + [f"+ {line}", "  (the sandbox restarts; the conversation goes on)"]
    if kind == "skill":
        from .skill_proposals import diff as skill_diff
        if "hash" in payload:
            return skill_diff(payload, current)
        return [f"+ fetch {payload['source']} on the host (git over https, that commit only)",
                "  nothing is installed yet: a second card shows its files, hash and flags"]
    text = payload["instructions"]
    short = text if len(text) <= 300 else text[:299] + "…"
    return [f"+ agent {payload['name']!r}"] + ([f"  instructions: {short}"] if short else [])
