"""The pytest runs beside the main one (tests/side_run.py) end with it: a main run stopped early
(-x, ^C) or only collecting leaves no tests running on their own for minutes."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from side_run import ROOT, SideRun


def test_a_run_nobody_waited_for_is_interrupted_and_tears_down(tmp_path):
    started, torn_down = tmp_path / "started", tmp_path / "torn-down"
    (tmp_path / "test_slow.py").write_text(f"""
import time
import pytest

@pytest.fixture
def sandbox():
    yield
    open({str(torn_down)!r}, "w").close()

def test_waits(sandbox):
    open({str(started)!r}, "w").close()  # in the test, not the fixture: a ^C there would stop its set-up
    time.sleep(300)
""")
    run = SideRun("side-run-test")
    run.start([str(tmp_path / "test_slow.py")])
    deadline = time.monotonic() + 60
    while not started.exists():
        assert run.proc.poll() is None and time.monotonic() < deadline, "the side run never started its test"
        time.sleep(0.05)
    run.abandon(grace=30)
    assert run.proc.returncode not in (None, -signal.SIGKILL), "still running 30 s after its ^C"
    assert torn_down.exists(), "interrupted without its fixtures' teardown"


def test_collecting_only_starts_nothing_beside(tmp_path):
    """--collect-only with the files that run beside selected: nothing is started beside (it used to
    start the three groups and the long turn, which then ran the whole suite on their own)."""
    env = {**os.environ, "TMPDIR": str(tmp_path), "CI": "true"}
    env.pop("NANOCLAW_TESTS_BESIDE", None)
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q",
                          "tests/test_security.py", "tests/outbound/test_nudges.py", "tests/test_beside.py",
                          "tests/lifecycle/test_long_turn.py"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "tests/outbound/test_nudges.py" in out.stdout
    assert sorted(p.name for p in Path(tmp_path).glob("nanoclaw-*.log")) == []
