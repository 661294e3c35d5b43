"""The mount allowlist: which host paths may appear in a sandbox as extra mounts.

The allowlist file lives outside the project and is never mounted into a sandbox
(Settings.mount_allowlist, default ~/.config/nanoclaw/mount-allowlist.json):

    {"allowedRoots": [{"path": "~/projects", "allowReadWrite": false, "description": "..."}],
     "blockedPatterns": ["my-secret-dir"]}

Without a usable file every extra mount is refused. A request is checked when it is
declared and again at every sandbox start (validate_mounts), always against the file's
current content: the cache is keyed by the bytes read, and a failed read is never cached
(v1 cached a read error for the life of the process).
"""
from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .config import PROJECT_ROOT
from .models import AgentGroup

DEFAULT_BLOCKED_PATTERNS = (
    ".ssh", ".gnupg", ".gpg", ".aws", ".azure", ".gcloud", ".kube", ".docker", "credentials",
    ".env", ".netrc", ".npmrc", ".pypirc", "id_rsa", "id_ed25519", "private_key", ".secret",
)
EXAMPLE = ('{"allowedRoots": [{"path": "~/projects", "allowReadWrite": false, '
           '"description": "my projects"}], "blockedPatterns": []}')


class MountRefused(ValueError):
    """A mount that may not be made. str() is one line that says what to do."""

    def __init__(self, message: str):
        super().__init__(message.replace("\r", " ").replace("\n", " "))  # one line, whatever went in


class AllowlistError(MountRefused):
    """The allowlist file is missing or unusable, so every extra mount is refused."""


@dataclass(frozen=True)
class MountRequest:
    host_path: str
    name: str = ""          # empty: the basename of host_path
    readwrite: bool = False


@dataclass(frozen=True)
class ApprovedMount:
    host_path: Path          # fully resolved; mount this, not the requested spelling
    name: str                # placed at /workspace/extra/<name> by the runtimes
    readonly: bool


@dataclass(frozen=True)
class AllowedRoot:
    path: Path               # ~-expanded, absolute; resolved at each check (symlinks may move)
    allow_read_write: bool = False
    description: str = ""


@dataclass(frozen=True)
class Allowlist:
    roots: tuple[AllowedRoot, ...]
    blocked_patterns: tuple[str, ...]   # the defaults followed by the file's own
    source: Path | None = None          # the file it came from; never mountable itself

    @classmethod
    def parse(cls, text: str | bytes, source: Path | None = None) -> "Allowlist":
        where = str(source) if source else "the mount allowlist"

        def bad(why: str) -> AllowlistError:
            return AllowlistError(f"no extra mounts are allowed: {where} is invalid ({why}); "
                                  f"fix it so it reads like {EXAMPLE}")

        try:
            data = json.loads(text)
        except (ValueError, UnicodeDecodeError) as err:
            raise bad(f"not JSON: {err}") from None
        if not isinstance(data, dict):
            raise bad("the top level must be an object")
        raw_roots = data.get("allowedRoots")
        if not isinstance(raw_roots, list):
            raise bad('"allowedRoots" must be a list')
        roots = []
        for i, entry in enumerate(raw_roots):
            if not isinstance(entry, dict) or not isinstance(entry.get("path"), str) or not entry["path"].strip():
                raise bad(f'allowedRoots[{i}] needs a non-empty "path" string')
            path = Path(entry["path"].strip()).expanduser()
            if not path.is_absolute():
                raise bad(f'allowedRoots[{i}].path {entry["path"]!r} must be absolute or start with ~')
            rw = entry.get("allowReadWrite", False)
            if not isinstance(rw, bool):
                raise bad(f'allowedRoots[{i}].allowReadWrite must be true or false')
            description = entry.get("description", "")
            if not isinstance(description, str):
                raise bad(f'allowedRoots[{i}].description must be a string')
            roots.append(AllowedRoot(Path(os.path.normpath(path)), rw, description))
        extra = data.get("blockedPatterns", [])
        if not isinstance(extra, list) or not all(isinstance(p, str) and p.strip() for p in extra):
            raise bad('"blockedPatterns" must be a list of non-empty strings')
        patterns = tuple(dict.fromkeys([*DEFAULT_BLOCKED_PATTERNS, *(p.strip() for p in extra)]))
        return cls(tuple(roots), patterns, source)

    @classmethod
    def load(cls, path: os.PathLike | str) -> "Allowlist":
        source = Path(path).expanduser()
        return cls.parse(_read(source), source)


