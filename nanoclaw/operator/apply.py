"""Applying an approved proposal. Each applier checks the payload again (checks.check_payload ran
before the owner saw it; the files it builds on are checked too) and returns an Outcome: what the
agent is told, the diff for the audit log, and whether the group's sandboxes must restart.

egress and credential routes only rewrite the group's policy file: the proxy reloads it on the next
request, nothing restarts. Packages rebuild the group's image (Docker only); an MCP server changes
the group's container_config. Both take effect in a restarted sandbox on the same session.
"""
from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass, field

from ..db import database
from ..models import AgentGroup
from ..proxy.host_secrets import HostSecrets
from ..proxy.policy_files import EGRESS_FILE, ROUTES_FILE, add_egress, diff_lines, load_for_edit, policy_root, put_route
from ..proposal_rules import RuleError
from . import checks, packages, skill_proposals
from ..sandboxes.manager import package_prefix
from ..runtime.base import PACKAGES_TARGET
from ..approvals.common import create_agent
from ..proxy.policy import check_route
from ..runtime.image import ImageBuildError, build_group_image
from ..runtime.image import group_image_repo
from ..runtime.image import prune_group_images
from ..security import write_text_nofollow

log = logging.getLogger("nanoclaw.operator.apply")


class ApplyError(RuntimeError):
    """Applying failed; the message is shown to the owner and told to the agent."""


@dataclass
class Outcome:
    agent_text: str
    diff: list[str]
    restart: bool = False
    extra: dict = field(default_factory=dict)


def current_state(settings, agent: AgentGroup, kind: str, payload: dict) -> dict:
    """What checks.diff compares against, read now (a broken policy file reads as empty)."""
    config = agent.container_config or {}
    try:
        if kind == "egress":
            return {"allow": list(load_for_edit(policy_root(settings), agent.folder, EGRESS_FILE).get("allow", []))}
        if kind == "credential_route":
            data = load_for_edit(policy_root(settings), agent.folder, ROUTES_FILE)
            return {"routes": [check_route(r).describe() for r in data.get("routes", [])]}
    except RuleError:
        return {}
    if kind == "install_packages":
        have = config.get("packages") or {}
        state = {m: have.get(m, []) for m in checks.PACKAGE_MANAGERS}
        docker = docker_available(settings) is None
        if docker and (payload.get("apt") or payload.get("npm")):
            state.update(image=config.get("image") or settings.agent_image,
                         new_image=f"{group_image_repo(agent.folder)} ({settings.agent_image} + the packages)")
        if payload.get("pip") or (payload.get("npm") and not docker):
            state["prefix"] = f"(into this agent's own package folder, {PACKAGES_TARGET}; the sandbox restarts)"
        return state
    if kind == "mcp_server":
        return {"servers": config.get("mcp_servers") or {}}
    if kind == "skill" and payload.get("name"):
        return skill_proposals.current(settings, agent, payload["name"])
    return {}


def apply_egress(settings, agent: AgentGroup, payload: dict) -> Outcome:
    try:
        before, after = add_egress(policy_root(settings), agent.folder, payload["host"])
    except RuleError as exc:
        raise ApplyError(f"the egress file of {agent.folder} is invalid, fix it first: {exc}") from None
    return Outcome(f"HTTPS to {payload['host']} is now allowed for you (no restart: your next request "
                   "goes through).", diff_lines(before, after))


def apply_route(settings, agent: AgentGroup, payload: dict) -> Outcome:
    try:
        before, after = put_route(policy_root(settings), agent.folder, payload)
    except RuleError as exc:
        raise ApplyError(f"the credential routes of {agent.folder} are invalid, fix them first: {exc}") from None
    use = (f"call $NANOCLAW_PROXY_URL{payload['match']}…" if payload["match"].startswith("/")
           else f"call http://{payload['match']}/… (through http_proxy)")
    note = "" if HostSecrets()(payload["secret"]) else \
        f" Note: the host has no value for ${payload['secret']} yet; requests answer 503 until the owner sets it."
    return Outcome(f"The credential route is live: {use} and the proxy adds the token from "
                   f"${payload['secret']} on the way to {payload['upstream']}.{note}", diff_lines(before, after))


def docker_available(settings) -> str | None:
    """None if an agent's own image can be built and used here, else why not."""
    if settings.runtime == "bwrap":
        return ("this host runs sandboxes with bubblewrap, which uses the host's own programs (set "
                "NANOCLAW_RUNTIME=docker, with Docker installed, for apt packages)")
    from ..runtime import docker as docker_rt  # the SDK only where an engine is asked
    client, where = docker_rt.connect()
    if client is None:
        return f"no Docker engine answers ({where}); start Docker for apt packages"
    return None


def apply_packages(settings, agent: AgentGroup, payload: dict, *, build=None, install=None) -> Outcome:
    """apt (and npm, on Docker) into the agent's own image; pip (and npm, on bubblewrap) into its
    package prefix. apt without Docker is refused (bubblewrap runs the host's own programs)."""
    have = (agent.container_config or {}).get("packages") or {}
    union = {m: sorted(set(have.get(m, [])) | set(payload.get(m, []))) for m in checks.PACKAGE_MANAGERS}
    try:
        checks.check_payload("install_packages", union)  # the union obeys the rules too
    except RuleError as exc:
        raise ApplyError(f"together with what is installed already: {exc}") from None
    tag, into_prefix, old = set_packages(settings, agent, union, payload, build=build, install=install)
    diff = [f"+ {m}: {p}" for m in checks.PACKAGE_MANAGERS for p in payload.get(m, []) if p not in have.get(m, [])]
    diff += [f"- image {old}", f"+ image {tag}"] if tag else []
    diff += [f"+ into {PACKAGES_TARGET} (PATH, PYTHONPATH, NODE_PATH)"] if into_prefix else []
    what = " ".join(payload["apt"] + payload["npm"] + payload.get("pip", []))
    where = "Your image was rebuilt with" if tag and not into_prefix else "You now have"
    return Outcome(f"{where} {what} and your sandbox restarted on the same conversation"
                   + (f" (npm/pip packages are under {PACKAGES_TARGET}, on PATH, NODE_PATH and PYTHONPATH)."
                      if into_prefix else "."), diff, restart=True, extra={"image": tag} if tag else {})


