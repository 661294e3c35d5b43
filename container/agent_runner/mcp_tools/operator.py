"""Operator tools: ask the owner for help, or propose a change to what this agent may do.

Every tool writes one system row to outbound.db (ours); the host turns it into a help request or a
pending proposal with a card for the owner. Nothing here changes anything by itself: the host
checks each proposal again, the owner approves, and only then is it applied.

- ask_operator(text) waits up to 60 s for the owner's reply (an `answer` row in inbound.db with
  content.help_ref); after that it returns "pending, id=…" and the reply arrives later as a new
  message.
- propose_egress / propose_credential_route / install_packages / add_mcp_server / create_agent
  return at once with the proposal's id; the decision arrives later as a system message.
"""
from __future__ import annotations

import time
import uuid

from .. import proposal_rules as rules
from .. import session_schema as schema
from ..store import SessionStore
from .context import ToolContext, ToolError, find_answer_row

HELP_WAIT_S = 60
POLL_S = 0.1
HEARTBEAT_S = 5.0


def _ref() -> str:
    return uuid.uuid4().hex[:12]


def _checked(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except rules.RuleError as exc:
        raise ToolError(str(exc)) from None


def _write(ctx: ToolContext, content: dict, store: SessionStore | None = None) -> None:
    store = store or ctx.store
    target = store.routing() or ctx.default_target()  # the host decides where the owner's card goes
    if target is None:
        raise ToolError("this session has no chat, so there is nobody to ask")
    store.write_out(content, target, in_reply_to=ctx.turn.in_reply_to, kind="system")


# --- ask_operator -----------------------------------------------------------------------------

def ask_operator(ctx: ToolContext, text: str, wait_seconds=HELP_WAIT_S) -> str:
    text = _checked(rules.check_text, text, "text")
    try:
        wait_s = min(max(float(wait_seconds), 0.0), HELP_WAIT_S)
    except (TypeError, ValueError):
        raise ToolError(f"wait_seconds must be a number of seconds, not {wait_seconds!r}") from None
    ref = _ref()
    own = ctx.store.sibling()  # runs on a worker thread: connections of its own
    try:
        _write(ctx, {"op": "help_request", "ref": ref, "text": text}, own)
        answer = _wait(own, ref, time.monotonic() + wait_s)
    finally:
        own.close()
    if answer is None:
        return (f"pending, id={ref}. The operator has not answered within {wait_s:g} s. Their answer "
                "will arrive as a later message; until then carry on with what you can, or end your turn.")
    return f"The operator ({answer.get('sender') or 'owner'}) answered: {answer.get('answer', '')}"


def _wait(own: SessionStore, ref: str, deadline: float) -> dict | None:
    conn, last_beat = None, 0.0
    try:
        while True:
            now = time.monotonic()
            if now - last_beat >= HEARTBEAT_S:
                own.touch_heartbeat()  # the host's stuck detection sees a live sandbox
                last_beat = now
            if conn is None and own.inbound_path.exists():
                conn = schema.connect(own.inbound_path, readonly=True)
            found = find_answer_row(conn, "help_ref", ref) if conn is not None else None
            if found:
                own.complete([found[0]])  # read here: the poll loop must not take it for a new message
                return found[1]
            if now >= deadline:
                return None
            time.sleep(min(POLL_S, max(0.0, deadline - now)))
    finally:
        if conn is not None:
            conn.close()


ask_operator.blocking = True


# --- proposals --------------------------------------------------------------------------------

def _propose(ctx: ToolContext, kind: str, payload: dict, reason, summary: str) -> str:
    reason = _checked(rules.check_text, reason, "reason", rules.MAX_TEXT, required=False)
    ref = _ref()
    _write(ctx, {"op": "proposal", "ref": ref, "kind": kind, "payload": payload, "reason": reason})
    return (f"Proposal id={ref} queued for the owner: {summary}. Nothing has changed yet; when the owner "
            "decides you get a system message saying what was done.")


def propose_egress(ctx: ToolContext, host: str, reason: str | None = None) -> str:
    entry = _checked(rules.check_host_entry, host)
    return _propose(ctx, "egress", {"host": str(entry)}, reason, f"allow HTTPS to {entry}")


def propose_credential_route(ctx: ToolContext, host_or_path: str, upstream: str, secret_name: str,
                             reason: str | None = None) -> str:
    match = _checked(rules.check_route_match, host_or_path)
    upstream = _checked(rules.check_upstream, upstream)
    secret = _checked(rules.check_secret_name, secret_name, ctx.config.reserved_secret_prefixes)
    how = (f"requests to $NANOCLAW_PROXY_URL{match}… go to {upstream}/…" if match.startswith("/")
           else f"requests to http://{match}/… (through http_proxy) go to {upstream}/…")
    return _propose(ctx, "credential_route", {"match": match, "upstream": upstream, "secret": secret}, reason,
                    f"{how} with the host's ${secret} added as the token")


def install_packages(ctx: ToolContext, apt=None, npm=None, pip=None, reason: str | None = None) -> str:
    apt_list, npm_list, pip_list = _checked(rules.check_packages, apt, npm, pip)
    what = ", ".join(f"{m}: {' '.join(names)}" for m, names in (("apt", apt_list), ("npm", npm_list), ("pip", pip_list))
                     if names)
    return _propose(ctx, "install_packages", {"apt": apt_list, "npm": npm_list, "pip": pip_list}, reason,
                    f"install {what} for this agent (the sandbox restarts; the conversation goes on)")


def add_mcp_server(ctx: ToolContext, name: str, command: str, args=None, env=None, reason: str | None = None) -> str:
    server = _checked(rules.check_mcp_server, name, command, args, env, ctx.config.reserved_secret_prefixes)
    return _propose(ctx, "mcp_server", server, reason,
                    f"start the MCP server {server['name']} ({server['command']} {' '.join(server['args'])}) "
                    "in this sandbox (it restarts; the conversation goes on)")


def create_agent(ctx: ToolContext, name: str, instructions: str | None = None, reason: str | None = None) -> str:
    name, instructions = _checked(rules.check_agent, name, instructions)
    return _propose(ctx, "create_agent", {"name": name, "instructions": instructions}, reason,
                    f"create a new agent {name!r}")


def propose_skill(ctx: ToolContext, folder: str | None = None, source: str | None = None,
                  reason: str | None = None) -> str:
    if bool(folder) == bool(source):
        raise ToolError("give either folder (a folder of your working folder) or source (https://host/repo#COMMIT)")
    if source:
        source = _checked(rules.check_text, source, "source", 500)
        if not source.startswith("https://") or "#" not in source:
            raise ToolError("source: a git repository over https at a full commit: https://host/owner/repo#COMMIT"
                            "[:FOLDER] (git rev-parse BRANCH gives the commit)")
        return _propose(ctx, "skill", {"source": source}, reason,
                        f"fetch the skill at {source} (the owner approves the fetch, then its files and hash)")
    folder = _checked(rules.check_text, folder, "folder", 200).removeprefix("/workspace/group/").strip("/")
    if not folder or ".." in folder.split("/") or folder.startswith("/"):
        raise ToolError("folder: a folder inside your working folder (e.g. skills/pdf-tools), without ..")
    return _propose(ctx, "skill", {"folder": folder}, reason,
                    f"add the skill in {folder} (the owner sees its files and its hash, and approves those bytes)")


_REASON = {"type": "string", "description": "Optional: why you need it, shown to the owner."}
_HOW_TO_SEE = ("A refused HTTPS request fails with 'CONNECT tunnel failed, response 403' (curl -v shows the "
               "proxy's reason) or 'Tunnel connection failed: 403 …'.")

SPECS = [
    (ask_operator, "ask_operator",
     "Tell the operator (the owner of this agent) in plain words what blocks you and ask for help. Waits up "
     f"to {HELP_WAIT_S} s for their reply and returns it; otherwise returns 'pending, id=…' and the reply "
     "arrives later as a new message. For a concrete change (network access, a credential, packages) "
     "prefer the propose_* tools.",
     {"type": "object", "properties": {
         "text": {"type": "string", "description": "What blocks you."},
         "wait_seconds": {"type": "integer", "description": f"How long to wait for a reply (at most {HELP_WAIT_S})."}},
      "required": ["text"]}),
    (propose_egress, "propose_egress",
     "Ask the owner to allow HTTPS from this sandbox to one host. Outgoing HTTPS goes through a proxy that "
     f"only lets allowlisted hosts through. {_HOW_TO_SEE} Give a host name (api.example.com), *.domain for "
     "its subdomains, or host:port for another port; a private or loopback address needs host:port. "
     "Once approved the next request works; nothing restarts.",
     {"type": "object", "properties": {"host": {"type": "string"}, "reason": _REASON}, "required": ["host"]}),
    (propose_credential_route, "propose_credential_route",
     "Ask the owner for an authenticated route to an HTTPS API without ever seeing the token: the proxy adds "
     "the token (from a host environment variable you name, e.g. GITHUB_TOKEN) to each request. Key it by a "
     "path prefix (/github/ -> you call $NANOCLAW_PROXY_URL/github/...) or by a host (api.github.com -> you "
     "call http://api.github.com/... through http_proxy; it goes on over HTTPS).",
     {"type": "object", "properties": {
         "host_or_path": {"type": "string", "description": "/prefix/ or a host name"},
         "upstream": {"type": "string", "description": "https://host[:port][/base]"},
         "secret_name": {"type": "string", "description": "the host environment variable holding the token"},
         "reason": _REASON},
      "required": ["host_or_path", "upstream", "secret_name"]}),
    (install_packages, "install_packages",
     f"Ask the owner to install Debian (apt), npm and/or Python (pip) packages for you, at most "
     f"{rules.MAX_PACKAGES} per request. After approval your sandbox restarts with them (npm and pip packages "
     "on PATH, NODE_PATH and PYTHONPATH; apt needs the Docker runtime); the conversation continues.",
     {"type": "object", "properties": {
         "apt": {"type": "array", "items": {"type": "string"}},
         "npm": {"type": "array", "items": {"type": "string"}},
         "pip": {"type": "array", "items": {"type": "string"}, "description": "PyPI project names, no versions"},
         "reason": _REASON},
      "required": []}),
    (add_mcp_server, "add_mcp_server",
     "Ask the owner to start an extra MCP server (stdio) inside your sandbox. `env` names variables the "
     "server gets from the sandbox's own environment; secrets are never passed in (use a credential route).",
     {"type": "object", "properties": {
         "name": {"type": "string"}, "command": {"type": "string"},
         "args": {"type": "array", "items": {"type": "string"}},
         "env": {"type": "array", "items": {"type": "string"}}, "reason": _REASON},
      "required": ["name", "command"]}),
    (propose_skill, "propose_skill",
     "Ask the owner to approve a skill you wrote: a folder in your working folder holding SKILL.md (YAML front "
     "matter with `name`, equal to the folder's name, lowercase letters, digits and hyphens, and `description`; "
     "then the instructions) and any scripts/ or references/. The host reads and hashes it; once approved you "
     "have it as nanoclaw:NAME from your next turn (your sandbox restarts). A SKILL.md you write yourself is "
     "never loaded otherwise. Links, programs and archives inside are refused. Or name a `source`, a git "
     "repository over https at a full commit (https://github.com/acme/skills#COMMIT:pdf-tools): the owner "
     "approves fetching it, then its files and hash.",
     {"type": "object", "properties": {"folder": {"type": "string", "description": "e.g. skills/pdf-tools"},
                                       "source": {"type": "string", "description": "https://host/repo#COMMIT[:FOLDER]"},
                                       "reason": _REASON}, "required": []}),
    (create_agent, "create_agent",
     "Ask the owner to create a new agent with its own instructions (only an admin's agent may do this).",
     {"type": "object", "properties": {"name": {"type": "string"}, "instructions": {"type": "string"},
                                       "reason": _REASON},
      "required": ["name"]}),
]
