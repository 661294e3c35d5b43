"""A stop waits for the running jobs without holding the scheduler's job-store lock: APScheduler's
own shutdown(wait=True) holds it while it waits, so a running job that asks the scheduler anything
(the capacity queue's drain pausing itself, the task timer planning a run) hung the stop for ever."""
from __future__ import annotations

import threading
from datetime import datetime, timezone

from apscheduler.schedulers.base import STATE_STOPPED
from apscheduler.schedulers.background import BackgroundScheduler

from nanoclaw.lifecycle.background import JobThreads, stop_scheduler


def test_a_job_that_calls_the_scheduler_while_it_stops_does_not_hang_the_stop():
    jobs = JobThreads()
    scheduler = BackgroundScheduler(timezone="UTC", executors={"default": jobs})
    running, go, asked = threading.Event(), threading.Event(), threading.Event()

    def job():
        running.set()
        go.wait(10)
        scheduler.get_job("busy")  # as drain() and the task timer do from inside their jobs
        asked.set()
    # a repeating job, as the service's are (a one-off job is removed by the scheduler's thread right
    # after it starts, which raced the stop: APScheduler's JobLookupError in its own thread)
    scheduler.add_job(job, "interval", hours=1, id="busy", next_run_time=datetime.now(timezone.utc))
    scheduler.start()
    assert running.wait(10)
    stopping = threading.Thread(target=stop_scheduler, args=(scheduler, jobs), daemon=True)
    stopping.start()
    while scheduler.state != STATE_STOPPED:  # the stop has begun
        stopping.join(0.01)
    go.set()
    stopping.join(10)
    assert not stopping.is_alive(), "the stop waited for a job that waited for the stop"
    assert asked.is_set()  # and the job finished before the stop returned
