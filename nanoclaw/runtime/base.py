"""What a sandbox is (SandboxSpec) and what a runtime can do (Runtime); select.py picks one.

Both runtimes give the agent the same view (docs/architecture.md, "Inside the sandbox"):

    /workspace/session          the session's agent/ part rw   (outbound.db, heartbeat, outbox/, home/)
    /workspace/inbound          the session's host/ part  ro   (inbound.db, inbox/), as a whole folder
    /workspace/group            groups/<folder>/ (cwd)    rw
    /workspace/global           groups/global/            ro
    /workspace/extra/<name>     validated extra mounts    as declared
    /workspace/skills           the approved skills       ro   (a plugin for the CLI; local sandboxes only)
    /opt/nanoclaw/agent_runner  container/agent_runner/   ro
    /run/nanoclaw-proxy         proxy/<folder>/           ro

uid/gid 1000, HOME=/workspace/session/home, PYTHONPATH=/opt/nanoclaw, no network, limits.
"""
from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Iterable, Mapping, Protocol, Sequence

INSTALL_LABEL = "nanoclaw.install"
SESSION_TARGET = "/workspace/session"
INBOUND_TARGET = "/workspace/inbound"
GROUP_TARGET = "/workspace/group"
GLOBAL_TARGET = "/workspace/global"
PACKAGES_TARGET = "/workspace/packages"  # the agent's approved pip/npm packages (read-only)
SKILLS_TARGET = "/workspace/skills"  # the skills the owner approved, checked at this start (read-only)
EXTRA_ROOT = "/workspace/extra"
RUNNER_TARGET = "/opt/nanoclaw/agent_runner"
PROXY_TARGET = "/run/nanoclaw-proxy"
HOME = SESSION_TARGET + "/home"
PYTHONPATH = "/opt/nanoclaw"

NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,200}$")
# Variables that carry credentials by name: the runner sets its own placeholder key inside.
SECRET_VARS = frozenset({"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"})
# A shorter "secret" would match by accident (e.g. "1"); real keys and tokens are far longer.
MIN_SECRET_LEN = 6


class RuntimeUnavailable(RuntimeError):
    """No sandbox runtime can be used; str() says what to do."""


class SecretInSandbox(ValueError):
    """A spec would carry a host secret into a sandbox."""


@dataclass(frozen=True)
class Mount:
    host: Path
    target: str          # a name (-> /workspace/extra/<name>) or a path under /workspace/extra/
    readonly: bool = True


@dataclass(frozen=True)
class SandboxSpec:
    name: str
    session_dir: Path    # the agent's part of the session folder (read-write)
    inbound_dir: Path    # the host's part (read-only, as a folder: nothing can be created in it)
    group_dir: Path
    global_dir: Path | None
    runner_dir: Path
    proxy_dir: Path
    extra_mounts: tuple[Mount, ...] = ()
    packages_dir: Path | None = None  # the host-installed prefix of approved pip/npm packages
    skills_dir: Path | None = None  # this start's view of the approved skills (operator/skill_store.view)
    env: Mapping[str, str] = field(default_factory=dict)
    command: Sequence[str] = ("python3", "-m", "agent_runner")
    memory_mb: int = 2048
    cpus: float = 1.0
    pids: int = 512
    uid: int = 1000
    gid: int = 1000
    labels: Mapping[str, str] = field(default_factory=dict)
    image: str | None = None  # Docker: the agent group's own image (approved packages); None = the default


class Runtime(Protocol):
    name: str

    def start(self, spec: SandboxSpec) -> None:
        """Start the sandbox unless one of that name runs already (idempotent)."""

    def is_running(self, name: str) -> bool: ...

    def stop(self, name: str, timeout: float = 5) -> None:
        """Stop and remove it; a missing sandbox is not an error."""

    def list_sandboxes(self, install_id: str) -> list[str]:
        """Names of this install's running sandboxes."""

    def logs(self, name: str) -> str:
        """Best effort, for debugging."""


# --- pure checks -----------------------------------------------------------------------

