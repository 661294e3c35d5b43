"""A sandbox reads the runner's modules from bytecode the host wrote (its mount is read-only, so it
could not cache them itself and compiled them at every start)."""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys

from nanoclaw.sandboxes.manager import RUNNER_DIR
from nanoclaw.sandboxes.runner_code import compile_runner


def loaded_from_bytecode(root, module: str) -> bool:
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([sys.executable, "-v", "-c", f"import {module}"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    cached = root / module.replace(".", "/")
    return f"code object from '{cached.parent}/__pycache__/{cached.name}." in done.stderr


def test_the_runners_modules_load_from_the_bytecode_the_host_wrote(tmp_path):
    root = tmp_path / "runner"
    shutil.copytree(RUNNER_DIR, root / "agent_runner", ignore=shutil.ignore_patterns("__pycache__"))
    assert not loaded_from_bytecode(root, "agent_runner.store")  # as a read-only mount saw it before
    assert compile_runner(root / "agent_runner")
    assert loaded_from_bytecode(root, "agent_runner.store")
    assert loaded_from_bytecode(root, "agent_runner.config")


def test_a_tree_the_host_cannot_write_is_reported_not_raised(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="nanoclaw.sandboxes")
    root = tmp_path / "agent_runner"
    root.mkdir()
    (root / "m.py").write_text("x = 1\n")
    root.chmod(0o555)
    try:
        if os.access(root, os.W_OK):  # root writes anywhere: a file where the cache folder would go
            root.chmod(0o755)
            (root / "__pycache__").write_text("")
        assert compile_runner(root) is False
    finally:
        root.chmod(0o755)
    assert "could not write the runner's bytecode" in caplog.text
