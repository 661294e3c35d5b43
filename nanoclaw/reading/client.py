"""The web program's side of the reading worker (and of the browser worker): started on first use,
restarted if it died or went idle, asked over its stdin and answered by id on its stdout (worker.py,
browser.py)."""
from __future__ import annotations

import itertools
import json
import logging
import resource
import subprocess
import sys
import threading
from concurrent.futures import Future

from ..config import PROJECT_ROOT

log = logging.getLogger("nanoclaw.reading")
# A hostile page (a decompression bomb, a PDF that makes the parser build without end) fails inside the
# worker with a MemoryError instead of taking the host's memory; 5 MB pages parse in well under this.
ADDRESS_SPACE = 1536 * 1024 * 1024


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


class WorkerGone(RuntimeError):
    pass


class Worker:
    def __init__(self, idle_s: float, module: str = "nanoclaw.reading.worker", extra: tuple[str, ...] = (),
                 limited: bool = True, told=None):
        # the browser worker is not address-limited: Chromium reserves far more than it uses, and
        # its sandbox has a cgroup of its own (browser_sandbox.py)
        self.idle_s, self.module, self.extra, self.limited = idle_s, module, extra, limited
        self.told = told  # a line with no id: what the worker tells unasked (the browser's requests)
        self._proc: subprocess.Popen | None = None
        self._waiting: dict[int, tuple[subprocess.Popen, Future]] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def ask(self, request: dict, timeout: float) -> dict:
        future: Future = Future()
        with self._lock:
            proc = self._running()
            request_id = next(self._ids)
            self._waiting[request_id] = (proc, future)
            try:
                proc.stdin.write(json.dumps({**request, "id": request_id}).encode() + b"\n")
                proc.stdin.flush()
            except OSError:
                self._waiting.pop(request_id, None)
                raise WorkerGone("the reading worker stopped") from None
        try:
            return future.result(timeout)
        finally:
            with self._lock:
                self._waiting.pop(request_id, None)

    def _running(self) -> subprocess.Popen:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self._proc = subprocess.Popen([sys.executable, "-m", self.module, "--idle", str(self.idle_s), *self.extra],
                                      cwd=PROJECT_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      preexec_fn=_limit if self.limited else None)
        log.info("%s started (pid %d)", self.module, self._proc.pid)
        threading.Thread(target=self._read, args=(self._proc,), name="reading-worker", daemon=True).start()
        return self._proc

    def _read(self, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            try:
                answer = json.loads(line)
            except ValueError:
                continue
            if "id" not in answer and self.told is not None:
                try:
                    self.told(answer)
                except Exception:  # noqa: BLE001 - a record that failed must not stop the answers
                    log.exception("%s: an event could not be handled", self.module)
                continue
            with self._lock:
                _, future = self._waiting.get(answer.pop("id", None), (None, None))
            if future is not None and not future.done():
                future.set_result(answer)
        proc.wait()
        log.info("%s %d ended (%s)", self.module, proc.pid, proc.returncode)
        with self._lock:
            if self._proc is proc:
                self._proc = None
            # a request written to a worker that was exiting has no answer coming: fail it now
            for owner, future in self._waiting.values():
                if owner is proc and not future.done():
                    future.set_exception(WorkerGone("the reading worker stopped"))

    def stop(self, kill: bool = False) -> None:
        """End the worker: let it finish (stdin closed), or kill it (a read that would not end)."""
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            if kill:
                proc.kill()
                return
            proc.stdin.close()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
