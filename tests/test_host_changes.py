"""Changes another host program announces reach the background's job at once (db.py: changes told): the
proxy's budget events and outages, the `tasks` CLI's pauses. The jobs' own intervals are a minute or
more now, so without the announcement the owner would wait that long."""
from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

from apscheduler.schedulers.background import BackgroundScheduler

from nanoclaw.db import ChangeListener, announce, topic_dir
from nanoclaw.lifecycle.background import CHANGE_JOBS, listen_for_changes


def test_an_announced_change_runs_its_callback_and_only_its_own(tmp_path):
    seen = {"budget": threading.Event(), "outages": threading.Event()}
    listener = ChangeListener(tmp_path, {t: e.set for t, e in seen.items()}).start()
    try:
        announce(tmp_path, "budget")
        assert seen["budget"].wait(5)
        assert not seen["outages"].is_set()
        announce(tmp_path, "outages")
        assert seen["outages"].wait(5)
    finally:
        listener.stop()
    assert listener._thread is None


def test_each_topic_runs_its_background_job_long_before_its_interval(tmp_path):
    scheduler = BackgroundScheduler(timezone="UTC")
    ran = {job_id: threading.Event() for job_id in CHANGE_JOBS.values()}
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    for job_id, event in ran.items():
        scheduler.add_job(event.set, "interval", seconds=3600, id=job_id, next_run_time=later)
    scheduler.start()
    stopped = threading.Event()
    listener = listen_for_changes(tmp_path, scheduler, stopped)
    try:
        for topic, job_id in CHANGE_JOBS.items():
            announce(tmp_path, topic)
            assert ran[job_id].wait(5), f"{topic} did not run {job_id}"
    finally:
        stopped.set()
        listener.stop()
        scheduler.shutdown(wait=True)


def test_announcing_never_fails_the_writer(tmp_path):
    (tmp_path / "run").write_text("not a folder")  # the changes folder cannot be made
    announce(tmp_path, "budget")
    assert not topic_dir(tmp_path, "budget").exists()


def test_a_link_in_place_of_the_nudge_is_not_followed(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    where = topic_dir(tmp_path, "tasks")
    where.mkdir(parents=True)
    (where / "nudge").symlink_to(target)
    announce(tmp_path, "tasks")
    assert target.read_text() == "keep" and not (where / "nudge").is_symlink()
