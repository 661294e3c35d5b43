"""Folder-name rules and path containment (the v1 rules).

Pure functions: every agent- or user-supplied name or path passes through here
before it touches the filesystem.
"""
from __future__ import annotations

import errno
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

FOLDER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
RESERVED_FOLDERS = frozenset({"global"})


class UnsafePath(ValueError):
    """A name or path that would leave its base directory or break a rule."""


def folder_problem(name: str) -> str | None:
    """Why `name` cannot be an agent folder, or None if it can."""
    if not name:
        return "the folder name is empty"
    if ".." in name or "/" in name or "\\" in name:
        return f"folder {name!r} may not contain '..', '/' or '\\'"
    if name.lower() in RESERVED_FOLDERS:
        return f"folder {name!r} is reserved"
    if not FOLDER_RE.match(name):
        return (f"folder {name!r} must start with a letter or digit and use only letters, digits, "
                "'_' and '-' (at most 64 characters)")
    return None


def validate_folder(name: str) -> str:
    problem = folder_problem(name)
    if problem:
        raise UnsafePath(problem)
    return name


def slugify(name: str) -> str:
    """A folder name derived from a display name: 'My Agent!' -> 'my-agent'."""
    slug = re.sub(r"[^a-z0-9_-]+", "-", name.strip().lower()).strip("-_")
    return slug[:64].rstrip("-_")


def contained(base: os.PathLike | str, candidate: os.PathLike | str) -> Path:
    """Resolve `candidate` (relative to `base` unless absolute), following
    symlinks, and return it only if it stays inside `base`."""
    base_path = Path(base).resolve()
    path = Path(candidate)
    if not path.is_absolute():
        path = base_path / path
    resolved = path.resolve()
    if resolved != base_path and base_path not in resolved.parents:
        raise UnsafePath(f"{str(candidate)!r} resolves outside {base_path}")
    return resolved


# --- trees an agent can change while the host reads them -----------------------------------------
# A folder the agent writes (its session part, its group folder) may change under the host at any
# moment: a folder swapped for a link between a check and an open is the classic way to make the
# host read or change what the agent points at. So such a tree is walked by descriptors: every
# entry is opened relative to its parent's descriptor with O_NOFOLLOW, so no link is followed at any
# level, and what is yielded is the very object that was opened.

_DIR_OPEN = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_ANY_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
MAX_TREE_DEPTH = 128


@dataclass(frozen=True)
class TreeEntry:
    rel: str            # posix path below the root ('' for the root itself)
    fd: int             # open for reading, valid only until the walk moves on (-1: a file not opened)
    st: os.stat_result  # of the open descriptor
    parent_fd: int      # the folder it was opened in (the root's own fd for the root)
    name: str

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.st.st_mode)


def walk_tree(root: os.PathLike | str, on_skip: Callable[[str, str], None] | None = None, *,
              open_files: bool = True) -> Iterator[TreeEntry]:
    """The root folder, then every folder and plain file under it, depth first in name order, each
    opened without following a link at any level. Links, sockets and fifos are passed over silently;
    what vanishes or cannot be opened while walking is reported to on_skip(rel, why) and passed
    over, so what an agent does in its own folder never makes the walk fail. A root that is missing
    or is itself a link yields nothing.

    open_files=False: plain files are looked at (lstat in their folder's descriptor) but not opened,
    for a walk in a process that may have one of them open as a SQLite database: closing any
    descriptor of a file drops all of the process's POSIX locks on it, SQLite's included, and a
    runner would then take the database for unused and reset the WAL index the host still reads."""
    skip = on_skip or (lambda _rel, _why: None)
    try:
        top = os.open(root, _DIR_OPEN)
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
            skip("", exc.strerror or str(exc))
        return
    stack: list[tuple[str, int, Iterator[str]]] = []
    try:
        yield TreeEntry("", top, os.fstat(top), top, "")
        stack.append(("", top, iter(_names(top, "", skip))))
        while stack:
            rel, dfd, names = stack[-1]
            name = next(names, None)
            if name is None:
                stack.pop()
                if dfd != top:
                    os.close(dfd)
                continue
            child = f"{rel}/{name}" if rel else name
            try:
                if not open_files:
                    st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                    if stat.S_ISREG(st.st_mode):
                        yield TreeEntry(child, -1, st, dfd, name)
                        continue
                    if not stat.S_ISDIR(st.st_mode):
                        continue  # a link, a socket, a fifo
                fd = os.open(name, _DIR_OPEN if not open_files else _ANY_OPEN, dir_fd=dfd)
            except OSError as exc:
                if exc.errno != errno.ELOOP:  # ELOOP: a link, never followed
                    skip(child, exc.strerror or str(exc))
                continue
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode) and len(stack) < MAX_TREE_DEPTH:
                yield TreeEntry(child, fd, st, dfd, name)
                stack.append((child, fd, iter(_names(fd, child, skip))))
                continue
            try:
                if stat.S_ISREG(st.st_mode):
                    yield TreeEntry(child, fd, st, dfd, name)
                elif stat.S_ISDIR(st.st_mode):
                    skip(child, f"deeper than {MAX_TREE_DEPTH} folders")
            finally:
                os.close(fd)
    finally:
        for _rel, dfd, _names_left in stack:
            if dfd != top:
                os.close(dfd)
        os.close(top)


def _names(dfd: int, rel: str, skip) -> list[str]:
    try:
        return sorted(os.listdir(dfd))
    except OSError as exc:
        skip(rel, exc.strerror or str(exc))
        return []


def write_text_nofollow(folder: os.PathLike | str, name: str, text: str) -> None:
    """Write `folder/name` without following a link at either (an agent's folder: a CLAUDE.md the
    agent replaced with a link must not make the host write through it). A link there is an error."""
    dfd = os.open(folder, _DIR_OPEN)
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dfd)
        with os.fdopen(fd, "w") as f:
            f.write(text)
    finally:
        os.close(dfd)


def write_atomic(path: os.PathLike | str, write, mode: int = 0o600) -> None:
    """`write(fileobj)` into a hidden temporary file beside `path`, synced, given `mode`, then renamed
    into place: a reader sees the old file or the whole new one, and a failure leaves nothing behind."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
