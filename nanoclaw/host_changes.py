"""Changes one host program makes that another must act on, told at once instead of polled for.

The proxy records budget events and model outages, a `tasks` command pauses a task; the web
program's background tells the owner or replans the task. The writer touches
data/run/changes/<topic>/nudge after its commit and the background, blocked on inotify for those
files, runs that topic's job at once. The jobs keep an interval as the safety net (a lost touch, an
inotify limit), long enough that an idle host does not wake for it.

Host-only: data/run/ is never mounted into a sandbox, so no agent can touch these files.
"""
from __future__ import annotations

import logging
import os
import select
import threading
from pathlib import Path
from typing import Callable

from agent_runner import nudge

log = logging.getLogger("nanoclaw.host_changes")

TOPICS = ("tasks", "budget", "outages")


def topic_dir(data_dir: Path, topic: str) -> Path:
    return Path(data_dir) / "run" / "changes" / topic


def announce(data_dir: Path, topic: str) -> None:
    """After the writer's commit; never fails it (the listener's interval picks the change up)."""
    where = topic_dir(data_dir, topic)
    try:
        where.mkdir(parents=True, exist_ok=True)
        nudge.touch_plain(where / nudge.NUDGE)
    except OSError as exc:
        log.debug("could not announce a change of %s: %s", topic, exc)


class ChangeListener:
    """A thread blocked on inotify (and a pipe that stops it): on a touch of a topic, its callback."""

    def __init__(self, data_dir: Path, callbacks: dict[str, Callable[[], None]]):
        self.data_dir = Path(data_dir)
        self.callbacks = callbacks
        self._stop_r, self._stop_w = os.pipe()
        self._thread: threading.Thread | None = None
        self.watcher: nudge.Watcher | None = None

    def start(self) -> "ChangeListener":
        try:
            self.watcher = nudge.Watcher((nudge.NUDGE,))
            for topic in self.callbacks:
                where = topic_dir(self.data_dir, topic)
                where.mkdir(parents=True, exist_ok=True)
                self.watcher.watch(where)
        except OSError as exc:  # nudge.Unavailable included: the jobs' intervals still run
            log.warning("changes of other host programs are noticed on the jobs' intervals only: %s", exc)
            return self
        self._thread = threading.Thread(target=self._run, name="nanoclaw-host-changes", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        by_dir = {topic_dir(self.data_dir, t): t for t in self.callbacks}
        while True:
            ready, _, _ = select.select([self.watcher.fileno(), self._stop_r], [], [])
            if self._stop_r in ready:
                return
            for directory in self.watcher.drain():
                topic = by_dir.get(directory)
                if topic is None:
                    continue
                if not directory.is_dir():  # removed under us: watch it again, the job looks anyway
                    directory.mkdir(parents=True, exist_ok=True)
                    self.watcher.watch(directory)
                try:
                    self.callbacks[topic]()
                except Exception as exc:  # noqa: BLE001 - the job's interval runs it anyway
                    log.warning("acting on a change of %s failed: %s", topic, exc)

    def stop(self) -> None:
        if self._thread is not None:
            os.write(self._stop_w, b"x")
            self._thread.join(timeout=5)
            self._thread = None
        if self.watcher is not None:
            self.watcher.close()
            self.watcher = None
        for fd in (self._stop_r, self._stop_w):
            try:
                os.close(fd)
            except OSError:
                pass
        self._stop_r = self._stop_w = -1
