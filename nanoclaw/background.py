"""The web program's background work, run by exactly one process.

Whoever takes the exclusive lock on data/scheduler.lock runs it: a second
gunicorn worker or a `flask` command never runs the jobs twice.

- delivery: a thread that watches the outbound.db of live sessions (a stat per
  session per tick; the database is opened only when the file changed) and
  hands new rows to the adapters;
- wake: an APScheduler job that drains the capacity queue and wakes sessions
  whose due work has no sandbox.
"""
from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from apscheduler.schedulers.background import BackgroundScheduler

from . import delivery
from .db import database
from .sessions import session_schema as schema
from .sessions import store

log = logging.getLogger("nanoclaw.background")

DELIVERY_TICK_S = 0.02
WAKE_INTERVAL_S = 2.0
LIVE_REFRESH_S = 2.0
FULL_PASS_S = 1.0


def take_lock(path: Path):
    """An exclusive, non-blocking flock; the open file is the lock (None if held elsewhere)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        return None
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


def outbound_signature(path: Path) -> tuple:
    """Changes whenever the agent commits to outbound.db (WAL or main file)."""
    sig = []
    for name in (schema.OUTBOUND, schema.OUTBOUND + "-wal"):
        try:
            st = os.stat(path / name)
            sig.append((st.st_mtime_ns, st.st_size))
        except FileNotFoundError:
            sig.append(None)
    return tuple(sig)


@dataclass
class Background:
    settings: object
    manager: object | None
    lock_handle: object
    scheduler: BackgroundScheduler | None = None
    live: dict[Path, tuple] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def watch(self, path: Path) -> None:
        """Deliver for this session from now on (called on wake)."""
        self.live.setdefault(path, ())

    def _refresh_live(self) -> None:
        from .models import Session
        with database.connection_context():
            for s in Session.select(Session.id, Session.agent_group).where(Session.status == "active"):
                self.live.setdefault(store.session_path(self.settings.sessions_dir, s.agent_group.folder, s.id), ())

    def _delivery_loop(self) -> None:
        next_refresh = next_full = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= next_refresh:
                try:
                    self._refresh_live()
                except Exception as exc:
                    log.warning("could not list sessions: %s", exc)
                next_refresh = now + LIVE_REFRESH_S
            # a full pass every second catches retries that came due; otherwise only changed files
            full = now >= next_full
            if full:
                next_full = now + FULL_PASS_S
            for path, seen in list(self.live.items()):
                sig = outbound_signature(path)
                if sig == seen and not full:
                    continue
                try:
                    delivery.deliver_session(path, self.settings)
                    self.live[path] = sig
                except Exception as exc:  # keep the loop alive; the row stays for the next tick
                    log.exception("delivery for %s failed: %s", path, exc)
            self._stop.wait(DELIVERY_TICK_S)

    def wake_due(self) -> None:
        """Wake sessions with due triggering work and no sandbox (also drains the capacity queue)."""
        if self.manager is None:
            return
        while self.manager.queue:
            folder, session_id = self.manager.queue.popleft()
            if not self.manager.wake(folder, session_id):
                break
        for path in list(self.live):
            folder, session_id = path.parent.name, path.name
            if store.has_due_trigger(path) and not self.manager.is_running(folder, session_id):
                self.manager.wake(folder, session_id)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._delivery_loop, name="nanoclaw-delivery", daemon=True)
        self._thread.start()
        self.scheduler = BackgroundScheduler(timezone="UTC")
        self.scheduler.add_job(self.wake_due, "interval", seconds=WAKE_INTERVAL_S, id="wake_due",
                               max_instances=1, coalesce=True)
        self.scheduler.start()
        log.info("background jobs started in pid %d (delivery every %.0f ms)", os.getpid(), DELIVERY_TICK_S * 1000)

    def shutdown(self) -> None:
        self._stop.set()
        if self.scheduler:
            self.scheduler.shutdown(wait=False)
        if self._thread:
            self._thread.join(timeout=5)
        self.lock_handle.close()


def start(app, manager=None) -> Background | None:
    """Start the background jobs in this process if it wins the scheduler lock."""
    settings = app.config["NANOCLAW"]
    handle = take_lock(settings.data_dir / "scheduler.lock")
    if handle is None:
        log.info("another process holds %s; this one runs no background jobs", settings.data_dir / "scheduler.lock")
        return None
    bg = Background(settings=settings, manager=manager, lock_handle=handle)
    bg.start()
    app.extensions["nanoclaw.background"] = bg
    if manager is not None:
        pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="nanoclaw-wake")

        def waker(folder: str, session_id: str) -> None:
            """Called by routing: watch the session and start its sandbox off the request thread."""
            bg.watch(store.session_path(settings.sessions_dir, folder, session_id))
            pool.submit(manager.wake, folder, session_id)
        app.extensions["nanoclaw.waker"] = waker
    return bg


def start_service(app) -> Background | None:
    """The web program's start: pick the sandbox runtime, then run the background jobs."""
    from .runtime.base import RuntimeUnavailable, select_runtime
    from .sandboxes import SandboxManager, mounts_for

    settings = app.config["NANOCLAW"]
    try:
        runtime = select_runtime(settings, log)
    except RuntimeUnavailable as exc:
        log.error("no sandbox runtime: %s; messages are stored but no agent can answer", exc)
        return start(app, None)
    manager = SandboxManager(settings, runtime, mounts_for=mounts_for(settings), on_refused=tell_owner(settings))
    return start(app, manager)


def tell_owner(settings):
    """When a sandbox cannot start (e.g. a refused mount), say why in the session's chat."""
    from .channels.base import get_adapter

    def notify(folder: str, session_id: str, message: str) -> None:
        path = store.session_path(settings.sessions_dir, folder, session_id)
        try:
            conn = schema.connect(path / schema.INBOUND, readonly=True)
            row = conn.execute("SELECT channel_type, platform_id, thread_id FROM routing").fetchone()
            conn.close()
            if row:
                get_adapter(row[0], settings).send_text(store.Target(*row), f"(Your agent could not start: {message})")
        except Exception as exc:
            log.error("could not tell %s/%s why its sandbox did not start: %s", folder, session_id, exc)
    return notify
