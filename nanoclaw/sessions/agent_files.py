"""Files in a session's agent part, as the host reads (and, for the door, writes) them: never
through a link the agent put there, and checked again after SQLite opened them."""
from __future__ import annotations

import logging
import os
import sqlite3
import stat
from pathlib import Path

from . import session_schema as schema

log = logging.getLogger("nanoclaw.sessions")


def agent_file(path: Path) -> Path | None:
    """`path` (in the agent's part) if it is a plain file there: never a link the agent planted to
    make the host read, or write through, something else."""
    try:
        return path if stat.S_ISREG(os.lstat(path).st_mode) else None
    except OSError:
        return None


def agent_mtime(path: Path) -> float | None:
    """When a file in the agent's part last changed, read without following a link (a link the agent
    planted would report another file's time)."""
    try:
        return os.lstat(path).st_mtime
    except OSError:
        return None


def plain_agent_db(path: Path) -> bool:
    """Before the host itself writes a database in the agent's part (the door, the one writer of a
    remote session's outbound.db): whatever is not a plain file of one link at its name or at its
    -wal, -shm or -journal (links a local sandbox of this session left, a FIFO, a hard link) is
    removed, since SQLite would open through it. True when the name is then a plain file or absent."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        entry = path.with_name(path.name + suffix)
        try:
            st = os.lstat(entry)
        except FileNotFoundError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
            continue
        log.warning("removed %s from %s: not a plain file of its own (%s)", entry.name, entry.parent,
                    "a link" if stat.S_ISLNK(st.st_mode) else "shared" if stat.S_ISREG(st.st_mode) else "not a file")
        if stat.S_ISDIR(st.st_mode):
            return False
        entry.unlink()
    return True


def opened_in_place(conn: sqlite3.Connection, name: str, path: Path) -> bool:
    """Whether database `name` of conn is the file at `path` itself, not one a link there led to.
    SQLite resolves links when it opens a file and reports the resolved name, and keeps the file it
    opened: so a plain-file check followed by this check after the open leaves no gap for a link
    the agent swaps in between."""
    for _seq, db, filename in conn.execute("PRAGMA database_list"):
        if db == name:
            return filename == os.path.join(os.path.realpath(path.parent), path.name)
    return False


def open_agent_db(path: Path, timeout: float = 1.0) -> sqlite3.Connection | None:
    """The agent's outbound.db at `path`, read-only, if it is a plain file there (never through a link)."""
    if agent_file(path) is None:
        return None
    try:
        conn = schema.connect(path, readonly=True, timeout=timeout)
        conn.execute("PRAGMA schema_version").fetchone()  # opens the file now
    except sqlite3.Error:
        return None
    if not opened_in_place(conn, "main", path):
        conn.close()
        return None
    return conn


def file_identity(path: Path, *, follow_links: bool = True) -> tuple[int, int] | None:
    """(device, inode) of a plain file, or None while there is none there: a connection kept to
    a session database is used again only while this stays the same."""
    try:
        st = os.stat(path) if follow_links else os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


def files_signature(files) -> tuple:
    """(inode, size, mtime) of each of `files`, read without following a link, None for one that is
    missing: it changes whenever any of them does (when to look again, never what to trust)."""
    out = []
    for file in files:
        try:
            st = os.lstat(file)
            out.append((st.st_ino, st.st_size, st.st_mtime_ns))
        except FileNotFoundError:
            out.append(None)
    return tuple(out)
