"""What the long-running programs load at rest (issue 43; the figures are bench/footprint.py's).

Each check runs a fresh interpreter the way the program starts: gunicorn's master reads
gunicorn.conf.py and its logger class, the worker (forked from it) imports the app; the proxy
runs `python -m nanoclaw.proxy`'s imports.
"""
import json
import subprocess
import sys

from nanoclaw.config import PROJECT_ROOT

from conftest import postgres_server_url, require

MASTER_THEN_WORKER = """
import json, runpy, sys
runpy.run_path("gunicorn.conf.py")
import nanoclaw.web.access_log
master = sorted(m for m in ("flask", "peewee") if m in sys.modules)
import app
import peewee
print(json.dumps({"master": master, "loaded": sorted(m for m in ("docker", "psycopg2", "nanoclaw.cli.doctor")
                                                   if sys.modules.get(m) is not None),
                  "postgres_driver": peewee.psycopg2 is not None}))
"""


def run(code: str, tmp_path, database_url: str | None = None) -> dict:
    env = {"NANOCLAW_DATA_DIR": str(tmp_path / "data"), "NANOCLAW_ENV_FILE": str(tmp_path / "none.env"),
           "TZ": "UTC", "PATH": "/usr/bin:/bin", "NANOCLAW_RUNTIME": "bwrap"}
    if database_url:
        env["DATABASE_URL"] = database_url
    out = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_web_program_on_sqlite_loads_neither_postgres_driver_nor_docker_sdk_nor_commands(tmp_path):
    seen = run(MASTER_THEN_WORKER, tmp_path)
    assert seen["master"] == [], "gunicorn's master has no use for Flask or peewee"
    assert seen["loaded"] == []
    assert seen["postgres_driver"] is False


def test_web_program_on_postgres_still_has_its_driver(tmp_path):
    url = postgres_server_url()
    require(url is not None, "no PostgreSQL server (set NANOCLAW_TEST_PG_URL or install postgresql)")
    seen = run(MASTER_THEN_WORKER, tmp_path, database_url=url)
    assert seen["postgres_driver"] is True


def test_proxy_program_on_sqlite_skips_the_postgres_driver(tmp_path):
    code = """
import json, sys
import nanoclaw.proxy
import nanoclaw.proxy.__main__ as program
nanoclaw.proxy.serve_forever = lambda *a, **k: None  # everything main() does but serve
program.main()
import peewee
print(json.dumps({"postgres_driver": peewee.psycopg2 is not None, "docker": sys.modules.get("docker") is not None}))
"""
    seen = run(code, tmp_path)
    assert seen == {"postgres_driver": False, "docker": False}
