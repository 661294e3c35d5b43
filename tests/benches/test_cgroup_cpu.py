"""bench/footprint.py's CPU figure counts what ran and ended within the phase (issue 61, item 4).

The old figure summed /proc run times of the processes alive at the phase's end (their waited-for
children included): a thread that ended, or a grandchild whose parent never waited, was not there.
Here a process in the bench's cgroup starts a thread and an orphaned grandchild that each burn CPU
and end before the phase does; the cgroup's figure holds their time, /proc's alive-at-end sum does not.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
from cgroup_cpu import Accounting  # noqa: E402
from idle import cpu_seconds  # noqa: E402

BURN = """
import os, sys, threading, time
def burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
t = threading.Thread(target=burn, args=(0.3,)); t.start(); t.join()     # a thread that ends
if os.fork() == 0:                                                      # a grandchild nobody waits for
    os.setsid()
    if os.fork() == 0:
        burn(0.3); os._exit(0)
    os._exit(0)
os.wait()
sys.stdout.write("ready\\n"); sys.stdout.flush()
sys.stdin.readline()                                                    # alive at the phase's end
"""


def test_a_thread_and_an_orphan_that_ended_in_the_phase_are_counted():
    acct = Accounting.open(f"nanoclaw-test-{os.getpid()}")
    if acct is None:
        pytest.skip("no writable cgroup here (needs root); the bench falls back to ticks and says so")
    try:
        before = acct.roles()
        proc = subprocess.Popen([sys.executable, "-c", BURN], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True, preexec_fn=acct.enter)
        assert proc.stdout.readline() == "ready\n"
        # the orphan is gone once nothing but the parent is left in the cgroup
        deadline = time.monotonic() + 30
        while len((acct.root / "cgroup.procs").read_text().split()) > 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        counted = (sum(acct.roles().values()) - sum(before.values())) / 1e9
        alive_at_end = cpu_seconds(proc.pid)  # /proc: the process alive at the end, and its waited children
        threads_alive = sum(int((t / "schedstat").read_text().split()[0])
                            for t in Path(f"/proc/{proc.pid}/task").iterdir()) / 1e9  # schedstat: live threads
        proc.stdin.write("\n")
        proc.stdin.close()
        proc.wait(10)
    finally:
        acct.close()
    assert counted >= 0.55, counted  # the thread's 0.3 s and the orphan's 0.3 s, and the interpreter's start
    assert alive_at_end < counted - 0.25, (alive_at_end, counted)  # the orphan's time was invisible to it
    assert threads_alive < counted - 0.5, (threads_alive, counted)  # and to schedstat, the ended thread's too
