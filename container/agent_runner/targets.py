"""Where an outbound row goes: pure decisions over the routing row and named destinations."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    channel_type: str
    platform_id: str
    thread_id: str | None = None


class UnknownDestination(ValueError):
    """`to` names no destination of this session; the message lists the valid names."""


def resolve_destination(to: str | None, default: Target | None,
                        destinations: Mapping[str, Target]) -> Target:
    """`to` absent -> the default (the chat the current message came from, else the routing row);
    otherwise exactly one of the session's named destinations."""
    if to is None or not str(to).strip():
        if default is None:
            raise UnknownDestination("this session has no chat to reply to yet; "
                                     + _valid_names(destinations))
        return default
    name = str(to).strip()
    if name in destinations:
        return destinations[name]
    raise UnknownDestination(f"unknown destination {name!r}; " + _valid_names(destinations))


def _valid_names(destinations: Mapping[str, Target]) -> str:
    if not destinations:
        return "no named destinations exist: leave 'to' empty to answer in the current chat"
    return "valid names: " + ", ".join(sorted(destinations))
