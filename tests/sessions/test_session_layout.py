"""The session folder's two parts on the host: the old flat layout is split safely, and the host
reads nothing from the agent's part through a link the agent planted."""
from __future__ import annotations

import json
import os
import sqlite3

import pytest

from nanoclaw.outbound import delivery, outbox
from nanoclaw.sessions import session_schema as schema
from nanoclaw.sessions import store
from nanoclaw.sessions.store import Target

HOME = Target("telegram", "42")


def flat_session(path):
    """A session folder as the previous layout had it: everything side by side."""
    path.mkdir(parents=True)
    conn = schema.connect(path / schema.INBOUND)
    conn.execute("INSERT INTO routing (id, channel_type, platform_id) VALUES (1, 'telegram', '42')")
    conn.close()
    (path / "inbox" / "ev1").mkdir(parents=True)
    (path / "inbox" / "ev1" / "photo.jpg").write_bytes(b"jpeg")
    schema.connect(path / schema.OUTBOUND).close()
    (path / "heartbeat").touch()
    (path / "outbox").mkdir()
    (path / "home" / ".claude").mkdir(parents=True)
    return path


def test_a_flat_session_is_split_into_host_and_agent_parts(tmp_path):
    path = flat_session(tmp_path / "s1")
    (path / "inbound.db-wal").write_bytes(b"planted by the agent")   # could re-route the session
    (path / "inbound.db-journal").write_bytes(b"planted too")
    assert store.upgrade_layout(path) is True
    assert sorted(p.name for p in path.iterdir()) == ["agent", "host"]
    assert sorted(p.name for p in store.host_part(path).iterdir()) == ["inbound.db", "inbox"]
    assert (store.inbox_dir(path) / "ev1" / "photo.jpg").read_bytes() == b"jpeg"
    agent = sorted(p.name for p in store.agent_part(path).iterdir())
    assert agent == ["heartbeat", "home", "inbound.db-journal", "inbound.db-wal", "outbound.db", "outbox"]
    assert store.routing_of(path) == HOME  # the history is kept
    assert store.upgrade_layout(path) is False  # once


def test_prepare_splits_an_old_folder_before_writing(tmp_path):
    path = flat_session(tmp_path / "s2")
    store.prepare(path, HOME)
    store.write_message(path, content={"text": "hi"}, target=HOME)
    assert not (path / schema.INBOUND).exists() and store.inbound_db(path).exists()
    conn = schema.connect(store.inbound_db(path), readonly=True)
    assert conn.execute("SELECT COUNT(*) FROM messages_in").fetchone()[0] == 1
    conn.close()


def test_a_link_in_the_agents_part_is_never_followed(tmp_path):
    """outbound.db replaced by a link to another session's outbound.db: the host reads nothing."""
    other = tmp_path / "other"
    store.prepare(other, Target("telegram", "7"))
    conn = schema.connect(store.outbound_db(other))
    conn.execute("INSERT INTO messages_out (id, seq, timestamp, channel_type, platform_id, content) "
                 "VALUES ('x', 1, '2026-01-01T00:00:00Z', 'telegram', '42', ?)", (json.dumps({"op": "text", "text": "theirs"}),))
    conn.close()
    path = tmp_path / "mine"
    store.prepare(path, HOME)
    os.symlink(store.outbound_db(other), store.outbound_db(path))
    assert store.agent_file(store.outbound_db(path)) is None
    assert delivery.open_session(path) is None
    probe = sqlite3.connect(":memory:")
    assert store.attach_outbound(probe, path) is False


def test_a_file_to_send_is_read_without_following_a_link(tmp_path):
    path = tmp_path / "s3"
    store.prepare(path, HOME)
    secret = tmp_path / "host-secret.txt"
    secret.write_text("not for the chat")
    (store.outbox_dir(path) / "report.txt").write_text("numbers")
    os.symlink(secret, store.outbox_dir(path) / "leak.txt")
    with outbox.outbox_copy(path, "outbox/report.txt", 1 << 20) as copy:
        assert copy.read_text() == "numbers" and copy.name == "report.txt"
    with pytest.raises(delivery.DeliveryError, match="file refused"):
        with outbox.outbox_copy(path, "outbox/leak.txt", 1 << 20):
            pass
    os.symlink(tmp_path, store.outbox_dir(path) / "up")
    with pytest.raises(delivery.DeliveryError, match="file refused"):
        with outbox.outbox_copy(path, "outbox/up/host-secret.txt", 1 << 20):
            pass


def test_a_link_swapped_in_after_the_plain_file_check_is_caught_after_the_open(tmp_path, monkeypatch):
    """The agent swaps outbound.db for a link to another session's database right after the host
    checked it was a plain file: the host sees what SQLite actually opened and reads nothing."""
    path = tmp_path / "s"
    store.prepare(path, Target("telegram", "1"))
    (tmp_path / "elsewhere").mkdir()
    conn = schema.connect(tmp_path / "elsewhere" / "outbound.db")  # same tables, rows not this session's
    conn.close()
    store.outbound_db(path).unlink(missing_ok=True)
    os.symlink(tmp_path / "elsewhere" / "outbound.db", store.outbound_db(path))
    monkeypatch.setattr(store, "agent_file", lambda p: p)  # the check passed a moment before the swap
    conn = sqlite3.connect(":memory:")
    assert store.attach_outbound(conn, path) is False
    assert store.open_agent_db(store.outbound_db(path)) is None
