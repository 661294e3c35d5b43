"""The chat platforms: one folder each, all of the same shape, filling this registry.

    nanoclaw/platforms/<name>/
      __init__.py   the declaration, `register(Platform(...))`: label, settings (which are secrets,
                    their prefixes), how a chat's kind is guessed from its id, its listener programs,
                    and where its parts are (loaded only when used)
      adapter.py    verify and parse webhooks into events; send, edit, react, cards, files, typing
      schema.py     the platform's payloads, validated at the edge
      listener.py   its own program, when events do not arrive by webhook (optional)
      rpc.py, …     what else the adapter needs (a client of a local daemon), in its layer
      commands.py   its set-up commands, `flask --app app nanoclaw <name> …` (optional)
      doctor.py     what `doctor` checks

Nothing outside a platform's folder names it: the settings, `doctor`, `supervise`, the pages,
approvals and wiring read this registry, so adding a platform is adding a folder. A folder's files
keep their layer (docs/architecture.md): the adapter and schema sit with channels/, the listener
with inbound/, commands and doctor with cli/; the declaration imports nothing but this module.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Callable


@dataclass(frozen=True)
class Setting:
    name: str                       # the environment variable (also read from .env)
    default: str | None = None
    secret: bool = False            # never printed, never handed to a sandbox or an upstream
    example: str | None = None      # a value of the right shape, where the shape is checked (+4915…)


@dataclass(frozen=True)
class Listener:
    """A program of the platform's own under supervisord (long polling, a socket it opens)."""
    program: str                    # supervisord's name for it, e.g. "telegram-poll"
    command: tuple[str, ...]        # after `flask --app app nanoclaw`, e.g. ("telegram", "poll")
    wanted: Callable[[dict], bool]  # from the platform's settings: does it run?
    startsecs: int = 2
    stopwaitsecs: int = 5


@dataclass(frozen=True)
class Finding:
    """One line of `doctor`: what was checked, whether it is well, and what to do if not."""
    ok: bool | None          # None: not applicable here (not configured)
    name: str
    detail: str

    def line(self) -> str:
        mark = {True: "✓", False: "✗", None: "·"}[self.ok]
        return f"{mark} {self.name}: {self.detail}"


PROBE_TIMEOUT = (5, 15)


def probe(url: str, **kwargs) -> tuple[int | None, dict]:
    """A doctor's request: (status, JSON body as a dict). A failure is reported by the exception's
    type, never by a text that could echo the request (and a token in it)."""
    import requests  # only `doctor` probes: the declarations stay light
    try:
        resp = requests.request(kwargs.pop("method", "GET"), url, timeout=PROBE_TIMEOUT, **kwargs)
    except requests.RequestException as exc:
        return None, {"_error": type(exc).__name__}
    try:
        body = resp.json()
    except ValueError:
        body = {}
    return resp.status_code, body if isinstance(body, dict) else {}


@dataclass(frozen=True)
class Platform:
    name: str                                   # the channel name: users are `<name>:<id>`
    label: str                                  # as people write it
    settings: tuple[Setting, ...]
    secret_prefixes: tuple[str, ...]            # host variables no agent may ever be granted
    adapter: str                                # "module:Class", relative to the folder
    configured: Callable[[dict], bool]          # set up in these settings (a token is there)?
    guess_kind: Callable[[str], str | None] = lambda _chat_id: None  # dm|group|thread, None: cannot tell
    dm_is_user: bool = False                    # a direct message's chat id is the person's own id
    listeners: tuple[Listener, ...] = ()
    commands: str | None = None                 # "module:attr", a click command or group
    doctor: str | None = None                   # "module:function", (settings dict) -> Finding | None
    check: Callable[[dict], str | None] = lambda _values: None  # a problem with the settings' values (and NANOCLAW_PORT)
    resolve_id: str | None = None               # "module:function", (settings, "+number") -> the platform's user id
    # services of the platform's own on this side (a daemon's URL) that no agent may ever reach
    private_services: Callable[[dict], list[str]] = lambda _values: []
    package: str = field(default="", compare=False)

    def part(self, ref: str):
        """A part named "module:attr" in this platform's folder (imported now)."""
        module, _, attr = ref.partition(":")
        return getattr(importlib.import_module(f"{self.package}.{module}"), attr)


_PLATFORMS: dict[str, Platform] = {}
_DISCOVERED = False


def register(platform: Platform, package: str) -> Platform:
    """Called by a platform folder's __init__ with its own __name__."""
    platform = Platform(**{**platform.__dict__, "package": package})
    _PLATFORMS[platform.name] = platform
    return platform


def _discover() -> None:
    global _DISCOVERED
    if not _DISCOVERED:
        for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
            if info.ispkg:
                importlib.import_module(f"{__name__}.{info.name}")
        _DISCOVERED = True


def all_platforms() -> list[Platform]:
    _discover()
    return [_PLATFORMS[name] for name in sorted(_PLATFORMS)]


def get(name: str) -> Platform | None:
    _discover()
    return _PLATFORMS.get(name)


def names() -> tuple[str, ...]:
    return tuple(p.name for p in all_platforms())


def secret_prefixes() -> tuple[str, ...]:
    return tuple(prefix for p in all_platforms() for prefix in p.secret_prefixes)


def label(channel: str) -> str:
    """'Telegram' for telegram; a channel that is no platform (web, cli) as it is."""
    found = get(channel)
    return found.label if found else channel
