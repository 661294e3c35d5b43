"""An agent's approved pip and npm packages, installed by the host into a prefix of its own
(`$NANOCLAW_DATA_DIR/packages/<folder>/python` and `/npm`), which both runtimes mount read-only at
/workspace/packages; the runner puts it on PATH, PYTHONPATH and NODE_PATH (agent_runner.__main__).

No package code runs on the host while installing: pip takes wheels only (`--only-binary=:all:`,
no setup.py) and npm runs no lifecycle scripts (`--ignore-scripts`). The whole set is installed
into a fresh folder, which then replaces the old one, so a failed install leaves the previous set
working. pip and npm read their usual settings (PIP_INDEX_URL, NPM_CONFIG_REGISTRY, a proxy) from
the environment of the web program.
"""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

log = logging.getLogger("nanoclaw.packages")

INSTALL_TIMEOUT_S = 900


class InstallError(RuntimeError):
    """The install failed; the message is the tool's own last words."""


def _run(argv: list[str], what: str) -> None:
    log.info("installing %s: %s", what, " ".join(argv))
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S,
                              env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "npm_config_update_notifier": "false"})
    except FileNotFoundError:
        raise InstallError(f"{argv[0]} is not installed on this host") from None
    except subprocess.TimeoutExpired:
        raise InstallError(f"installing {what} took longer than {INSTALL_TIMEOUT_S // 60} minutes") from None
    if done.returncode != 0:
        last = [ln for ln in (done.stderr or done.stdout or "").splitlines() if ln.strip()]
        raise InstallError(f"{what}: {last[-1].strip() if last else f'exit {done.returncode}'}")


def install(prefix: Path, pip: list[str], npm: list[str]) -> None:
    """Make `prefix` hold exactly these packages (and their dependencies)."""
    prefix = Path(prefix)
    staging = prefix.with_name(f".{prefix.name}.new")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        if pip:
            _run([sys.executable, "-m", "pip", "install", "--target", str(staging / "python"), "--only-binary=:all:",
                  "--no-input", "--no-warn-script-location", "--quiet", "--", *pip], "pip packages")
        if npm:
            (staging / "npm").mkdir()
            _run(["npm", "install", "--prefix", str(staging / "npm"), "--ignore-scripts", "--no-audit", "--no-fund",
                  "--loglevel=error", "--", *npm], "npm packages")
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
