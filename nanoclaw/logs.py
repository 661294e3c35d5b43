"""How every program logs: readable text (the default) or one JSON object per line
(NANOCLAW_LOG_FORMAT=json) with time, level, logger, message, and the session, agent and channel
when the record carries them (`extra={"session": …}`)."""
from __future__ import annotations

import json
import logging
from datetime import datetime, timezone

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
CONTEXT = ("session", "agent", "channel")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {"time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
                 "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        for key in CONTEXT:
            if getattr(record, key, None) is not None:
                entry[key] = str(getattr(record, key))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure(fmt: str = "text") -> None:
    """Once per process (a later call changes nothing, as logging.basicConfig)."""
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root.addHandler(handler)
    root.setLevel(logging.INFO)
