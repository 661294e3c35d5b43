"""The web program's background work, run by exactly one process.

Whoever takes the exclusive lock on data/scheduler.lock runs it: a second
gunicorn worker or a `flask` command never runs the jobs twice.

- start-up (at once, in a job): this install's sandboxes left by a previous run
  are removed (wakes that arrive meanwhile wait in the queue), the sends a killed
  predecessor left half done are settled in every session, then the first sweep
  runs over every open session while delivery, wakes and task runs already go on;
- delivery: a thread that wakes when an active session's runner nudges after a
  commit to outbound.db (and every second regardless) and hands new rows to the
  adapters or to a system op's handler (outbound/watcher.py);
- sweep (every SWEEP_INTERVAL_S): liveness, stuck claims, retries, idle stops,
  wakes of due work (sweep.py), over the active sessions only (active.py);
- drain (every DRAIN_INTERVAL_S): starts queued wakes when there is room;
- scheduled tasks: exact-time jobs (tasks/timer.py).

SIGTERM (gunicorn's worker_exit → shutdown()): stop taking work, let the
delivery in flight finish, stop the scheduler (running jobs finish), stop the
sandboxes (their runners give in-flight rows back), close the database. The
next start carries on from the session files.
"""
from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
import concurrent.futures
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from apscheduler.executors.pool import BasePoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler

from .. import metrics
from ..db import database
from ..db import ChangeListener
from ..inbound import intake
from ..outbound import watcher as delivery_watcher
from ..outbound.watcher import DeliveryLoop
from ..runtime.base import RuntimeUnavailable
from ..sessions import store
from ..sessions.store import SessionRef
from ..sessions.wake import NO_WAKE
from ..tasks.timer import TaskTimer
from . import housekeeping, sweep
from . import image_prune, records, retention, silent  # noqa: F401  (their housekeeping jobs register themselves)
from .active import ActiveSet, everything, session_ids_of

log = logging.getLogger("nanoclaw.background")

SWEEP_INTERVAL_S = 10.0
INTAKE_RECOVERY_S = 10.0
DRAIN_INTERVAL_S = 2.0
RUNTIME_RETRY_S = 30.0     # no sandbox runtime at start: how often to look again
STARTUP_STOP_WAIT_S = 30.0  # a stop during start-up lets it finish (it checks the stop between its steps)
LOCK_RETRY_S = 1.0         # the lock held elsewhere at start: how often to try it again


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


class JobThreads(BasePoolExecutor):
    """APScheduler's thread-pool executor over a pool we keep, so a stop can wait for the running
    jobs without holding the scheduler's job-store lock: `shutdown(wait=True)` holds it while it
    waits, and a job that calls the scheduler (the drain pausing itself, the task timer planning a
    run) would wait for that lock for ever."""

    def __init__(self, max_workers: int = 10):
        self.threads = concurrent.futures.ThreadPoolExecutor(max_workers, thread_name_prefix="nanoclaw-job")
        super().__init__(self.threads)


def stop_scheduler(scheduler: BackgroundScheduler, jobs: JobThreads) -> None:
    """No new runs; the running jobs finish (they may still call the scheduler meanwhile)."""
    scheduler.shutdown(wait=False)
    jobs.threads.shutdown(wait=True)


# topic announced by another host program -> the job that acts on it (db.py: changes told)
CHANGE_JOBS = {"tasks": "tasks_changes", "budget": "housekeeping:budget.notices",
               "outages": "housekeeping:model.outages"}


def listen_for_changes(data_dir: Path, scheduler: BackgroundScheduler, stopped: threading.Event) -> ChangeListener:
    """Each announced change runs its job now (its interval is only the safety net)."""
    def run_now(job_id: str) -> None:
        if not stopped.is_set() and scheduler.get_job(job_id) is not None:
            scheduler.modify_job(job_id, next_run_time=datetime.now(timezone.utc))
    return ChangeListener(data_dir, {topic: (lambda job_id=job_id: run_now(job_id))
                                     for topic, job_id in CHANGE_JOBS.items()}).start()


