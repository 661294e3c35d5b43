"""What goes down to a remote sandbox of inbound.db: a long poll that wakes on the host's commit,
then the rows changed since the runner's position in the file's change log, or the whole file
(agent_runner/change_log.py), with the person's inbox files the sandbox lacks first."""
from __future__ import annotations

import asyncio
import io
import os
import tarfile
from pathlib import Path

from agent_runner import change_log, nudge

from ..security import walk_tree
from ..sessions import session_schema as schema
from ..sessions import store


def inbound_stamp(path: Path) -> str | None:
    """inode and SQLite's file change counter (header bytes 24-27, bumped by every commit in a
    rollback-journal database such as inbound.db): exact, and one read of 100 bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        head = os.pread(fd, 100, 0)
        return f"{os.fstat(fd).st_ino}:{int.from_bytes(head[24:28], 'big')}" if len(head) == 100 else None
    finally:
        os.close(fd)


class InboundWatch:
    """Wakes long polls when a session's inbound.db changes, on the channel's event loop: one inotify
    watch per waited-on host/ folder, read by the loop itself (no thread), and only that folder's
    waiters woken (a queue overflow wakes them all). Without inotify, a look every 20 ms."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self._folders: dict[Path, set[asyncio.Event]] = {}
        try:
            self._watcher: nudge.Watcher | None = nudge.Watcher((schema.INBOUND,))
        except nudge.Unavailable:
            self._watcher = None
        if self._watcher is not None:
            loop.add_reader(self._watcher.fileno(), self._readable)

    def _readable(self) -> None:
        for folder in self._watcher.drain():
            for event in self._folders.get(folder, ()):
                event.set()

    async def wait(self, folder: Path, path: Path, after: str | None, timeout: float) -> str | None:
        """The stamp once it differs from `after`, or the same stamp after `timeout`."""
        deadline = self._loop.time() + timeout
        stamp = inbound_stamp(path)
        if stamp != after or timeout <= 0:
            return stamp
        event = asyncio.Event()
        waiters = self._folders.setdefault(folder, set())
        if not waiters and self._watcher is not None:
            self._watcher.watch(folder)
        waiters.add(event)
        try:
            while True:
                event.clear()  # before the look: a commit from here on sets it again
                stamp = inbound_stamp(path)
                left = deadline - self._loop.time()
                if stamp != after or left <= 0:
                    return stamp
                try:
                    await asyncio.wait_for(event.wait(), left if self._watcher else min(left, 0.02))
                except TimeoutError:
                    pass
        finally:
            waiters.discard(event)
            if not waiters:
                del self._folders[folder]
                if self._watcher is not None:
                    self._watcher.unwatch(folder)

    def close(self) -> None:
        if self._watcher is not None:
            self._loop.remove_reader(self._watcher.fileno())
            self._watcher.close()


MAX_MARK_NAMES = 10_000


def inbox_mark(raw) -> dict | None:
    """The runner's mark of the inbox files it has, checked (None: it has none, or sent nonsense)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("after"), int) or raw["after"] < 0:
        return None
    at = raw.get("at")
    if not isinstance(at, list) or len(at) > MAX_MARK_NAMES or not all(isinstance(n, str) for n in at):
        return None
    return {"after": raw["after"], "at": set(at)}


def lacks(rel: str, ctime: int, mark: dict | None) -> bool:
    """Whether the runner holding `mark` lacks an inbox file (pure). A file lands in the inbox by a
    rename, which sets its change time, so what the runner lacks is what changed after the newest
    file it has; of those changed at that very time (the clock's step is coarse), the names it has
    come with the mark."""
    return mark is None or ctime > mark["after"] or (ctime == mark["after"] and rel not in mark["at"])


def next_mark(files: list[tuple[str, int]], mark: dict | None) -> dict | None:
    """The mark a runner holds once it has all of `files` ((name, change time) each; pure): its size
    does not grow with the inbox."""
    if not files:
        return mark
    newest = max(ctime for _rel, ctime in files)
    if mark and newest < mark["after"]:  # the host's clock went back: keep the runner's mark
        return mark
    return {"after": newest, "at": {rel for rel, ctime in files if ctime == newest}}


def inbound_answer(session: Path, out, mark: dict | None, held) -> tuple[str | None, dict | None, bool, dict | None]:
    """A tar of the inbox files the sandbox lacks (by the mark it holds), then the changes since the
    position it holds, or inbound.db as one consistent copy when only a snapshot will do.
    (stamp, position, whole?, the inbox mark once it has them)"""
    db = store.inbound_db(session)
    conn = schema.connect(db, readonly=True)
    try:
        conn.execute("BEGIN")  # one read transaction: the stamp, the position and the bytes belong together
        delta = change_log.since(conn, held) if held else None
        data = change_log.encode(delta) if delta is not None else conn.serialize()
        position = delta["position"] if delta is not None else change_log.position(conn)
        stamp = inbound_stamp(db)
        conn.execute("COMMIT")
    finally:
        conn.close()
    with tarfile.open(fileobj=out, mode="w|") as tar:
        seen = []
        for entry in walk_tree(store.inbox_dir(session), open_files=False):
            if entry.is_dir:
                continue
            seen.append((entry.rel, entry.st.st_ctime_ns))
            if not lacks(entry.rel, entry.st.st_ctime_ns, mark):
                continue
            try:
                fd = os.open(entry.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=entry.parent_fd)
            except OSError:
                continue
            with os.fdopen(fd, "rb") as src:
                info = tarfile.TarInfo(f"inbox/{entry.rel}")
                info.size, info.mode = os.fstat(src.fileno()).st_size, 0o644
                tar.addfile(info, src)
        mark = next_mark(seen, mark)
        info = tarfile.TarInfo(schema.INBOUND if delta is None else change_log.DELTA_NAME)
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))
        end = tar.offset + 2 * tarfile.BLOCKSIZE  # the end-of-archive blocks, without tar's padding
    out.truncate(end)                             # to 10 KiB records (a delta is a few hundred bytes)
    out.seek(end)
    return stamp, position, delta is None, mark