def assert_no_secrets(env: Mapping[str, str], secrets: Iterable[str | None]) -> None:
    """Raise SecretInSandbox if a value holds one of `secrets` or a name is a credential variable.

    The message names the variable, never the value.
    """
    for key in env:
        if key in SECRET_VARS:
            raise SecretInSandbox(f"{key} may not be passed into a sandbox (the proxy injects credentials)")
    wanted = [s for s in secrets if s and len(s) >= MIN_SECRET_LEN]
    for key, value in env.items():
        if any(s in str(value) for s in wanted):
            raise SecretInSandbox(f"the sandbox variable {key} holds a host secret; refusing to start")


def known_secrets(settings) -> list[str]:
    """Every secret value the host settings hold (API key, OAuth token, platform tokens)."""
    values = [getattr(settings, "anthropic_api_key", None), getattr(settings, "claude_code_oauth_token", None),
              getattr(settings, "secret_key", None), getattr(settings, "metrics_token", None),
              getattr(settings, "transcribe_api_key", None), getattr(settings, "tts_api_key", None)]
    values += [v for k, v in (getattr(settings, "platform", None) or {}).items()
               if not k.endswith(("_API_BASE", "_MODE"))]  # addresses and modes are not secrets
    return [v for v in values if v]


def extra_target(mount: Mount) -> str:
    """Where an extra mount appears: always a single level under /workspace/extra/."""
    target = PurePosixPath(mount.target)
    if target.is_absolute():
        if target.parent != PurePosixPath(EXTRA_ROOT):
            raise ValueError(f"extra mount target {mount.target!r} must be {EXTRA_ROOT}/<name>")
        target = PurePosixPath(target.name)
    name = str(target)
    if not NAME_RE.match(name) or name in (".", ".."):
        raise ValueError(f"extra mount name {mount.target!r} must be letters, digits, '_', '.', '-'")
    return f"{EXTRA_ROOT}/{name}"


def check_spec(spec: SandboxSpec, secrets: Iterable[str | None]) -> None:
    """Everything a runtime refuses before it starts anything."""
    if not NAME_RE.match(spec.name):
        raise ValueError(f"sandbox name {spec.name!r} must be letters, digits, '_', '.', '-'")
    if not spec.labels.get(INSTALL_LABEL):
        raise ValueError(f"sandbox {spec.name} has no {INSTALL_LABEL} label (orphans could not be found)")
    if spec.uid == 0 or spec.gid == 0:
        raise ValueError("a sandbox never runs as root")
    secrets = list(secrets)
    assert_no_secrets(spec.env, secrets)
    assert_no_secrets({f"argv[{i}]": a for i, a in enumerate(spec.command)}, secrets)
    targets = [extra_target(m) for m in spec.extra_mounts]
    if len(set(targets)) != len(targets):
        raise ValueError(f"sandbox {spec.name}: two extra mounts share a target")
    for path in (spec.session_dir, spec.inbound_dir, spec.group_dir, spec.runner_dir, spec.proxy_dir):
        if not Path(path).is_absolute():
            raise ValueError(f"sandbox {spec.name}: {path} is not an absolute path")


def sandbox_env(spec: SandboxSpec) -> dict[str, str]:
    """The whole environment the agent sees: the spec's (non-secret) variables plus the fixed ones."""
    return {**spec.env, "PYTHONPATH": PYTHONPATH, "HOME": HOME, "PYTHONUNBUFFERED": "1"}


def prepare_session(spec: SandboxSpec) -> None:
    """Folders the sandbox expects to find (HOME lives in the session folder, so transcripts persist)."""
    (spec.session_dir / "home").mkdir(parents=True, exist_ok=True)
    spec.inbound_dir.mkdir(parents=True, exist_ok=True)
    spec.group_dir.mkdir(parents=True, exist_ok=True)
    spec.proxy_dir.mkdir(parents=True, exist_ok=True)


class NameLocks:
    """One lock per sandbox name, so concurrent start() calls for a name make one sandbox."""

    def __init__(self):
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    def __call__(self, name: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(name, threading.Lock())
