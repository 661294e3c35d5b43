"""Outages of an agent's whole model chain, as the proxy sees them: a row when every model failed a
call (none while one is open for that agent), ended at the agent's next answered call. The web
program tells the owner once per outage (operator/outages.py)."""
from __future__ import annotations

import logging
import threading

from ..db import database
from ..db import announce
from ..models import utcnow
from ..usage.tables import ModelOutage

log = logging.getLogger("nanoclaw.proxy")


class Outages:
    def __init__(self, data_dir=None):
        self.data_dir = data_dir  # where to announce a change to the web program (db.py: changes told)
        self._open: set[str] | None = None  # agents with an open outage (read once, then kept here)
        self._lock = threading.Lock()

    def _known(self) -> set[str]:
        if self._open is None:
            database.connect(reuse_if_open=True)
            self._open = {r.agent_folder for r in ModelOutage.select(ModelOutage.agent_folder)
                          .where(ModelOutage.ended_at.is_null())}
        return self._open

    def started(self, folder: str, upstream: str, status: int, detail: str) -> None:
        try:
            with self._lock:
                if folder in self._known():
                    return
                ModelOutage.create(agent_folder=folder, upstream=upstream, status=status, detail=detail[:500])
                self._open.add(folder)
            self._announce()
        except Exception as exc:  # noqa: BLE001 - the card is a courtesy; the log line above has it all
            log.warning("could not record the model outage of %s: %s", folder, exc)

    def ended(self, folder: str) -> None:
        if self._open is not None and folder not in self._open:
            return  # the usual case: nothing open, nothing read
        try:
            with self._lock:
                if folder not in self._known():
                    return
                ModelOutage.update(ended_at=utcnow()).where(ModelOutage.agent_folder == folder,
                                                            ModelOutage.ended_at.is_null()).execute()
                self._open.discard(folder)
            self._announce()
        except Exception as exc:  # noqa: BLE001
            log.warning("could not end the model outage of %s: %s", folder, exc)

    def _announce(self) -> None:
        if self.data_dir is not None:
            announce(self.data_dir, "outages")
