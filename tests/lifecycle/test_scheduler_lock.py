"""Two app processes on one data directory: only the holder of data/scheduler.lock runs the
background jobs; when it dies, the process that was waiting takes over (a worker started while its
predecessor was still shutting down must not stay without jobs), and a third still waits."""
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
from nanoclaw import service
from nanoclaw.lifecycle import background
marker = sys.argv[1]
original = background.Background.sweep
def sweep(self, full=False):
    with open(marker, "a") as f:
        f.write(f"{os.getpid()}\n")
    return original(self, full)
background.Background.sweep = sweep
background.SWEEP_INTERVAL_S = 0.2
background.LOCK_RETRY_S = 0.2
app = create_app()
bg = service.start(app, None)
print("jobs" if bg else "none", flush=True)
if bg is None:
    service.wait_for_lock(app, lambda handle: service.start(app, None, handle))
time.sleep(60)
"""


def spawn(env, marker):
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(marker)], cwd=PROJECT_ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return proc, proc.stdout.readline().strip()


def runners(marker):
    return set(marker.read_text().split()) if marker.exists() else set()


def wait_for(condition, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def test_two_app_processes_never_both_run_jobs_and_the_waiting_one_takes_over(tmp_path):
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
        assert wait_for(lambda: marker.exists() and len(marker.read_text().split()) >= 5)  # the holder sweeps
        assert runners(marker) == {str(first.pid)}  # the second tried the lock all along, in vain
        first.send_signal(signal.SIGKILL)  # the holder dies: the kernel drops its lock
        first.wait(10)
        assert wait_for(lambda: str(second.pid) in runners(marker)), "the waiting process did not take over"
        third, said_third = spawn(env, marker)
        assert said_third == "none"
        swept = len(marker.read_text().split())
        assert wait_for(lambda: len(marker.read_text().split()) >= swept + 5)
        assert runners(marker) == {str(first.pid), str(second.pid)}  # never the third while the second runs
    finally:
        for proc in (first, second, third):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)
