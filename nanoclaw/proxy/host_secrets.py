"""Host secrets by name: the process environment first, then the project's .env (re-read when it
changes). The credential routes and the model upstreams both read their keys here, at the moment of
the request; a policy file names a variable, never its value."""
from __future__ import annotations

import os
import threading
from pathlib import Path

from dotenv import dotenv_values

from ..config import PROJECT_ROOT


class HostSecrets:
    """Token lookup: the process environment first, then the project's .env (re-read when it changes)."""

    def __init__(self, dotenv_path: Path | None = None):
        self.dotenv_path = Path(dotenv_path or os.environ.get("NANOCLAW_ENV_FILE") or PROJECT_ROOT / ".env")
        self._cache: tuple[tuple, dict] = ((), {})
        self._lock = threading.Lock()

    def __call__(self, name: str) -> str | None:
        value = os.environ.get(name)
        return value if value else self._dotenv().get(name) or None

    def values(self) -> list[str]:
        """Every value in .env (a page read for an agent must not carry any of them out)."""
        return list(self._dotenv().values())

    def _dotenv(self) -> dict:
        try:
            st = self.dotenv_path.stat()
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError:
            return {}
        with self._lock:
            if self._cache[0] != stamp:
                self._cache = (stamp, {k: v for k, v in dotenv_values(self.dotenv_path).items() if v})
            return self._cache[1]
