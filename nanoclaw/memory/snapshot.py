"""The memory a conversation starts with, delivered through the session like the host's other
answers: with each chat or task message the host writes, the session's `options` carry the current
text of its scope (`memory`) and what that scope is (`memory_scope`). The runner reads them when a
conversation starts and keeps them for that conversation; never from the group folder, which the
agent can write."""
from __future__ import annotations

import threading
import time
from pathlib import Path

from ..db import connected
from . import notes
from .scopes import Reach, reach_of

OPTION, SCOPE_OPTION = "memory", "memory_scope"
REACH_TTL_S = 10.0  # roles change rarely; a changed one shows within this

_reaches: dict[Path, tuple[float, Reach | None]] = {}
_lock = threading.Lock()


def reach_cached(path: Path) -> Reach | None:
    now = time.monotonic()
    with _lock:
        kept = _reaches.get(path)
    if kept is not None and kept[0] > now:
        return kept[1]
    reach = reach_of(path.parent.parent, path.parent.name, path.name)
    with _lock:
        if len(_reaches) > 4096:
            _reaches.clear()
        _reaches[path] = (now + REACH_TTL_S, reach)
    return reach


def options_for(path: Path) -> dict[str, str]:
    with connected():
        reach = reach_cached(Path(path))
        if reach is None:
            return {}
        return {OPTION: notes.text_of(path.parent.name, reach.memory), SCOPE_OPTION: reach.memory.describe()}


def forget() -> None:
    with _lock:
        _reaches.clear()
