"""The host's index of what was said, per agent: the messages the router wrote into its sessions (from
admitted senders only: a stranger's, a pending or denied sender's, a dropped message never get here)
and the replies the host delivered for it. Searched by the agent within its conversation's reach;
kept NANOCLAW_KEEP_HISTORY_DAYS (365), apart from the 30-day pruning of session rows.

SQLite: an FTS5 index over the table (kept by triggers). PostgreSQL: a generated tsvector with the
`simple` configuration. One pure compiler (query.py) words both, so both answer alike.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import peewee

from ..db import database, defer, hot_write
from . import query
from .scopes import Reach
from .tables import History

log = logging.getLogger("nanoclaw.memory")

MAX_TEXT = 20_000   # what is indexed of one message
MAX_HITS = 50


@dataclass(frozen=True)
class Hit:
    said_at: str
    sender_id: str
    sender_name: str
    channel: str
    chat_id: str
    thread_id: str | None
    text: str


def postgres() -> bool:
    return isinstance(database.obj, peewee.PostgresqlDatabase)


def add(folder: str, channel: str, chat_id: str, thread_id: str | None, session_id: str, key: str, sender_id: str,
        sender_name: str, said_at: str, text: str) -> None:
    """One message this agent saw (once: a replayed message is not indexed twice)."""
    text = (text or "").strip()
    if not text:
        return
    p = database.param
    # within a routing round, written with the commit that marks its events routed (db.deferring)
    defer("INSERT INTO history (agent_folder, channel_type, platform_id, thread_id, session_id, message_key, "
          f"sender_id, sender_name, said_at, text, norm) VALUES ({', '.join([p] * 11)}) "
          "ON CONFLICT (agent_folder, message_key) DO NOTHING",
          (folder, channel, chat_id, thread_id, session_id or "", key[:300], sender_id or "",
           (sender_name or "")[:255], said_at, text[:MAX_TEXT], query.indexed(text[:MAX_TEXT])))


def catch_up() -> int:
    """SQLite: index the rows added since the last time (one transaction); how many."""
    if postgres():
        return 0
    with hot_write(), database.atomic():
        last = database.execute_sql("SELECT last_id FROM history_fts_state WHERE id = 1").fetchone()[0]
        top = database.execute_sql("SELECT COALESCE(MAX(id), 0) FROM history").fetchone()[0]
        if top <= last:
            return 0
        database.execute_sql("INSERT INTO history_fts(rowid, norm) SELECT id, norm FROM history WHERE id > ? "
                             "ORDER BY id", (last,))
        database.execute_sql("UPDATE history_fts_state SET last_id = ? WHERE id = 1", (top,))
        return top - last


def search(folder: str, reach: Reach, raw: str, *, limit: int = 10, after: str | None = None,
           before: str | None = None) -> tuple[list[query.Term], list[Hit]]:
    """The newest matching messages within the reach; after/before are UTC ISO bounds."""
    terms = query.parse(raw)
    limit = max(1, min(int(limit or 10), MAX_HITS))
    catch_up()
    p = database.param
    where, args = ["h.agent_folder = " + p], [folder]
    if not reach.everything:
        where += [f"h.channel_type = {p}", f"h.platform_id = {p}"]
        args += [reach.channel, reach.chat_id]
    if after:
        where.append(f"h.said_at >= {p}")
        args.append(after)
    if before:
        where.append(f"h.said_at < {p}")
        args.append(before)
    if postgres():
        sql = (f"SELECT h.said_at, h.sender_id, h.sender_name, h.channel_type, h.platform_id, h.thread_id, h.text "
               f"FROM history h WHERE h.tsv @@ to_tsquery('simple', {p}) AND {' AND '.join(where)} "
               f"ORDER BY h.said_at DESC, h.id DESC LIMIT {p}")
        args = [query.tsquery(terms), *args, limit]
    else:
        sql = (f"SELECT h.said_at, h.sender_id, h.sender_name, h.channel_type, h.platform_id, h.thread_id, h.text "
               f"FROM history_fts f JOIN history h ON h.id = f.rowid WHERE history_fts MATCH {p} "
               f"AND {' AND '.join(where)} ORDER BY f.rowid DESC LIMIT {p}")
        args = [query.fts5(terms), *args, limit]
    rows = database.execute_sql(sql, args).fetchall()
    return terms, [Hit(*row) for row in rows]


def prune(keep_days: int, now: datetime | None = None) -> int:
    cutoff = ((now or datetime.now(timezone.utc)) - timedelta(days=keep_days)).strftime("%Y-%m-%dT%H:%M:%S")
    catch_up()  # a row leaves the index as it goes (the delete trigger): it must be in it first
    with database.atomic():
        removed = History.delete().where(History.said_at < cutoff).execute()
    if removed:
        scrub()
    return removed


def forget(folder: str, *, channel: str | None = None, chat_id: str | None = None,
           before: str | None = None) -> int:
    query_ = History.delete().where(History.agent_folder == folder)
    if channel is not None:
        query_ = query_.where(History.channel_type == channel, History.platform_id == chat_id)
    if before is not None:
        query_ = query_.where(History.said_at < before)
    catch_up()
    with database.atomic():
        removed = query_.execute()
    if removed:
        scrub()
    return removed


def scrub() -> None:
    """After a forget or a prune, nothing of the words stays readable in the database's files (SQLite): the
    rows' pages were zeroed as they were deleted (secure_delete, db.SQLITE_PRAGMAS), the full-text index is
    merged into one segment (`optimize` drops the deleted entries the older segments still held), and the
    write-ahead log is checkpointed and truncated. PostgreSQL keeps dead tuples until its VACUUM (autovacuum
    runs on its own; `VACUUM history` at once): docs/security.md says so."""
    if isinstance(database.obj, peewee.PostgresqlDatabase):
        return
    with database.atomic():
        database.execute_sql("INSERT INTO history_fts(history_fts) VALUES ('optimize')")
    busy, _log, _done = database.execute_sql("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    if busy:
        log.warning("the history's write-ahead log could not be truncated now (a reader holds it); it is on the "
                    "next checkpoint")


def oldest(folder: str | None = None) -> str | None:
    q = History.select(peewee.fn.MIN(History.said_at))
    if folder:
        q = q.where(History.agent_folder == folder)
    return q.scalar()
