"""The page's "modify" form of a proposal: its fields, prefilled with the current values, and the
payload the submitted form stands for. Pure: proposals.modify checks the result like the agent's own.

Lists are typed space- or comma-separated (package and variable names have no spaces); MCP args one per line
(an argument may contain spaces). A credential route's secret is a variable NAME; no value is ever
asked for or shown.
"""
from __future__ import annotations

from ..approvals.pending import FormField

EDITABLE = ("egress", "credential_route", "install_packages", "mcp_server")

WHY = FormField("why", "Why you changed it (optional; the agent is told)", multiline=True)


def fields(kind: str, payload: dict, reason: str) -> tuple[FormField, ...]:
    """The form of one proposal, or () when the page does not modify this kind."""
    if kind == "egress":
        own = (FormField("host", "Host", payload["host"], "api.example.com, host:port or *.example.com",
                         required=True),)
    elif kind == "credential_route":
        own = (FormField("match", "Host or path", payload["match"],
                         "a host (api.github.com) or a path prefix of the proxy (/github/)", required=True),
               FormField("upstream", "Upstream", payload["upstream"], "https://host[:port][/base]", required=True),
               FormField("secret", "Secret name", payload["secret"],
                         "the host environment variable that holds the token (its value never shows here)",
                         required=True))
    elif kind == "install_packages":
        own = (FormField("apt", "apt packages", " ".join(payload["apt"]), "space-separated"),
               FormField("npm", "npm packages", " ".join(payload["npm"]), "space-separated"),
               FormField("pip", "pip packages", " ".join(payload.get("pip", [])), "space-separated PyPI names"),
               FormField("reason", "Reason", reason, multiline=True))
    elif kind == "mcp_server":
        own = (FormField("name", "Name", payload["name"], required=True),
               FormField("command", "Command", payload["command"], required=True),
               FormField("args", "Arguments", "\n".join(payload["args"]), "one per line", multiline=True),
               FormField("env", "Environment variable names", " ".join(payload["env"]),
                         "space-separated; taken from the sandbox's own environment"))
    else:
        return ()
    return own + (WHY,)


def parse(kind: str, values: dict[str, str]) -> tuple[dict, str | None]:
    """(payload, reason or None to keep the agent's) from the submitted form, unchecked."""
    get = lambda name: (values.get(name) or "").strip()  # noqa: E731
    names = lambda name: get(name).replace(",", " ").split()  # noqa: E731
    if kind == "egress":
        return {"host": get("host")}, None
    if kind == "credential_route":
        return {"match": get("match"), "upstream": get("upstream"), "secret": get("secret")}, None
    if kind == "install_packages":
        return {"apt": names("apt"), "npm": names("npm"), "pip": names("pip")}, get("reason")
    if kind == "mcp_server":
        args = [line.rstrip("\r") for line in (values.get("args") or "").split("\n")]
        return {"name": get("name"), "command": get("command"), "args": [a for a in args if a.strip()],
                "env": names("env")}, None
    raise ValueError(f"the page does not modify {kind} proposals")
