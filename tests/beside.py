"""The slowest end-to-end files run in a second pytest process beside the main one, so the suite's
wall time is about the longer of the two rather than their sum (two cores: while one process waits
on a sandbox, the other runs). Started when the suite is collected (conftest.py) with the node ids
the run selected from these files; tests/test_beside.py, moved to the end of the run, waits for it
and fails with its output if anything in it failed. Running these files alone runs them here.

They hold no state the main process shares: each test has its own data folder, database (a fresh
PostgreSQL database by name), install id (the pid), ports and sandboxes, and none builds or
prunes an image."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
FILES = ("tests/test_faults_e2e.py", "tests/test_lifecycle_e2e.py", "tests/test_slack_socket_e2e.py",
         "tests/test_telegram_poll_e2e.py")
CHILD = "NANOCLAW_TESTS_BESIDE"  # set in the second process: it runs what it was given
_run: dict = {}


def start(node_ids: list[str], env: dict[str, str]) -> None:
    if _run:
        return
    out = tempfile.NamedTemporaryFile("w+", prefix="nanoclaw-beside-", suffix=".log", delete=False)
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *node_ids],
                            cwd=HERE.parent, stdout=out, stderr=subprocess.STDOUT,
                            env={**os.environ, **env, CHILD: "1"})
    _run.update(proc=proc, out=out)


def result(timeout: float = 3600) -> tuple[int, str]:
    if not _run:
        start(list(FILES), {})
    proc, out = _run["proc"], _run["out"]
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    out.seek(0)
    output = out.read()
    _run["summary"] = output.strip().splitlines()[-1] if output.strip() else "(no output)"
    return code, output


def summary() -> str | None:
    """The second process's last line ("N passed in …"), once it was waited for."""
    return _run.get("summary")
