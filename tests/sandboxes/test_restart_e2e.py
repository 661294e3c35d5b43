"""A session's sandbox stopped and started again keeps answering (real Docker, as root).

Found by `bench/latency.py`: each Docker start gives the session folder to the sandbox's user, and
that walk opened and closed every file in it, the session databases included, in the very process
whose delivery thread keeps `outbound.db` open. Closing any descriptor of a file drops all of the
process's POSIX locks on it, SQLite's too; the next runner then took the database for unused, and
from the third start on its answers never reached the chat."""
from __future__ import annotations

import os
import sqlite3

from conftest import require
from nanoclaw.runtime.access import chown_tree
from nanoclaw.sessions import session_schema as schema
from tests.outbound.test_nudges import OWNER, _script
from tests.tg_flow import message, sandbox_service, texts


def held_locks(path) -> int:
    """How many POSIX locks this process holds on `path` (/proc/locks: kind, pid, dev:inode, range)."""
    inode = os.stat(path).st_ino
    with open("/proc/locks") as locks:
        return sum(1 for line in locks if (f := line.split())[1] == "POSIX"
                   and f[4] == str(os.getpid()) and f[5].rsplit(":", 1)[-1] == str(inode))


def test_giving_a_folder_to_the_sandbox_user_keeps_the_hosts_database_locks(tmp_path):
    require(os.geteuid() == 0, "chown needs root (CI runs as root)")
    db = tmp_path / "agent" / schema.OUTBOUND
    db.parent.mkdir()
    runner = schema.connect(db)  # the runner's side made the file, as in a sandbox, and keeps it open
    runner.execute("INSERT OR REPLACE INTO container_state (id) VALUES (1)")
    host = sqlite3.connect(f"file:{db}?mode=ro", uri=True)  # delivery's kept connection
    host.execute("BEGIN")
    host.execute("SELECT count(*) FROM container_state").fetchone()
    try:
        shm = db.with_name(db.name + "-shm")
        before = held_locks(shm)
        assert before > 0
        chown_tree(db.parent, 1000, 1000)
        assert held_locks(shm) == before
        assert os.stat(db).st_uid == 1000 and os.stat(shm).st_uid == 1000
    finally:
        host.close()
        runner.close()


def test_a_sandbox_stopped_and_started_again_answers_every_time(make_settings, sqlite_url):
    with sandbox_service(make_settings, sqlite_url, _script, runtime="docker") as svc:
        svc.cli("agent", "create", "Andy")
        svc.cli("user", "add", "telegram:111", "--role", "owner", "--name", "Olivia")
        svc.cli("wire", "telegram", "111", "andy", "--kind", "dm")
        for n, word in enumerate(("one", "two", "three", "four"), start=1):
            svc.post(message(111, OWNER, word))
            svc.wait(lambda: len(texts(svc.tg, 111)) >= n, timeout=60, what=f"the answer to {word!r}")
            for name in svc.runtime.list_sandboxes(svc.settings.install_id):
                svc.runtime.stop(name)  # as a crash or the engine would: the host's delivery keeps its connection
        assert texts(svc.tg, 111) == ["answer to one", "answer to two", "answer to three", "answer to four"]
