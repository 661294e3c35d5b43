"""Backup and restore of an install, while it runs.

One tar.gz holds: `manifest.json` (versions, counts, what is inside); `db/nanoclaw.db`, a
consistent copy of the central SQLite database (SQLite's online backup API, never a file copy of
a live database; with PostgreSQL it is left to pg_dump); `sessions/…`, each session's two
databases copied the same way and its files (inbox, outbox, the SDK's transcripts in home/);
`groups/…`; `policy/…` (egress and credential routes: secret names only); the mount allowlist.
Secret values (the page's secret key, the .env file) only with `with_secrets`, and then the
archive is made readable by its owner alone.
"""
from __future__ import annotations

import fcntl
import io
import json
import os
import sqlite3
import tarfile
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from .. import __version__
from ..db import database
from ..migrate import current_version, discover
from ..models import AgentGroup, ScheduledTask, Session, User

SESSION_DBS = ("host/inbound.db", "agent/outbound.db")
SKIP_NAMES = {"heartbeat"}
SKIP_SUFFIXES = ("-wal", "-shm", "-journal")


class BackupError(Exception):
    """One line that says what is wrong and what to do."""


@dataclass
class Written:
    path: Path
    manifest: dict


def sqlite_path(url: str) -> Path | None:
    return Path("/" + url[len("sqlite:///"):].lstrip("/")) if url.startswith("sqlite:///") else None


def copy_sqlite(source: Path, dest: Path) -> None:
    """A consistent copy of a database another process may be writing (the online backup API)."""
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True, timeout=30)
    try:
        out = sqlite3.connect(dest)
        try:
            src.backup(out)
        finally:
            out.close()
    finally:
        src.close()


def _add_tree(tar: tarfile.TarFile, root: Path, arc_root: str, skip_dbs: tuple[str, ...] = ()) -> int:
    """Plain files and folders under root (links and devices are never archived)."""
    count = 0
    if not root.is_dir():
        return 0
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink() or rel in skip_dbs or path.name in SKIP_NAMES or path.name.endswith(SKIP_SUFFIXES):
            continue
        if path.is_file():
            tar.add(path, arcname=f"{arc_root}/{rel}", recursive=False)
            count += 1
    return count


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), int(time.time()), 0o600
    tar.addfile(info, io.BytesIO(data))


def write_backup(settings, dest: Path | None = None, *, with_secrets: bool = False) -> Written:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    dest = Path(dest) if dest else Path(settings.data_dir) / "backups" / f"nanoclaw-{stamp}.tar.gz"
    if dest.is_dir():
        dest = dest / f"nanoclaw-{stamp}.tar.gz"
    dest.parent.mkdir(parents=True, exist_ok=True)
    central = sqlite_path(settings.database_url)
    manifest = {"format": 1, "app_version": __version__, "schema_version": current_version(database.obj),
                "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "database": "sqlite" if central else "postgresql", "with_secrets": with_secrets,
                "counts": {"agents": AgentGroup.select().count(), "users": User.select().count(),
                           "sessions": Session.select().count(), "tasks": ScheduledTask.select().count()}}
    partial = dest.with_name(dest.name + ".partial")
    old_umask = os.umask(0o077)  # the archive holds conversations: the owner's alone
    try:
        with tempfile.TemporaryDirectory(prefix="nanoclaw-backup-") as tmp, tarfile.open(partial, "w:gz") as tar:
            if central is not None:
                copy_sqlite(central, Path(tmp) / "nanoclaw.db")
                tar.add(Path(tmp) / "nanoclaw.db", arcname="db/nanoclaw.db")
            files = 0
            sessions_dir = Path(settings.sessions_dir)
            for session in sorted(sessions_dir.glob("*/*")) if sessions_dir.is_dir() else []:
                arc = f"sessions/{session.relative_to(sessions_dir).as_posix()}"
                for name in SESSION_DBS:
                    if (session / name).is_file() and not (session / name).is_symlink():
                        copy = Path(tmp) / "session.db"
                        copy_sqlite(session / name, copy)
                        tar.add(copy, arcname=f"{arc}/{name}")
                        copy.unlink()
                files += _add_tree(tar, session, arc, SESSION_DBS)
            files += _add_tree(tar, Path(settings.groups_dir), "groups")
            files += _add_tree(tar, Path(settings.data_dir) / "policy", "policy")
            allowlist = Path(settings.mount_allowlist)
            if allowlist.is_file():
                tar.add(allowlist, arcname="mount-allowlist.json")
            if with_secrets:
                key = Path(settings.data_dir) / "secret_key"
                if key.is_file():
                    tar.add(key, arcname="secrets/secret_key")
                env_file = Path(os.environ.get("NANOCLAW_ENV_FILE", Path(settings.data_dir).parent / ".env"))
                if env_file.is_file():
                    tar.add(env_file, arcname="secrets/env")
            manifest["files"] = files
            _add_bytes(tar, "manifest.json", json.dumps(manifest, indent=2).encode())
        os.replace(partial, dest)
    finally:
        os.umask(old_umask)
        partial.unlink(missing_ok=True)
    return Written(dest, manifest)


def prune(folder: Path, keep: int) -> list[Path]:
    """Remove all but the newest `keep` archives in folder; the removed ones."""
    archives = sorted(Path(folder).glob("nanoclaw-*.tar.gz"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in archives[keep:]:
        old.unlink()
    return archives[keep:]


def read_manifest(archive: Path) -> dict:
    try:
        with tarfile.open(archive, "r:gz") as tar:
            member = tar.extractfile("manifest.json")
            return json.loads(member.read()) if member else {}
    except (OSError, KeyError, tarfile.TarError, ValueError) as exc:
        raise BackupError(f"{archive} is not a NanoClaw backup ({type(exc).__name__})") from None


def service_running(data: Path) -> bool:
    """Whether a process holds the background's lock on this data folder (the service runs)."""
    lock = data / "scheduler.lock"
    if not lock.exists():
        return False
    with open(lock, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
    return False


def _is_empty(path: Path) -> bool:
    return not path.exists() or not any(p for p in path.iterdir() if p.name not in ("logs", "backups", "secret_key"))


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
    targets = {"db/": None if central is None else central.parent, "sessions/": Path(settings.sessions_dir),
               "groups/": groups, "policy/": data / "policy", "secrets/": data}
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar.getmembers():
            if not member.isfile():
                continue  # folders are made as needed; links and devices are never restored
            prefix = next((p for p in targets if member.name.startswith(p)), None)
            if member.name == "mount-allowlist.json":
                dest = Path(settings.mount_allowlist)
                if dest.exists():
                    continue  # an allowlist of this machine wins
            elif prefix is None or targets[prefix] is None:
                continue
            else:
                rel = member.name[len(prefix):]
                if prefix == "db/":
                    rel = central.name
                elif prefix == "secrets/":
                    if rel != "secret_key":
                        continue  # the .env is for the operator to read, not to overwrite theirs
                base = targets[prefix].resolve()
                dest = (base / rel).resolve()
                if base not in dest.parents:
                    raise BackupError(f"{archive} holds a path outside its folders ({member.name}); refusing it")
            dest.parent.mkdir(parents=True, exist_ok=True)
            if dest.suffix == ".db":  # a journal left beside the old file would be replayed into this one
                for leftover in SKIP_SUFFIXES:
                    dest.with_name(dest.name + leftover).unlink(missing_ok=True)
            with tar.extractfile(member) as src, open(dest, "wb") as out:
                out.write(src.read())
            os.chmod(dest, 0o600 if member.name.startswith("secrets/") else 0o644)
    return manifest
