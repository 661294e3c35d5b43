"""What the host says while a turn runs: a stop (/stop, the page's Stop turn, `tasks stop`).

The host records a stop in inbound.db (the `stop` option lists the stopped turns' message ids);
the runner's loop does not look at inbound.db while it waits on the CLI, so this watch does, a few
times a second (one small read), and tells the provider to interrupt the turn.
"""
from __future__ import annotations

import asyncio
import logging
import sqlite3

from . import session_schema as schema

log = logging.getLogger("agent_runner.midturn")

WATCH_S = 0.25


def stopped(store, ids) -> bool:
    """Has the host stopped the turn holding `ids`?"""
    try:
        value = store.option(schema.STOP_OPTION)
    except sqlite3.Error:  # the host mid-write: look again next time
        return False
    return not set(ids).isdisjoint(schema.stopped_ids(value))


class TurnWatch:
    def __init__(self, store, provider, ids: list[str]):
        self.store, self.provider, self.ids = store, provider, list(ids)

    async def run(self) -> None:
        while not self.provider.stopping.is_set():
            await asyncio.sleep(WATCH_S)
            if stopped(self.store, self.ids):
                log.info("the host stopped this turn")
                self.provider.stopping.set()
