"""One runtime now, a better one later: bubblewrap serves while the Docker image is built.

New sandboxes start on `current`; a sandbox keeps running where it started, so every question
(is it running, list, stop, logs) asks all the runtimes this has used. Switching is one
assignment: a start in flight finishes on the runtime it began with.
"""
from __future__ import annotations

import threading

from .base import Runtime, SandboxSpec


class SwitchingRuntime:
    def __init__(self, current: Runtime):
        self.current = current
        self._all: list[Runtime] = [current]
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.current.name

    def switch_to(self, runtime: Runtime) -> None:
        with self._lock:
            if runtime not in self._all:
                self._all.insert(0, runtime)
            self.current = runtime

    def _runtimes(self) -> list[Runtime]:
        with self._lock:
            return list(self._all)

    def start(self, spec: SandboxSpec) -> None:
        if any(r.is_running(spec.name) for r in self._runtimes() if r is not self.current):
            return  # it runs where it started
        self.current.start(spec)

    def is_running(self, name: str) -> bool:
        return any(r.is_running(name) for r in self._runtimes())

    def stop(self, name: str, timeout: float = 5) -> None:
        for runtime in self._runtimes():
            runtime.stop(name, timeout=timeout)

    def list_sandboxes(self, install_id: str) -> list[str]:
        names: list[str] = []
        for runtime in self._runtimes():
            names += [n for n in runtime.list_sandboxes(install_id) if n not in names]
        return names

    def logs(self, name: str) -> str:
        for runtime in self._runtimes():
            if runtime.is_running(name):
                return runtime.logs(name)
        return self.current.logs(name)
