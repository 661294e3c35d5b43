"""What changed in inbound.db, so a remote sandbox's copy follows the host's file by deltas.

Every table of inbound.db (those of INBOUND_DDL, present and future) carries three triggers that
stamp the changed row's primary key into `changes` with a rising seq, one entry per key: a key
written again moves to the top, and a deleted one stays as a tombstone (`gone`). The host sends a
runner what changed past the position it holds: the current row of each changed key still there,
the key of each one gone. A whole snapshot only to start, after a gap (the log pruned past the
position, or more changes than a delta carries), or when the file or its schema changed.

Stdlib only: the host writes and reads the log (nanoclaw/remote/channel.py), a remote runner
applies what comes (remote.py). A delta is idempotent: applying it twice leaves the same copy.
"""
from __future__ import annotations

import json
import sqlite3

TRACKING_DDL = """
CREATE TABLE IF NOT EXISTS changes (
    seq   INTEGER PRIMARY KEY AUTOINCREMENT,   -- rises with each write, never reused
    tbl   TEXT NOT NULL,
    pk    TEXT NOT NULL,                       -- the row's primary key, as a JSON array
    gone  INTEGER NOT NULL DEFAULT 0,          -- 1: a tombstone (the row was deleted)
    UNIQUE (tbl, pk)
);
CREATE TABLE IF NOT EXISTS change_log (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    generation  TEXT NOT NULL,                 -- this file's: a new inbound.db starts seqs again
    floor       INTEGER NOT NULL DEFAULT 0     -- entries below this seq were pruned
);
INSERT OR IGNORE INTO change_log (id, generation) VALUES (1, lower(hex(randomblob(8))));
"""
UNTRACKED = ("changes", "change_log", "sqlite_sequence")
TRIGGER_PREFIX = "changes_"
MAX_CHANGES = 5000      # changes in one delta; further behind, a snapshot
KEEP_CHANGES = 20_000   # the log keeps this many latest changes (a few days of a busy chat)
DELTA_NAME = "inbound.delta.json"


class Gap(Exception):
    """This copy cannot take the delta (a table or column it lacks): a snapshot is needed."""


def tables(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            if r[0] not in UNTRACKED and not r[0].startswith("sqlite_")]


def _columns(conn: sqlite3.Connection, table: str) -> tuple[list[str], list[str]]:
    """(all columns in SELECT * order, the primary key's columns; rowid when it has none)."""
    info = conn.execute(f'PRAGMA table_info("{table}")').fetchall()
    pk = [r[1] for r in sorted((r for r in info if r[5]), key=lambda r: r[5])]
    return [r[1] for r in info], pk or ["rowid"]


def _key(row: str, pk: list[str]) -> str:
    return "json_array(" + ", ".join(f'{row}."{c}"' for c in pk) + ")"


def track(conn: sqlite3.Connection, only: tuple[str, ...] | None = None) -> None:
    """The log's tables and each table's triggers (or those of `only`), where missing (the host's
    connect to inbound.db; a remote runner for its claims in outbound.db)."""
    script = [TRACKING_DDL]
    for table in only or tables(conn):
        _, pk = _columns(conn, table)
        new, old = _key("NEW", pk), _key("OLD", pk)

        # A delete, then an insert: never a conflict clause, which the statement that fired the
        # trigger would override (an upsert's ON CONFLICT made "OR REPLACE" here fail).
        def stamp(key: str, gone: int, table=table) -> str:
            return (f"DELETE FROM changes WHERE tbl = '{table}' AND pk = {key}; "
                    f"INSERT INTO changes (tbl, pk, gone) VALUES ('{table}', {key}, {gone});")
        script.append(f"""
            CREATE TRIGGER IF NOT EXISTS "{TRIGGER_PREFIX}{table}_insert" AFTER INSERT ON "{table}" BEGIN
                {stamp(new, 0)} END;
            CREATE TRIGGER IF NOT EXISTS "{TRIGGER_PREFIX}{table}_update" AFTER UPDATE ON "{table}" BEGIN
                {stamp(old, 1)} {stamp(new, 0)} END;
            CREATE TRIGGER IF NOT EXISTS "{TRIGGER_PREFIX}{table}_delete" AFTER DELETE ON "{table}" BEGIN
                {stamp(old, 1)} END;""")
    in_one_transaction(conn, "\n".join(script))  # a new session's file costs one sync, not one per trigger


