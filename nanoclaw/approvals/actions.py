"""Card actions: `<prefix>-<id>:<value>` routed to the capability that owns the prefix.

Capabilities register a handler for their prefix (nsa, nca, ncq, …); core code
never imports a capability by name.
"""
from __future__ import annotations

import logging
import re
from typing import Callable

from ..channels.base import Action

log = logging.getLogger("nanoclaw.actions")

ACTION_RE = re.compile(r"^([a-z]{2,8})-([A-Za-z0-9_]{1,32}):(.{0,40})$", re.S)
_HANDLERS: dict[str, Callable] = {}


def register_action(prefix: str):
    def decorate(fn):
        _HANDLERS[prefix] = fn
        return fn
    return decorate


def parse_action_id(action_id: str) -> tuple[str, str, str] | None:
    """('nsa', '12', 'allow') for 'nsa-12:allow'; None when it is not ours."""
    m = ACTION_RE.match(action_id or "")
    return (m.group(1), m.group(2), m.group(3)) if m else None


def dispatch(action: Action, settings) -> str | None:
    """Run the prefix's handler; returns the text to show the clicker, if any."""
    parts = parse_action_id(action.action_id)
    if parts is None or parts[0] not in _HANDLERS:
        log.warning("ignored unknown action %r from %s", action.action_id, action.user_id)
        return "This button is no longer handled."
    prefix, ident, value = parts
    return _HANDLERS[prefix](action, ident, value, settings)