def _read(source: Path) -> bytes:
    try:
        return source.read_bytes()
    except FileNotFoundError:
        raise AllowlistError(f"no extra mounts are allowed because {source} does not exist; "
                             f"create it with JSON like {EXAMPLE}") from None
    except OSError as err:
        raise AllowlistError(f"no extra mounts are allowed because {source} cannot be read "
                             f"({err.strerror or err}); make it a readable JSON file like {EXAMPLE}") from None


_cache: dict[str, tuple[bytes, Allowlist]] = {}
_cache_lock = threading.Lock()


def current_allowlist(path: os.PathLike | str) -> Allowlist:
    """The allowlist as the file says now. Reads the (small) file on every call and
    re-parses only when its bytes changed; a read or parse error drops the cached copy
    and is raised, so fixing the file takes effect on the next call."""
    source = Path(path).expanduser().absolute()
    key = str(source)
    try:
        raw = _read(source)
        with _cache_lock:
            cached = _cache.get(key)
        if cached and cached[0] == raw:
            return cached[1]
        allowlist = Allowlist.parse(raw, source)
    except AllowlistError:
        with _cache_lock:
            _cache.pop(key, None)
        raise
    with _cache_lock:
        _cache[key] = (raw, allowlist)
    return allowlist


def name_problem(name: str) -> str | None:
    """Why `name` cannot be the directory under /workspace/extra, or None."""
    if not name or name.strip() != name or name in (".", ".."):
        return f"mount name {name!r} is empty, '.' or has surrounding spaces"
    if name.startswith("/"):
        return f"mount name {name!r} is absolute"
    if ".." in name or "/" in name or "\\" in name:
        return f"mount name {name!r} may not contain '..', '/' or '\\'"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return f"mount name {name!r} contains control characters"
    return None


def blocked_pattern(path: Path, patterns: Iterable[str]) -> tuple[str, str] | None:
    """(pattern, offending component) if any component of `path` contains a pattern.

    Containment rather than equality, case-insensitively: '.env.local', 'aws-credentials'
    and 'id_rsa.pub' are as sensitive as the bare names. A pattern holding '/' is
    matched against the whole path.
    """
    parts = [p for p in path.parts if p != "/"]
    for pattern in patterns:
        needle = pattern.lower()
        if "/" in needle:
            if needle in str(path).lower():
                return pattern, str(path)
            continue
        for part in parts:
            if needle in part.lower():
                return pattern, part
    return None


def _under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def protected_paths(settings) -> list[tuple[Path, str]]:
    """NanoClaw's own files, never mounted into a sandbox whatever the allowlist says: (path, what)."""
    return [(Path(PROJECT_ROOT), "NanoClaw's own folder (its code and .env)"),
            (Path(settings.data_dir), "NanoClaw's data folder (every session, the proxy's sockets, the secret key)"),
            (Path(settings.groups_dir), "the agents' folders (each agent sees only its own)")]


def exposes(resolved: Path, protected: Iterable[tuple[Path, str]]) -> tuple[Path, str] | None:
    """The protected path a mount of `resolved` would expose: it, inside it, or around it."""
    for path, what in protected:
        try:
            real = Path(path).expanduser().resolve()
        except (OSError, RuntimeError):
            continue
        if _under(resolved, real) or _under(real, resolved):
            return real, what
    return None


