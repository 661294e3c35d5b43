"""When does a task run next? Pure functions over the user's timezone.

Times the agent gives are the user's local time (a naive ISO string is read in
TIMEZONE) and are stored in UTC. Cron is evaluated with croniter in TIMEZONE on
the absolute grid, so a task never drifts; after downtime an overdue task runs
once and then continues on its grid. Intervals are anchored to their first
scheduled time, not to when the last run happened to finish.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

UTC = timezone.utc


class ScheduleError(ValueError):
    pass


def parse_local(text: str, tz: str) -> datetime:
    """'2026-03-29T09:00' (local) or an ISO time with an offset → an aware UTC datetime."""
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ScheduleError(f"{text!r} is not an ISO date-time like 2026-03-29T09:00") from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=ZoneInfo(tz))
    return value.astimezone(UTC)


def _croniter():
    """croniter, loaded when a cron schedule is first read (2 MiB the web program need not hold
    while no task repeats by cron)."""
    from croniter import croniter
    return croniter


def validate_cron(expr: str) -> str:
    if not _croniter().is_valid(expr):
        raise ScheduleError(f"{expr!r} is not a cron expression like '0 9 * * 1-5'")
    return expr


def parse_every(value: str | int) -> timedelta:
    """'90s', '15m', '2h', '1d' or a number of milliseconds (v1) → a positive timedelta."""
    text = str(value).strip().lower()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    try:
        if text[-1:] in units:
            seconds = float(text[:-1]) * units[text[-1]]
        else:
            seconds = int(text) / 1000
    except ValueError:
        seconds = 0
    if seconds <= 0:
        raise ScheduleError(f"{value!r} is not an interval like '15m', '2h', '1d' or milliseconds")
    return timedelta(seconds=seconds)


def next_cron(expr: str, after: datetime, tz: str) -> datetime:
    """The first cron time strictly after `after`, evaluated in `tz`; returned in UTC."""
    local = after.astimezone(ZoneInfo(tz))
    nxt = _croniter()(expr, local).get_next(datetime)
    return nxt.astimezone(UTC)


def next_run(kind: str, value: str, scheduled: datetime, now: datetime, tz: str) -> datetime | None:
    """The run after the one scheduled at `scheduled` (which is running now or was missed)."""
    if kind == "once":
        return None
    if kind == "cron":
        return next_cron(value, max(scheduled, now), tz)
    if kind == "every":
        step = parse_every(value)
        nxt = scheduled + step
        if nxt <= now:  # missed runs: jump forward on the same grid, in one step
            missed = (now - nxt) // step + 1
            nxt += step * missed
        return nxt
    raise ScheduleError(f"unknown schedule kind {kind!r}; use once, cron or every")


def first_run(kind: str, value: str, now: datetime, tz: str) -> datetime:
    """When a newly scheduled task first runs."""
    if kind == "once":
        return parse_local(value, tz)
    if kind == "cron":
        return next_cron(validate_cron(value), now, tz)
    if kind == "every":
        return now + parse_every(value)
    raise ScheduleError(f"unknown schedule kind {kind!r}; use once, cron or every")
