"""The web program's blueprints: webhooks, the operator page, the web chat, health."""
from __future__ import annotations

# No module-level Flask import: gunicorn's master loads web/access_log.py for its logger and has no
# use for Flask (8 MiB resident at rest).


def current_wake():
    """The process's Wake (nanoclaw/service.py), handed on to what the request writes."""
    from flask import current_app
    return current_app.extensions["nanoclaw.wake"]


def current_manager():
    """The sandbox manager of this process, when it runs the sandboxes (None otherwise)."""
    return current_wake().manager
