"""The app factory: settings, database, the page and webhooks, the CLI group, the capabilities."""
from __future__ import annotations

import logging

from flask import Flask
from werkzeug.middleware.proxy_fix import ProxyFix
from . import logs, proposal_rules, service
from .cli import nanoclaw_group
from .config import Settings
from .db import bind, database
from .hooks.tables import secret_names as hook_secrets
from .upstreams import registry
from .web import health, hooks, webhooks
from .web import chat, page

log = logging.getLogger("nanoclaw")


def create_app(settings=None, *, start_background: bool | None = None) -> Flask:
    """The app factory. `settings` defaults to Settings.load() (environment + .env)."""

    settings = settings or Settings.load()
    logs.configure(settings.log_format)

    app = Flask(__name__, template_folder="../templates", static_folder="../static")
    app.config["NANOCLAW"] = settings
    app.config["MAX_CONTENT_LENGTH"] = 1024 * 1024

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    # model upstreams' keys and webhooks' secrets: no agent may ask for a route or a server with them
    proposal_rules.reserve(lambda: (*registry.secret_names(settings.data_dir / "policy"), *hook_secrets()))
    service.build(app)  # the Wake, and the capability modules registered
    page.configure(app, settings)
    bind(settings.database_url)

    @app.before_request
    def _connect():
        try:
            database.connect(reuse_if_open=True)
        except Exception as exc:  # /healthz reports it; other routes fail on first query
            log.warning("database unreachable: %s", str(exc).splitlines()[0] if str(exc) else exc)

    @app.teardown_request
    def _close(_exc):
        if not database.is_closed():
            database.close()

    app.before_request(lambda: chat.allow_uploads(settings))  # before CSRF reads the form

    app.register_blueprint(health.bp)
    app.register_blueprint(webhooks.bp)
    app.register_blueprint(hooks.bp)
    app.session_interface = webhooks.PageSessions()
    page.register(app, exempt=(webhooks.bp, hooks.bp))  # login + CSRF for the page; webhooks are signed instead

    if settings.trusted_proxies:
        # behind Caddy or nginx every request comes from 127.0.0.1: the client's address (login
        # throttling, the audit log) and scheme come from the proxy's headers, and only from as many
        # proxies as the operator said are there (a client's own X-Forwarded-For is not believed)
        n = settings.trusted_proxies
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=n, x_proto=n, x_host=n)

    app.cli.add_command(nanoclaw_group)
    return app
