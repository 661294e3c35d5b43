"""Shared fixtures: a fresh app per test on a fresh database (SQLite and PostgreSQL)."""
from __future__ import annotations

import atexit
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import uuid
from pathlib import Path

import pytest

from nanoclaw.app import create_app
from nanoclaw.config import PROJECT_ROOT, Settings
from nanoclaw.db import open_database
from nanoclaw.migrate import apply_pending
from nanoclaw.web import auth

IN_CI = os.environ.get("CI") == "true"

# In the tests' own processes a password is hashed with one round of PBKDF2, not scrypt: the same
# code and checks (a check follows the method its stored hash names) at none of scrypt's cost, which
# was a tenth of the suite's CPU (~0.1 s per login and per password set; tests/web/test_admin.py
# alone spent 80 s in it). The programs the tests start (gunicorn, `flask` commands) keep scrypt:
# tests/cli/test_cli.py checks that a password set by the real command is stored as one.
auth.PASSWORD_METHOD = "pbkdf2:sha256:1"


def require(condition: bool, why: str) -> None:
    """Skip locally when a real part is missing; in CI a skip would hide a gap, so fail."""
    if not condition:
        if IN_CI:
            pytest.fail(f"required in CI: {why}")
        pytest.skip(why)


_pg_url_cache: list[str | None] = []


class _Dropper:
    """Test databases are dropped on a thread of their own: a DROP DATABASE waits for the server's
    checkpoint (about 130 ms), which no test needs to wait for. The run's end waits for the last."""

    def __init__(self):
        self.todo: queue.Queue[str | None] = queue.Queue()
        self.thread: threading.Thread | None = None

    def drop(self, server: str, name: str) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, args=(server,), name="pg-dropper", daemon=True)
            self.thread.start()
        self.todo.put(name)

    def _run(self, server: str) -> None:
        admin = open_database(server)
        while (name := self.todo.get()) is not None:
            try:
                admin.connect(reuse_if_open=True)
                admin.execute_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            except Exception as exc:  # noqa: BLE001 - a test database left behind harms no other test
                print(f"could not drop the test database {name}: {exc}")
            finally:
                self.todo.task_done()
        admin.close()

    def finish(self) -> None:
        if self.thread is not None:
            self.todo.put(None)
            self.thread.join(120)


_dropper = _Dropper()


def postgres_server_url() -> str | None:
    """The admin URL of a PostgreSQL server for tests: NANOCLAW_TEST_PG_URL, or one we start."""
    if not _pg_url_cache:
        url = os.environ.get("NANOCLAW_TEST_PG_URL")
        if not url:
            try:
                out = subprocess.run([str(PROJECT_ROOT / "scripts" / "postgres.sh"), "start"],
                                     capture_output=True, text=True, timeout=120)
                url = out.stdout.strip() if out.returncode == 0 else None
            except (OSError, subprocess.TimeoutExpired):
                url = None
        _pg_url_cache.append(url)
    return _pg_url_cache[0]


class _Templates:
    """One migrated database per engine in each test process, made the first time a test asks; each
    test gets a copy of it (SQLite: the file; PostgreSQL: CREATE DATABASE … TEMPLATE), so a test
    pays for a copy (3 ms; about 0.1 s on PostgreSQL) instead of every migration (32 ms; 0.2 s).
    The migrations themselves run here on an empty database, and test_migrations.py tests them on
    empty ones (`empty_db_url`)."""

    def __init__(self):
        self.sqlite_file: Path | None = None
        self.pg_name: str | None = None

    def sqlite(self) -> Path:
        if self.sqlite_file is None:
            path = Path(tempfile.mkdtemp(prefix="nanoclaw-template-")) / "nanoclaw.db"
            db = open_database(f"sqlite:///{path}")
            db.connect()
            apply_pending(db, log=lambda _l: None)
            db.close_all()  # the last connection's close checkpoints the WAL into the file
            atexit.register(shutil.rmtree, path.parent, True)
            self.sqlite_file = path
        return self.sqlite_file

    def postgres(self, server: str) -> str:
        if self.pg_name is None:
            name = "nc_template_" + uuid.uuid4().hex[:12]
            _admin_sql(server, f"CREATE DATABASE {name}")
            db = open_database(f"{server.rpartition('/')[0]}/{name}")
            db.connect()
            apply_pending(db, log=lambda _l: None)
            db.close_all()  # a template is copied only while nobody is connected to it
            self.pg_name = name
        return self.pg_name


_templates = _Templates()


def _admin_sql(server: str, sql: str) -> None:
    admin = open_database(server)
    admin.connect()
    admin.execute_sql(sql)
    admin.close_all()


def _sqlite_copy(tmp_path) -> str:
    path = tmp_path / "data" / "nanoclaw.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_templates.sqlite(), path)
    return f"sqlite:///{path}"


def _postgres_database(template: bool):
    server = postgres_server_url()
    require(server is not None, "no PostgreSQL server (set NANOCLAW_TEST_PG_URL or install postgresql)")
    name = "nc_test_" + uuid.uuid4().hex[:12]
    _admin_sql(server, f"CREATE DATABASE {name}" + (f" TEMPLATE {_templates.postgres(server)}" if template else ""))
    yield f"{server.rpartition('/')[0]}/{name}"
    from nanoclaw.db import database
    if database.obj is not None and not database.obj.is_closed():
        database.obj.close()
    _dropper.drop(server, name)


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request, tmp_path):
    """A test's own central database of each engine, migrated to the newest version."""
    if request.param == "sqlite":
        yield _sqlite_copy(tmp_path)
        return
    yield from _postgres_database(template=True)


