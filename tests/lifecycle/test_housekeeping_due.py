"""A housekeeping job whose work comes at known times runs at those times, not every few seconds
(issue 43: at rest nothing pending, nothing polling). Real APScheduler, the service's executor."""
from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import pytest
from apscheduler.schedulers.background import BackgroundScheduler

from nanoclaw.lifecycle import housekeeping
from nanoclaw.lifecycle.background import JobThreads, stop_scheduler


@pytest.fixture
def scheduler(monkeypatch):
    monkeypatch.setattr(housekeeping, "_JOBS", {})
    monkeypatch.setattr(housekeeping, "database", _NoDatabase())
    jobs = JobThreads()
    sched = BackgroundScheduler(timezone="UTC", executors={"default": jobs})
    yield sched
    if sched.running:
        stop_scheduler(sched, jobs)
    housekeeping._scheduler = None


class _NoDatabase:
    def connection_context(self):
        import contextlib
        return contextlib.nullcontext()


def runs_of(name: str, due):
    """Register a job `name` (safety net a minute) that records when it ran."""
    ran: list[float] = []
    done = threading.Event()

    @housekeeping.register_job(name, every_s=60, due=due)
    def job(settings, manager):
        ran.append(time.monotonic())
        done.set()
    return ran, done


def test_a_job_runs_at_its_next_due_time_not_at_its_safety_net(scheduler):
    deadline = [datetime.now(timezone.utc) + timedelta(seconds=0.5)]
    ran, done = runs_of("cards.expire", lambda: deadline.pop() if deadline else None)
    started = time.monotonic()
    housekeeping.start(scheduler, None, None)
    scheduler.start()
    while len(ran) < 2 and time.monotonic() - started < 5:
        time.sleep(0.02)
    assert len(ran) == 2, "the second run waited for the minute's safety net"
    assert 0.3 < ran[1] - started < 2
    job = scheduler.get_job("housekeeping:cards.expire")
    assert job.next_run_time > datetime.now(timezone.utc) + timedelta(seconds=50)  # nothing due: a minute


def test_run_by_only_brings_a_run_forward(scheduler):
    runs_of("cards.expire", None)
    housekeeping.start(scheduler, None, None)
    scheduler.start()
    job_id = "housekeeping:cards.expire"
    while scheduler.get_job(job_id).next_run_time < datetime.now(timezone.utc) + timedelta(seconds=30):
        time.sleep(0.02)  # the first run (at once) is over; the next is a minute away
    soon = datetime.now(timezone.utc) + timedelta(seconds=20)
    housekeeping.run_by("cards.expire", soon.replace(tzinfo=None))  # naive means UTC
    assert abs((scheduler.get_job(job_id).next_run_time - soon).total_seconds()) < 0.01
    housekeeping.run_by("cards.expire", soon + timedelta(seconds=30))  # later: nothing moves
    assert abs((scheduler.get_job(job_id).next_run_time - soon).total_seconds()) < 0.01
    housekeeping.run_by("unknown.job", soon)  # no such job: nothing happens


def test_run_by_after_the_scheduler_stopped_moves_nothing(scheduler):
    runs_of("cards.expire", None)
    housekeeping.start(scheduler, None, None)
    scheduler.start()
    job = scheduler.get_job("housekeeping:cards.expire")
    housekeeping.stop(scheduler)
    housekeeping.run_by("cards.expire", datetime.now(timezone.utc) + timedelta(days=-1))
    assert scheduler.get_job(job.id).next_run_time == job.next_run_time
