"""The central database: one peewee handle, bound at start-up from DATABASE_URL; and the changes
one host program commits that another must act on, told at once instead of polled for.

SQLite runs in WAL mode with foreign keys on and a busy timeout; PostgreSQL is
the same code through the same models. Nothing here may be SQLite-only SQL.

Changes told (`announce`, `ChangeListener`): the proxy records budget events and model outages, a
`tasks` command pauses a task, an agent group is created; another program acts on it. The writer
touches data/run/changes/<topic>/nudge after its commit and the reader, blocked on inotify for those
files, runs its look at once. The readers keep an interval as the safety net (a lost touch, an
inotify limit), long enough that an idle host does not wake for it. Host-only: data/run/ is never
mounted into a sandbox, so no agent can touch these files; a touch carries nothing, the reader
reads its own tables.
"""
from __future__ import annotations

import logging
import os
import select
import threading
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Callable
from urllib.parse import unquote, urlparse

import peewee
from playhouse.pool import PooledPostgresqlDatabase, PooledSqliteDatabase

from agent_runner import nudge

database = peewee.DatabaseProxy()

SQLITE_PRAGMAS = {
    "journal_mode": "wal",
    "foreign_keys": 1,
    "busy_timeout": 5000,
    "synchronous": "normal",
    "secure_delete": 1,   # what is deleted (a forgotten history, a cleared memory) is zeroed, not left in free pages
}


def open_database(url: str) -> peewee.Database:
    """A peewee Database for a validated DATABASE_URL (not yet connected)."""
    parsed = urlparse(url)
    if parsed.scheme == "sqlite":
        path = Path(unquote(url[len("sqlite:///"):]))
        if not path.is_absolute():
            path = Path("/") / path
        path.parent.mkdir(parents=True, exist_ok=True)
        # pooled: a request reuses a connection instead of paying connect + pragmas every time.
        # lock_type IMMEDIATE: a transaction takes the write lock at BEGIN, waiting in the busy
        # handler. A deferred one that reads and then writes fails at once ("database is locked",
        # no waiting) when another connection committed in between: WAL cannot move its snapshot.
        return PooledSqliteDatabase(str(path), pragmas=SQLITE_PRAGMAS, check_same_thread=False,
                                    max_connections=32, stale_timeout=300, lock_type="IMMEDIATE")
    return PooledPostgresqlDatabase(
        parsed.path.lstrip("/"),
        user=unquote(parsed.username) if parsed.username else None,
        password=unquote(parsed.password) if parsed.password else None,
        host=parsed.hostname,
        port=parsed.port or 5432,
        max_connections=32, stale_timeout=300,
    )


def bind(url: str) -> peewee.Database:
    db = open_database(url)
    database.initialize(db)
    return db


def is_reachable() -> tuple[bool, str | None]:
    try:
        database.execute_sql("SELECT 1")
        return True, None
    except Exception as exc:  # any driver error means "not reachable" to a health check
        return False, str(exc).splitlines()[0] if str(exc) else type(exc).__name__


_hot_writes = threading.Lock()


@contextmanager
def hot_write():
    """Around the writes every webhook makes (the intake's insert and stamps). On SQLite the
    writers of one process queue here instead of in SQLite's busy handler, which sleeps 1, 2,
    5, 10 ms... between tries: eight request threads inserting at once would otherwise spend
    more time asleep than writing. PostgreSQL locks rows, not the database: no queue there."""
    if isinstance(database.obj, peewee.PostgresqlDatabase):
        yield
        return
    with _hot_writes:
        yield


def connected():
    """A connection for the block: the delivery thread and the workers have none of their own, a
    request thread has one open already (then nothing is opened or closed here)."""
    return database.connection_context() if database.is_closed() else nullcontext()


_deferred = threading.local()


@contextmanager
def deferring():
    """Writes that can ride on a later commit of this thread (`defer`) wait for `flush_deferred`, so a
    routing round's index rows share the commit that marks its events routed; whatever is left at the
    end of the block is written then."""
    _deferred.rows = []
    try:
        yield
    finally:
        rows, _deferred.rows = _deferred.rows, None
        if rows:
            with hot_write(), database.atomic():
                for sql, params in rows:
                    database.execute_sql(sql, params)


def defer(sql: str, params) -> None:
    """Run now, or with the enclosing `deferring` block's next flush (same thread)."""
    rows = getattr(_deferred, "rows", None)
    if rows is None:
        with hot_write():
            database.execute_sql(sql, params)
    else:
        rows.append((sql, params))


def flush_deferred() -> None:
    """Inside the caller's transaction: the deferred writes of this thread."""
    rows = getattr(_deferred, "rows", None)
    while rows:
        sql, params = rows.pop(0)
        database.execute_sql(sql, params)


# --- changes told to the other host programs ---------------------------------------------------

log = logging.getLogger("nanoclaw.changes")

TOPICS = ("tasks", "budget", "outages", "proxy")  # "proxy": look again for agent groups


def topic_dir(data_dir: Path, topic: str) -> Path:
    return Path(data_dir) / "run" / "changes" / topic


def announce(data_dir: Path, topic: str) -> None:
    """After the writer's commit; never fails it (the listener's interval picks the change up)."""
    where = topic_dir(data_dir, topic)
    try:
        where.mkdir(parents=True, exist_ok=True)
        nudge.touch_plain(where / nudge.NUDGE)
    except OSError as exc:
        log.debug("could not announce a change of %s: %s", topic, exc)


class ChangeListener:
    """A thread blocked on inotify (and a pipe that stops it): on a touch of a topic, its callback."""

    def __init__(self, data_dir: Path, callbacks: dict[str, Callable[[], None]]):
        self.data_dir = Path(data_dir)
        self.callbacks = callbacks
        self._stop_r, self._stop_w = os.pipe()
        self._thread: threading.Thread | None = None
        self.watcher: nudge.Watcher | None = None

    def start(self) -> "ChangeListener":
        try:
            self.watcher = nudge.Watcher((nudge.NUDGE,))
            for topic in self.callbacks:
                where = topic_dir(self.data_dir, topic)
                where.mkdir(parents=True, exist_ok=True)
                self.watcher.watch(where)
        except OSError as exc:  # nudge.Unavailable included: the jobs' intervals still run
            log.warning("changes of other host programs are noticed on the jobs' intervals only: %s", exc)
            return self
        self._thread = threading.Thread(target=self._run, name="nanoclaw-host-changes", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        by_dir = {topic_dir(self.data_dir, t): t for t in self.callbacks}
        while True:
            ready, _, _ = select.select([self.watcher.fileno(), self._stop_r], [], [])
            if self._stop_r in ready:
                return
            for directory in self.watcher.drain():
                topic = by_dir.get(directory)
                if topic is None:
                    continue
                if not directory.is_dir():  # removed under us: watch it again, the job looks anyway
                    directory.mkdir(parents=True, exist_ok=True)
                    self.watcher.watch(directory)
                try:
                    self.callbacks[topic]()
                except Exception as exc:  # noqa: BLE001 - the job's interval runs it anyway
                    log.warning("acting on a change of %s failed: %s", topic, exc)

    def stop(self) -> None:
        if self._thread is not None:
            os.write(self._stop_w, b"x")
            self._thread.join(timeout=5)
            self._thread = None
        if self.watcher is not None:
            self.watcher.close()
            self.watcher = None
        for fd in (self._stop_r, self._stop_w):
            try:
                os.close(fd)
            except OSError:
                pass
        self._stop_r = self._stop_w = -1
