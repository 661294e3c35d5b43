"""The delivery thread: hands what the active sessions' runners committed to outbound.db to delivery.

It sleeps until a runner nudges (agent/nudge touched after each commit; see agent_runner/nudge.py)
and then has that session delivered at once. Every FULL_PASS_S it looks at every live session's
outbound files (a few stat calls each) and has those delivered that changed without a nudge (the
safety net: a lost nudge costs that second, never the message) and those that need the clock (a
retry coming due, a typing indicator to show again). Without inotify it does that every POLL_S.

The deliveries themselves run on a bounded pool (SessionPool), one worker per session at a time:
whatever one session's work costs (a slow platform call, a file to copy, a search or a voice to
make), the others' go on beside it.
"""
from __future__ import annotations

import logging
import os
import select
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from agent_runner import nudge  # the runner is a package of this project (pyproject.toml)

from ..sessions import session_schema as schema
from ..sessions import store
from . import delivery

log = logging.getLogger("nanoclaw.delivery")

POLL_S = 0.02          # only without inotify
FULL_PASS_S = 1.0
LIVE_REFRESH_S = 10.0  # the sweep's refresh (as often) usually makes this one needless: wakes add theirs at once
IDLE_REFRESH_S = 10.0  # no live session: a wake and the sweep's refresh interrupt the wait anyway
WAKE_RATE = 500.0   # passes per second a runner that churns its folder can cost us, sustained
WAKE_BURST = 20.0   # wakes allowed back to back: a turn's commit writes the WAL, then touches the nudge


def outbound_signature(path: Path) -> tuple:
    """Changes whenever the agent commits to outbound.db (WAL or main file): the polling fallback."""
    outbound = store.outbound_db(path)
    return store.files_signature((outbound, outbound.with_name(schema.OUTBOUND + "-wal"),
                                  outbound.with_name(nudge.NUDGE)))


def wake_budget(budget: float, elapsed_s: float) -> tuple[float, float]:
    """A token bucket for the loop's wakes (pure): (budget after this wake, seconds to wait first).
    Wakes are refilled at WAKE_RATE up to WAKE_BURST. A fixed gap after every wake would hold back
    the nudge itself: the runner's WAL write wakes us a moment before its nudge does."""
    budget = min(WAKE_BURST, budget + elapsed_s * WAKE_RATE)
    if budget >= 1.0:
        return budget - 1.0, 0.0
    return 0.0, (1.0 - budget) / WAKE_RATE


def to_deliver(live: dict[Path, tuple], nudged: set[Path], full: bool, clock_driven: set[Path],
               signature: Callable[[Path], tuple]) -> list[tuple[Path, tuple]]:
    """Which live sessions to deliver now, each with its outbound signature (pure apart from
    `signature`, a few stat calls): the nudged ones at once; on a full pass also those that need
    the clock (a retry, a turn under way) and those whose files changed without a nudge reaching
    us (the safety net). Without inotify every pass is a full one."""
    out = []
    for path, seen in list(live.items()):  # request threads add sessions meanwhile
        if path in nudged:
            out.append((path, signature(path)))
        elif full:
            sig = signature(path)
            if sig != seen or path in clock_driven:
                out.append((path, sig))
    return out


DELIVERY_WORKERS = 8  # sessions delivered at once; threads are made only as work needs them
CLOSE_WAIT_S = 15.0   # at shutdown, how long the deliveries in flight may take to finish


class SessionPool:
    """Runs `work(path)` for sessions on a bounded pool, one worker per session at a time: a session
    asked for again while its work runs is run once more right after (nothing asked is lost, and
    asks that pile up meanwhile cost one run). `done(path, value)` is told each run's `value`, the
    latest asked with the session (its outbound signature)."""

    def __init__(self, work: Callable[[Path], object], done: Callable[[Path, object], None] | None = None,
                 workers: int | None = None):
        self.work = work
        self.done = done or (lambda path, value: None)
        self._pool = ThreadPoolExecutor(max_workers=workers or DELIVERY_WORKERS, thread_name_prefix="nanoclaw-deliver")
        self._running: dict[Path, list] = {}  # path -> [asked again?, the value to tell]
        self._lock = threading.Condition()

    def submit(self, path: Path, value: object = None) -> None:
        with self._lock:
            if path in self._running:
                self._running[path] = [True, value]
                return
            self._running[path] = [False, value]
        try:
            self._pool.submit(self._run, path)
        except RuntimeError:  # shut down: the work waits for the next start
            with self._lock:
                self._running.pop(path, None)
                self._lock.notify_all()

    def _run(self, path: Path) -> None:
        while True:
            with self._lock:
                value = self._running[path][1]
                self._running[path][0] = False
            try:
                self.work(path)
                self.done(path, value)
            except Exception as exc:  # the row stays for the next pass
                log.exception("delivery for %s failed: %s", path, exc)
            with self._lock:
                if not self._running[path][0]:
                    del self._running[path]
                    self._lock.notify_all()
                    return

    def busy(self) -> set[Path]:
        with self._lock:
            return set(self._running)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Until no session's work runs or waits (tests, shutdown)."""
        with self._lock:
            return self._lock.wait_for(lambda: not self._running, timeout)

    def shutdown(self, wait: bool = True) -> None:
        self._pool.shutdown(wait=wait, cancel_futures=True)


