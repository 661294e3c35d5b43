"""Runs tests/long_turn_scenario.py in its own pytest process, once per test session."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
_run: dict = {}


def start() -> None:
    if _run:
        return
    out = tempfile.NamedTemporaryFile("w+", prefix="nanoclaw-long-turn-", suffix=".log", delete=False)
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             str(HERE / "long_turn_scenario.py")], cwd=HERE.parent, stdout=out,
                            stderr=subprocess.STDOUT, env=dict(os.environ))
    _run.update(proc=proc, out=out)


def result(timeout: float = 1800) -> tuple[int, str]:
    start()
    proc, out = _run["proc"], _run["out"]
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    out.seek(0)
    return code, out.read()
