"""Nudges across the session folder: a writer commits, the reader on the other side wakes at once.

Both sides already share the session folder, so a nudge is a file event (inotify), which the kernel
delivers across bind mounts, Docker and bubblewrap alike, and which needs no socket nobody may
forget to send on:
- host → runner: the runner watches host/ for inbound.db; every host process that writes it
  (router, intake, task timer, CLI) nudges without knowing it. The journal is TRUNCATE, so the
  commit itself is a write the runner sees, and nothing becomes visible after the last event.
- runner → host: the runner touches agent/nudge after each commit to outbound.db (WAL: the
  commit becomes visible through the -shm, which makes no event, so the touch comes after it);
  the host's delivery thread watches every live session's agent/ for that one name.

A nudge is only a hint. Each side still looks on its own every second (the safety net), so a lost
or dropped nudge delays a message by that second and never loses it. Events are filtered by name
and coalesced, so an agent that churns its folder costs the host one cheap pass per wake, no more.
inotify is stdlib-free here (ctypes on libc), so the sandbox image needs nothing new.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import stat
import struct
from pathlib import Path

NUDGE = "nudge"  # in agent/: touched by the runner after each commit to outbound.db

IN_MODIFY = 0x002
IN_ATTRIB = 0x004
IN_CLOSE_WRITE = 0x008
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_IGNORED = 0x8000
IN_Q_OVERFLOW = 0x4000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC
MASK = IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE
_EVENT = struct.Struct("iIII")

_libc = None


def _lib():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    return _libc


class Unavailable(OSError):
    """No inotify here (another OS, or the per-user instance limit): poll fast instead."""


class Watcher:
    """Watches directories for events on names that start with one of `prefixes`; `drain()` says
    which directories had one since the last call. One fd, for select() or an event loop."""

    def __init__(self, prefixes: tuple[str, ...], mask: int = MASK):
        self.prefixes, self.mask = prefixes, mask
        try:
            fd = _lib().inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        except (OSError, AttributeError) as exc:
            raise Unavailable(f"no inotify: {exc}") from exc
        if fd < 0:
            raise Unavailable(ctypes.get_errno(), f"inotify_init1: {os.strerror(ctypes.get_errno())}")
        self.fd = fd
        self._dirs: dict[int, Path] = {}   # watch descriptor -> directory
        self._wds: dict[Path, int] = {}

    def fileno(self) -> int:
        return self.fd

    def watch(self, directory: Path) -> bool:
        """Start watching (idempotent); False when the directory is not there (yet)."""
        directory = Path(directory)
        if directory in self._wds:
            return True
        wd = _lib().inotify_add_watch(self.fd, os.fsencode(directory), self.mask)
        if wd < 0:
            err = ctypes.get_errno()
            if err in (errno.ENOENT, errno.ENOTDIR, errno.EACCES):
                return False
            raise OSError(err, f"inotify_add_watch {directory}: {os.strerror(err)}")
        self._dirs[wd] = directory
        self._wds[directory] = wd
        return True

    def unwatch(self, directory: Path) -> None:
        wd = self._wds.pop(Path(directory), None)
        if wd is not None:
            self._dirs.pop(wd, None)
            _lib().inotify_rm_watch(self.fd, wd)

    @property
    def watched(self) -> set[Path]:
        return set(self._wds)

    def drain(self) -> set[Path]:
        """The watched directories with a matching event since the last drain (all of them after a
        queue overflow). A directory that went away is forgotten, so watch() can take it again."""
        hit: set[Path] = set()
        while True:
            try:
                data = os.read(self.fd, 64 * 1024)
            except BlockingIOError:
                return hit
            if not data:
                return hit
            offset = 0
            while offset + _EVENT.size <= len(data):
                wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
                name = data[offset + _EVENT.size: offset + _EVENT.size + length].rstrip(b"\0").decode(
                    "utf-8", "replace")
                offset += _EVENT.size + length
                if mask & IN_Q_OVERFLOW:
                    hit |= set(self._wds)
                    continue
                directory = self._dirs.get(wd)
                if directory is None:
                    continue
                if mask & IN_IGNORED:  # removed or unmounted: forget it, a refresh may watch it again
                    self._dirs.pop(wd, None)
                    self._wds.pop(directory, None)
                    hit.add(directory)
                elif name.startswith(self.prefixes):
                    hit.add(directory)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self._dirs.clear()
        self._wds.clear()


def touch(directory: Path) -> None:
    """The runner's nudge to the host (the door's, for a remote runner); never fails the write it
    follows."""
    try:
        touch_plain(Path(directory) / NUDGE)
    except OSError:
        pass


def touch_plain(path: Path) -> None:
    """Make `path` a plain file with a fresh mtime without following a link: the host touches files
    in the agent's folder (the nudge, the heartbeat of a remote runner), where a link the agent left
    could point anywhere. A link, or anything else that is not a plain file, is removed first."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    for _ in range(3):
        try:
            fd = os.open(path, flags, 0o644)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENXIO, errno.EISDIR, errno.EEXIST):
                raise
            _remove(path)  # a link (ELOOP), a FIFO without a reader (ENXIO), a folder
            continue
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                os.utime(fd)
                return
        finally:
            os.close(fd)
        _remove(path)  # a FIFO with a reader, a device: not what the host touches
    raise OSError(errno.EEXIST, f"{path} could not be made a plain file")


def _remove(path: Path) -> None:
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            os.rmdir(path)  # an empty folder in its place; a full one stays and the touch fails
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass
