"""inbound.db goes down to a remote sandbox as the rows changed since its copy's position, not as the
whole file each time: a year of a busy chat costs a turn no more bytes than an empty one
(issue 44). The log itself (change_log.py) on real SQLite files; then the real door, channel and
runner side over TLS."""
from __future__ import annotations

import sqlite3

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from agent_runner import change_log
from agent_runner.remote import RemoteSession
from nanoclaw.sessions import session_schema as schema
from nanoclaw.sessions import store
from nanoclaw.sessions.store import Target
from tests.remote.test_gate import door, session_of  # noqa: F401 - the fixture


def contents(conn: sqlite3.Connection) -> dict:
    """Every table's rows (the log's own tables aside), in a stable order."""
    return {t: sorted(map(tuple, conn.execute(f'SELECT * FROM "{t}"')), key=repr) for t in change_log.tables(conn)}


def copy_of(host: sqlite3.Connection, path) -> sqlite3.Connection:
    """What a runner holds after a snapshot: the file's bytes, its own copy, no triggers."""
    path.write_bytes(host.serialize())
    conn = sqlite3.connect(path, isolation_level=None)
    change_log.untrack(conn)
    return conn


def sample_row(conn: sqlite3.Connection, table: str, n: int) -> dict:
    """A row any table of the schema takes (its CHECKs ask id = 1 at most)."""
    row = {}
    for _cid, name, kind, notnull, _default, pk in conn.execute(f'PRAGMA table_info("{table}")'):
        if name == "id" and kind.upper() == "INTEGER":
            row[name] = 1
        elif notnull or pk:
            row[name] = n if kind.upper() == "INTEGER" else f"{name}-{n}"
    return row


def test_every_table_of_inbound_db_logs_its_inserts_updates_and_deletes(tmp_path):
    host = schema.connect(tmp_path / schema.INBOUND)
    assert set(change_log.tables(host)) >= {"messages_in", "delivered", "destinations", "routing", "options",
                                            "status_messages"}
    for table in change_log.tables(host):
        row = sample_row(host, table, 7)
        host.execute(f'INSERT INTO "{table}" ({", ".join(row)}) VALUES ({", ".join("?" * len(row))})', list(row.values()))
        first = change_log.position(host)["seq"]
        host.execute(f'UPDATE "{table}" SET {next(iter(row))} = {next(iter(row))}')
        assert change_log.position(host)["seq"] > first, f"an update of {table} was not logged"
        host.execute(f'DELETE FROM "{table}"')
        assert host.execute("SELECT gone FROM changes WHERE tbl = ? ORDER BY seq DESC", (table,)).fetchone()[0] == 1


# What the host does to a session's inbound.db: new messages, their status, delivery records,
# routing and options replaced, rows removed (retention), the log's old entries pruned.
op = st.one_of(
    st.tuples(st.just("message"), st.integers(0, 40)),
    st.tuples(st.just("status"), st.integers(0, 40), st.sampled_from(["completed", "failed", "pending"])),
    st.tuples(st.just("delivered"), st.integers(0, 40)),
    st.tuples(st.just("routing"), st.integers(0, 3)),
    st.tuples(st.just("option"), st.sampled_from(["progress", "voice"]), st.one_of(st.none(), st.text(max_size=5))),
    st.tuples(st.just("prune"), st.integers(0, 40)),
    st.tuples(st.just("log"), st.integers(0, 30)),
    st.tuples(st.just("replace_seq"), st.integers(0, 40)),
    st.just(("sync",)),
)