def in_one_transaction(conn: sqlite3.Connection, sql: str) -> None:
    """Statements in one transaction (one commit, one sync); none of them if one fails, and the
    connection is left with no transaction open (session_schema's DDL uses it too)."""
    try:
        conn.executescript("BEGIN;" + sql + "\nCOMMIT;")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def untrack(conn: sqlite3.Connection) -> None:
    """A runner's copy takes deltas as they come: its own writes need no log."""
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        if name.startswith(TRIGGER_PREFIX):
            conn.execute(f'DROP TRIGGER IF EXISTS "{name}"')


def _state(conn: sqlite3.Connection) -> tuple[dict, int] | None:
    """(where this file's log stands: generation, schema, latest seq; its floor), None without a log."""
    try:
        generation, floor = conn.execute("SELECT generation, floor FROM change_log WHERE id = 1").fetchone()
    except (sqlite3.Error, TypeError):
        return None
    top = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'changes'").fetchone()
    return {"generation": generation, "schema": conn.execute("PRAGMA schema_version").fetchone()[0],
            "seq": max(top[0] if top else 0, floor)}, floor


def position(conn: sqlite3.Connection) -> dict | None:
    """Where this file's log stands: its generation, schema and latest seq (None without a log)."""
    state = _state(conn)
    return state[0] if state else None


def since(conn: sqlite3.Connection, held, limit: int = MAX_CHANGES) -> dict | None:
    """The delta from the position a runner holds (any JSON it sent) to now, read within the
    caller's read transaction; None when only a snapshot will do."""
    state = _state(conn)
    if state is None or not isinstance(held, dict) or held.get("generation") != state[0]["generation"] \
            or held.get("schema") != state[0]["schema"]:
        return None
    here, floor = state
    seq = held.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool) or not floor <= seq <= here["seq"]:
        return None
    found = conn.execute("SELECT tbl, pk, gone FROM changes WHERE seq > ? ORDER BY seq LIMIT ?",
                         (seq, limit + 1)).fetchall()
    if len(found) > limit:
        return None
    out: dict[str, dict] = {}
    shapes: dict[str, tuple[list[str], list[str]]] = {}
    for table, pk_json, gone in found:
        if table not in shapes:
            shapes[table] = _columns(conn, table)
            out[table] = {"columns": shapes[table][0], "rows": [], "gone": []}
        columns, pk = shapes[table]
        key = json.loads(pk_json)
        row = None if gone else conn.execute(
            f'SELECT * FROM "{table}" WHERE ' + " AND ".join(f'"{c}" IS ?' for c in pk), key).fetchone()
        if row is None:
            out[table]["gone"].append(key)
        elif any(isinstance(v, bytes) for v in row):
            return None  # JSON carries no bytes (no table of inbound.db has them today)
        else:
            out[table]["rows"].append(list(row))
    return {"from": seq, "position": here, "tables": out}


def apply(conn: sqlite3.Connection, delta: dict) -> dict:
    """One transaction on a runner's copy: the keys gone removed, the rows as sent put in place.
    Its new position; Gap when the copy lacks a table or column the host has now."""
    have = set(tables(conn))
    conn.execute("BEGIN IMMEDIATE")
    try:
        for table, part in delta["tables"].items():
            if table not in have:
                raise Gap(f"no table {table!r} here")
            columns, pk = _columns(conn, table)
            if part["columns"] != columns:
                raise Gap(f"table {table!r} has other columns here")
            where = " AND ".join(f'"{c}" IS ?' for c in pk)
            conn.executemany(f'DELETE FROM "{table}" WHERE {where}', part["gone"])
            names = ", ".join(f'"{c}"' for c in columns)
            conn.executemany(f'INSERT OR REPLACE INTO "{table}" ({names}) VALUES ({", ".join("?" * len(columns))})',
                             part["rows"])
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return delta["position"]


def prune(conn: sqlite3.Connection, keep: int = KEEP_CHANGES) -> int:
    """Entries older than the latest `keep` changes go, tombstones and live rows' alike (the host's
    daily retention pass): a runner that far behind gets a snapshot, so the log stays this size
    whatever the history. How many went."""
    here = position(conn)
    if here is None or here["seq"] <= keep:
        return 0
    cut = here["seq"] - keep
    gone = conn.execute("DELETE FROM changes WHERE seq <= ?", (cut,)).rowcount  # a runner at cut needs none
    conn.execute("UPDATE change_log SET floor = MAX(floor, ?) WHERE id = 1", (cut,))
    return gone


def encode(delta: dict) -> bytes:
    return json.dumps(delta, separators=(",", ":")).encode()
