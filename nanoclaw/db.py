"""The central database: one peewee handle, bound at start-up from DATABASE_URL.

SQLite runs in WAL mode with foreign keys on and a busy timeout; PostgreSQL is
the same code through the same models. Nothing here may be SQLite-only SQL.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager, nullcontext
from pathlib import Path
from urllib.parse import unquote, urlparse

import peewee
from playhouse.pool import PooledPostgresqlDatabase, PooledSqliteDatabase

database = peewee.DatabaseProxy()

SQLITE_PRAGMAS = {
    "journal_mode": "wal",
    "foreign_keys": 1,
    "busy_timeout": 5000,
    "synchronous": "normal",
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
