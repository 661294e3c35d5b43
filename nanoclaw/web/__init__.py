"""The web program's blueprints: webhooks, the operator page, the web chat, health."""
from __future__ import annotations

from flask import current_app


def current_wake():
    """The process's Wake (nanoclaw/service.py), handed on to what the request writes."""
    return current_app.extensions["nanoclaw.wake"]


def current_manager():
    """The sandbox manager of this process, when it runs the sandboxes (None otherwise)."""
    return current_wake().manager
