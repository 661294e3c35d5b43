"""Two app processes on one data directory: only the holder of data/scheduler.lock runs the
background jobs; when it dies, the next process to start takes over."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from nanoclaw.config import PROJECT_ROOT

CHILD = r"""
import os, sys, time
from nanoclaw.app import create_app
from nanoclaw.lifecycle import background
marker = sys.argv[1]
original = background.Background.sweep
def sweep(self, full=False):
    with open(marker, "a") as f:
        f.write(f"{os.getpid()}\n")
    return original(self, full)
background.Background.sweep = sweep
background.SWEEP_INTERVAL_S = 0.2
app = create_app()
bg = background.start(app, None)
print("jobs" if bg else "none", flush=True)
time.sleep(60)
"""


def spawn(env, marker):
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(marker)], cwd=PROJECT_ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return proc, proc.stdout.readline().strip()


def runners(marker):
    return set(marker.read_text().split()) if marker.exists() else set()


def test_two_app_processes_never_both_run_jobs(tmp_path):
    env = {**os.environ, "NANOCLAW_DATA_DIR": str(tmp_path / "data"), "NANOCLAW_ENV_FILE": str(tmp_path / "none"),
           "TZ": "UTC", "PYTHONPATH": str(PROJECT_ROOT)}
    env.pop("DATABASE_URL", None)
    subprocess.run([f"{os.path.dirname(sys.executable)}/flask", "--app", "app", "nanoclaw", "migrate"],
                   cwd=PROJECT_ROOT, env=env, check=True, capture_output=True, timeout=60)
    marker = tmp_path / "sweeps"
    first, said_first = spawn(env, marker)
    second, said_second = spawn(env, marker)
    third = None
    try:
        assert (said_first, said_second) == ("jobs", "none")
        time.sleep(2)  # the holder sweeps every 0.2 s meanwhile
        assert runners(marker) == {str(first.pid)}
        first.send_signal(signal.SIGKILL)  # the holder dies: the kernel drops its lock
        first.wait(10)
        third, said_third = spawn(env, marker)
        assert said_third == "jobs"
        time.sleep(1)
        assert runners(marker) == {str(first.pid), str(third.pid)}  # never the second
    finally:
        for proc in (first, second, third):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)
