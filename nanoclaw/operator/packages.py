"""An agent's approved pip and npm packages, installed by the host into a prefix of its own
(`$NANOCLAW_DATA_DIR/packages/<folder>/python` and `/npm`), which both runtimes mount read-only at
/workspace/packages; the runner puts it on PATH, PYTHONPATH and NODE_PATH (agent_runner.__main__).

No package code runs on the host while installing, and nothing local is installed: the names are
registry names (proposal_rules refuses anything shaped like a file), pip and npm run in an empty
folder of their own (so no file of the service's working folder can be taken for a package),
pip takes wheels only (`--only-binary=:all:`, no setup.py is built or run), and npm first resolves
the whole tree without installing it: every package must come from the registry as a tarball
(a `file:`, `link:` or git dependency of any package refuses the install), then installs exactly
that tree with no lifecycle scripts (`npm ci --ignore-scripts`). The whole set is installed into a
fresh folder, which then replaces the old one, so a failed install leaves the previous set working.
pip and npm read their usual settings (PIP_INDEX_URL, NPM_CONFIG_REGISTRY, a proxy) from the
environment of the web program.
"""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

log = logging.getLogger("nanoclaw.packages")

INSTALL_TIMEOUT_S = 900


class InstallError(RuntimeError):
    """The install failed; the message is the tool's own last words."""


def _run(argv: list[str], what: str, cwd: Path) -> None:
    log.info("installing %s: %s", what, " ".join(argv))
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, cwd=cwd,
                              env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "npm_config_update_notifier": "false"})
    except FileNotFoundError:
        raise InstallError(f"{argv[0]} is not installed on this host") from None
    except subprocess.TimeoutExpired:
        raise InstallError(f"installing {what} took longer than {INSTALL_TIMEOUT_S // 60} minutes") from None
    if done.returncode != 0:
        last = [ln for ln in (done.stderr or done.stdout or "").splitlines() if ln.strip()]
        raise InstallError(f"{what}: {last[-1].strip() if last else f'exit {done.returncode}'}")


SEMVER_RE = re.compile(r"\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.+-]+)?")
NPM_FLAGS = ["--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"]


def _install_npm(folder: Path, names: list[str], cwd: Path) -> None:
    folder.mkdir()
    (folder / "package.json").write_text(json.dumps({"name": "nanoclaw-agent-packages", "private": True}))
    _run(["npm", "install", "--prefix", str(folder), "--package-lock-only", *NPM_FLAGS, "--", *names],
         "npm packages (resolving)", cwd)
    problem = not_from_registry(json.loads((folder / "package-lock.json").read_text()), _npm_registry(cwd))
    if problem:
        raise InstallError(f"npm packages: {problem}; only packages from the registry are installed")
    _run(["npm", "ci", "--prefix", str(folder), *NPM_FLAGS], "npm packages", cwd)


def _npm_registry(cwd: Path) -> str:
    try:
        done = subprocess.run(["npm", "config", "get", "registry"], capture_output=True, text=True, timeout=60,
                              cwd=cwd)
    except (OSError, subprocess.TimeoutExpired):
        raise InstallError("npm is not installed on this host") from None
    return done.stdout.strip() or "https://registry.npmjs.org/"


def not_from_registry(lock: dict, registry: str) -> str | None:
    """Why an npm lockfile's tree is not made of tarballs from `registry` only (pure), or None. A
    package bundled inside another's tarball came with it from the registry."""
    base = registry.rstrip("/") + "/"
    for path, entry in (lock.get("packages") or {}).items():
        if not path or entry.get("inBundle"):
            continue  # the prefix's own package.json; what a registry tarball carries inside
        name = path.rsplit("node_modules/", 1)[-1]
        resolved = str(entry.get("resolved") or "")
        if entry.get("link") or resolved.startswith(("file:", "link:")) or "node_modules/" not in path:
            return f"{name} comes from a local folder or file ({resolved or 'a link'})"
        # npm leaves `resolved` out for a tarball of the configured registry; then the version is plain
        from_registry = resolved.startswith(base) if resolved else bool(SEMVER_RE.fullmatch(str(entry.get("version"))))
        if not from_registry or not entry.get("integrity"):
            return f"{name} does not come from the registry {base} ({resolved or entry.get('version') or 'no address'})"
    return None


def install(prefix: Path, pip: list[str], npm: list[str]) -> None:
    """Make `prefix` hold exactly these packages (and their dependencies)."""
    prefix = Path(prefix)
    staging = prefix.with_name(f".{prefix.name}.new")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        with tempfile.TemporaryDirectory(prefix="nanoclaw-install-") as empty:
            if pip:
                _run([sys.executable, "-m", "pip", "install", "--target", str(staging / "python"),
                      "--only-binary=:all:", "--no-input", "--no-warn-script-location", "--quiet", "--", *pip],
                     "pip packages", Path(empty))
            if npm:
                _install_npm(staging / "npm", npm, Path(empty))
        for root, dirs, files in os.walk(staging):  # readable by the sandbox's uid, written by nobody
            for name in dirs + files:
                path = os.path.join(root, name)
                if not os.path.islink(path):
                    os.chmod(path, 0o755 if name in dirs or os.access(path, os.X_OK) else 0o644)
        staging.chmod(0o755)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    old = prefix.with_name(f".{prefix.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if prefix.exists():
        prefix.rename(old)
    staging.rename(prefix)
    shutil.rmtree(old, ignore_errors=True)
