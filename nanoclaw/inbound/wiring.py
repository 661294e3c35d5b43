"""Pure rules for wirings: defaults by chat kind and validation of the engage settings."""
from __future__ import annotations

import re
from dataclasses import dataclass

from .. import platforms
from ..models import CHAT_KINDS, ENGAGE_MODES, IGNORED_POLICIES, SENDER_SCOPES

# dm -> everything engages; group -> only a mention; thread -> a mention, then the thread sticks.
KIND_DEFAULTS = {
    "dm": ("pattern", "."),
    "group": ("mention", None),
    "thread": ("mention-sticky", None),
}


class WiringError(ValueError):
    pass


@dataclass(frozen=True)
class EngageSettings:
    engage_mode: str
    engage_pattern: str | None
    sender_scope: str
    ignored_message_policy: str


def resolve_engage(kind: str, engage: str | None, pattern: str | None,
                   sender_scope: str = "all", ignored: str = "drop") -> EngageSettings:
    """The engage settings a new wiring gets, given what the user said and the chat's kind."""
    if kind not in CHAT_KINDS:
        raise WiringError(f"unknown chat kind {kind!r}; use one of: {', '.join(CHAT_KINDS)}")
    if engage is None:
        engage, default_pattern = KIND_DEFAULTS[kind]
        if pattern is None:
            pattern = default_pattern
    if engage not in ENGAGE_MODES:
        raise WiringError(f"unknown engage mode {engage!r}; use one of: {', '.join(ENGAGE_MODES)}")
    if engage == "pattern":
        if not pattern:
            raise WiringError("--engage pattern needs --pattern REGEX (use '.' to answer every message)")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise WiringError(f"--pattern {pattern!r} is not a valid regular expression: {exc}") from None
    elif pattern:
        raise WiringError(f"--pattern only applies to --engage pattern, not {engage!r}")
    if sender_scope not in SENDER_SCOPES:
        raise WiringError(f"unknown sender scope {sender_scope!r}; use one of: {', '.join(SENDER_SCOPES)}")
    if ignored not in IGNORED_POLICIES:
        raise WiringError(f"unknown ignored-message policy {ignored!r}; use one of: {', '.join(IGNORED_POLICIES)}")
    return EngageSettings(engage, pattern if engage == "pattern" else None, sender_scope, ignored)


def guess_kind(channel: str, chat_id: str) -> str:
    """A new chat's kind from its id, when the operator did not say: as the platform tells from
    the id (its declaration's guess_kind), else a direct message."""
    platform = platforms.get(channel)
    return (platform.guess_kind(chat_id) if platform else None) or "dm"
