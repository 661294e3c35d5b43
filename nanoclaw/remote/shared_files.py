"""The door's record of the folders remote sandboxes share with the host, and what a lost write tells.

- Who wrote each file of a group folder through the door, and which version (`files.db` in the
  door's own folder, where no sandbox sees it): when an upload or a removal wins over a version its
  sandbox never saw (trees.py), that record names the session whose version lost, so the kept copy
  carries its name and its agent is told in its next prompt (a message that waits for the next turn
  rather than starting one).
- What the host has of a folder (`manifest`: name -> sha256, with the tree's tag), for a runner to
  take what changed here since it last agreed with the host. Digests are cached per file by inode,
  size and change time, so a look at an unchanged folder reads no file.
"""
from __future__ import annotations

import hashlib
import logging
import sqlite3
import threading
import time
from collections import OrderedDict
from pathlib import Path

from agent_runner.tree_sync import tree_tag

from ..security import walk_tree
from ..sessions import store
from . import trees

log = logging.getLogger("nanoclaw.remote.shared_files")

CACHED_FOLDERS = 2000  # folders whose digests are kept in memory (the live sessions' homes and groups)
# Who wrote a version, kept this long: past it a version lost to a later write is still kept aside,
# only no session is told (by then it has long seen the group folder as it is).
KEEP_WRITTEN_S = 30 * 86400


class SharedFiles:
    def __init__(self, door_dir: Path, sessions_dir: Path):
        self.sessions_dir = Path(sessions_dir)
        self._db = sqlite3.connect(Path(door_dir) / "files.db", check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS written (folder TEXT NOT NULL, name TEXT NOT NULL, digest TEXT,"
                         " session TEXT NOT NULL, at REAL NOT NULL, PRIMARY KEY (folder, name))")
        self._lock = threading.Lock()
        self._digests: OrderedDict[Path, dict] = OrderedDict()

    def close(self) -> None:
        self._db.close()

    # -- who wrote what ----------------------------------------------------------------------------
    def owner_of(self, folder: str):
        """For trees.py: the session that wrote a name's current version through the door (None when
        the version on the host is not the one it wrote: the host, or a local sandbox, changed it)."""
        def owner(name: str, digest: str | None) -> str | None:
            with self._lock:
                row = self._db.execute("SELECT session, digest FROM written WHERE folder = ? AND name = ?",
                                       (folder, name)).fetchone()
            return row[0] if row and row[1] == digest else None
        return owner

    def settle(self, folder: str, session: str, done: trees.Unpacked, removed: list[str] = ()) -> None:
        """Record what a session's upload or removal left in the group folder, and tell each session
        whose version lost."""
        kept = {c.kept_as: c.loser for c in done.conflicts if c.kept_as}
        now = time.time()
        rows = [(folder, name, digest, kept.get(name) or session, now) for name, digest in done.written.items()]
        rows += [(folder, name, None, session, now) for name in removed]
        with self._lock:
            self._db.execute("BEGIN")
            self._db.executemany("INSERT OR REPLACE INTO written (folder, name, digest, session, at) VALUES (?, ?, ?, ?, ?)",
                                 rows)
            self._db.execute("COMMIT")
        for conflict in done.conflicts:
            if conflict.loser and conflict.loser != session:
                self._tell(folder, conflict)

    def prune(self, now: float | None = None) -> int:
        """Forget who wrote the versions older than KEEP_WRITTEN_S (files.db would otherwise keep every
        name ever written through the door); how many."""
        limit = (time.time() if now is None else now) - KEEP_WRITTEN_S
        with self._lock:
            return self._db.execute("DELETE FROM written WHERE at < ?", (limit,)).rowcount

    def _tell(self, folder: str, conflict: trees.Conflict) -> None:
        path = store.session_path(self.sessions_dir, folder, conflict.loser)
        if not store.inbound_db(path).exists():
            return
        name = conflict.name[:300]
        if conflict.kept_as is None:
            text = (f"Another conversation of yours changed {name} in the group folder after you removed it; "
                    "the file is back, with its version.")
        else:
            text = (f"Another conversation of yours {'removed' if conflict.removed else 'changed'} {name} in the "
                    f"group folder after you changed it; your version is kept beside it as {conflict.kept_as[:400]}.")
        key = hashlib.sha256(f"{conflict.name}\0{conflict.kept_as}\0{time.time()}".encode()).hexdigest()[:24]
        try:
            store.write_message(path, content={"text": text, "sender": "System"}, target=None, kind="system",
                                trigger=False, message_id=f"conflict:{key}")
        except Exception as exc:  # noqa: BLE001 - the copy is kept either way; the note is a courtesy
            log.warning("door: could not tell %s/%s its version of %s lost: %s", folder, conflict.loser, name, exc)

    # -- what the host has -------------------------------------------------------------------------
    def manifest(self, root: Path) -> tuple[dict[str, str], str]:
        """name -> sha256 of the plain files below root (as trees.pack sends them), and its tag."""
        with self._lock:
            cache = self._digests.pop(root, None) or {}
            self._digests[root] = cache
            while len(self._digests) > CACHED_FOLDERS:
                self._digests.popitem(last=False)
        found: dict[str, str] = {}
        fresh: dict = {}
        for entry in walk_tree(root, open_files=False):
            if entry.is_dir or entry.name.endswith(trees.SKIP_SUFFIXES) or len(found) >= trees.MAX_FILES:
                continue
            st = entry.st
            sig = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            digest = cache.get(entry.rel, (None, None))
            if digest[0] != sig:
                value = trees.digest_at(entry.parent_fd, entry.name)
                if value is None:
                    continue
                digest = (sig, value)
            fresh[entry.rel] = digest
            found[entry.rel] = digest[1]
        with self._lock:
            if root in self._digests:
                self._digests[root] = fresh
        return found, tree_tag(found)

