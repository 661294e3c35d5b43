"""The runner's side of the session folder: reads inbound.db (in the host's part, mounted
read-only) and writes outbound.db, heartbeat and outbox/ (in ours). One writer per file, always."""
from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
import uuid
from pathlib import Path
from typing import Any

from . import nudge
from . import session_schema as schema
from .selection import InboundRow
from .targets import Target

log = logging.getLogger("agent_runner.store")
SDK_SESSION_KEY = "sdk_session_id"
READ_PATIENCE_S = 5.0
OPEN_TRIES = 10


MAX_STREAM = 60_000  # characters of a live answer kept (longer than any platform shows)


class SessionStore:
    # In a sandbox on another machine (remote.py) a new inbound.db replaces the old one by a rename;
    # the read connection then follows it to the new file.
    follow_renames = False

    def __init__(self, session_dir: Path, inbound_dir: Path):
        self.dir = Path(session_dir)            # ours: outbound.db, heartbeat, outbox/, home/
        self.inbound_dir = Path(inbound_dir)    # the host's: inbound.db, inbox/ (read-only)
        self.out = self._open_out()
        self._in: sqlite3.Connection | None = None
        self._in_ino = 0
        self._heartbeat_at = 0.0

    def _open_out(self) -> sqlite3.Connection:
        """outbound.db, made if new. A start once met "attempt to write a readonly database" here
        (CI, 2026-11-26, not reproduced since): whatever held the file then was passing, so a few
        short tries come before giving up."""
        for attempt in range(OPEN_TRIES):
            try:
                return schema.connect(self.dir / schema.OUTBOUND)
            except sqlite3.OperationalError as e:
                if "readonly" not in str(e) or attempt == OPEN_TRIES - 1:
                    raise
                log.warning("outbound.db is read-only for now (%s); trying again", e)
                time.sleep(0.2)
        raise AssertionError("unreachable")

    # inbound.db (read-only) ----------------------------------------------------------------------
    @classmethod
    def of_session(cls, folder: Path) -> "SessionStore":
        """The store of a whole session folder as the host lays it out (host/ and agent/), for
        running the runner's side outside a sandbox (tests, benchmarks)."""
        return cls(Path(folder) / schema.AGENT_PART, Path(folder) / schema.HOST_PART)

    def sibling(self) -> "SessionStore":
        """A store on the same folders with connections of its own (a tool's worker thread)."""
        return type(self)(self.dir, self.inbound_dir)

    @property
    def inbound_path(self) -> Path:
        return self.inbound_dir / schema.INBOUND

    def inbound(self) -> sqlite3.Connection | None:
        """The host creates inbound.db; until it exists there is nothing to read."""
        if self._in is not None and self.follow_renames:
            try:
                replaced = os.stat(self.inbound_path).st_ino != self._in_ino
            except FileNotFoundError:
                replaced = False
            if replaced:
                self._in.close()
                self._in = None
        if self._in is None and self.inbound_path.exists():
            self._in = schema.connect(self.inbound_path, readonly=True)
            self._in.execute("PRAGMA schema_version").fetchone()  # opens the file now, before the stat
            self._in_ino = os.stat(self.inbound_path).st_ino
        return self._in

    def _read(self, sql: str, args: tuple | list = ()) -> list[sqlite3.Row] | None:
        """All rows of a query on inbound.db (None when it does not exist yet), waiting out the
        host's commit in short steps (up to READ_PATIENCE_S): SQLite's own busy handler sleeps 1, 2,
        5, 10 ms…, which overshoots a commit of well under a millisecond on the answer's path. The
        nudge wakes us while the host's commit still syncs (0.3-1 ms): 0.1 ms steps for the first
        2 ms, then growing ones."""
        conn = self.inbound()
        if conn is None:
            return None
        started = time.monotonic()
        deadline = started + READ_PATIENCE_S
        pause = 0.0001
        conn.execute("PRAGMA busy_timeout=0")
        try:
            while True:
                try:
                    return conn.execute(sql, args).fetchall()
                except sqlite3.OperationalError as e:
                    if "locked" not in str(e) and "busy" not in str(e) or time.monotonic() > deadline:
                        raise
                time.sleep(pause)
                if time.monotonic() - started > 0.002:
                    pause = min(pause * 2, 0.004)
        finally:
            conn.execute(f"PRAGMA busy_timeout={int(READ_PATIENCE_S * 1000)}")

    def inbound_stamp(self) -> tuple | None:
        """A cheap change detector: the file's (inode, mtime, size) and SQLite's data_version
        (which changes on every commit by another connection, even within one mtime tick)."""
        try:
            st = os.stat(self.inbound_path)
        except FileNotFoundError:
            return None
        rows = self._read("PRAGMA data_version")
        return (st.st_ino, st.st_mtime_ns, st.st_size, rows[0][0] if rows else None)

    def pending_rows(self, limit: int = 500) -> list[tuple[InboundRow, str | None]]:
        """Pending rows, newest first, each with its process_after."""
        rows = self._read("SELECT * FROM messages_in WHERE status = 'pending' ORDER BY seq DESC LIMIT ?", (limit,))
        return [(InboundRow.from_db(r), r["process_after"]) for r in rows or []]

    def routing(self) -> Target | None:
        rows = self._read("SELECT channel_type, platform_id, thread_id FROM routing WHERE id = 1")
        return Target(*rows[0]) if rows else None

    def destinations(self) -> dict[str, Target]:
        rows = self._read("SELECT name, channel_type, platform_id, thread_id FROM destinations")
        return {r[0]: Target(r[1], r[2], r[3]) for r in rows or []}

    def already_sent(self, ids: list[str]) -> list[dict[str, Any]]:
        """What went out to people in answer to these rows (messages, files, cards), oldest first:
        after an interrupted turn, the retry is told, so nothing is sent twice."""
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        rows = self.out.execute(f"SELECT content FROM messages_out WHERE kind = 'chat' AND in_reply_to IN ({marks}) "
                                "ORDER BY seq", ids).fetchall()
        sent = []
        for (content,) in rows:
            try:
                op = json.loads(content)
            except ValueError:
                continue
            if isinstance(op, dict) and op.get("op") in ("text", "file", "card"):
                sent.append(op)
        return sent

    def host_answer(self, message_id: str) -> dict[str, Any] | None:
        """The host's answer to one of our requests (a completed `answer` row), or None while there
        is none yet."""
        rows = self._read("SELECT content FROM messages_in WHERE id = ? AND kind = 'answer'", (message_id,))
        if not rows:
            return None
        try:
            answer = json.loads(rows[0][0])
        except ValueError:
            return {}
        return answer if isinstance(answer, dict) else {}

    def option(self, key: str) -> str | None:
        """A decision of the host's for this session (its `options` table), e.g. the memory snapshot."""
        rows = self._read("SELECT value FROM options WHERE key = ?", (key,))
        return rows[0][0] if rows else None

    def destination_labels(self) -> dict[str, str]:
        """name → what the host calls it (for the system prompt)."""
        rows = self._read("SELECT name, display_name, channel_type, platform_id FROM destinations ORDER BY name")
        return {r[0]: r[1] or f"{r[2]} {r[3]}" for r in rows or []}

    # processing_ack ------------------------------------------------------------------------------
    def acked_ids(self, ids: list[str]) -> set[str]:
        """Which of `ids` we hold a claim or an outcome for."""
        if not ids:
            return set()
        marks = ",".join("?" * len(ids))
        return {r[0] for r in self.out.execute(
            f"SELECT message_id FROM processing_ack WHERE message_id IN ({marks})", ids)}

    def prune(self, days: float, now: float | None = None) -> tuple[int, int]:
        """At start: our rows the host has finished with, older than `days` — replies it delivered
        (or gave up on), never the newest (its seq numbers the next), and outcomes of messages the
        host has removed. (replies, outcomes) removed. The host prunes its side (lifecycle/records.py)."""
        if days <= 0 or self.inbound() is None:
            return 0, 0
        cutoff = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime((now or time.time()) - days * 86400))
        finished = {r[0] for r in self._read("SELECT message_out_id FROM delivered WHERE status IN "
                                             "('delivered', 'failed')") or []}
        replies = [r[0] for r in self.out.execute(
            "SELECT id FROM messages_out WHERE timestamp < ? AND seq < (SELECT MAX(seq) FROM messages_out)", (cutoff,))
            if r[0] in finished]
        present = {r[0] for r in self._read("SELECT id FROM messages_in") or []}
        outcomes = [r[0] for r in self.out.execute("SELECT message_id FROM processing_ack WHERE status != 'processing'")
                    if r[0] not in present]
        with self._tx():
            self.out.executemany("DELETE FROM messages_out WHERE id = ?", [(i,) for i in replies])
            self.out.executemany("DELETE FROM processing_ack WHERE message_id = ?", [(i,) for i in outcomes])
        return len(replies), len(outcomes)

    def forget_stale_claims(self) -> int:
        """At start: a `processing` claim can only be a dead predecessor's."""
        return self.out.execute("DELETE FROM processing_ack WHERE status = 'processing'").rowcount

    def _ack(self, ids: list[str], status: str) -> None:
        now = schema.utc_now_iso()
        with self._tx():
            self.out.executemany(
                "INSERT INTO processing_ack (message_id, status, status_changed) VALUES (?, ?, ?) "
                "ON CONFLICT (message_id) DO UPDATE SET status = excluded.status, "
                "status_changed = excluded.status_changed", [(i, status, now) for i in ids])

    def claim(self, ids: list[str]) -> None:
        self._ack(ids, "processing")

    def complete(self, ids: list[str]) -> None:
        self._ack(ids, "completed")

    def release(self, ids: list[str]) -> None:
        """Give rows back: no claim means the host (or a later turn) may try them again."""
        with self._tx():
            self._release(ids)

    def _release(self, ids: list[str]) -> None:
        self.out.executemany("DELETE FROM processing_ack WHERE message_id = ? AND status = 'processing'",
                             [(i,) for i in ids])

    def finish_turn(self, ids: list[str], reply: dict[str, Any] | None, target: Target | None, *,
                    in_reply_to: str | None, ok: bool) -> None:
        """One transaction: the turn's reply (if any) and the rows' outcome — completed, or released
        for a retry — so a crash can neither lose the reply nor send it twice."""
        now = schema.utc_now_iso()
        with self._tx():
            if reply is not None and target is not None:
                self._insert_out(reply, target, in_reply_to, "chat" if ok else "system")
            if ok:
                self.out.executemany(
                    "INSERT INTO processing_ack (message_id, status, status_changed) VALUES (?, 'completed', ?) "
                    "ON CONFLICT (message_id) DO UPDATE SET status = 'completed', "
                    "status_changed = excluded.status_changed", [(i, now) for i in ids])
            else:
                self._release(ids)
            self.out.execute("UPDATE container_state SET stream_for = NULL, stream_text = NULL WHERE id = 1")

    # messages_out --------------------------------------------------------------------------------
    def write_out(self, content: dict[str, Any], target: Target, *, in_reply_to: str | None = None,
                  kind: str = "chat") -> int:
        """Append one outbound row; returns its seq (what edit/reaction tools refer to)."""
        with self._tx():
            return self._insert_out(content, target, in_reply_to, kind)

    def _insert_out(self, content: dict[str, Any], target: Target, in_reply_to: str | None, kind: str) -> int:
        seq = self.out.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM messages_out").fetchone()[0]
        self.out.execute(
            "INSERT INTO messages_out (id, seq, in_reply_to, timestamp, kind, channel_type, platform_id,"
            " thread_id, content) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (uuid.uuid4().hex, seq, in_reply_to, schema.utc_now_iso(), kind, target.channel_type,
             target.platform_id, target.thread_id, json.dumps(content, ensure_ascii=False)))
        return seq

    def out_row(self, seq: int) -> dict[str, Any] | None:
        row = self.out.execute("SELECT * FROM messages_out WHERE seq = ?", (seq,)).fetchone()
        if row is None:
            return None
        d = dict(row)
        d["content"] = json.loads(d["content"])
        return d

    # session_state / container_state -------------------------------------------------------------
    def get_state(self, key: str) -> str | None:
        row = self.out.execute("SELECT value FROM session_state WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def set_state(self, key: str, value: str | None) -> None:
        if value is None:
            self.out.execute("DELETE FROM session_state WHERE key = ?", (key,))
        else:
            self.out.execute("INSERT INTO session_state (key, value) VALUES (?, ?) "
                             "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (key, value))

    def set_tool(self, name: str | None, declared_timeout_ms: int | None = None, subject: str | None = None) -> None:
        """What the agent is running now (the host's stuck detection reads it; a long turn's status
        message shows the subject)."""
        started = schema.utc_now_iso() if name else None
        self.out.execute(
            "INSERT INTO container_state (id, current_tool, tool_declared_timeout_ms, tool_started_at, tool_subject) "
            "VALUES (1, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET current_tool = excluded.current_tool, "
            "tool_declared_timeout_ms = excluded.tool_declared_timeout_ms, "
            "tool_started_at = excluded.tool_started_at, tool_subject = excluded.tool_subject",
            (name, declared_timeout_ms, started, subject))

    def set_stream(self, message_in_id: str | None, text: str | None) -> None:
        """The answer so far, for the chat's live message (the host shows it; the finished answer
        is a row of its own). Under WAL with synchronous=NORMAL the commit is not synced; the nudge
        has the host's delivery look at once."""
        with self._tx():
            self.out.execute(
                "INSERT INTO container_state (id, stream_for, stream_text) VALUES (1, ?, ?) ON CONFLICT (id) DO UPDATE "
                "SET stream_for = excluded.stream_for, stream_text = excluded.stream_text",
                (message_in_id, (text or "")[:MAX_STREAM] if message_in_id else None))

    def container_state(self) -> dict[str, Any]:
        row = self.out.execute("SELECT * FROM container_state WHERE id = 1").fetchone()
        return dict(row) if row else {}

    # heartbeat -----------------------------------------------------------------------------------
    def touch_heartbeat(self, min_interval_s: float = 0.0) -> None:
        now = time.monotonic()
        if min_interval_s and now - self._heartbeat_at < min_interval_s:
            return
        self._heartbeat_at = now
        path = self.dir / schema.HEARTBEAT
        stamp = time.time_ns()  # the clock rows are stamped with (the file's own would be the kernel's
        try:                    # coarse one, up to a tick behind a row written just before)
            os.utime(path, ns=(stamp, stamp))
        except FileNotFoundError:
            path.touch()
            os.utime(path, ns=(stamp, stamp))

    # ----------------------------------------------------------------------------------------------
    def _tx(self):
        return _Tx(self.out, self.dir)

    def close(self) -> None:
        self.out.close()
        if self._in is not None:
            self._in.close()


class _Tx:
    """One write transaction on outbound.db; after its commit the host's delivery is nudged."""

    def __init__(self, conn: sqlite3.Connection, directory: Path):
        self.conn = conn
        self.dir = directory

    def __enter__(self):
        self.conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type, *_):
        self.conn.execute("ROLLBACK" if exc_type else "COMMIT")
        if not exc_type:
            nudge.touch(self.dir)
