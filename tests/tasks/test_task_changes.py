"""`flask nanoclaw tasks pause|resume` from another process reaches the running service's timer at
once (not at the 30 s safety-net look): the real APScheduler BackgroundScheduler with the real
TaskTimer and the background's change listener (the CLI announces, db.py), the CLI as a
real subprocess on the same database (SQLite and PostgreSQL)."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone

from apscheduler.schedulers.background import BackgroundScheduler

from nanoclaw.tasks import scheduling
from nanoclaw.config import PROJECT_ROOT
from nanoclaw.models import ScheduledTask
from nanoclaw.lifecycle.background import listen_for_changes
from nanoclaw.tasks.timer import CHANGES_S, RECONCILE_S, TaskTimer
from nanoclaw.sessions import session_schema as schema
from tests.tasks.test_scheduling import make_session, path_of


def run_cli(settings, *args) -> str:
    """The operator's command in a process of its own, as from a shell beside the service."""
    env = {**os.environ, "NANOCLAW_DATA_DIR": str(settings.data_dir), "NANOCLAW_GROUPS_DIR": str(settings.groups_dir),
           "DATABASE_URL": settings.database_url, "TZ": settings.timezone,
           "NANOCLAW_ENV_FILE": str(settings.data_dir / "none.env"),
           "NANOCLAW_MOUNT_ALLOWLIST": str(settings.mount_allowlist)}
    flask = os.path.join(os.path.dirname(sys.executable), "flask")
    out = subprocess.run([flask, "--app", "app", "nanoclaw", *args], cwd=PROJECT_ROOT, env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def task_rows(settings, session) -> list:
    path = path_of(settings, session) / "host" / schema.INBOUND
    conn = schema.connect(path, readonly=True)
    try:
        return conn.execute("SELECT id FROM messages_in WHERE kind = 'task'").fetchall()
    finally:
        conn.close()


class Runs:
    def __init__(self):
        self.woken: list[tuple[str, float]] = []
        self.event = threading.Event()

    def wake(self, folder, session_id, task=False):
        self.woken.append((session_id, time.monotonic()))
        self.event.set()

    def watch(self, ref):
        pass


def test_pause_and_resume_from_the_cli_take_effect_within_a_second(app):
    settings = app.config["NANOCLAW"]
    group, session = make_session(settings, "andy")
    due = datetime.now(timezone.utc) + timedelta(seconds=9)
    task = scheduling.schedule(group, session, "stand up and stretch", at=due.strftime("%Y-%m-%dT%H:%M:%S.%f"),
                               tz="UTC")
    # the control: a task of another chat due a second later and never paused; its run is the event that
    # says the paused one's moment came and went
    _same, other = make_session(settings, "andy", chat="control")
    scheduling.schedule(group, other, "drink some water", at=(due + timedelta(seconds=1)).strftime(
        "%Y-%m-%dT%H:%M:%S.%f"), tz="UTC")
    scheduler = BackgroundScheduler(timezone="UTC")
    runs = Runs()
    timer = TaskTimer(settings, scheduler, wake=runs.wake, watch=runs.watch)
    scheduler.start()
    stopped = threading.Event()
    changes = listen_for_changes(settings.data_dir, scheduler, stopped)
    try:
        timer.start()
        deadline = time.monotonic() + 5
        while scheduler.get_job(f"task:{task.id}") is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert scheduler.get_job(f"task:{task.id}") is not None  # planned by the start-up reconcile

        assert "paused" in run_cli(settings, "tasks", "pause", task.id)
        paused_at = time.monotonic()
        while scheduler.get_job(f"task:{task.id}") is not None and time.monotonic() - paused_at < 6:
            time.sleep(0.05)
        took = time.monotonic() - paused_at
        # well under the safety net's interval (a loaded CI machine gets slack)
        assert took < min(5, CHANGES_S / 3), f"the paused task's run stayed planned for {took:.1f} s"
        assert scheduler.get_job(f"prewake:{task.id}") is None  # no sandbox is started for it either

        runs.woken.clear()  # the pre-wake started the sandbox before the pause; that is all it did
        deadline = time.monotonic() + 30
        while not task_rows(settings, other) and time.monotonic() < deadline:  # the control's run
            time.sleep(0.05)
        assert task_rows(settings, other), "the control task did not run a second after the paused one's moment"
        assert session.id not in [sid for sid, _ in runs.woken] and task_rows(settings, session) == []
        runs.woken.clear()  # its time passed while paused: the control ran, the paused task did not
        runs.event.clear()

        assert "resumed" in run_cli(settings, "tasks", "resume", task.id)
        resumed_at = time.monotonic()
        deadline = resumed_at + RECONCILE_S / 2
        while not task_rows(settings, session) and time.monotonic() < deadline:
            time.sleep(0.02)
        late = time.monotonic() - resumed_at
        print(f"ran {late * 1000:.0f} ms after the CLI resumed it")
        assert task_rows(settings, session), "the resumed task did not run"
        assert late < RECONCILE_S / 3, f"the resumed task ran {late:.1f} s after the CLI resumed it"
        # the control's session may be woken again at any time (its answer's delivery): only the paused one counts
        assert runs.event.wait(2) and [sid for sid, _ in runs.woken if sid != other.id] == [session.id]
        assert ScheduledTask.get_by_id(task.id).runs == 1
    finally:
        stopped.set()
        changes.stop()
        timer.close()
        scheduler.shutdown(wait=True)
