"""The second engine (another machine's view) for this folder's tests."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import require

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "remote-engine.sh"


@pytest.fixture(scope="session")
def engine_env():
    require(os.geteuid() == 0 and SCRIPT.exists(), "a second engine in a network namespace needs root")
    started = subprocess.run([str(SCRIPT), "start"], capture_output=True, text=True, timeout=120)
    require(started.returncode == 0, f"the second engine did not start: {started.stderr[-500:]}")
    env = dict(line.split("=", 1) for line in started.stdout.split())
    loaded = subprocess.run([str(SCRIPT), "load", "nanoclaw-agent:latest"], capture_output=True, text=True, timeout=600)
    require(loaded.returncode == 0, f"the agent image did not reach the second engine: {loaded.stderr[-500:]}")
    return env
