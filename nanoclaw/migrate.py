"""Migration runner: numbered files in migrations/, each applied in one
transaction and recorded in schema_version.

A migration file is `NNNN_name.py` defining `upgrade(db, sql)`, where `sql` is a
Dialect that fills in the few words SQLite and PostgreSQL spell differently.
DDL is transactional on both engines, so a migration that fails halfway leaves
the schema exactly as it was.
"""
from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

import peewee

from .config import PROJECT_ROOT

MIGRATIONS_DIR = PROJECT_ROOT / "migrations"
FILE_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.py$")


class MigrationError(RuntimeError):
    pass


@dataclass(frozen=True)
class Dialect:
    pk: str          # auto-increment integer primary key
    ts: str          # timestamp column type
    bool_true: str
    bool_false: str

    @classmethod
    def of(cls, db: peewee.Database) -> "Dialect":
        if isinstance(db, peewee.PostgresqlDatabase):
            return cls(pk="SERIAL PRIMARY KEY", ts="TIMESTAMP", bool_true="TRUE", bool_false="FALSE")
        return cls(pk="INTEGER PRIMARY KEY AUTOINCREMENT", ts="DATETIME", bool_true="1", bool_false="0")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    path: Path

    def load(self):
        spec = importlib.util.spec_from_file_location(f"nanoclaw_migration_{self.version:04d}", self.path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        if not callable(getattr(module, "upgrade", None)):
            raise MigrationError(f"{self.path.name} has no upgrade(db, sql) function")
        return module


def discover(directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    found = []
    for path in sorted(directory.glob("*.py")):
        m = FILE_RE.match(path.name)
        if m:
            found.append(Migration(int(m.group(1)), m.group(2), path))
    versions = [m.version for m in found]
    if len(versions) != len(set(versions)):
        raise MigrationError(f"two migrations share a number in {directory}")
    return found


def _ensure_version_table(db: peewee.Database) -> None:
    sql = Dialect.of(db)
    db.execute_sql(
        "CREATE TABLE IF NOT EXISTS schema_version ("
        " version INTEGER PRIMARY KEY, name VARCHAR(255) NOT NULL,"
        f" applied_at {sql.ts} DEFAULT CURRENT_TIMESTAMP)"
    )


def applied_versions(db: peewee.Database) -> dict[int, str]:
    _ensure_version_table(db)
    return {v: n for v, n in db.execute_sql("SELECT version, name FROM schema_version").fetchall()}


def current_version(db: peewee.Database) -> int:
    """The newest applied version, 0 for an empty database. Never creates anything."""
    if "schema_version" not in db.get_tables():
        return 0
    row = db.execute_sql("SELECT MAX(version) FROM schema_version").fetchone()
    return row[0] or 0


def pending(db: peewee.Database, directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    done = applied_versions(db)
    return [m for m in discover(directory) if m.version not in done]


def apply_pending(db: peewee.Database, directory: Path = MIGRATIONS_DIR, log=print) -> list[Migration]:
    """Apply every pending migration in order; stop at the first failure."""
    applied = []
    for migration in pending(db, directory):
        module = migration.load()
        try:
            with db.atomic():
                module.upgrade(db, Dialect.of(db))
                db.execute_sql(
                    "INSERT INTO schema_version (version, name) VALUES (%s, %s)" % (db.param, db.param),
                    (migration.version, migration.name),
                )
        except Exception as exc:
            raise MigrationError(
                f"migration {migration.version:04d}_{migration.name} failed and was rolled back: {exc}"
            ) from exc
        log(f"applied {migration.version:04d}_{migration.name}")
        applied.append(migration)
    return applied
