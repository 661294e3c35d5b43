"""What a long-running program need not load.

peewee imports a PostgreSQL driver whenever one is installed (psycopg2: 4.6 MiB resident in each
program). A program whose settings name SQLite marks the drivers absent before peewee loads, so
peewee sees PostgreSQL as unavailable in that process only; commands and tests are untouched.
"""
from __future__ import annotations

import sys

_DRIVERS = ("psycopg2", "psycopg2cffi", "psycopg")


def skip_postgres_drivers(database_url: str) -> bool:
    """True when the drivers were marked absent (SQLite, and peewee not loaded yet)."""
    if not database_url.startswith("sqlite") or "peewee" in sys.modules:
        return False
    for name in _DRIVERS:
        sys.modules.setdefault(name, None)  # `import psycopg2` now raises ImportError
    return True
