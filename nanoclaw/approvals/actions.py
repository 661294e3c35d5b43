"""Card actions: `<prefix>-<token>:<value>` routed to the capability that owns the prefix.

Capabilities register a handler for their prefix (nsa, nca, ncq, …); core code never imports a
capability by name. The token is the card's row's 128 random bits (models.new_token), never a
sequential id, and a click counts only on the card it was made on (`on_card`): the chat the card was
sent to, or the operator's page, which is behind a login. Buttons an agent puts on its own cards never
carry its own text as an action id (approvals/agent_cards.py gives them `nac-…`).
"""
from __future__ import annotations

import logging
import re
from typing import Callable

from ..channels.events import Action

log = logging.getLogger("nanoclaw.actions")

ACTION_RE = re.compile(r"^([a-z]{2,8})-([A-Za-z0-9_-]{1,32}):(.{0,40})$", re.S)
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


def on_card(action: Action, channel: str | None, chat_id: str | None) -> bool:
    """Was this click made where the card is: in the chat it was sent to (the platform says where a
    click came from), or on the operator's page? A valid id pasted into another chat is not."""
    if action.origin == "page":
        return True
    return bool(channel) and action.channel == channel and str(action.chat_id) == str(chat_id)


NOT_HERE = "This button does not belong to this chat."


class NotAllowed(Exception):
    """This person may not do this (their role, or a card's button outside its chat); nothing was
    changed. str() is the short refusal: a toast in chat, a 403 on the page."""


def dispatch(action: Action, settings, wake, *, refusals: bool = False) -> str | None:
    """Run the prefix's handler; returns the text to show the clicker, if any. A refusal is that
    text too, unless `refusals` (the page), where NotAllowed is raised for a 403. `wake` starts
    the agent's sandbox when the handler wrote to its session."""
    parts = parse_action_id(action.action_id)
    if parts is None or parts[0] not in _HANDLERS:
        log.warning("ignored unknown action %r from %s", action.action_id, action.user_id)
        return "This button is no longer handled."
    prefix, ident, value = parts
    try:
        return _HANDLERS[prefix](action, ident, value, settings, wake)
    except NotAllowed as exc:
        log.info("refused %s to %s: %s", action.action_id, action.user_id, exc)
        if refusals:
            raise
        return str(exc)
