"""Periodic housekeeping jobs, run by the process that holds the scheduler lock.

A capability registers its own job (questions expire their cards, approvals expire stale
requests) and the lifecycle modules register theirs (isolated task runs' sessions, stale group
images), so background.py never names a capability:

    @register_job("approvals.expire", every_s=60)
    def expire(settings, manager) -> None: ...

Each run gets a database connection of its own; a failing job logs and runs again next time.

A job whose work comes at known times (a question's deadline) names them with `due`: every_s is
then only its safety net, and the job runs at the next due time instead of looking every few
seconds while nothing is pending; whoever creates such work calls `run_by`.
"""
from __future__ import annotations

import logging
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
    due: Callable[[], datetime | None] | None = None  # when it is next needed (UTC), read after each run


_JOBS: dict[str, Job] = {}
_scheduler = None  # this process's scheduler while it runs the jobs (the scheduler lock's holder)


def register_job(name: str, every_s: float, first_after_s: float = 0.0, due: Callable | None = None):
    def decorate(fn):
        _JOBS[name] = Job(name, every_s, fn, first_after_s, due)
        return fn
    return decorate


def jobs() -> list[Job]:
    return sorted(_JOBS.values(), key=lambda j: j.name)


def run(job: Job, settings, manager) -> None:
    try:
        with database.connection_context():
            job.fn(settings, manager)
            due = job.due() if job.due else None
    except Exception as exc:  # keep the job alive: the next run tries again
        log.exception("housekeeping job %s failed: %s", job.name, exc)
        return
    if due is not None:
        run_by(job.name, due)


def run_by(name: str, at: datetime) -> None:
    """Job `name` runs no later than `at` (UTC; naive means UTC). Only ever brings a run forward,
    so two callers cannot undo each other; a no-op in a process that does not run the jobs."""
    scheduler = _scheduler
    job = scheduler.get_job(f"housekeeping:{name}") if scheduler is not None else None
    if job is None or job.next_run_time is None:
        return
    from apscheduler.jobstores.base import JobLookupError
    at = at if at.tzinfo else at.replace(tzinfo=timezone.utc)
    if at < job.next_run_time:
        try:
            scheduler.modify_job(job.id, next_run_time=max(at, datetime.now(timezone.utc)))
        except JobLookupError:
            pass  # removed meanwhile (the scheduler stopping)


def start(scheduler, settings, manager) -> None:
    """Add every registered job to the (APScheduler) scheduler, which `run_by` then moves."""
    global _scheduler
    _scheduler = scheduler
    now = datetime.now(timezone.utc)
    for job in jobs():
        scheduler.add_job(run, "interval", args=[job, settings, manager], seconds=job.every_s,
                          id=f"housekeeping:{job.name}", max_instances=1, coalesce=True,
                          next_run_time=now + timedelta(seconds=job.first_after_s))


def stop(scheduler) -> None:
    """The scheduler stopped: `run_by` has nothing to move until the next start."""
    global _scheduler
    if _scheduler is scheduler:
        _scheduler = None
