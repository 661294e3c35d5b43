"""A platform's listener program as supervisord runs it (its declared `flask --app app nanoclaw …`
command), for the end-to-end tests: started with only the settings the test gives, killed, or stopped
with SIGTERM within the program's declared stopwaitsecs."""
from __future__ import annotations

import importlib
import os
import signal
import subprocess
from pathlib import Path

from nanoclaw.config import PROJECT_ROOT


class ListenerProgram:
    def __init__(self, platform: str, env: dict, log: Path):
        self.platform, self.env, self.log, self.proc = platform, env, log, None
        self.program = importlib.import_module(f"nanoclaw.platforms.{platform}").PLATFORM.listeners[0]

    def start(self) -> "ListenerProgram":
        own = (f"{self.platform.upper()}_", "NANOCLAW_", "DATABASE_URL")
        env = {k: v for k, v in os.environ.items() if not k.startswith(own)}
        self.proc = subprocess.Popen([str(PROJECT_ROOT / ".venv" / "bin" / "flask"), "--app", "app", "nanoclaw",
                                      *self.program.command], cwd=PROJECT_ROOT, env={**env, **self.env},
                                     stdout=self.log.open("ab"), stderr=subprocess.STDOUT)
        return self

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        """SIGTERM, as supervisord stops it; it must be gone within the program's stopwaitsecs."""
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(self.program.stopwaitsecs)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                raise AssertionError(f"{self.program.program} did not stop on SIGTERM within supervisord's "
                                     "stopwaitsecs")
