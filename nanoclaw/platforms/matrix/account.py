"""The bot's Matrix account: which access token to use, and where one from a password login is kept.

With MATRIX_ACCESS_TOKEN the token is the setting. With MATRIX_PASSWORD instead, `matrix login`
(or the matrix-sync program on its first start) logs in once and keeps the token and its device id
in data/matrix/account.json, owner-only, written whole (a temporary file, then renamed); every
program of the install reads it from there, so there is one device, not one per program.
"""
from __future__ import annotations

import json
from pathlib import Path

from ...security import write_atomic

def state_dir(settings) -> Path:
    path = Path(settings.data_dir) / "matrix"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def write_private(path: Path, data: dict) -> None:
    """`data` as JSON at `path`, mode 0600, whole or not at all."""
    write_atomic(path, lambda fh: fh.write(json.dumps(data).encode()))


def read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def stored(settings) -> dict:
    """What a password login left: {"access_token", "device_id", "user_id"}, or {}."""
    return read_json(state_dir(settings) / "account.json")


def keep(settings, access_token: str, device_id: str, user_id: str) -> None:
    write_private(state_dir(settings) / "account.json",
                  {"access_token": access_token, "device_id": device_id, "user_id": user_id})


def access_token(settings) -> str | None:
    """The setting, else the stored login's token (for the configured user only)."""
    platform = settings.platform
    if platform.get("MATRIX_ACCESS_TOKEN"):
        return platform["MATRIX_ACCESS_TOKEN"]
    found = stored(settings)
    if found.get("user_id") == platform.get("MATRIX_USER_ID") and isinstance(found.get("access_token"), str):
        return found["access_token"]
    return None