def host_write(conn: sqlite3.Connection, step: tuple) -> None:
    kind = step[0]
    if kind == "message":
        conn.execute("INSERT OR IGNORE INTO messages_in (id, seq, timestamp, content) VALUES (?, ?, 't', '{}')",
                     (f"m{step[1]}", step[1] + 1))
    elif kind == "status":
        conn.execute("UPDATE messages_in SET status = ?, tries = tries + 1 WHERE id = ?", (step[2], f"m{step[1]}"))
    elif kind == "delivered":
        conn.execute("INSERT INTO delivered (message_out_id, status) VALUES (?, 'delivered') ON CONFLICT "
                     "(message_out_id) DO UPDATE SET tries = tries + 1", (f"o{step[1]}",))
    elif kind == "routing":
        conn.execute("INSERT OR REPLACE INTO routing (id, channel_type, platform_id) VALUES (1, 'telegram', ?)",
                     (str(step[1]),))
    elif kind == "option":
        if step[2] is None:
            conn.execute("DELETE FROM options WHERE key = ?", (step[1],))
        else:
            conn.execute("INSERT OR REPLACE INTO options (key, value) VALUES (?, ?)", step[1:])
    elif kind == "prune":
        conn.execute("DELETE FROM messages_in WHERE seq <= ?", (step[1],))
    elif kind == "log":
        change_log.prune(conn, keep=step[1])
    elif kind == "replace_seq":  # another id takes a seq by REPLACE: the row it pushes out is gone too
        conn.execute("INSERT OR REPLACE INTO messages_in (id, seq, timestamp, content) VALUES (?, ?, 't', '{}')",
                     (f"r{step[1]}", step[1] + 1))


@hsettings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(op, max_size=60))
def test_any_run_of_host_writes_leaves_the_copy_equal_to_the_host_after_each_sync(tmp_path_factory, steps):
    folder = tmp_path_factory.mktemp("changes")
    host = schema.connect(folder / schema.INBOUND)
    copy = copy_of(host, folder / "copy.db")
    held = change_log.position(host)
    snapshots = 0
    for step in [*steps, ("sync",)]:
        if step[0] != "sync":
            host_write(host, step)
            continue
        host.execute("BEGIN")
        delta = change_log.since(host, held)
        host.execute("COMMIT")
        if delta is None:  # behind the pruned log: the whole file, as the door sends it then
            copy.close()
            copy, snapshots = copy_of(host, folder / "copy.db"), snapshots + 1
            held = change_log.position(host)
        else:
            held = change_log.apply(copy, delta)
            assert change_log.apply(copy, delta) == held  # applied twice (a retried pull): the same copy
        assert contents(copy) == contents(host)
    assert held == change_log.position(host)


@given(held=st.one_of(st.none(), st.integers(), st.text(), st.lists(st.integers()),
                      st.dictionaries(st.sampled_from(["generation", "schema", "seq"]),
                                      st.one_of(st.integers(-2**70, 2**70), st.text(), st.booleans(), st.none()))))
def test_any_position_a_runner_sends_gets_a_delta_of_its_own_file_or_a_snapshot(held):
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.executescript(schema.INBOUND_DDL)
    change_log.track(conn)
    conn.execute("INSERT INTO messages_in (id, seq, timestamp, content) VALUES ('a', 1, 't', '{}')")
    delta = change_log.since(conn, held)
    assert delta is None or delta["position"] == change_log.position(conn)


def test_a_runner_far_behind_gets_the_whole_file(tmp_path):
    host = schema.connect(tmp_path / schema.INBOUND)
    held = change_log.position(host)
    host.execute("BEGIN")
    host.executemany("INSERT INTO messages_in (id, seq, timestamp, content) VALUES (?, ?, 't', '{}')",
                     [(f"m{n}", n + 1) for n in range(change_log.MAX_CHANGES + 1)])
    host.execute("COMMIT")
    assert change_log.since(host, held) is None
    assert change_log.since(host, {**held, "seq": held["seq"] + 1})["tables"]["messages_in"]["rows"]
    host.execute("ALTER TABLE options ADD COLUMN note TEXT")  # the host's schema moved on
    assert change_log.since(host, {**change_log.position(host), "schema": held["schema"]}) is None


def fill_history(path, count: int) -> None:
    """A year of a busy chat, answered: what retention keeps (or more)."""
    conn = schema.connect(store.inbound_db(path))
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO messages_in (id, seq, kind, timestamp, status, content) VALUES "
                     "(?, ?, 'chat', '2026-10-01T10:00:00.000Z', 'completed', ?)",
                     [(f"telegram:old-{n}", n + 1, '{"text": "message %d about the garden and dinner"}' % n)
                      for n in range(count)])
    conn.execute("COMMIT")
    conn.close()


def remote_side(tmp_path, link) -> RemoteSession:
    local = tmp_path / "sandbox"
    session = RemoteSession(link, local / "session", local / "inbound", local / "group", local / "global")
    session.bootstrap()
    return session


