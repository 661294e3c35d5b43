"""Periodic housekeeping jobs, run by the process that holds the scheduler lock.

A capability registers its own job (questions expire their cards, approvals expire stale
requests) and the lifecycle modules register theirs (isolated task runs' sessions, stale group
images), so background.py never names a capability:

    @register_job("questions.expire", every_s=5)
    def expire(settings, manager) -> None: ...

Each run gets a database connection of its own; a failing job logs and runs again next time.

A job with nothing to wait for may sleep: `nap(name, has_work)` pauses it while has_work() is
false, and the code that gives it work calls `wake(name)` (questions expire only while a question
is open, so an idle host does not look every few seconds).
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Callable

from ..db import database

log = logging.getLogger("nanoclaw.housekeeping")


@dataclass(frozen=True)
class Job:
    name: str
    every_s: float
    fn: Callable
    first_after_s: float  # the first run, after start-up (0: at once)


_JOBS: dict[str, Job] = {}
_running = {"scheduler": None}  # the scheduler start() added the jobs to, in this process
_naps = threading.Lock()        # a wake between nap()'s look and its pause is never lost


def register_job(name: str, every_s: float, first_after_s: float = 0.0):
    def decorate(fn):
        _JOBS[name] = Job(name, every_s, fn, first_after_s)
        return fn
    return decorate


def jobs() -> list[Job]:
    return sorted(_JOBS.values(), key=lambda j: j.name)


def run(job: Job, settings, manager) -> None:
    try:
        with database.connection_context():
            job.fn(settings, manager)
    except Exception as exc:  # keep the job alive: the next run tries again
        log.exception("housekeeping job %s failed: %s", job.name, exc)


def start(scheduler, settings, manager) -> None:
    """Add every registered job to the (APScheduler) scheduler."""
    _running["scheduler"] = scheduler
    now = datetime.now(timezone.utc)
    for job in jobs():
        scheduler.add_job(run, "interval", args=[job, settings, manager], seconds=job.every_s,
                          id=f"housekeeping:{job.name}", max_instances=1, coalesce=True,
                          next_run_time=now + timedelta(seconds=job.first_after_s))


def nap(name: str, has_work: Callable[[], bool]) -> bool:
    """From the job itself: pause it unless has_work(); True when it sleeps now."""
    scheduler = _running["scheduler"]
    if scheduler is None:
        return False
    with _naps:
        if has_work() or scheduler.get_job(f"housekeeping:{name}") is None:
            return False
        scheduler.pause_job(f"housekeeping:{name}")
        return True


def wake(name: str) -> None:
    """The job has work again: it runs now (and then on its interval) if it slept."""
    scheduler = _running["scheduler"]
    if scheduler is None or not scheduler.running:
        return
    with _naps:
        job = scheduler.get_job(f"housekeeping:{name}")
        if job is not None and job.next_run_time is None:
            scheduler.modify_job(job.id, next_run_time=datetime.now(timezone.utc))
