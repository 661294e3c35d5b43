"""Task times: the v1 scheduler tests (seed spec section 5) plus DST and weekday checks."""
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from nanoclaw.tasks.recurrence import ScheduleError, first_run, next_run, parse_every, parse_local

UTC = timezone.utc
NOW = datetime(2026, 1, 15, 12, 0, 0, tzinfo=UTC)


# --- ported from v1 task-scheduler.test.ts -------------------------------------------------

def test_computeNextRun_returns_null_for_once_tasks():
    assert next_run("once", "2026-01-15T12:00", NOW, NOW, "UTC") is None


def test_interval_task_is_anchored_to_its_scheduled_time_not_now():
    scheduled = NOW - timedelta(seconds=2)
    assert next_run("every", "60000", scheduled, NOW, "UTC") == scheduled + timedelta(seconds=60)


def test_interval_task_catches_up_without_infinite_loop():
    scheduled = NOW - timedelta(minutes=10)
    nxt = next_run("every", "60000", scheduled, NOW, "UTC")
    assert nxt > NOW
    assert (nxt - scheduled) % timedelta(minutes=1) == timedelta(0)
    assert nxt - NOW <= timedelta(minutes=1)


def test_cron_is_evaluated_in_the_users_timezone():
    nxt = next_run("cron", "0 9 * * *", NOW, NOW, "America/New_York")
    assert nxt.astimezone(ZoneInfo("America/New_York")).hour == 9
    assert nxt == datetime(2026, 1, 15, 14, 0, tzinfo=UTC)  # 07:00 in New York now: today at 9


# --- beyond v1 ------------------------------------------------------------------------------

def test_daily_nine_oclock_across_dst_change_stays_nine_local():
    tz = "Europe/Berlin"
    before = datetime(2026, 3, 28, 8, 0, tzinfo=UTC)  # 09:00 CET on the day before the change
    runs = [before]
    for _ in range(2):
        runs.append(next_run("cron", "0 9 * * *", runs[-1], runs[-1], tz))
    local = [r.astimezone(ZoneInfo(tz)) for r in runs]
    assert [(d.day, d.hour, d.minute) for d in local] == [(28, 9, 0), (29, 9, 0), (30, 9, 0)]
    assert runs[1] - runs[0] == timedelta(hours=23)  # the short night is absorbed, not the local hour


def test_cron_weekday_zero_is_sunday():
    nxt = first_run("cron", "0 9 * * 0", NOW, "UTC")
    assert nxt.strftime("%A") == "Sunday" and nxt.hour == 9


def test_overdue_cron_runs_once_then_continues_on_its_grid():
    scheduled = datetime(2026, 1, 10, 9, 0, tzinfo=UTC)  # missed five days of downtime
    assert next_run("cron", "0 9 * * *", scheduled, NOW, "UTC") == datetime(2026, 1, 16, 9, 0, tzinfo=UTC)


def test_naive_times_are_local_and_stored_utc():
    assert parse_local("2026-07-01T09:00", "Europe/Berlin") == datetime(2026, 7, 1, 7, 0, tzinfo=UTC)
    assert parse_local("2026-07-01T09:00Z", "Europe/Berlin") == datetime(2026, 7, 1, 9, 0, tzinfo=UTC)
    assert parse_local("2026-07-01T09:00+02:00", "UTC") == datetime(2026, 7, 1, 7, 0, tzinfo=UTC)


@pytest.mark.parametrize("bad", ["tomorrow", "", "2026-13-01T00:00"])
def test_bad_local_time(bad):
    with pytest.raises(ScheduleError):
        parse_local(bad, "UTC")


def test_every_units():
    assert parse_every("15m") == timedelta(minutes=15)
    assert parse_every("2h") == timedelta(hours=2)
    assert parse_every(60000) == timedelta(minutes=1)
    for bad in ("0", "-5m", "soon"):
        with pytest.raises(ScheduleError):
            parse_every(bad)


def test_invalid_cron_is_refused():
    with pytest.raises(ScheduleError):
        first_run("cron", "61 * * * *", NOW, "UTC")
