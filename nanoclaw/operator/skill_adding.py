"""Adding a skill to an agent from a source (issue 66, items 3 and 4), for the CLI and the page: parse,
check who may use that source, fetch on the host, check, pin, audit. The owner may add from any source;
a scoped admin only from the sources the owner trusts (`skill trust URL-PREFIX`), matched by scheme,
host and whole path segments, so `https://github.com/acme` never matches `https://github.com/acme-evil`."""
from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

from ..models import AgentGroup, audit
from ..security import write_atomic
from . import skill_sources, skill_store
from .skill_format import Skill, SkillRefused, read_folder

TRUST_FILE = "skill_trust.json"


def trust_file(settings) -> Path:
    return Path(settings.data_dir) / "policy" / TRUST_FILE


def trusted(settings) -> list[str]:
    try:
        data = json.loads(trust_file(settings).read_text())
    except (OSError, ValueError):
        return []
    return [p for p in data.get("prefixes", []) if isinstance(p, str)] if isinstance(data, dict) else []


def normal_prefix(text: str) -> str:
    """A trusted prefix as it is kept (pure): https, a host, whole path segments; SkillRefused otherwise."""
    parts = urlsplit(text.strip())
    if parts.scheme != "https" or not parts.hostname or parts.query or parts.fragment or parts.username:
        raise SkillRefused("a trusted source is an https URL prefix without user, query or #, e.g. "
                           "https://github.com/acme")
    path = "/".join(s for s in parts.path.split("/") if s)
    return f"https://{parts.hostname.lower()}{':' + str(parts.port) if parts.port else ''}" + (f"/{path}" if path else "")


def matches(prefix: str, location: str) -> bool:
    """Whether `location` is under `prefix` (pure): same scheme, same host and port, and the prefix's
    path segments are the location's first ones (a trailing .git on the last one is the same repository)."""
    try:
        want, got = urlsplit(prefix), urlsplit(location)
        if (want.scheme, want.hostname, want.port) != (got.scheme, got.hostname, got.port) or got.username:
            return False
    except ValueError:
        return False
    need = [s for s in want.path.split("/") if s]
    have = [s for s in got.path.split("/") if s]
    if len(have) < len(need):
        return False
    if have[:len(need)] == need:
        return True
    return len(have) == len(need) and have[:-1] == need[:-1] and have[-1].removesuffix(".git") == need[-1]


def change_trust(settings, actor: str, prefix: str, *, add: bool) -> list[str]:
    prefix = normal_prefix(prefix)
    now = trusted(settings)
    after = sorted(set(now) | {prefix}) if add else [p for p in now if p != prefix]
    trust_file(settings).parent.mkdir(parents=True, exist_ok=True)
    write_atomic(trust_file(settings), lambda f: f.write(json.dumps({"prefixes": after}, indent=2).encode()), 0o644)
    audit(actor, "skill.trust" if add else "skill.distrust", prefix)
    return after


def add(settings, agent: AgentGroup, source_text: str, sha256: str | None, actor: str, *, owner: bool,
        get=None, say=lambda _line: None) -> Skill:
    """Fetch, check and pin; SkillRefused with the reason (nothing added)."""
    where = skill_sources.parse(source_text, sha256)
    if not owner:
        if where.kind == "folder" or not where.location.lower().startswith("https://"):
            raise SkillRefused("only the owner adds a skill from this machine or over another protocol than https")
        if not any(matches(p, where.location) for p in trusted(settings)):
            raise SkillRefused(f"{where.location} is not under a source the owner trusts "
                               "(the owner can add it, or trust it: skill trust URL-PREFIX)")
    work = Path(tempfile.mkdtemp(prefix="nanoclaw-skill-"))
    try:
        if where.kind == "folder":
            folder = Path(where.location).expanduser()
            if not folder.is_dir():
                raise SkillRefused(f"no folder {folder}")
        elif where.kind == "git":
            say(f"fetching {where} …")
            folder = skill_sources.fetch_git(where, work, owner=owner)
        else:
            say(f"fetching {where.location} …")
            folder = skill_sources.fetch_archive(where, work, get or fetch_bytes)
        skill = read_folder(folder)
        skill_store.install(settings, agent, folder, skill, str(where), actor)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    audit(actor, "skill.add", f"skill:{agent.folder}/{skill.name}", hash=skill.hash, source=str(where),
          files=len(skill.files), flags=list(skill.flags))
    return skill


def fetch_bytes(url: str, limit: int) -> bytes:
    import requests  # only an archive source needs it

    try:
        with requests.get(url, stream=True, timeout=(10, 60), allow_redirects=True) as answer:
            answer.raise_for_status()
            data = b""
            for piece in answer.iter_content(64 * 1024):
                data += piece
                if len(data) > limit:
                    raise SkillRefused(f"the archive is larger than {limit >> 20} MB")
    except requests.RequestException as exc:
        raise SkillRefused(f"could not fetch {url}: {exc}") from None
    return data
