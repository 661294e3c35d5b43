"""Restore an archive written by lifecycle/backup.py: all or nothing, never through a link.

An archive may come from a time an agent had planted links in its own folders, and the folders on
disk may hold such links now. So nothing is written into the live folders: every member is checked
against the archive's shape first (a session's `agent/` members land only under that session's
`agent/`), written into fresh staging folders that only this process has touched, and only when all
of it is there are the live folders swapped for the staged ones (a rename each). What they held
before is kept aside in `$NANOCLAW_DATA_DIR/pre-restore-<time>/`, not lost. A refusal, or any
failure while staging, leaves the install exactly as it was.
"""
from __future__ import annotations

import os
import re
import secrets
import shutil
import tarfile
from datetime import datetime
from pathlib import Path

from ..migrate import discover
from ..security import folder_problem
from .backup import SKIP_SUFFIXES, BackupError, read_manifest, service_running, sqlite_path

SESSION_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _is_empty(path: Path) -> bool:
    return not path.exists() or not any(p for p in path.iterdir() if p.name not in ("logs", "backups", "secret_key"))


def placement(name: str) -> tuple[str, tuple[str, ...]] | None:
    """Where an archive member goes: (area, its parts below the area), None for a member this
    version does not restore; BackupError for a name outside the archive's shape (pure)."""
    parts = tuple(name.split("/"))
    if name.startswith("/") or "\0" in name or any(p in ("", ".", "..") for p in parts):
        raise BackupError(f"the archive holds a path outside its folders ({name!r}); refusing it")
    area, rest = parts[0], parts[1:]
    if name == "mount-allowlist.json":
        return "allowlist", ()
    if area == "db" and len(rest) == 1:
        return "db", ()
    if area == "secrets":
        return ("secret_key", ()) if rest == ("secret_key",) else None  # the .env is to read, not restore
    if area in ("groups", "policy") and rest:
        return area, rest
    if area == "sessions":
        shaped = (len(rest) >= 4 and not folder_problem(rest[0]) and SESSION_ID_RE.fullmatch(rest[1])
                  and (rest[2:] == ("host", "inbound.db") or (rest[2:4] == ("host", "inbox") and len(rest) > 4)
                       or rest[2] == "agent"))
        if not shaped:
            raise BackupError(f"the archive holds {name!r}, which is not a session's own file; refusing it")
        return "sessions", rest
    return None


class _Staging:
    """Fresh folders beside each live one (same filesystem, so the swap is a rename)."""

    def __init__(self, live: dict[str, Path]):
        token = secrets.token_hex(6)
        self.live = live
        self.staged = {area: path.parent / f".{path.name}.restore-{token}" for area, path in live.items()}
        self.used: set[str] = set()

    def write(self, area: str, parts: tuple[str, ...], data, secret: bool) -> None:
        root = self.staged[area]
        if area not in self.used:
            if area in ("db", "secret_key", "allowlist"):
                root.parent.mkdir(parents=True, exist_ok=True)
            else:
                root.mkdir(parents=True, mode=0o755)
            self.used.add(area)
        dest = root.joinpath(*parts) if parts else root
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:  # only this process wrote here, and every name was checked: O_EXCL only catches a repeat
            fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600 if secret else 0o644)
        except FileExistsError:
            raise BackupError(f"the archive holds {area}/{'/'.join(parts)} twice; refusing it") from None
        with os.fdopen(fd, "wb") as out:
            shutil.copyfileobj(data, out)

    def discard(self) -> None:
        for area in self.used:
            path = self.staged[area]
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)

    def swap(self, aside: Path) -> list[str]:
        """Live areas for staged ones; the old ones kept in `aside`. What was moved aside."""
        moved = []
        for area in sorted(self.used):
            live, staged = self.live[area], self.staged[area]
            leftovers = [live.with_name(live.name + s) for s in SKIP_SUFFIXES] if area == "db" else []
            for old in [live, *leftovers]:
                if old.exists() or old.is_symlink():
                    aside.mkdir(parents=True, exist_ok=True, mode=0o700)
                    shutil.move(str(old), aside / f"{area}-{old.name}")
                    moved.append(old.name)
            os.replace(staged, live)
        return moved


def restore(settings, archive: Path, *, force: bool = False) -> dict:
    """Unpack into the configured data and groups folders (empty ones, unless force)."""
    manifest = read_manifest(archive)
    if manifest.get("format") != 1:
        raise BackupError(f"{archive} has no manifest this version can read")
    newest = max((m.version for m in discover()), default=0)
    if manifest.get("schema_version", 0) > newest:
        raise BackupError(f"the backup's schema ({manifest['schema_version']}) is newer than this NanoClaw's "
                          f"({newest}); update NanoClaw first (git pull)")
    data, groups = Path(settings.data_dir), Path(settings.groups_dir)
    if service_running(data):
        raise BackupError("the service is running on this data folder; stop it first (Ctrl-C on make run)")
    if not force and not (_is_empty(data) and _is_empty(groups)):
        raise BackupError(f"{data} or {groups} is not empty; restore into a fresh install, or add --force")
    central = sqlite_path(settings.database_url)
    live = {"sessions": Path(settings.sessions_dir), "groups": groups, "policy": data / "policy",
            "secret_key": data / "secret_key", "allowlist": Path(settings.mount_allowlist)}
    if central is not None:
        live["db"] = central
    data.mkdir(parents=True, exist_ok=True)
    staging = _Staging(live)
    try:
        with tarfile.open(archive, "r:gz") as tar:
            for member in tar.getmembers():
                if not member.isfile():
                    continue  # folders are made as needed; links and devices are never restored
                placed = placement(member.name)
                if placed is None or placed[0] not in live:
                    continue
                area, parts = placed
                if area == "allowlist" and live[area].exists():
                    continue  # an allowlist of this machine wins
                with tar.extractfile(member) as src:
                    staging.write(area, parts, src, secret=area == "secret_key")
    except BaseException:
        staging.discard()
        raise
    aside = data / f"pre-restore-{datetime.now():%Y%m%d-%H%M%S}"
    if staging.swap(aside):
        manifest["moved_aside"] = str(aside)
    return manifest
