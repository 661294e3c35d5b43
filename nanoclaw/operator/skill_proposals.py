"""An agent proposes a skill it wrote (issue 66, item 4): `propose_skill {folder}` names a folder of its
workspace; the host copies it by descriptor (no link followed) into its own staging folder, checks it
(skill_format), and the owner's card shows the name, description, files, hash, flags and the start of
its instructions, with what changes against a version already pinned. Approval installs exactly the
staged bytes (their hash is checked again) and restarts the agent's sandboxes so it has the skill at
its next turn. The agent's text reaches only the owner, on the card."""
from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

from ..models import AgentGroup
from ..proposal_rules import RuleError
from . import skill_store
from .skill_format import SkillRefused, read_folder
from ..internet.addresses import Refused, Rules, parse_networks
from ..internet.fetch import Fetcher
from ..internet.own import own_ports
from .skill_sources import Source, fetch_git, from_workspace, parse

EXCERPT = 400


def staging(settings) -> Path:
    return skill_store.skills_root(settings) / ".proposed"


def prepare(settings, agent: AgentGroup, folder: str) -> dict:
    """The host's own reading of the proposed folder, as the payload the card and the approval use."""
    work = Path(tempfile.mkdtemp(prefix=".reading-", dir=_made(staging(settings))))
    try:
        return _staged(settings, lambda: from_workspace(settings.groups_dir / agent.folder, folder, work),
                       {"folder": folder})
    finally:
        shutil.rmtree(work, ignore_errors=True)


def check_source(settings, text: str) -> tuple[Source, tuple[str, int, str]]:
    """A source the agent names, checked before anything is fetched: a git repository at a full commit,
    over https, at an address the host may reach for an agent (web_read's check: no loopback, private
    or metadata address unless the owner opened it). Returns it and the (host, port, address) git is
    pinned to."""
    try:
        source = parse(text)
    except SkillRefused as exc:
        raise RuleError(str(exc)) from None
    if source.kind != "git":
        raise RuleError("name a git repository at a full commit: https://host/owner/repo#COMMIT[:FOLDER]")
    if not source.location.lower().startswith("https://"):
        raise RuleError("a skill you name is fetched over https only")
    rules = Rules(allow_networks=parse_networks(" ".join(settings.web_allow_networks)),
                  allow_ports=frozenset(settings.web_allow_ports), own_ports=frozenset(own_ports(settings)))
    try:
        where, address = Fetcher(rules).check(source.location)
    except Refused as exc:
        raise RuleError(f"{source.location} is not fetched: {exc}") from None
    return source, (where.host, where.port, address)


def fetch_for_card(settings, text: str) -> dict:
    """The owner approved fetching: fetch over https (pinned to the checked address), read, stage."""
    source, pin = check_source(settings, text)
    work = Path(tempfile.mkdtemp(prefix=".fetching-", dir=_made(staging(settings))))
    try:
        return _staged(settings, lambda: fetch_git(source, work, owner=False, pin=pin, ca_file=settings.skill_ca_file),
                       {"source": str(source)})
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _staged(settings, copy, origin: dict) -> dict:
    try:
        copied = copy()
        skill = read_folder(copied)
        kept = staging(settings) / skill.hash / skill.name
        if not kept.is_dir():
            kept.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(copied), kept)
    except SkillRefused as exc:
        raise RuleError(str(exc)) from None
    except OSError as exc:
        raise RuleError(f"the skill could not be read: {exc.strerror or exc}") from None
    body = (kept / "SKILL.md").read_text("utf-8", "replace").split("\n---", 1)[-1].strip()
    return {**origin, "name": skill.name, "description": skill.description, "hash": skill.hash,
            "files": [[f.path, f.mode, f.size, _digest(kept / f.path)] for f in skill.files],
            "flags": list(skill.flags), "excerpt": body[:EXCERPT]}


def _made(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def current(settings, agent: AgentGroup, name: str) -> dict:
    """The pinned version of `name` for this agent, file by file ({} when it has none)."""
    row = next((r for r in skill_store.installed(agent.folder) if r.name == name), None)
    if row is None:
        return {}
    copy = skill_store.copy_path(settings, agent.folder, row.hash, name)
    try:
        files = {f.path: [f.mode, f.size, _digest(copy / f.path)] for f in read_folder(copy).files}
    except (SkillRefused, OSError):
        files = {}
    return {"hash": row.hash, "files": files}


def diff(payload: dict, pinned: dict) -> list[str]:
    """The card's lines (pure): what the skill is, its files (against the pinned version), its flags."""
    lines = [f"+ skill {payload['name']}: {payload['description'][:300]}",
             f"  hash: sha256:{payload['hash']}"]
    if pinned:
        lines.append(f"- replaces the pinned sha256:{pinned['hash']}")
    old = pinned.get("files", {})
    for path, mode, size, digest in payload["files"]:
        mark = " " if not pinned else ("+" if path not in old else ("~" if old[path] != [mode, size, digest] else " "))
        lines.append(f"{mark} {mode:04o} {size:>8,}  {path}")
    new = {f[0] for f in payload["files"]}
    lines += [f"- {path} (removed)" for path in sorted(old) if path not in new]
    lines += [f"  ⚠ {flag}" for flag in payload.get("flags", [])]
    if payload.get("excerpt"):
        lines.append(f"  instructions: {' '.join(payload['excerpt'].split())[:EXCERPT]}")
    return lines


def install(settings, agent: AgentGroup, payload: dict, actor: str) -> tuple[str, list[str]]:
    """Install the staged bytes the owner saw; (what the agent is told, the diff)."""
    kept = staging(settings) / payload["hash"] / payload["name"]
    try:
        skill = read_folder(kept)
    except (SkillRefused, OSError) as exc:
        raise RuleError(f"the staged copy of the skill is gone or changed ({exc}); propose it again") from None
    if skill.hash != payload["hash"]:
        raise RuleError("the staged copy no longer has the bytes that were shown; propose it again")
    pinned = current(settings, agent, skill.name)
    origin = payload.get("folder") or payload.get("source")
    skill_store.install(settings, agent, kept, skill, f"proposed by the agent (from {origin})", actor)
    shutil.rmtree(kept.parent, ignore_errors=True)
    return (f"The skill {skill.name} is installed as nanoclaw:{skill.name} (sha256:{skill.hash[:16]}…); your "
            "sandbox restarts so you have it from your next turn.", diff(payload, pinned))
