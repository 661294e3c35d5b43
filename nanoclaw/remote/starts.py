"""Which start of a session's remote sandbox is the current one: a nonce kept at the session
folder's root (neither host/ nor agent/, so no sandbox ever sees it). A pass carries the nonce of the
start it was minted for; once the sandbox is stopped or started again, older passes are refused."""
from __future__ import annotations

from pathlib import Path

from ..security import write_atomic
from .passes import new_nonce

NONCE_FILE = "door-nonce"


def begin(session_path: Path) -> str:
    nonce = new_nonce()
    write_atomic(Path(session_path) / NONCE_FILE, lambda f: f.write(nonce.encode()))
    return nonce


def current(session_path: Path) -> str | None:
    try:
        return (Path(session_path) / NONCE_FILE).read_text().strip() or None
    except OSError:
        return None


def end(session_path: Path) -> None:
    (Path(session_path) / NONCE_FILE).unlink(missing_ok=True)
