"""An agent's budget: the limits, and the decisions the proxy makes with them before a model call.

The decisions are pure (`verdict`, `warnings`): the proxy reads the limits and the ledger's sums,
adds what the agent's calls in flight may still cost (each holds the estimate of usage/estimate.py
until its answer is counted), and refuses a call once that reaches the limit. A call in flight is
never cut, so the overshoot is at most one call's reservation: the last call admitted while spent +
reserved was still below the limit, however many calls the agent starts at once.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import date, datetime, time as day_time, timedelta
from zoneinfo import ZoneInfo

from .ledger import Spent
from .tables import Budget

WARN_AT = 0.8
BUDGET_STATUS = 402   # what the proxy answers a refused call: the CLI does not retry it (the runner waits)


@dataclass(frozen=True)
class Limits:
    daily_micro: int | None = None
    monthly_micro: int | None = None

    @classmethod
    def of(cls, row: Budget | None) -> "Limits":
        if row is None:
            return cls()
        return cls(micro(row.daily_usd), micro(row.monthly_usd))


def micro(usd: float | None) -> int | None:
    return None if usd is None else round(usd * 1_000_000)


def periods(day: date) -> tuple[str, str]:
    return f"day:{day.isoformat()}", f"month:{day.isoformat()[:7]}"


@dataclass(frozen=True)
class Verdict:
    blocked: bool
    period: str | None = None
    spent_micro: int = 0
    limit_micro: int = 0


def verdict(limits: Limits, spent: Spent, day: date, reserved_micro: int = 0) -> Verdict:
    """May the agent make a model call now, with `reserved_micro` held by its calls in flight? (pure)
    The day's limit is asked first."""
    day_period, month_period = periods(day)
    for period, used, limit in ((day_period, spent.day_micro, limits.daily_micro),
                                (month_period, spent.month_micro, limits.monthly_micro)):
        if limit is not None and used + reserved_micro >= limit:
            return Verdict(True, period, used, limit)
    return Verdict(False)


def warnings(limits: Limits, spent: Spent, day: date) -> list[tuple[str, int, int]]:
    """(period, spent, limit) of each limit the agent has used 80 % or more of (pure)."""
    day_period, month_period = periods(day)
    return [(period, used, limit) for period, used, limit in ((day_period, spent.day_micro, limits.daily_micro),
                                                              (month_period, spent.month_micro, limits.monthly_micro))
            if limit and used >= WARN_AT * limit]


def resets_at(period: str, tz: str) -> datetime:
    """When a period's budget starts afresh, in the owner's time zone (pure)."""
    kind, _, value = period.partition(":")
    if kind == "day":
        start = date.fromisoformat(value) + timedelta(days=1)
    else:
        year, month = (int(x) for x in value.split("-"))
        start = date(year + month // 12, month % 12 + 1, 1)
    return datetime.combine(start, day_time(0), tzinfo=ZoneInfo(tz))


def usd(micro_value: int) -> str:
    return f"${micro_value / 1_000_000:,.2f}"


class LimitCache:
    """The budgets table, read at most every `ttl_s` by a process that asks on every model call."""

    def __init__(self, ttl_s: float = 2.0):
        self.ttl_s = ttl_s
        self._read_at = -1e9
        self._limits: dict[str, Limits] = {}

    def of(self, agent_folder: str) -> Limits:
        now = time.monotonic()
        if now - self._read_at >= self.ttl_s:
            self._limits = {row.agent_folder: Limits.of(row) for row in Budget.select()}
            self._read_at = now
        return self._limits.get(agent_folder, Limits())

    def forget(self) -> None:
        self._read_at = -1e9
