"""The adapter shape every platform module follows, and the registry that finds them.

Inbound: a platform module turns a verified request into InboundEvents.
Outbound: delivery calls send_text / edit_text / react / send_file / send_card on the
adapter named by the row's channel_type. A platform's adapter lives in its folder
(nanoclaw/platforms/<name>/adapter.py) and registers itself here when the registry loads it;
core code never imports a platform by name.
"""
from __future__ import annotations

import importlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import requests

from .. import platforms
from .events import Action, InboundEvent
from ..sessions.store import Target


@dataclass(frozen=True)
class Card:
    title: str
    body: str
    buttons: tuple[tuple[str, str], ...] = field(default_factory=tuple)  # (label, action id)


@dataclass
class Parsed:
    """What one webhook request carried."""
    events: list[InboundEvent] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)
    response: tuple[object, int] | None = None   # a body the platform expects back (challenge, PONG)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (kind, why): parts that did not fit


class WebhookRefused(Exception):
    """Verification failed: answer `status` and store nothing."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


class MalformedPayload(ValueError):
    """The request was authentic but its payload does not fit the platform's schema. The webhook
    answers what the platform expects (200, nothing routed), logs it once and counts it by `kind`
    (the event kind as far as it could be told)."""

    def __init__(self, message: str, kind: str = "unknown"):
        super().__init__(message)
        self.kind = kind


def read_as(shape, payload, what: str, kind: str):
    """`payload` read as `shape` (shapes.py), or MalformedPayload naming `what` and the first problem
    (`kind` for the log line and the counter)."""
    from . import shapes
    try:
        return shapes.read(shape, payload)
    except shapes.ShapeError as exc:
        raise MalformedPayload(f"not {what} we can read ({shapes.first_problem(exc)})", kind=kind) from None


def json_of(body: bytes):
    """A webhook body's JSON, or MalformedPayload."""
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise MalformedPayload("body is not JSON", kind="not-json") from None


class DeliveryError(Exception):
    """A platform refused or failed. retry_after: the platform's own wait (429)."""

    def __init__(self, message: str, *, retry_after: float | None = None, permanent: bool = False):
        super().__init__(message)
        self.retry_after = retry_after
        self.permanent = permanent


def api_request(http, method: str, url: str, what: str, **kwargs):
    """One platform API request: (the response, its JSON body or None when it has none). A network
    failure is a DeliveryError naming only `what`, never the URL (a token may be in it)."""
    try:
        resp = http.request(method, url, **kwargs)
    except requests.RequestException as exc:
        raise DeliveryError(f"{what}: {type(exc).__name__}") from None
    try:
        return resp, resp.json()
    except ValueError:
        return resp, None


DEFAULT_FILE_LIMIT = 50 * 1024 * 1024


def file_limit(adapter) -> int:
    """The largest file the platform takes from a bot (what delivery copies at most)."""
    return int(getattr(adapter, "max_file_bytes", DEFAULT_FILE_LIMIT))


class Adapter(Protocol):
    """Outbound operations every platform implements. Platforms that receive webhooks also have
    `handle_webhook(kind, method, headers, query, body: bytes) -> Parsed` (verify the raw body
    first: raise WebhookRefused / MalformedPayload) and `acknowledge_action(action, text)`."""
    name: str
    max_file_bytes: int  # the largest file it sends (DEFAULT_FILE_LIMIT when it does not say)

    def send_text(self, target: Target, text: str) -> str | None: ...
    def edit_text(self, target: Target, platform_message_id: str, text: str) -> None: ...
    def react(self, target: Target, platform_message_id: str, emoji: str) -> None: ...
    def send_file(self, target: Target, path: Path, caption: str | None) -> str | None: ...
    def send_card(self, target: Target, card: Card) -> str | None: ...
    # Optional: show "typing…" in the chat for a few seconds (message_id: the user's message,
    # which WhatsApp ties its indicator to). Called by typing_indicator while the agent works.
    # def typing(self, target: Target, message_id: str | None = None) -> None: ...


_FACTORIES: dict[str, type] = {}
# Keyed by id(settings); the settings object is kept with its adapter so the id cannot be reused
# by a new Settings while the entry exists.
_INSTANCES: dict[tuple[str, int], tuple[object, Adapter]] = {}


def register(name: str):
    def decorate(cls):
        cls.name = name
        _FACTORIES[name] = cls
        return cls
    return decorate


def get_adapter(name: str, settings) -> Adapter:
    """The adapter for a channel, loaded on first use: a platform's from its folder (the registry
    says where), the web chat's and the local CLI's from here."""
    if name not in _FACTORIES:
        platform = platforms.get(name)
        try:
            if platform is not None:
                platform.part(platform.adapter)
            else:
                importlib.import_module(f"{__package__}.{name}")
        except ModuleNotFoundError:
            raise DeliveryError(f"no channel adapter named {name!r}", permanent=True) from None
    key = (name, id(settings))
    if key not in _INSTANCES:
        _INSTANCES[key] = (settings, _FACTORIES[name](settings))
    return _INSTANCES[key][1]