def validate_mount(request: MountRequest, allowlist: Allowlist,
                   protected: Iterable[tuple[Path, str]] = ()) -> ApprovedMount:
    """Approve one request against `allowlist` or raise MountRefused (why, and what to do).
    `protected`: NanoClaw's own paths (protected_paths), refused after symlinks are resolved."""
    raw = (request.host_path or "").strip()
    if not raw:
        raise MountRefused("the mount has no host path; give the absolute path of a directory under an allowed root")
    requested = Path(os.path.normpath(Path(raw).expanduser()))
    if not requested.is_absolute():
        raise MountRefused(f"host path {raw!r} is relative; give an absolute path (or one starting with ~)")

    name = request.name if request.name else requested.name
    problem = name_problem(name)
    if problem:
        raise MountRefused(f"{problem}; choose a plain name such as 'projects' (it appears as /workspace/extra/<name>)")

    try:
        resolved = requested.resolve(strict=True)
    except (FileNotFoundError, NotADirectoryError):
        raise MountRefused(f"host path {requested} does not exist; create it or correct the path") from None
    except (OSError, RuntimeError) as err:  # permission denied, symlink loop
        raise MountRefused(f"host path {requested} cannot be resolved ({err}); correct the path") from None

    # Both spellings: a harmless-looking link to ~/.ssh and a '.ssh' link to anything.
    for path in dict.fromkeys((requested, resolved)):
        hit = blocked_pattern(path, allowlist.blocked_patterns)
        if hit:
            raise MountRefused(
                f"host path {path} matches blocked pattern {hit[0]!r} (in {hit[1]!r}), which marks credentials "
                "that are never mounted; mount a directory that does not contain them")

    hit = exposes(resolved, protected)
    if hit is not None:
        via = f" (it resolves to {resolved})" if resolved != requested else ""
        raise MountRefused(f"host path {requested}{via} would expose {hit[1]} at {hit[0]}: NanoClaw's own files "
                           "are never mounted into a sandbox; mount a folder outside it")

    if allowlist.source is not None:
        source = allowlist.source.expanduser().absolute()
        if any(_under(guarded, resolved) for guarded in (source.parent.resolve(), source.resolve())):
            raise MountRefused(f"host path {resolved} contains the mount allowlist ({allowlist.source}), which a "
                               "sandbox must never see; mount a narrower directory")

    containing = [(root, root.path.resolve()) for root in allowlist.roots]
    containing = [(root, real) for root, real in containing if _under(resolved, real)]
    if not containing:
        where = ", ".join(str(r.path) for r in allowlist.roots) or "none"
        via = f" (it resolves to {resolved})" if resolved != requested else ""
        raise MountRefused(
            f"host path {requested}{via} is not under any allowed root (allowed: {where}); "
            f"add a root that contains it to allowedRoots in {allowlist.source or 'the mount allowlist'}")
    # The most specific root decides: '~' read-write with '~/Documents' read-only keeps Documents read-only.
    root = max(containing, key=lambda pair: len(pair[1].parts))[0]

    if request.readwrite and not root.allow_read_write:
        raise MountRefused(
            f"host path {requested} asks for read-write but its allowed root {root.path} is read-only "
            f"(allowReadWrite is false); mount it read-only, or set \"allowReadWrite\": true for that root")
    return ApprovedMount(host_path=resolved, name=name, readonly=not request.readwrite)


def validate_mounts(requests: Iterable[MountRequest], allowlist_path: os.PathLike | str,
                    protected: Iterable[tuple[Path, str]] = ()) -> list[ApprovedMount]:
    """Approve every request against the allowlist file as it is now, or raise MountRefused
    for the first one that fails. No requests need no allowlist file."""
    requests = list(requests)
    if not requests:
        return []
    allowlist = current_allowlist(allowlist_path)
    approved: list[ApprovedMount] = []
    seen: set[str] = set()
    for request in requests:
        mount = validate_mount(request, allowlist, protected)
        if mount.name in seen:
            raise MountRefused(f"two mounts are named {mount.name!r}; give one of them another name")
        seen.add(mount.name)
        approved.append(mount)
    return approved


__all__ = [
    "DEFAULT_BLOCKED_PATTERNS", "MountRequest", "ApprovedMount", "MountRefused", "AllowlistError",
    "AllowedRoot", "Allowlist", "current_allowlist", "validate_mount", "validate_mounts",
    "blocked_pattern", "name_problem", "protected_paths", "exposes", "declared_mounts", "save_mounts",
]


# --- what an agent declares (agent_groups.container_config['mounts']) ------------------------------

def declared_mounts(agent: AgentGroup) -> list[dict]:
    return list((agent.container_config or {}).get("mounts", []))


def save_mounts(agent: AgentGroup, mounts: list[dict]) -> None:
    config = dict(agent.container_config or {})
    config["mounts"] = mounts
    AgentGroup.update(container_config=config).where(AgentGroup.id == agent.id).execute()
