"""Periodic housekeeping jobs, run by the process that holds the scheduler lock.

A capability registers its own job (questions expire their cards, approvals expire stale
requests) and the lifecycle modules register theirs (isolated task runs' sessions, stale group
images), so background.py never names a capability:

    @register_job("questions.expire", every_s=5)
    def expire(settings, manager) -> None: ...

Each run gets a database connection of its own; a failing job logs and runs again next time.
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


_JOBS: dict[str, Job] = {}


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
    now = datetime.now(timezone.utc)
    for job in jobs():
        scheduler.add_job(run, "interval", args=[job, settings, manager], seconds=job.every_s,
                          id=f"housekeeping:{job.name}", max_instances=1, coalesce=True,
                          next_run_time=now + timedelta(seconds=job.first_after_s))
