"""The central database under concurrent writers (both engines)."""
import threading

from nanoclaw.db import open_database


def test_a_read_then_write_transaction_waits_for_another_writer_instead_of_failing(db_url):
    """The router's read-then-create transactions (a new user's DM, a new chat, a session) ran
    beside the webhook's dedup insert; on SQLite a deferred transaction failed with "database is
    locked" when that insert committed between its read and its write, and the event waited for
    the recovery pass. Now the second writer waits."""
    db = open_database(db_url)
    db.execute_sql("CREATE TABLE t_users (id INTEGER PRIMARY KEY, v TEXT)")
    db.execute_sql("CREATE TABLE t_events (id INTEGER PRIMARY KEY, v TEXT)")
    db.close()
    read, errors = threading.Event(), []

    def router():
        try:
            with db.connection_context(), db.atomic():
                db.execute_sql("SELECT COUNT(*) FROM t_users").fetchone()
                read.set()
                threading.Event().wait(0.3)  # the webhook's insert lands now (or waits for us)
                db.execute_sql("INSERT INTO t_users (id, v) VALUES (1, 'new user')")
        except Exception as exc:
            errors.append(repr(exc))

    def webhook():
        read.wait(5)
        try:
            with db.connection_context():
                db.execute_sql("INSERT INTO t_events (id, v) VALUES (1, 'dedup row')")
        except Exception as exc:
            errors.append(repr(exc))

    threads = [threading.Thread(target=router), threading.Thread(target=webhook)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert errors == []
    with db.connection_context():
        assert db.execute_sql("SELECT (SELECT COUNT(*) FROM t_users), (SELECT COUNT(*) FROM t_events)"
                              ).fetchone() == (1, 1)
    db.close_all()
