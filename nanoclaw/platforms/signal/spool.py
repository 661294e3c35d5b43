"""What signal-cli handed the listener, kept on disk before it is handed on (the listener's own SQLite
file, one writer: $NANOCLAW_DATA_DIR/signal-spool.db). signal-cli forgets an envelope once it wrote it
to the listener, so the listener stores each at once (synchronous FULL: on disk when `put` returns) and
hands them over from here in order, however long the web program takes; a restart goes on from here."""
from __future__ import annotations

import sqlite3
import threading
from pathlib import Path


class Spool:
    def __init__(self, path: Path):
        self.path = Path(path)
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY AUTOINCREMENT, data TEXT NOT NULL)")
        self._lock = threading.Lock()
        self._more = threading.Condition(self._lock)

    def put(self, data: str) -> None:
        with self._lock:
            self._db.execute("INSERT INTO events (data) VALUES (?)", (data,))
            self._more.notify_all()

    def first(self, timeout: float) -> tuple[int, str] | None:
        """The oldest event kept, waiting up to `timeout` for one."""
        with self._lock:
            row = self._db.execute("SELECT id, data FROM events ORDER BY id LIMIT 1").fetchone()
            if row is None and self._more.wait(timeout):
                row = self._db.execute("SELECT id, data FROM events ORDER BY id LIMIT 1").fetchone()
            return row

    def wake(self) -> None:
        """End a wait in first() (the program stops)."""
        with self._lock:
            self._more.notify_all()

    def done(self, ident: int) -> None:
        with self._lock:
            self._db.execute("DELETE FROM events WHERE id = ?", (ident,))

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT count(*) FROM events").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()
