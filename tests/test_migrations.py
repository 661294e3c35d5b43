"""Migrations from empty, re-run, status, and a failure halfway that changes nothing."""
import pytest

from nanoclaw import migrate
from nanoclaw.db import database, open_database

CENTRAL_TABLES = {"agent_groups", "messaging_groups", "messaging_group_agents", "users", "user_roles",
                  "agent_group_members", "user_dms", "sessions", "inbound_events", "dropped_messages",
                  "audit_log", "schema_version"}


@pytest.fixture
def db(empty_db_url):
    d = open_database(empty_db_url)
    d.connect()
    yield d
    d.close()


def test_from_empty_then_rerun_is_a_no_op(db):
    assert migrate.current_version(db) == 0
    applied = migrate.apply_pending(db, log=lambda _l: None)
    assert [m.version for m in applied] == [m.version for m in migrate.discover()]
    assert CENTRAL_TABLES <= set(db.get_tables())
    assert migrate.apply_pending(db, log=lambda _l: None) == []
    assert migrate.current_version(db) == max(m.version for m in migrate.discover())


def write(directory, name, body):
    (directory / name).write_text(body)


def test_failed_migration_leaves_schema_unchanged(db, tmp_path):
    mdir = tmp_path / "migrations"
    mdir.mkdir()
    write(mdir, "0001_first.py", "def upgrade(db, sql):\n"
          "    db.execute_sql('CREATE TABLE first_t (id {pk})'.format(pk=sql.pk))\n")
    write(mdir, "0002_breaks.py", "def upgrade(db, sql):\n"
          "    db.execute_sql('CREATE TABLE half_t (id {pk})'.format(pk=sql.pk))\n"
          "    db.execute_sql('INSERT INTO first_t DEFAULT VALUES')\n"
          "    db.execute_sql('ALTER TABLE first_t ADD COLUMN note VARCHAR(10)')\n"
          "    raise RuntimeError('boom halfway')\n")
    write(mdir, "0003_after.py", "def upgrade(db, sql):\n"
          "    db.execute_sql('CREATE TABLE after_t (id {pk})'.format(pk=sql.pk))\n")
    with pytest.raises(migrate.MigrationError, match="0002_breaks failed and was rolled back: boom halfway"):
        migrate.apply_pending(db, mdir, log=lambda _l: None)
    tables = set(db.get_tables())
    assert "first_t" in tables
    assert "half_t" not in tables and "after_t" not in tables
    assert [c.name for c in db.get_columns("first_t")] == ["id"]
    assert db.execute_sql("SELECT COUNT(*) FROM first_t").fetchone()[0] == 0
    assert migrate.applied_versions(db) == {1: "first"}
    assert [m.name for m in migrate.pending(db, mdir)] == ["breaks", "after"]


def test_status_lists_applied_and_pending(cli):
    result = cli("migrate", "--status")
    assert result.exit_code == 0
    assert "0001_initial  applied" in result.output


def test_migrate_command_is_idempotent(cli):
    result = cli("migrate")
    assert result.exit_code == 0
    assert "nothing to do" in result.output


def test_commands_refuse_before_migration(make_settings, tmp_path):
    from nanoclaw.app import create_app
    app = create_app(make_settings(DATABASE_URL=f"sqlite:///{tmp_path / 'data' / 'nanoclaw.db'}"))
    result = app.test_cli_runner().invoke(args=["nanoclaw", "agent", "list"])
    assert result.exit_code == 2
    assert "migration(s) pending; run: flask --app app nanoclaw migrate" in result.output
    database.close()


