"""A pytest run in a process of its own, beside the main one: started once, waited for once
(tests/long_turn.py and tests/beside.py use it). Its output goes to a temporary file, read back
when it is waited for."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class SideRun:
    def __init__(self, name: str):
        self.name = name
        self.proc: subprocess.Popen | None = None
        self.out = None
        self.summary: str | None = None  # its last line ("N passed in …"), once waited for

    @property
    def started(self) -> bool:
        return self.proc is not None

    def start(self, targets: list[str], env: dict[str, str] | None = None) -> None:
        if self.proc is not None:
            return
        self.out = tempfile.NamedTemporaryFile("w+", prefix=f"nanoclaw-{self.name}-", suffix=".log", delete=False)
        self.proc = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                                      "-o", "console_output_style=times", *targets],
                                     cwd=ROOT, stdout=self.out, stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {})})

    def result(self, timeout: float) -> tuple[int, str]:
        """(exit code, output) of the run started before."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.out.seek(0)
        output = self.out.read()
        self.summary = output.strip().splitlines()[-1] if output.strip() else "(no output)"
        return code, output

    def abandon(self, grace: float = 60) -> None:
        """The main run ended without waiting for this one (-x, ^C, a failed collection): interrupt
        it as ^C would, so its tests' teardowns stop their sandboxes and services, rather than leave
        it running for minutes on its own."""
        if self.proc is None or self.proc.poll() is not None or self.summary is not None:
            return
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