@pytest.mark.parametrize("history", [0, 21_000])
def test_each_new_message_comes_down_as_a_small_change_whatever_the_history(door, tmp_path, history):  # noqa: F811
    path, link = session_of(door, "andy")
    fill_history(path, history)
    sandbox = remote_side(tmp_path, link)
    assert sandbox.pulled["snapshot"] == 1
    start_bytes = sandbox.pulled["bytes"]
    host = schema.connect(store.inbound_db(path))
    for n in range(5):
        message_id = store.write_message(path, content={"text": f"new {n}", "sender": "Olivia"},
                                         target=Target("telegram", "111"))
        assert sandbox.pull(wait=5)
        host.execute("UPDATE messages_in SET status = 'completed' WHERE id = ?", (message_id,))
        assert sandbox.pull(wait=5)
    local = sqlite3.connect(sandbox.inbound_dir / schema.INBOUND)
    assert contents(local) == contents(host)
    assert sandbox.pulled["snapshot"] == 1 and sandbox.pulled["delta"] == 10
    per_change = (sandbox.pulled["bytes"] - start_bytes) / 10
    assert per_change < 4 * 1024, f"{per_change:.0f} bytes per change with {history} messages kept"
    print(f"history {history}: start {start_bytes} bytes, {per_change:.0f} bytes per change")
    if history:
        assert start_bytes > 1 << 20  # the start still carries the whole file (what the sandbox lacks)


@pytest.mark.parametrize("kept", [0, 3_000])
def test_a_new_inbox_file_costs_a_pull_the_same_whatever_the_inbox_keeps(door, tmp_path, kept):  # noqa: F811
    """The runner says which inbox files it has by a mark of fixed size (the change time of the newest
    it has), not by naming them all: a chat whose inbox keeps a month of photos asks as cheaply as a
    new one, and gets only the new file."""
    path, link = session_of(door, "andy")
    inbox = store.inbox_dir(path)
    inbox.mkdir(parents=True, exist_ok=True)
    for n in range(kept):
        (inbox / f"photo-{n:05d}-of-the-garden.jpg").write_bytes(b"\xff\xd8old")
    sandbox = remote_side(tmp_path, link)
    assert len(list((sandbox.inbound_dir / "inbox").glob("*"))) == kept
    up, down = door.channel.moved["up"], door.channel.moved["down"]
    for n in range(5):
        part = inbox / f".new-{n}.part"
        part.write_bytes(b"\xff\xd8new %d" % n)
        part.rename(inbox / f"new-{n}.jpg")  # as the host lands a download
        store.write_message(path, content={"text": f"photo {n}", "sender": "Olivia"}, target=Target("telegram", "111"))
        assert sandbox.pull(wait=5)
        assert (sandbox.inbound_dir / "inbox" / f"new-{n}.jpg").read_bytes() == b"\xff\xd8new %d" % n
    asked, got = (door.channel.moved["up"] - up) / 5, (door.channel.moved["down"] - down) / 5
    assert asked < 1024 and got < 6 * 1024, f"{asked:.0f} bytes asked, {got:.0f} received per pull with {kept} kept"


def test_an_inbox_mark_names_only_the_files_at_its_newest_change_time():
    from nanoclaw.remote.inbound import inbox_mark, lacks, next_mark
    files = [("a.jpg", 10), ("b.jpg", 20), ("c.jpg", 20)]
    mark = next_mark(files, None)
    assert mark == {"after": 20, "at": {"b.jpg", "c.jpg"}}
    assert [lacks(rel, t, mark) for rel, t in [*files, ("d.jpg", 20), ("e.jpg", 21)]] == [False] * 3 + [True, True]
    assert all(lacks(rel, t, None) for rel, t in files)
    assert next_mark([("a.jpg", 5)], mark) == mark  # the clock went back: the mark stays
    assert inbox_mark({"after": 20, "at": ["b.jpg"]}) == {"after": 20, "at": {"b.jpg"}}
    for bad in (None, [], {"after": -1, "at": []}, {"after": "20", "at": []}, {"after": 1, "at": "x"},
                {"after": 1, "at": [1]}, {"after": 1, "at": ["x"] * 10_001}):
        assert inbox_mark(bad) is None  # nonsense: the runner gets every file again, nothing else
