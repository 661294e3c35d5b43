"""Whether an agent's budget lets it work now: what the sandbox manager asks before it starts a
session's sandbox, so messages that wait for the budget are not woken into a refusal every sweep.
(The proxy refuses the calls themselves: proxy/spending.py.)"""
from __future__ import annotations

import logging

import peewee

from ..db import connected
from . import budgets, ledger

log = logging.getLogger("nanoclaw.usage")


class SpendGate:
    def __init__(self, settings, clock=ledger.now):
        self.tz = settings.timezone
        self.clock = clock
        self.limits = budgets.LimitCache()

    def spent_up(self, agent_folder: str) -> bool:
        try:
            with connected():
                limits = self.limits.of(agent_folder)
                if limits.daily_micro is None and limits.monthly_micro is None:
                    return False
                day = ledger.today(self.tz, self.clock())
                return budgets.verdict(limits, ledger.spent(agent_folder, day), day).blocked
        except peewee.DatabaseError as exc:  # the database is away: the proxy still refuses what is due
            log.warning("could not read the budget of %s: %s", agent_folder, exc)
            return False