class DeliveryLoop:
    """Runs in one thread of the process that holds the scheduler lock. `live` (session path ->
    last signature) is the Background's; `refresh` updates it from the active sessions."""

    def __init__(self, settings, live: dict[Path, tuple], refresh: Callable[[], None], stop: threading.Event,
                 deliver: Callable[[Path], object] | None = None):
        self.settings = settings
        self.live = live
        self.refresh = refresh
        self.stop = stop
        self.kept = delivery.KeptSessions()  # the workers' connections, one per live session
        self.deliver = deliver or (lambda path: delivery.deliver_session(path, settings, kept=self.kept))
        self.pool = SessionPool(lambda path: self.deliver(path), self._delivered)
        self._r, self._w = os.pipe()
        self._fd_lock = threading.Lock()  # interrupt() from request threads never writes to a closed fd
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        try:
            self.watcher: nudge.Watcher | None = nudge.Watcher((nudge.NUDGE,))
        except nudge.Unavailable as exc:
            log.warning("no inotify (%s): delivery looks at every session's outbound.db every %.0f ms instead",
                        exc, POLL_S * 1000)
            self.watcher = None

    def interrupt(self) -> None:
        """Wake the loop now (a new live session to watch, or shutdown)."""
        with self._fd_lock:
            if self._w < 0:
                return
            try:
                os.write(self._w, b"x")
            except (BlockingIOError, OSError):
                pass  # one is already pending

    def _delivered(self, path: Path, sig) -> None:
        if path in self.live:
            self.live[path] = sig

    def close(self) -> None:
        """After the thread ended: the deliveries in flight may finish (for CLOSE_WAIT_S; a platform
        call that hangs past that is left to its own timeout)."""
        finished = self.pool.wait_idle(CLOSE_WAIT_S)
        self.pool.shutdown(wait=finished)
        if not finished:
            log.warning("shutting down with a delivery still under way after %.0f s (its row is settled at "
                        "the next start)", CLOSE_WAIT_S)
        self.kept.close()
        if self.watcher:
            self.watcher.close()
        with self._fd_lock:
            fds, self._r, self._w = (self._r, self._w), -1, -1
            for fd in fds:
                if fd >= 0:
                    os.close(fd)

    def _sync_watches(self) -> None:
        wanted = {store.agent_part(p): p for p in list(self.live)}
        for directory in self.watcher.watched - set(wanted):
            self.watcher.unwatch(directory)
        for directory in set(wanted) - self.watcher.watched:
            try:
                self.watcher.watch(directory)  # not there yet: the full pass covers it until it is
            except OSError as exc:
                log.warning("cannot watch %s for nudges (%s); it is delivered on the full pass", directory, exc)

    def _sleep(self, timeout: float) -> None:
        fds = [self._r] + ([self.watcher.fileno()] if self.watcher else [])
        try:
            ready, _, _ = select.select(fds, [], [], max(0.0, timeout))
        except InterruptedError:
            return
        if self._r in ready:
            try:
                os.read(self._r, 4096)
            except BlockingIOError:
                pass

    def run(self) -> None:
        self._next_refresh = self._next_full = self._last_wake = 0.0
        self._budget = WAKE_BURST
        while not self.stop.is_set():
            try:
                self._pass()
            except Exception as exc:  # never silently, never for good: delivery stopping means no answers
                log.exception("the delivery loop failed a pass (trying again in a second): %s", exc)
                self.stop.wait(1.0)

    def _pass(self) -> None:
        now = time.monotonic()
        if now >= self._next_refresh:
            try:
                self.refresh()
            except Exception as exc:
                log.warning("could not list sessions: %s", exc)
            self._next_refresh = now + LIVE_REFRESH_S
            delivery.clock_driven.intersection_update(list(self.live))
            self.kept.retain(list(self.live))
        if self.watcher:
            self._sync_watches()
        full = now >= self._next_full
        if full:
            self._next_full = now + FULL_PASS_S
        nudged_dirs = self.watcher.drain() if self.watcher else set()
        nudged = {p for p in list(self.live) if store.agent_part(p) in nudged_dirs}
        for path, sig in to_deliver(self.live, nudged, full or self.watcher is None, delivery.clock_driven,
                                    outbound_signature):
            if self.stop.is_set():
                return  # shutting down: the deliveries in flight finish, the rest waits for the next start
            self.pool.submit(path, sig)
        if self.stop.is_set():
            return
        if self.watcher is None:
            self._sleep(POLL_S)
            return
        if not self.live:  # at rest: nothing to pass over until a session is watched (which interrupts)
            self._next_full = self._next_refresh = max(self._next_refresh, now + IDLE_REFRESH_S)
        elif self._next_full - now > FULL_PASS_S:  # the first live session after rest: its passes now
            self._next_full, self._next_refresh = now + FULL_PASS_S, min(self._next_refresh, now + LIVE_REFRESH_S)
        self._sleep(min(self._next_full, self._next_refresh) - time.monotonic())
        woke = time.monotonic()
        self._budget, wait = wake_budget(self._budget, woke - self._last_wake)
        self._last_wake = woke + wait  # the refill during the wait is spent on this wake
        if wait:
            time.sleep(wait)