@dataclass
class Background:
    settings: object
    manager: object | None
    lock_handle: object
    scheduler: BackgroundScheduler | None = None
    live: dict[Path, tuple] = field(default_factory=dict)
    ready: threading.Event = field(default_factory=threading.Event)  # start-up done
    last_sweep: sweep.PassResult | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _startup_done: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _pool: ThreadPoolExecutor | None = None
    _timer: object | None = None
    _changes: ChangeListener | None = None
    _jobs: JobThreads | None = None
    delivery: DeliveryLoop | None = None

    def __post_init__(self):
        self.created = time.monotonic()
        self._refreshed_at = float("-inf")
        self.active = ActiveSet(self.settings)
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="nanoclaw-wake")
        self._drain_lock = threading.Lock()

    # --- sessions ------------------------------------------------------------------------------
    def watch(self, ref: SessionRef | Path) -> None:
        """Deliver and sweep for this session from now on (called on wake)."""
        if isinstance(ref, Path):
            ref = SessionRef(ref.parent.name, ref.name, ref)
        self.active.woke(ref)
        self.live.setdefault(ref.path, ())
        if self.delivery is not None:
            self.delivery.interrupt()  # watch its nudges before its runner's first commit

    def wake(self, folder: str, session_id: str, *, task: bool = False) -> None:
        """Start the session's sandbox off the caller's thread (or queue it: capacity, start-up)."""
        if self.manager is None or self._stop.is_set():
            return
        try:
            self._pool.submit(self.manager.wake, folder, session_id, task=task)
        except RuntimeError:  # the pool is shut down: we are stopping
            pass

    def wake_session(self, session) -> None:
        """A router wake: watch the session and start its sandbox off the caller's thread."""
        self.start_session(session.agent_group.folder, session.id)

    def start_session(self, folder: str, session_id: str) -> None:
        """What a connected Wake does (sessions/wake.py): watch the session, start its sandbox."""
        self.watch(store.session_path(self.settings.sessions_dir, folder, session_id))
        self.wake(folder, session_id)

    def recover_intake(self, older_than_s: float = intake.RECOVER_AFTER_S) -> None:
        """Route webhook events a stopped process accepted and never routed."""
        try:
            intake.recover(self.settings, self.wake_session if self.manager else NO_WAKE, older_than_s)
        except Exception as exc:
            log.exception("intake recovery failed: %s", exc)

    def running_ids(self) -> set[str]:
        if self.manager is None:
            return set()
        return session_ids_of(self.manager.running(), self.settings.install_id)

    def refresh(self) -> list[SessionRef]:
        """The active sessions now; the delivery loop watches exactly these."""
        self._refreshed_at = time.monotonic()
        refs = self.active.refresh(self.running_ids())
        paths = {r.path for r in refs}
        for path in list(self.live):
            if path not in paths:
                self.live.pop(path, None)
        added = paths - self.live.keys()
        for path in paths:
            self.live.setdefault(path, ())
        if added and self.delivery is not None:
            self.delivery.interrupt()  # the sweep's refresh found them: watch their nudges now
        return refs

    def refresh_unless_fresh(self, max_age_s: float) -> None:
        """The delivery loop's refresh, left out when the sweep's is newer than `max_age_s`: every wake
        adds its session at once (watch), so a refresh only drops sessions that ended and finds
        sandboxes no wake here started; a second listing of the sandboxes in the same seconds finds
        nothing the first did not."""
        if time.monotonic() - self._refreshed_at >= max_age_s:
            self.refresh()

    # --- jobs ------------------------------------------------------------------------------------
    def startup(self) -> None:
        try:
            self._startup()
        finally:
            self._startup_done.set()

    def _startup(self) -> None:
        """Orphans out; the sends a killed predecessor left half done settled; then wakes, delivery
        and tasks run while the first sweep goes over every session; then the regular sweep."""
        started = time.monotonic()
        try:
            if self.manager is not None:
                removed = self.manager.stop_all()
                if removed:
                    log.info("removed %d sandbox(es) left by a previous run: %s", len(removed), ", ".join(removed))
        except Exception as exc:
            log.exception("could not remove the previous run's sandboxes: %s", exc)
        finally:
            if self.manager is not None:
                self.manager.held = False
        if self._stop.is_set():
            return
        self.upgrade_layouts()
        # before the first send: a reply a killed predecessor was sending is settled in every session
        # (the start-up sweep skips sessions woken meanwhile; their rows would stay 'sending')
        settled = sweep.settle_half_sent(everything(self.settings))
        if settled:
            log.info("settled %d send(s) a stopped process left half done (counted as sent)", settled)
        self.delivery = DeliveryLoop(self.settings, self.live,
                                     lambda: self.refresh_unless_fresh(delivery_watcher.LIVE_REFRESH_S), self._stop)
        self._thread = threading.Thread(target=self.delivery.run, name="nanoclaw-delivery", daemon=True)
        self._thread.start()
        self.scheduler.add_job(self.drain, "interval", seconds=DRAIN_INTERVAL_S, id="drain", max_instances=1,
                               coalesce=True, next_run_time=datetime.now(timezone.utc))
        if self.manager is not None:
            self.manager.on_queued = self._queued
        if self._timer is not None:
            self._timer.start()
        housekeeping.start(self.scheduler, self.settings, self.manager)  # expiries, retention, image pruning
        # what the proxy and the CLI change is acted on when they say so, not on a poll (db.py: changes told)
        self._changes = listen_for_changes(self.settings.data_dir, self.scheduler, self._stop)
        # before the sweep (it wakes the sessions these write to); only what came in before this
        # process started: what it accepted since is on its own intake thread's queue
        self.recover_intake(older_than_s=time.monotonic() - self.created)
        try:
            self.sweep(full=True)
        except Exception as exc:
            log.exception("start-up sweep failed: %s", exc)
        finally:
            self.ready.set()
        log.info("start-up recovery done in %.2fs", time.monotonic() - started)
        if not self._stop.is_set():
            self.scheduler.add_job(self.sweep, "interval", seconds=SWEEP_INTERVAL_S, id="sweep", max_instances=1,
                                   coalesce=True)
            self.scheduler.add_job(self.recover_intake, "interval", seconds=INTAKE_RECOVERY_S, id="intake",
                                   max_instances=1, coalesce=True)

    def upgrade_layouts(self) -> None:
        """Session folders of the old flat layout split into host/ and agent/ (no sandbox runs now)."""
        moved = 0
        for ref in everything(self.settings):
            try:
                moved += store.upgrade_layout(ref.path)
            except OSError as exc:
                log.error("could not split the session folder %s into host/ and agent/: %s", ref.path, exc)
        if moved:
            log.info("split %d session folder(s) into host/ and agent/ (the agent can no longer write beside "
                     "inbound.db)", moved)

    def sweep(self, full: bool = False, skip_woken: bool = True) -> sweep.PassResult:
        started = time.monotonic()
        refs = self.refresh()
        if full:
            refs = everything(self.settings)
        manager = self.manager

        def wake(ref: SessionRef, task: bool = False) -> None:
            self.watch(ref)
            self.wake(ref.folder, ref.session_id, task=task)
        result = sweep.sweep_pass(refs, self.active.running_ids, self.settings, now=time.time(),
                                  pressure=bool(manager and manager.queue),
                                  skip=self.active.woken_ids() if full and skip_woken else frozenset(),
                                  stop=(manager.stop if manager else lambda *_: None), wake=wake)
        self.last_sweep = result
        metrics.SWEEP_PASSES.inc()
        for action, n in (("stopped", len(result.stopped)), ("reset", result.resets), ("failed", result.failed),
                          ("woken", len(result.woken))):
            if n:
                metrics.SWEEP_ACTIONS.labels(action).inc(n)
        took = time.monotonic() - started
        if full or result.stopped or result.resets or result.failed or took > 1:
            log.info("sweep%s: %d session(s) in %.0f ms; stopped %d, retries %d, failed %d, woken %d",
                     " (start-up, all sessions)" if full else "", result.sessions, took * 1000,
                     len(result.stopped), result.resets, result.failed, len(result.woken))
        if result.stopped:
            self.drain()
        return result

    def await_runtime(self, wake, find) -> None:
        """No sandbox runtime at start: look again every RUNTIME_RETRY_S (`find()` makes a manager or
        raises RuntimeUnavailable). Once one works it is attached and every session swept, so the
        messages stored meanwhile are answered without a restart."""
        def attempt() -> None:
            if self.manager is not None or self._stop.is_set():
                return
            try:
                manager = find()
            except RuntimeUnavailable:
                return
            self.scheduler.remove_job("runtime")
            self.attach(wake, manager)
        self.scheduler.add_job(attempt, "interval", seconds=RUNTIME_RETRY_S, id="runtime", max_instances=1,
                               coalesce=True)

    def attach(self, wake, manager) -> None:
        self.manager = manager
        manager.on_queued = self._queued
        wake.connect(self.start_session, manager)
        log.info("a sandbox runtime works now (%s): answering what waited for it", manager.runtime.name)
        self.sweep(full=True, skip_woken=False)  # sessions "woken" while nothing could start them too

    def drain(self) -> None:
        """Start queued wakes while there is room; the job runs only while some wait (a queued wake
        resumes it), so an idle host does not wake every DRAIN_INTERVAL_S for nothing."""
        if self.manager is None:
            return
        if self.manager.queue:
            self.manager.drain()
        with self._drain_lock:
            if not self.manager.queue and self.scheduler.get_job("drain") is not None:
                self.scheduler.pause_job("drain")

    def _queued(self) -> None:
        with self._drain_lock:
            if self.scheduler is not None and self.scheduler.get_job("drain") is not None:
                self.scheduler.resume_job("drain")

    # --- life ------------------------------------------------------------------------------------
    def start(self) -> None:
        if self.manager is not None:
            self.manager.held = True  # until the orphans are gone and the first sweep ran
        logging.getLogger("apscheduler").setLevel(logging.WARNING)  # not a line per job run (every 2 s)
        self._jobs = JobThreads()
        self.scheduler = BackgroundScheduler(timezone="UTC", executors={"default": self._jobs})
        self._timer = TaskTimer(self.settings, self.scheduler, wake=self.wake, watch=self.watch)
        self.scheduler.add_job(self.startup, "date", id="startup", run_date=datetime.now(timezone.utc),
                               misfire_grace_time=None)
        self.scheduler.start()
        log.info("background jobs started in pid %d (sweep every %.0f s; delivery on each runner's nudge)",
                 os.getpid(), SWEEP_INTERVAL_S)

    def shutdown(self, stop_sandboxes: bool = True) -> None:
        if self.manager is not None:
            self.manager.closing = True  # no new sandboxes from here on
        self._stop.set()
        if self.delivery is not None:
            self.delivery.interrupt()
        if self._thread:
            self._thread.join(timeout=15)  # the delivery in flight finishes
            if not self._thread.is_alive() and self.delivery is not None:
                self.delivery.close()
        if self._timer is not None:
            self._timer.close()
        if self._changes is not None:
            self._changes.stop()
        if self.scheduler and self.scheduler.running:
            # APScheduler's shutdown holds its job-store lock while it waits for running jobs: a
            # start-up still adding its jobs would wait for that lock for ever (a stop during start-up)
            self._startup_done.wait(STARTUP_STOP_WAIT_S)
            stop_scheduler(self.scheduler, self._jobs)  # a running job (sweep, task run) finishes
            housekeeping.stop(self.scheduler)
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self.manager is not None and stop_sandboxes:
            stopped = self.manager.stop_all()
            if stopped:
                log.info("stopped %d sandbox(es); their runners gave back what was in flight", len(stopped))
        if not database.is_closed():
            database.close()
        self.lock_handle.close()
        log.info("background jobs stopped in pid %d", os.getpid())
