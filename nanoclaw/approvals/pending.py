"""What waits on the operator: a registry the capability modules fill, the page reads.

A capability (sender approvals, channel approvals, agent questions, help requests,
proposals…) registers a *provider*: `provider(settings, user_id) -> iterable of PendingItem`,
the items that user may decide. Each item carries the same buttons (label, action id)
as its chat card, so deciding on the page is `actions.dispatch` of the same action id:
the capability's one handler decides, and the first answer wins either way.

Items that take free text (a question, a help request) name a `reply_prefix`; the
capability registers `register_reply(prefix)(handler(user_id, ident, text, settings) -> str)`.

Items that take a small form (modify a proposal, name a new agent) carry `forms`: each names a
handler the capability registers with `register_form(name)(handler(user_id, ident, values,
settings) -> FormAnswer)`. A refused form changes nothing; the page shows the answer next to it.

Core code never imports a capability by name; the page never knows which exist.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable, Iterable

log = logging.getLogger("nanoclaw.pending")


@dataclass(frozen=True)
class FormField:
    name: str
    label: str
    value: str = ""
    hint: str = ""
    multiline: bool = False
    required: bool = False


@dataclass(frozen=True)
class ItemForm:
    name: str                                    # the registered handler, e.g. "npr.modify"
    ident: str                                   # passed to the handler (the row's id)
    title: str                                   # what the form does, shown as its opener
    submit: str                                  # the button's label
    fields: tuple[FormField, ...]
    preview: str | None = None                   # "folder": the page shows the folder a name gets


@dataclass(frozen=True)
class FormAnswer:
    ok: bool
    message: str


@dataclass(frozen=True)
class PendingItem:
    key: str                                     # unique across providers, e.g. "nsa-12"
    kind: str                                    # shown as a label: "Unknown sender", "Question", …
    title: str
    body: str
    created_at: datetime                         # UTC, naive (as the central DB stores it)
    buttons: tuple[tuple[str, str], ...] = ()    # (label, action id), exactly as on the chat card
    agent_folder: str | None = None
    reply_prefix: str | None = None              # set: the page shows a reply box for this item
    reply_ident: str | None = None               # the id passed to the reply handler (default: key's id)
    details: tuple[tuple[str, str], ...] = field(default_factory=tuple)  # extra (label, value) lines
    forms: tuple[ItemForm, ...] = ()             # small forms shown under the buttons


Provider = Callable[[object, str], Iterable[PendingItem]]
_PROVIDERS: dict[str, Provider] = {}
_REPLIES: dict[str, Callable] = {}
_FORMS: dict[str, Callable] = {}


def register_pending(name: str):
    """Decorator: `@register_pending("sender_approvals") def items(settings, user_id): ...`"""
    def decorate(fn: Provider) -> Provider:
        _PROVIDERS[name] = fn
        return fn
    return decorate


def unregister_pending(name: str) -> None:
    _PROVIDERS.pop(name, None)


def register_reply(prefix: str):
    """Decorator: `@register_reply("ncq") def reply(user_id, ident, text, settings, wake) -> str`."""
    def decorate(fn):
        _REPLIES[prefix] = fn
        return fn
    return decorate


def register_form(name: str):
    """Decorator: `@register_form("npr.modify") def submit(user_id, ident, values, settings, wake) -> FormAnswer`."""
    def decorate(fn):
        _FORMS[name] = fn
        return fn
    return decorate


def providers() -> list[str]:
    return sorted(_PROVIDERS)


@dataclass(frozen=True)
class Listing:
    items: list[PendingItem]
    problems: list[str]           # providers that failed: shown, never hidden


def pending_items(settings, user_id: str) -> Listing:
    """Every item waiting on `user_id`, newest first. A failing provider is reported, not fatal."""
    items, problems = [], []
    for name, provider in sorted(_PROVIDERS.items()):
        try:
            items.extend(provider(settings, user_id))
        except Exception as exc:
            log.exception("pending provider %s failed", name)
            problems.append(f"{name}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
    items.sort(key=lambda i: i.created_at, reverse=True)
    return Listing(items, problems)


def reply(prefix: str, ident: str, text: str, user_id: str, settings, wake) -> str:
    handler = _REPLIES.get(prefix)
    if handler is None:
        return "This item no longer takes replies."
    return handler(user_id, ident, text, settings, wake)


def submit_form(name: str, ident: str, values: dict[str, str], user_id: str, settings, wake) -> FormAnswer:
    handler = _FORMS.get(name)
    if handler is None:
        return FormAnswer(False, "This item no longer takes that form.")
    return handler(user_id, ident, values, settings, wake)
