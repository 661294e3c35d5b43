"""Exact-time jobs for scheduled tasks, in the process that holds the scheduler lock.

Each active task due within HORIZON has two APScheduler `date` jobs: a pre-wake PREWAKE_S
before its time (prepares the run's session and starts its sandbox, so a cold start does not
make the run late) and the run itself at the exact time. The times come from recurrence.py
(croniter in TIMEZONE): never an APScheduler CronTrigger, whose numeric weekdays differ from
cron's (`0 9 * * 0` would fire on Monday). A reconcile job picks up tasks further ahead, tasks
changed by another process, and, at start-up, overdue ones: they run once, at once, then
continue on their grid. A change another process makes (the `tasks` CLI pauses or resumes a
task) takes effect at once: that process announces it (db.py: changes told) and the background runs
the job that follows the rows' updated_at; the job also runs every CHANGES_S, the safety net.
"""
from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone

from .. import metrics
from . import runs, scheduling

log = logging.getLogger("nanoclaw.task_timer")

UTC = timezone.utc
PREWAKE_S = 15.0
HORIZON = timedelta(minutes=3)
RECONCILE_S = 30.0
CHANGES_S = 30.0  # the safety net only: a change is announced (an idle host need not look every second)


class TaskTimer:
    def __init__(self, settings, scheduler, *, wake, watch):
        self.settings = settings
        self.scheduler = scheduler
        self.wake = wake      # wake(folder, session_id, task=True): start the sandbox (or queue it)
        self.watch = watch    # watch(SessionRef): deliver and sweep for this session from now on
        self._seen = None     # the newest updated_at of scheduled_tasks this timer has acted on
        scheduling.on_change(self.replan)

    def start(self) -> None:
        _, self._seen = runs.changed_since(None)  # what is there now, the reconcile plans
        self.scheduler.add_job(self.reconcile, "interval", seconds=RECONCILE_S, id="tasks_reconcile",
                               max_instances=1, coalesce=True, next_run_time=datetime.now(UTC))
        self.scheduler.add_job(self.follow_changes, "interval", seconds=CHANGES_S, id="tasks_changes",
                               max_instances=1, coalesce=True)

    def close(self) -> None:
        scheduling.off_change(self.replan)

    def reconcile(self) -> None:
        for task_id, due in runs.due_soon(HORIZON):
            if self.scheduler.get_job(f"task:{task_id}") is None:
                self.plan(task_id, due)

    def follow_changes(self) -> None:
        """Replan the tasks another process changed since the last look (one indexed query)."""
        changed, self._seen = runs.changed_since(self._seen)
        for task_id in changed:
            self.replan(task_id)

    def replan(self, task_id: str) -> None:
        """After a change in this process: plan the task's next run, or drop its jobs."""
        due = runs.next_of(task_id)
        if due is not None and due <= datetime.now(UTC) + HORIZON:
            self.plan(task_id, due)
        else:
            for job_id in (f"task:{task_id}", f"prewake:{task_id}"):
                if self.scheduler.get_job(job_id) is not None:
                    self.scheduler.remove_job(job_id)

    def plan(self, task_id: str, due: datetime) -> None:
        now = datetime.now(UTC)
        self.scheduler.add_job(self._fire, "date", run_date=max(due, now), args=[task_id, due], id=f"task:{task_id}",
                               replace_existing=True, misfire_grace_time=None, coalesce=True)
        if due - now > timedelta(seconds=1):
            self.scheduler.add_job(self._prewake, "date", run_date=max(now, due - timedelta(seconds=PREWAKE_S)),
                                   args=[task_id, due], id=f"prewake:{task_id}", replace_existing=True,
                                   misfire_grace_time=None, coalesce=True)

    def _prewake(self, task_id: str, due: datetime) -> None:
        try:
            ref = runs.prepare_run(self.settings, task_id, due)
        except scheduling.TaskError as exc:
            log.warning("task %s: no pre-wake: %s", task_id, exc)
            return
        if ref is not None:
            self.watch(ref)
            self.wake(ref.folder, ref.session_id, task=True)

    def _fire(self, task_id: str, due: datetime) -> None:
        run = runs.fire(self.settings, task_id, due)
        if run is None:
            return
        metrics.TASK_RUNS.inc()
        metrics.TASK_LATENESS_SECONDS.observe(max(0.0, (datetime.now(UTC) - due).total_seconds()))
        self.watch(run.ref)
        self.wake(run.ref.folder, run.ref.session_id, task=True)
        if run.next_run is not None and run.next_run <= datetime.now(UTC) + HORIZON:
            self.plan(task_id, run.next_run)