def test_sqlite_runs_wal_with_foreign_keys(sqlite_app):
    assert database.execute_sql("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert database.execute_sql("PRAGMA foreign_keys").fetchone()[0] == 1
    assert database.execute_sql("PRAGMA busy_timeout").fetchone()[0] == 5000


def test_each_existing_task_is_given_the_chat_of_its_session(db, tmp_path):
    """0020 (issue 60, item 3): a task kept before tasks had a chat gets its session's; one whose session
    is gone gets none (the CLI and the page still see it, no agent does)."""
    import shutil
    early = tmp_path / "early"
    early.mkdir()
    for m in migrate.discover():
        if m.name != "task_chat" and m.version < 20:
            shutil.copy(m.path, early)
    migrate.apply_pending(db, early, log=lambda _l: None)
    p, now = db.param, "2026-12-01 10:00:00"
    db.execute_sql(f"INSERT INTO agent_groups (id, name, folder, created_at) VALUES (1, 'Andy', 'andy', {p})", (now,))
    for mg in (7, 8):
        db.execute_sql(f"INSERT INTO messaging_groups (id, channel_type, platform_id, created_at) "
                       f"VALUES ({mg}, 'telegram', 'chat-{mg}', {p})", (now,))
    db.execute_sql(f"INSERT INTO sessions (id, agent_group_id, messaging_group_id, created_at, last_active_at) "
                   f"VALUES ('s8', 1, 8, {p}, {p})", (now, now))
    for task, session in (("in-dm", "s8"), ("orphan", None)):
        db.execute_sql(f"INSERT INTO scheduled_tasks (id, agent_group_id, session_id, prompt, schedule_kind, "
                       f"schedule_value, created_at, updated_at) VALUES ({p}, 1, {p}, 'x', 'every', '1h', {p}, {p})",
                       (task, session, now, now))
    migrate.apply_pending(db, log=lambda _l: None)
    found = dict(db.execute_sql("SELECT id, messaging_group_id FROM scheduled_tasks").fetchall())
    assert found == {"in-dm": 8, "orphan": None}


def test_the_history_already_kept_is_folded_and_indexed_again(db, tmp_path):
    """0021 (issue 61, item 3): messages kept before folding are found by their words without accents."""
    import shutil
    early = tmp_path / "early"
    early.mkdir()
    for m in migrate.discover():
        if m.version < 21:
            shutil.copy(m.path, early)
    migrate.apply_pending(db, early, log=lambda _l: None)
    p = db.param
    db.execute_sql(f"INSERT INTO history (agent_folder, channel_type, platform_id, message_key, said_at, text) "
                   f"VALUES ('andy', 'telegram', '1', 'k1', '2026-11-20T10:00:00', {p})", ("Lunch at Café Müller",))
    postgres = "Postgres" in type(db).__name__
    if not postgres:  # indexed as the old catch_up did
        db.execute_sql("INSERT INTO history_fts(rowid, text) SELECT id, text FROM history")
        db.execute_sql("UPDATE history_fts_state SET last_id = (SELECT MAX(id) FROM history)")
    migrate.apply_pending(db, log=lambda _l: None)
    assert db.execute_sql("SELECT norm FROM history").fetchone()[0] == "lunch at cafe muller"
    if postgres:
        found = db.execute_sql("SELECT COUNT(*) FROM history WHERE tsv @@ to_tsquery('simple', 'muller')")
        assert found.fetchone()[0] == 1
    else:
        assert db.execute_sql("SELECT last_id FROM history_fts_state").fetchone()[0] == 0  # indexed again
        db.execute_sql("INSERT INTO history_fts(rowid, norm) SELECT id, norm FROM history")  # what catch_up does
        assert db.execute_sql("SELECT rowid FROM history_fts WHERE history_fts MATCH 'muller'").fetchall() == [(1,)]


def test_agents_that_exist_when_reading_lands_read_only_listed_hosts(db, tmp_path):
    """0023 (issue 62): an existing agent reaches nothing new without the owner (read listed, no search, no
    browser); an agent created afterwards has no row and gets the defaults (reading/access.py)."""
    import shutil
    from nanoclaw.reading.access import Access, access_of
    early = tmp_path / "early"
    early.mkdir()
    for m in migrate.discover():
        if m.version < 23:
            shutil.copy(m.path, early)
    migrate.apply_pending(db, early, log=lambda _l: None)
    p = db.param
    db.execute_sql(f"INSERT INTO agent_groups (id, name, folder, created_at) VALUES (1, 'Andy', 'andy', {p})",
                   ("2026-12-01 10:00:00",))
    migrate.apply_pending(db, log=lambda _l: None)
    rows = db.execute_sql("SELECT agent_group_id, read, search, browser FROM agent_internet").fetchall()
    assert [tuple(r) for r in rows] == [(1, "listed", "off", "off")]
    assert access_of(None) == Access(read="on", search="off", browser="off")
    assert access_of(None, search_configured=True).search == "on"