def set_packages(settings, agent: AgentGroup, wanted: dict, touched: dict, *, build=None,
                 install=None) -> tuple[str | None, bool, str]:
    """Make the agent's packages exactly `wanted`, redoing only the places `touched` names change in:
    its image (apt, and npm on Docker) and its prefix (pip, and npm on bubblewrap). An image with
    nothing left to add goes back to the common one; an empty prefix is removed.
    Returns (the new image tag or None, whether the prefix changed, the image before)."""
    why_not = docker_available(settings)
    docker = why_not is None
    if wanted["apt"] and not docker:
        raise ApplyError(f"apt packages need the Docker runtime: {why_not}")
    into_image = docker and bool(touched.get("apt") or touched.get("npm"))
    into_prefix = bool(touched.get("pip")) or (bool(touched.get("npm")) and not docker)
    tag = None
    if into_image and (wanted["apt"] or wanted["npm"]):
        try:
            tag = (build or build_group_image)(settings, agent.folder, wanted["apt"], wanted["npm"],
                                               progress=lambda _l: None)
        except ImageBuildError as exc:
            raise ApplyError(f"the image build failed: {str(exc).splitlines()[0]}") from None
    if into_prefix:
        prefix = package_prefix(settings, agent.folder)
        npm = [] if docker else wanted["npm"]
        if wanted["pip"] or npm:
            try:
                (install or packages.install)(prefix, wanted["pip"], npm)
            except packages.InstallError as exc:
                raise ApplyError(f"installing failed: {exc}") from None
        else:
            shutil.rmtree(prefix, ignore_errors=True)
    old = (agent.container_config or {}).get("image") or settings.agent_image
    with database.atomic():
        fresh = AgentGroup.get_by_id(agent.id)
        config = dict(fresh.container_config or {})
        config["packages"] = wanted
        if tag:
            config["image"] = tag
        elif into_image:  # nothing left for an image of its own
            config.pop("image", None)
        AgentGroup.update(container_config=config).where(AgentGroup.id == agent.id).execute()
    if tag and build is None:
        _prune_older(agent.folder, tag)
    return tag, into_prefix, old


def _prune_older(folder: str, current: str) -> None:
    """The group's earlier images go now if nothing runs them (else image_prune's job takes them
    once the restarted sandboxes left them); a failure here never fails the approval."""
    try:
        prune_group_images(folder, {current})
    except Exception as exc:
        log.warning("could not prune the older images of %s: %s", folder, exc)


def apply_mcp(settings, agent: AgentGroup, payload: dict) -> Outcome:
    with database.atomic():
        fresh = AgentGroup.get_by_id(agent.id)
        config = dict(fresh.container_config or {})
        servers = dict(config.get("mcp_servers") or {})
        old = servers.get(payload["name"])
        servers[payload["name"]] = payload
        config["mcp_servers"] = servers
        AgentGroup.update(container_config=config).where(AgentGroup.id == agent.id).execute()
    line = f"{payload['name']}: {payload['command']} {' '.join(payload['args'])}".rstrip()
    removed = [f"- {old['name']}: {old['command']} {' '.join(old.get('args', []))}".rstrip()] if old else []
    diff = removed + [f"+ {line}"]
    return Outcome(f"The MCP server {payload['name']} was added; your sandbox restarted on the same "
                   f"conversation and its tools are available as mcp__{payload['name']}__*.", diff, restart=True)


def apply_create_agent(settings, payload: dict, actor: str) -> Outcome:
    try:
        agent = create_agent(settings, payload["name"], actor)
    except ValueError as exc:
        raise ApplyError(str(exc)) from None
    if payload.get("instructions"):
        AgentGroup.update(instructions=payload["instructions"]).where(AgentGroup.id == agent.id).execute()
        write_text_nofollow(settings.groups_dir / agent.folder, "CLAUDE.md",
                            f"# {agent.name}\n\n{payload['instructions']}\n")
    return Outcome(f"The agent {agent.name} was created (folder {agent.folder}); the owner can wire it to a chat.",
                   [f"+ agent {agent.name} (folder {agent.folder})"], extra={"folder": agent.folder})


def apply(settings, agent: AgentGroup, kind: str, payload: dict, actor: str) -> Outcome:
    payload = checks.check_payload(kind, payload)  # again, right before it takes effect
    if kind == "egress":
        return apply_egress(settings, agent, payload)
    if kind == "credential_route":
        return apply_route(settings, agent, payload)
    if kind == "install_packages":
        return apply_packages(settings, agent, payload)
    if kind == "mcp_server":
        return apply_mcp(settings, agent, payload)
    if kind == "skill" and "hash" not in payload:  # the owner approved fetching: the second card comes next
        fetched = skill_proposals.fetch_for_card(settings, payload["source"])
        return Outcome(f"The host fetched {payload['source']}; the owner now sees its files and hash on a second "
                       "card, and nothing is installed until they approve that.",
                       [f"+ fetched sha256:{fetched['hash']}"], extra={"fetched": fetched})
    if kind == "skill":
        told, diff = skill_proposals.install(settings, agent, payload, actor)
        return Outcome(told, diff, restart=True)
    return apply_create_agent(settings, payload, actor)
