"""The router's kept write connection to each session's inbound.db (sessions/store.py): reused
between writes, never for a file it did not open, never across a fork, and bounded in number."""
from __future__ import annotations

import multiprocessing
import os
import shutil
import sqlite3

import pytest

from nanoclaw.sessions import session_schema as schema
from nanoclaw.sessions import store
from nanoclaw.sessions.store import Target

CHAT = Target("rec", "chat-1")


def texts(path) -> list[str]:
    conn = sqlite3.connect(path / "host" / schema.INBOUND)
    try:
        return [row[0] for row in conn.execute("SELECT json_extract(content, '$.text') FROM messages_in ORDER BY seq")]
    finally:
        conn.close()


def say(path, text: str) -> None:
    store.write_message(path, content={"text": text}, target=CHAT)


def open_inbound_files() -> set[str]:
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.endswith("/" + schema.INBOUND) or target.endswith(schema.INBOUND + " (deleted)"):
            found.add(target)
    return found


@pytest.fixture(autouse=True)
def no_kept_writers():
    yield
    for path in list(store._writers):
        store.forget_writer(path)


def test_a_session_folder_made_anew_gets_the_message_not_the_removed_file(tmp_path):
    path = tmp_path / "s"
    store.prepare(path, CHAT)
    say(path, "one")
    shutil.rmtree(path)  # removed behind the writer's back (an operator, a restore from backup)
    store.prepare(path, CHAT)
    say(path, "two")
    assert texts(path) == ["two"]
    assert not any(f.endswith("(deleted)") for f in open_inbound_files())


def test_the_kept_connection_serves_the_next_write_and_sees_other_writers(tmp_path):
    path = tmp_path / "s"
    store.prepare(path, CHAT)
    say(path, "one")
    kept = store._writers[path][1]
    other = schema.connect(path / "host" / schema.INBOUND)  # e.g. another gunicorn worker
    other.execute("INSERT INTO messages_in (id, seq, timestamp, content) VALUES ('x', 2, '2026-11-26T00:00:00Z', "
                  "'{\"text\": \"from elsewhere\"}')")
    other.close()
    say(path, "three")
    assert store._writers[path][1] is kept
    assert texts(path) == ["one", "from elsewhere", "three"]  # its seq follows the other writer's row


def _child_writes(path, queue):
    try:
        say(path, "from the child")
        queue.put(id(store._writers[path][1]))  # the same address as the parent's object: the inherited copy
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        queue.put(repr(exc))


def test_a_forked_child_writes_with_a_connection_of_its_own(tmp_path):
    path = tmp_path / "s"
    store.prepare(path, CHAT)
    say(path, "before the fork")
    parents = store._writers[path][1]
    ctx = multiprocessing.get_context("fork")  # as gunicorn forks its workers
    queue = ctx.Queue()
    child = ctx.Process(target=_child_writes, args=(path, queue))
    child.start()
    childs = queue.get(timeout=30)
    child.join(30)
    assert childs != id(parents)  # SQLite: a connection must not be used across a fork
    say(path, "after the fork")
    assert store._writers[path][1] is parents
    assert texts(path) == ["before the fork", "from the child", "after the fork"]
    assert sqlite3.connect(path / "host" / schema.INBOUND).execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_a_write_that_fails_midway_leaves_nothing_and_the_next_one_works(tmp_path):
    path = tmp_path / "s"
    store.prepare(path, CHAT)
    say(path, "one")
    with pytest.raises(RuntimeError):
        with store._inbound(path) as conn:
            conn.execute("INSERT INTO messages_in (id, seq, timestamp, content) VALUES ('y', 9, 'now', '{}')")
            raise RuntimeError("the caller failed mid-write")
    say(path, "two")
    assert texts(path) == ["one", "two"]


def test_kept_connections_are_bounded(tmp_path):
    before = open_inbound_files()
    for i in range(store.KEPT_WRITERS + 8):
        path = tmp_path / f"s{i}"
        store.prepare(path, CHAT)
        say(path, "hello")
    assert len(store._writers) == store.KEPT_WRITERS
    assert len(open_inbound_files() - before) == store.KEPT_WRITERS
    assert texts(tmp_path / "s0") == ["hello"]  # the oldest was closed, its message kept
