"""gunicorn settings for the `web` program: one gthread worker on loopback.

One worker on purpose: the web process also holds the background scheduler,
and SQLite is happiest with one writer process.
"""
import sys

from nanoclaw.config import Settings, SettingsError, skip_postgres_drivers

try:
    _settings = Settings.load()
except SettingsError as exc:
    print(f"nanoclaw: cannot start: {exc}", file=sys.stderr)
    sys.exit(2)

skip_postgres_drivers(_settings.database_url)  # the worker forks from here and inherits it

bind = f"127.0.0.1:{_settings.port}"
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
# gunicorn's control socket defaults to one path per user; keep ours with our data.
control_socket = str(_settings.data_dir / "gunicorn.ctl")


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
