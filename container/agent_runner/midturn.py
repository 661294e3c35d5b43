"""What happens while a turn runs: the host stops it (/stop, the page's Stop turn, `tasks stop`), or a
new message for the agent arrives and the chat's wiring says what to do with it (`while_busy`):
- queue (the default): nothing now; it is the next turn;
- steer: the message is written to the CLI at once and becomes part of this turn (provider.steer);
  its row is claimed with the turn's own, so a crash retries it with that turn, never alone, and
  the person sees a 👀 reaction where the platform has them;
- interrupt: this turn is interrupted and its rows given back; the next turn takes them with the new one.
Only a row the host wrote as engaging (trigger) counts: context-only chatter never steers, and a
stranger's message never reaches a session. The runner's loop does not look at inbound.db while it
waits on the CLI, so this watch does, a few times a second (a stamp first; rows only on a change).
"""
from __future__ import annotations

import asyncio
import logging
import sqlite3

from . import session_schema as schema
from .formatter import format_messages
from .selection import is_due
from .targets import Target

log = logging.getLogger("agent_runner.midturn")

WATCH_S = 0.25
SEEN = "👀"


def stopped(store, ids) -> bool:
    """Has the host stopped the turn holding `ids`?"""
    try:
        value = store.option(schema.STOP_OPTION)
    except sqlite3.Error:  # the host mid-write: look again next time
        return False
    return not set(ids).isdisjoint(schema.stopped_ids(value))


class TurnWatch:
    def __init__(self, store, provider, ids: list[str], *, mode: str = "queue", tz: str | None = None,
                 to_message=None):
        self.store, self.provider, self.ids = store, provider, ids  # ids: the turn's own list, grown by a steer
        self.mode, self.tz, self.to_message = mode, tz, to_message
        self._stamp = store.inbound_stamp() if mode != "queue" else None

    async def run(self) -> None:
        while not self.provider.stopping.is_set():
            await asyncio.sleep(WATCH_S)
            if stopped(self.store, self.ids):
                log.info("the host stopped this turn")
                self.provider.stopping.set()
                return
            if self.mode in ("steer", "interrupt") and not self.provider.answered_early:
                await self._look()

    async def _look(self) -> None:
        stamp = self.store.inbound_stamp()
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            rows = [(r, after) for r, after in self.store.pending_rows()]
            acked = self.store.acked_ids([r.id for r, _ in rows])
        except sqlite3.Error:
            self._stamp = None
            return
        now = schema.utc_now_iso()
        new = sorted((r for r, after in rows if r.id not in self.ids and r.id not in acked and r.trigger
                      and r.kind == "chat" and is_due(after, now)), key=lambda r: r.seq)
        if not new:
            return
        if self.mode == "interrupt":
            log.info("a new message while busy: interrupting the turn")
            self.provider.interrupting = True
            self.provider.stopping.set()
            return
        self.store.claim([r.id for r in new])
        self.ids.extend(r.id for r in new)
        for r in new:
            if r.channel_type and r.platform_id:
                self.store.write_out({"op": "reaction", "on_message_in": r.id, "emoji": SEEN},
                                     Target(r.channel_type, r.platform_id, r.thread_id))
        text = format_messages([self.to_message(r) for r in new], self.tz)
        log.info("%d message(s) steered into the running turn", len(new))
        await self.provider.steer(text)