@pytest.fixture(params=["sqlite", "postgres"])
def empty_db_url(request, tmp_path):
    """A fresh, empty central database of each engine (for the migrations themselves)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'data' / 'nanoclaw.db'}"
        return
    yield from _postgres_database(template=False)


@pytest.fixture
def sqlite_url(tmp_path):
    """A test's own SQLite central database, migrated to the newest version."""
    return _sqlite_copy(tmp_path)


@pytest.fixture
def make_settings(tmp_path):
    def make(**env) -> Settings:
        base = {
            "NANOCLAW_DATA_DIR": str(tmp_path / "data"),
            "NANOCLAW_GROUPS_DIR": str(tmp_path / "groups"),
            "TZ": "UTC",
            "NANOCLAW_MOUNT_ALLOWLIST": str(tmp_path / "mount-allowlist.json"),
        }
        base.update({k: str(v) for k, v in env.items()})
        return Settings.load(environ=base, dotenv_path=tmp_path / "no.env")
    return make


def _build_app(settings):
    app = create_app(settings)
    from nanoclaw.db import database
    database.connect(reuse_if_open=True)
    apply_pending(database.obj, log=lambda _l: None)
    return app


@pytest.fixture
def app(make_settings, db_url):
    """A migrated app on SQLite and on PostgreSQL."""
    app = _build_app(make_settings(DATABASE_URL=db_url))
    yield app
    from nanoclaw.db import database
    database.close()


@pytest.fixture
def sqlite_app(make_settings, sqlite_url):
    """A migrated app on SQLite only (for tests that are not about the database)."""
    app = _build_app(make_settings(DATABASE_URL=sqlite_url))
    yield app
    from nanoclaw.db import database
    database.close()


@pytest.fixture
def cli(app):
    runner = app.test_cli_runner()

    def run(*args):
        return runner.invoke(args=["nanoclaw", *args])
    return run


def malformed_total(channel: str) -> float:
    """How many malformed payloads of `channel` the webhooks counted (every kind), in this process."""
    from prometheus_client import REGISTRY
    return sum(sample.value for metric in REGISTRY.collect() if metric.name == "nanoclaw_webhooks_malformed"
               for sample in metric.samples
               if sample.name.endswith("_total") and sample.labels.get("channel") == channel)


def pytest_collection_modifyitems(session, config, items):
    """The long-turn test (over ten minutes) runs in its own process beside the rest: start it now,
    and move the test that waits for it to the end of the run."""
    waiting = [item for item in items if item.nodeid.startswith("tests/lifecycle/test_long_turn.py")]
    if not waiting:
        return
    for item in waiting:
        items.remove(item)
    items.extend(waiting)
    if len(items) > len(waiting) and not config.option.collectonly:  # run alone, the test starts it itself
        import long_turn
        long_turn.start()


def pytest_collection_finish(session):
    """The slowest end-to-end files (tests/beside.py) run in a second process while the rest runs
    here, when the run selected them together with other tests and with tests/test_beside.py, which
    waits for them at the end (after -k and other deselection, so the child runs what was chosen)."""
    import beside
    items = session.items
    if os.environ.get(beside.CHILD) == "1" or session.config.option.collectonly:
        return  # (--collect-only runs nothing, here or beside)
    moved = [item for item in items if item.nodeid.split("::")[0] in beside.FILES]
    waiter = [item for item in items if item.nodeid.startswith("tests/test_beside.py")]
    rest = [item for item in items if item not in moved and item not in waiter
            and not item.nodeid.startswith("tests/lifecycle/test_long_turn.py")]
    if not moved or not rest or not waiter:  # they run here, in order, as usual
        if not moved and rest:
            for item in waiter:
                items.remove(item)  # none of them selected: nothing to wait for
        return
    for item in moved + waiter:
        items.remove(item)
    env = {}
    if postgres_server_url():  # started once here, not raced by two processes
        env["NANOCLAW_TEST_PG_URL"] = postgres_server_url()
    beside.start([item.nodeid for item in moved], env)
    long_turn_at = next((i for i, item in enumerate(items) if item.nodeid.startswith("tests/lifecycle/test_long_turn.py")),
                        len(items))
    items[long_turn_at:long_turn_at] = waiter  # before the long turn's wait, which is the longest


def pytest_sessionfinish(session, exitstatus):
    import beside
    import long_turn
    beside.abandon()  # runs the session ended without waiting for (-x, ^C) stop with it
    long_turn.abandon()
    if _templates.pg_name:
        _dropper.drop(postgres_server_url(), _templates.pg_name)
    _dropper.finish()


def pytest_terminal_summary(terminalreporter):
    import beside
    if beside.summary():
        terminalreporter.write_line(f"beside ({', '.join(beside.FILES)}): {beside.summary()}")


def counter_value(name: str, labels: dict) -> float:
    """A counter's value for these labels in this process (0 before it was counted)."""
    from prometheus_client import REGISTRY
    return REGISTRY.get_sample_value(name, labels) or 0.0


def said_just_now(iso: str, within_s: float = 120.0) -> bool:
    """An event's UTC ISO time is about now: what a fixture's time older than a week becomes (issue 60:
    a platform's time more than 7 days before its reference is replaced by the reference, now)."""
    import time
    from datetime import datetime
    return abs(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() - time.time()) < within_s
