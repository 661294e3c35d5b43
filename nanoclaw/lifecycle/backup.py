"""Backup and restore of an install, while it runs.

One tar.gz holds: `manifest.json` (versions, counts, what is inside); `db/nanoclaw.db`, a
consistent copy of the central SQLite database (SQLite's online backup API, never a file copy of
a live database; with PostgreSQL it is left to pg_dump); `sessions/…`, each session's two
databases copied the same way and its files (inbox, outbox, the SDK's transcripts in home/);
`groups/…`; `policy/…` (egress and credential routes, model upstreams and each agent's model: secret
names only); the mount allowlist.
Secret values (the page's secret key, the .env file) only with `with_secrets`, and then the
archive is made readable by its owner alone.
"""
from __future__ import annotations

import fcntl
import io
import json
import logging
import os
import shutil
import sqlite3
import stat
import tarfile
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from .. import __version__
from ..db import database
from ..migrate import current_version
from ..models import AgentGroup, ScheduledTask, Session, User
from ..security import walk_tree

log = logging.getLogger("nanoclaw.backup")

INBOUND, OUTBOUND = "inbound.db", "outbound.db"
HOST_DB = f"host/{INBOUND}"
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


def copy_sqlite(source: Path, dest: Path, *, writable_source: bool = False) -> None:
    """A consistent copy of a database another process may be writing (the online backup API)."""
    src = sqlite3.connect(source if writable_source else f"file:{source}?mode=ro", uri=not writable_source,
                          timeout=30)
    try:
        out = sqlite3.connect(dest)
        try:
            src.backup(out)
        finally:
            out.close()
    finally:
        src.close()


class Walk:
    """What one backup passed over because it changed under it (an agent's own folder, at worst)."""

    def __init__(self):
        self.skipped: list[str] = []

    def skip(self, arc: str, why: str) -> None:
        self.skipped.append(arc)
        log.warning("backup: passed over %s (%s)", arc, why)


def add_tree(tar: tarfile.TarFile, root: Path, arc_root: str, walk: Walk, skip_names: tuple[str, ...] = (),
             skip_suffixes: tuple[str, ...] = SKIP_SUFFIXES) -> int:
    """Plain files under root, read through descriptors opened without following a link at any
    level (security.walk_tree): links, devices and fifos are never archived, and an agent swapping a
    folder for a link while this runs gets at most its own files left out, never the host's in."""
    count = 0
    for entry in walk_tree(root, on_skip=lambda rel, why: walk.skip(f"{arc_root}/{rel}", why)):
        if (entry.is_dir or entry.rel in skip_names or entry.name in SKIP_NAMES
                or (skip_suffixes and entry.name.endswith(skip_suffixes))):
            continue
        if _add_open_file(tar, entry.fd, f"{arc_root}/{entry.rel}", entry.st, walk):
            count += 1
    return count


def _add_open_file(tar: tarfile.TarFile, fd: int, arcname: str, st: os.stat_result, walk: Walk) -> bool:
    """One file from an open descriptor; copied first, so a file that grows or shrinks meanwhile
    is archived as it was read instead of breaking the archive."""
    with tempfile.SpooledTemporaryFile(max_size=8 << 20) as copy:
        try:
            with os.fdopen(os.dup(fd), "rb") as src:
                shutil.copyfileobj(src, copy)
        except OSError as exc:
            walk.skip(arcname, exc.strerror or str(exc))
            return False
        info = tarfile.TarInfo(arcname)
        info.size, info.mtime, info.mode = copy.tell(), int(st.st_mtime), stat.S_IMODE(st.st_mode) & 0o755
        copy.seek(0)
        tar.addfile(info, copy)
    return True


def _agent_db_copy(agent_part: Path, dest: Path, walk: Walk, arc: str) -> bool:
    """A consistent copy of the agent's outbound.db (written by the agent, in WAL mode, in a folder it
    controls): the database and its WAL are read through descriptors (no link followed), then SQLite
    puts the copy together and checks it. A copy torn by a write meanwhile is taken again; one that
    stays broken is passed over (the agent's own file, the one thing at stake)."""
    for _attempt in range(3):
        staged = dest.parent / "agent-db"
        shutil.rmtree(staged, ignore_errors=True)
        staged.mkdir()
        got = {}
        for entry in walk_tree(agent_part):
            if entry.rel in (OUTBOUND, OUTBOUND + "-wal") and not entry.is_dir:
                with os.fdopen(os.dup(entry.fd), "rb") as src, open(staged / entry.rel, "wb") as out:
                    shutil.copyfileobj(src, out)
                got[entry.rel] = True
        if OUTBOUND not in got:
            return False
        try:
            copy_sqlite(staged / OUTBOUND, dest, writable_source=True)
            check = sqlite3.connect(dest)
            try:
                ok = check.execute("PRAGMA quick_check").fetchone()[0] == "ok"
            finally:
                check.close()
        except sqlite3.Error:
            ok = False
        if ok:
            return True
        dest.unlink(missing_ok=True)
    walk.skip(f"{arc}/agent/{OUTBOUND}", "it kept changing, or is not a database")
    return False


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
            files, walk = 0, Walk()
            sessions_dir = Path(settings.sessions_dir)
            for session in sorted(sessions_dir.glob("*/*")) if sessions_dir.is_dir() else []:
                arc = f"sessions/{session.relative_to(sessions_dir).as_posix()}"
                if session.is_symlink() or not session.is_dir():
                    continue
                inbound = session / HOST_DB  # the host's own part: the agent cannot touch it
                if inbound.is_file() and not inbound.is_symlink():
                    copy_sqlite(inbound, Path(tmp) / "session.db")
                    tar.add(Path(tmp) / "session.db", arcname=f"{arc}/{HOST_DB}")
                    (Path(tmp) / "session.db").unlink()
                if _agent_db_copy(session / "agent", Path(tmp) / "agent.db", walk, arc):
                    tar.add(Path(tmp) / "agent.db", arcname=f"{arc}/agent/{OUTBOUND}")
                    (Path(tmp) / "agent.db").unlink()
                files += add_tree(tar, session / "host", f"{arc}/host", walk, (INBOUND,))
                files += add_tree(tar, session / "agent", f"{arc}/agent", walk, (OUTBOUND,))
            files += add_tree(tar, Path(settings.groups_dir), "groups", walk)
            files += add_tree(tar, Path(settings.data_dir) / "policy", "policy", walk)
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
            manifest["files"], manifest["skipped"] = files, walk.skipped
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
