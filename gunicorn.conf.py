"""gunicorn settings for the `web` program: one gthread worker on loopback.

One worker on purpose: the web process also holds the background scheduler,
and SQLite is happiest with one writer process.

The master only forks and watches the worker, so it loads as little as it can: `make run` hands it
the port in its environment (nanoclaw/supervise.py, from the settings it has checked), and the
settings themselves are read in the worker. Started by hand without it, the master reads the
settings as the worker would.
"""
import os
import sys


def _port():
    if os.environ.get("NANOCLAW_PORT"):
        return os.environ["NANOCLAW_PORT"]  # what Settings would read first too
    from nanoclaw.config import Settings, SettingsError
    try:
        return Settings.load().port
    except SettingsError as exc:
        print(f"nanoclaw: cannot start: {exc}", file=sys.stderr)
        sys.exit(2)


bind = f"127.0.0.1:{_port()}"
workers = 1
worker_class = "gthread"
threads = 8
timeout = 60
graceful_timeout = 20
keepalive = 5
accesslog = "-"
# URLs in the access log lose their secrets (login links, verify tokens, query values): web/access_log.py
logger_class = "nanoclaw.web.access_log.RedactingLogger"
errorlog = "-"
# No control socket (`gunicornc`): it runs an asyncio loop in a thread of the master (1.7 MiB) for
# commands supervisord's own already give.
control_socket_disable = True


def post_fork(server, worker):
    """In the worker, before it imports the app: on SQLite, peewee never loads a PostgreSQL driver,
    and requests never loads its encoding detector."""
    from nanoclaw.config import Settings, SettingsError, lighten_program
    try:
        database_url = Settings.load().database_url
    except SettingsError:
        database_url = None  # the app's own import says what is wrong
    lighten_program(database_url)


def post_worker_init(worker):
    """The worker that wins data/scheduler.lock runs delivery, wakes and the sweep."""
    from nanoclaw.service import start_service
    start_service(worker.wsgi)


def worker_exit(server, worker):
    app = getattr(worker, "wsgi", None)
    if app is None:
        return
    from nanoclaw.service import stop_service
    stop_service(app)
