"""Which start of a session's remote sandbox is the current one: a nonce kept at the session
folder's root (neither host/ nor agent/, so no sandbox ever sees it). A pass carries the nonce of the
start it was minted for; once the sandbox is stopped or started again, older passes are refused."""
from __future__ import annotations

from pathlib import Path

from ..security import folder_problem, write_atomic
from ..sessions import store
from .passes import Claims, new_nonce

NONCE_FILE = "door-nonce"
SESSION_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_")


def session_if_current(sessions_dir: Path, claims: Claims) -> Path | None:
    """The session folder a pass names, when the pass's start is that session's current one (OSError:
    the door cannot tell now)."""
    if folder_problem(claims.folder) or not claims.session or not set(claims.session) <= SESSION_ID_CHARS:
        return None
    path = store.session_path(sessions_dir, claims.folder, claims.session)
    return path if current(path) == claims.nonce else None


def begin(session_path: Path) -> str:
    nonce = new_nonce()
    write_atomic(Path(session_path) / NONCE_FILE, lambda f: f.write(nonce.encode()))
    return nonce


def current(session_path: Path) -> str | None:
    """The current start's nonce; None when the session has none (never started, or stopped). Any
    other failure to read it (out of descriptors, say) is an OSError: it says nothing of the start."""
    try:
        return (Path(session_path) / NONCE_FILE).read_text().strip() or None
    except (FileNotFoundError, NotADirectoryError):
        return None


def end(session_path: Path) -> None:
    (Path(session_path) / NONCE_FILE).unlink(missing_ok=True)
